package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Outcome is how an audited action ended.
type Outcome string

// The outcomes.
const (
	// OK: the action was done.
	OK Outcome = "ok"
	// Denied: the caller was refused (bad key, missing permission).
	Denied Outcome = "denied"
	// Failed: the action was allowed but did not complete.
	Failed Outcome = "error"
)

func (o Outcome) valid() bool { return o == OK || o == Denied || o == Failed }

// Entry is what a caller records: who did what to which resource, and how
// it ended. It never carries prompt text or a secret: Reason is a short
// explanation ("API key revoked"), Resource a name ("keys/3f9a01c2b7de").
type Entry struct {
	// Principal is who acted ("" when unknown, e.g. a request with no key).
	Principal string
	// Tenant is the tenant id the principal acts for.
	Tenant string
	// Action names the operation: "key.create", "auth", "models.use".
	Action string
	// Resource names what was acted on: "tenants/acme", "keys/ID".
	Resource string
	Outcome  Outcome
	// Reason says why, for denials and errors.
	Reason string
}

// Record is one line of the log: an Entry with its place in the chain.
type Record struct {
	Entry
	// Seq numbers the records from 1 without gaps.
	Seq uint64
	// Time is when the record was appended (UTC).
	Time time.Time
	// Prev is the hex SHA-256 of the previous line's bytes (its newline
	// excluded); the first record's is GenesisPrev.
	Prev string
	// Hash is the hex SHA-256 of the record's canonical encoding without
	// its hash (which includes Prev).
	Hash string
}

// GenesisPrev is the Prev of the first record.
const GenesisPrev = "0000000000000000000000000000000000000000000000000000000000000000"

// MaxLine is the longest accepted line in bytes; Append shortens fields so
// that no record comes near it.
const MaxLine = 16 << 10

// maxField is the longest a field is kept, in bytes.
const maxField = 1 << 10

// ErrFormat is wrapped by every parse error.
var ErrFormat = errors.New("audit: malformed record")

// wire is a record as a JSON line. Its field order is the canonical order:
// encoding/json writes struct fields in declaration order, so the same
// record always encodes to the same bytes.
type wire struct {
	Seq       uint64 `json:"seq"`
	Time      string `json:"time"`
	Principal string `json:"principal"`
	Tenant    string `json:"tenant"`
	Action    string `json:"action"`
	Resource  string `json:"resource"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason"`
	Prev      string `json:"prev"`
	Hash      string `json:"hash,omitempty"`
}

// timeFormat is the record's time format: fixed width, so that re-encoding
// a parsed time gives the same bytes.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

func (r *Record) wire() wire {
	return wire{Seq: r.Seq, Time: r.Time.UTC().Format(timeFormat), Principal: r.Principal, Tenant: r.Tenant,
		Action: r.Action, Resource: r.Resource, Outcome: string(r.Outcome), Reason: r.Reason, Prev: r.Prev, Hash: r.Hash}
}

// marshal encodes w without HTML escaping and without the trailing newline.
func marshal(w wire) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// hashOf returns the hex SHA-256 of r's canonical encoding without its
// hash.
func (r *Record) hashOf() (string, error) {
	w := r.wire()
	w.Hash = ""
	b, err := marshal(w)
	if err != nil {
		return "", fmt.Errorf("audit: encode record %d: %w", r.Seq, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// seal sets r's hash and returns its line (without the newline).
func (r *Record) seal() ([]byte, error) {
	h, err := r.hashOf()
	if err != nil {
		return nil, err
	}
	r.Hash = h
	b, err := marshal(r.wire())
	if err != nil {
		return nil, fmt.Errorf("audit: encode record %d: %w", r.Seq, err)
	}
	return b, nil
}

// ParseRecord parses one line (without its newline) and checks that it is
// in canonical form and that its hash matches its contents. It does not
// check the chain (Prev, Seq): Verify does.
func ParseRecord(line []byte) (Record, error) {
	if len(line) > MaxLine {
		return Record{}, fmt.Errorf("%w: line of %d bytes exceeds %d", ErrFormat, len(line), MaxLine)
	}
	if !utf8.Valid(line) {
		return Record{}, fmt.Errorf("%w: not UTF-8", ErrFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var w wire
	if err := dec.Decode(&w); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	if dec.More() {
		return Record{}, fmt.Errorf("%w: data after the record", ErrFormat)
	}
	t, err := time.Parse(timeFormat, w.Time)
	if err != nil {
		return Record{}, fmt.Errorf("%w: time %q", ErrFormat, w.Time)
	}
	r := Record{
		Entry: Entry{Principal: w.Principal, Tenant: w.Tenant, Action: w.Action, Resource: w.Resource,
			Outcome: Outcome(w.Outcome), Reason: w.Reason},
		Seq: w.Seq, Time: t, Prev: w.Prev, Hash: w.Hash,
	}
	switch {
	case r.Seq == 0:
		return Record{}, fmt.Errorf("%w: seq 0", ErrFormat)
	case !r.Outcome.valid():
		return Record{}, fmt.Errorf("%w: outcome %q", ErrFormat, w.Outcome)
	case !isHex256(r.Prev):
		return Record{}, fmt.Errorf("%w: prev is not 64 lower-case hex digits", ErrFormat)
	case !isHex256(r.Hash):
		return Record{}, fmt.Errorf("%w: hash is not 64 lower-case hex digits", ErrFormat)
	}
	// The line must be exactly the canonical encoding: then every byte of
	// it is covered by the hash, and the next record's Prev (a hash of
	// these bytes) and this record's Hash agree on what was written.
	canon, err := marshal(r.wire())
	if err != nil || !bytes.Equal(canon, line) {
		return Record{}, fmt.Errorf("%w: not in canonical form", ErrFormat)
	}
	h, err := r.hashOf()
	if err != nil {
		return Record{}, err
	}
	if h != r.Hash {
		return Record{}, fmt.Errorf("%w: hash does not match the record's contents", ErrFormat)
	}
	return r, nil
}

func isHex256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Chain makes the record of e that follows the record with sequence
// number seq and line hash prev (0 and GenesisPrev for the first), at time
// now, and returns it with its line (canonical, without a newline). Fields
// longer than a kilobyte are shortened. A Log chains its records with it;
// so can another place that keeps the lines (a cluster's stream).
func Chain(e Entry, seq uint64, prev string, now time.Time) (Record, []byte, error) {
	if !e.Outcome.valid() {
		return Record{}, nil, fmt.Errorf("audit: outcome %q: want ok, denied or error", e.Outcome)
	}
	e.Principal, e.Tenant, e.Action = clip(e.Principal), clip(e.Tenant), clip(e.Action)
	e.Resource, e.Reason = clip(e.Resource), clip(e.Reason)
	r := Record{Entry: e, Seq: seq + 1, Time: now.UTC(), Prev: prev}
	line, err := r.seal()
	if err != nil {
		return Record{}, nil, err
	}
	return r, line, nil
}

// LineHash is the hex SHA-256 of a record's line (without its newline):
// the next record's Prev.
func LineHash(line []byte) string { return lineHash(line) }

// lineHash is the hex SHA-256 of a line's bytes: the next record's Prev.
func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// clip shortens s to at most maxField bytes without splitting a UTF-8
// character, and replaces invalid UTF-8 (which JSON would rewrite, making
// the record non-canonical).
func clip(s string) string {
	s = string(bytes.ToValidUTF8([]byte(s), []byte("\uFFFD")))
	if len(s) <= maxField {
		return s
	}
	cut := maxField
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
