// Package jskv keeps the tenant store's records (tenant.Store: tenants,
// keys, bindings, context caches) in a NATS JetStream key-value bucket, so
// that every gateway of a cluster reads and changes one set of them.
//
// # Layout: immutable snapshots and one head
//
// JetStream KV offers compare-and-set on one key and nothing across keys,
// while a tenant transaction reads and writes several records (deleting a
// tenant revokes its keys). So records are not kept one per KV key.
// Instead the bucket holds values written once and never changed (blobs,
// each cut into chunks that fit a NATS message, under <prefix><n>), and
// one key that is overwritten:
//
//   - snap.<kind>.<tx>.: the snapshot of one kind written by transaction
//     <tx>: its records in id order, each with its value when the value
//     is small (inlineMax), or naming the blob that holds it.
//   - rec.<kind>.<tx>.<n>.: the value of one large record, written by
//     transaction <tx> when the record was put. A context cache carries
//     its contents: kept apart, a change to one cache rewrites only the
//     kind's snapshot (ids and blob names for the large ones), not every
//     other cache's contents.
//   - head: which snapshot is current for each kind, with a commit
//     sequence. It is the only key ever overwritten, always by
//     compare-and-set on its KV revision.
//
// A read (View) uses one head and the snapshots it names: one consistent
// state. A write (Update) runs fn against the state of the head it read,
// writes new snapshots for the kinds fn changed, then moves the head with
// an update expecting the revision it read. If another process moved the
// head first, that fails: the new snapshots are purged, and fn runs again
// on the new state (bounded attempts, with jittered backoff). Every commit
// is thus ordered after the head it read: transactions are serialisable
// across every process sharing the bucket.
//
// # Garbage
//
// A head lists the blobs it replaced (retired): the snapshots of the kinds
// it changed, and the blobs of the large records it replaced or deleted.
// The commit after it purges them, so the blobs of the two newest heads
// always exist and a reader that is mid-way through loading the previous
// head still finds them; a reader slower than two commits finds a chunk
// gone, re-reads the head and loads again. Purges remove the messages
// without leaving delete markers. Blobs no head mentions (a writer that
// died between writing them and moving the head) are purged by Open once
// older than Options.OrphanAge.
//
// # Reads are local
//
// Each Store keeps the decoded records of the newest head it has seen in
// memory, and a watch on the head tells it when another process commits.
// A read uses the local copy unless the watch has announced a newer head
// or the copy was last confirmed more than Options.MaxStaleness ago (the
// bound that holds even when the watch lags): then it reads the head (one
// round trip) and loads the kinds whose snapshot changed, and in them the
// large records it does not already hold. A key revoked
// through one gateway is thus refused by another as soon as the watch
// delivers, and never later than MaxStaleness plus a round trip.
//
// The cost: every change rewrites the snapshot of each kind it touches
// (its small records and the names of its large ones), and every process
// holds every record in memory. That fits tenants, keys and context caches
// (thousands of records), not millions of records.
package jskv

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvserve/kvserve/internal/tenant"
)

// Options configure Open. The zero value is the default.
type Options struct {
	// Bucket is the KV bucket's name (default DefaultBucket). Every
	// gateway of a cluster must use the same one.
	Bucket string
	// Replicas is how many NATS servers keep the bucket: 1 for an
	// embedded or single server, 3 on a three-node cluster. Zero keeps an
	// existing bucket's and creates a new one with 1; another value is
	// set on an existing bucket too.
	Replicas int
	// MaxStaleness is how long a read may use the local copy of the
	// records without confirming the head (default 1s). The watch on the
	// head usually refreshes the copy sooner; this bounds how late a
	// change made elsewhere (a revoked key) can be seen when it does not.
	MaxStaleness time.Duration
	// ChunkSize is the most bytes of a snapshot written to one KV value
	// (default: the server's maximum message payload less room for
	// headers). Tests lower it to cross chunk boundaries with small data.
	ChunkSize int
	// MaxAttempts is how many times Update runs fn when other processes
	// keep committing first (default 64).
	MaxAttempts int
	// OrphanAge is how old a snapshot no head mentions must be before
	// Open purges it (default 10 minutes: far longer than a transaction,
	// whose snapshots are written just before its head moves).
	OrphanAge time.Duration
	// Timeout bounds one request to the NATS server when the caller's
	// context has no deadline (default 5s).
	Timeout time.Duration
	// Logger receives warnings about garbage that could not be purged
	// (default: none).
	Logger *slog.Logger
}

// DefaultBucket is the bucket's name unless Options.Bucket says otherwise.
const DefaultBucket = "KVSERVE_STATE"

// headKey is the one key compare-and-set moves.
const headKey = "head"

// snapPrefix starts every snapshot's key, recPrefix every large record's.
const (
	snapPrefix = "snap."
	recPrefix  = "rec."
)

// inlineMax is the largest value kept in its kind's snapshot. Tenants,
// keys and bindings are a few hundred bytes: inline, one read loads them
// all. A larger value (a context cache's contents) gets a blob of its own,
// written once, so that changing other records does not copy it.
const inlineMax = 4 << 10

// payloadHeadroom is left of the server's maximum payload for the
// message's headers (the expected-sequence header of a create).
const payloadHeadroom = 4 << 10

// ErrConflict is returned (wrapped) by Update when other processes
// committed first on every attempt.
var ErrConflict = errors.New("jskv: transaction conflicted with other writers")

// ErrUnreachable is returned (wrapped) by View and Update when the head
// cannot be read and the local copy is older than MaxStaleness: the store
// fails closed rather than trust a copy that may predate a revocation.
var ErrUnreachable = errors.New("jskv: the NATS server does not answer")

// errReadOnly is returned by a View's Put and Delete.
var errReadOnly = errors.New("jskv: read-only transaction")

// headVersion is the layout this package writes and reads: a head of
// another version is refused rather than guessed at, as the cluster's
// messages are.
const headVersion = 1

// head is the value of headKey.
type head struct {
	// V is the layout's version, headVersion.
	V int `json:"v"`
	// Seq counts commits.
	Seq uint64 `json:"seq"`
	// Tx is the random id of the transaction that wrote this head: a
	// writer whose compare-and-set got no answer finds out from it
	// whether it landed.
	Tx string `json:"tx"`
	// Kinds names each non-empty kind's snapshot.
	Kinds map[tenant.Kind]blob `json:"kinds,omitempty"`
	// Retired are the key prefixes of the blobs this commit replaced: the
	// next commit purges them.
	Retired []string `json:"retired,omitempty"`
}

// blob names a value written once, in chunks, under Key+"0", Key+"1"...
type blob struct {
	// Key is the chunks' common prefix, ending in ".".
	Key    string `json:"key"`
	Chunks int    `json:"chunks"`
	Size   int    `json:"size"`
	// SHA256 is the hex digest of the value: chunks that do not add up to
	// it are not this blob.
	SHA256 string `json:"sha256"`
}

func (b blob) chunkKey(i int) string { return b.Key + strconv.Itoa(i) }

// kindData is one kind's records, decoded. Once it belongs to a version it
// is never changed: transactions copy it before writing.
type kindData struct {
	ids  []string // sorted
	vals map[string][]byte
	// blobs are the blobs holding the values larger than inlineMax, by
	// id. A record put in a transaction has none until its commit writes
	// one.
	blobs map[string]blob
}

// version is the state of one head.
type version struct {
	rev   uint64 // the head's KV revision; 0: no head yet (an empty store)
	head  head
	kinds map[tenant.Kind]*kindData
}

// Store is a tenant.Store on a JetStream KV bucket. It is safe for
// concurrent use; several Stores (in one process or many) may share a
// bucket.
type Store struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream
	subj   string // the bucket's subject prefix, "$KV.<bucket>."
	o      Options
	log    *slog.Logger

	// loadMu makes one refresh at a time: the others wait and use its
	// result rather than all reading the head.
	loadMu sync.Mutex

	mu      sync.Mutex // guards what follows
	cur     *version
	checked time.Time // when cur was last confirmed to be the newest head
	closed  bool

	// seen is the newest head revision the watch has delivered.
	seen atomic.Uint64

	stopWatch context.CancelFunc
	watchDone chan struct{}
}

var _ tenant.Store = (*Store)(nil)

// Open returns the store in the bucket on nc's server, creating the bucket
// if needed. nc stays the caller's: Close does not close it.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Store, error) {
	if o.Bucket == "" {
		o.Bucket = DefaultBucket
	}
	if o.MaxStaleness <= 0 {
		o.MaxStaleness = time.Second
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 64
	}
	if o.OrphanAge <= 0 {
		o.OrphanAge = 10 * time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	most := int(nc.MaxPayload()) - payloadHeadroom
	if most <= 0 {
		return nil, fmt.Errorf("jskv: the NATS server's maximum payload (%d bytes) leaves no room for records", nc.MaxPayload())
	}
	switch {
	case o.ChunkSize <= 0:
		o.ChunkSize = most
	case o.ChunkSize > most:
		return nil, fmt.Errorf("jskv: chunk size %d exceeds what the NATS server accepts in one message (%d bytes with headers)", o.ChunkSize, most)
	}
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(o.Timeout))
	if err != nil {
		return nil, fmt.Errorf("jskv: %w", err)
	}
	kv, err := openBucket(ctx, js, o)
	if err != nil {
		return nil, err
	}
	stream, err := js.Stream(ctx, "KV_"+o.Bucket)
	if err != nil {
		return nil, fmt.Errorf("jskv: bucket %s's stream: %w", o.Bucket, err)
	}
	s := &Store{kv: kv, stream: stream, subj: "$KV." + o.Bucket + ".", o: o, log: log}
	// The watch starts before the first read, so that no commit falls
	// between them unseen. It lives as long as the store, not ctx: the
	// client ends a watch when the context it was made with ends.
	wctx, stop := context.WithCancel(context.Background())
	w, err := watchHead(ctx, wctx, kv, o.Timeout)
	if err != nil {
		stop()
		return nil, fmt.Errorf("jskv: watching the head of %s: %w", o.Bucket, err)
	}
	s.stopWatch, s.watchDone = stop, make(chan struct{})
	go s.watch(wctx, w)
	if _, err := s.refresh(ctx, time.Time{}); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.purgeOrphans(ctx); err != nil {
		log.Warn("jskv: purging orphaned snapshots", "bucket", o.Bucket, "err", err)
	}
	return s, nil
}

// watchHead starts the watch of the head key, made with wctx, trying again
// until timeout has passed or ctx ends. The client creates a watch's
// consumer with its own fixed five-second wait, not the store's Timeout,
// and a replicated consumer can take longer than that to be agreed on by
// its servers under load; a consumer whose creation timed out is
// ephemeral and removed by its server once inactive.
func watchHead(ctx, wctx context.Context, kv jetstream.KeyValue, timeout time.Duration) (jetstream.KeyWatcher, error) {
	deadline := time.Now().Add(timeout)
	for {
		w, err := kv.Watch(wctx, headKey, jetstream.UpdatesOnly())
		if err == nil || !isTimeout(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return w, err
		}
	}
}

// isTimeout reports whether err is a request that got no answer in time.
func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
}

// openBucket returns the bucket, creating it if needed, and sets its
// replicas if o asks for a number it does not have.
func openBucket(ctx context.Context, js jetstream.JetStream, o Options) (jetstream.KeyValue, error) {
	cfg := jetstream.KeyValueConfig{
		Bucket:      o.Bucket,
		Description: "kvserve tenants, keys, bindings and context caches (internal/tenant/jskv)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
	}
	kv, err := js.KeyValue(ctx, o.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // another process made it meanwhile
			kv, err = js.KeyValue(ctx, o.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("jskv: bucket %s (does the NATS server run JetStream?): %w", o.Bucket, err)
	}
	if o.Replicas <= 0 {
		return kv, nil
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("jskv: bucket %s: %w", o.Bucket, err)
	}
	if c := st.Config(); c.Replicas != o.Replicas {
		c.Replicas = o.Replicas
		if kv, err = js.UpdateKeyValue(ctx, c); err != nil {
			return nil, fmt.Errorf("jskv: bucket %s: setting %d replicas: %w", o.Bucket, o.Replicas, err)
		}
	}
	return kv, nil
}

// watch records the revision of every head another process commits, until
// ctx ends (Close). The end of ctx also ends w's subscription: the client
// unsubscribes it then, in a goroutine of its own, so that Close does not
// wait on a server that is away.
func (s *Store) watch(ctx context.Context, w jetstream.KeyWatcher) {
	defer close(s.watchDone)
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return // reads fall back on MaxStaleness
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			for {
				old := s.seen.Load()
				if e.Revision() <= old || s.seen.CompareAndSwap(old, e.Revision()) {
					break
				}
			}
		}
	}
}

// Close stops the watch. Transactions after it return tenant.ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.stopWatch()
	<-s.watchDone
	return nil
}

// current returns the newest state this store knows, refreshed from the
// bucket if the watch announced a newer head or the copy is older than
// MaxStaleness.
func (s *Store) current(ctx context.Context) (*version, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("jskv: %w", tenant.ErrClosed)
	}
	v, checked := s.cur, s.checked
	s.mu.Unlock()
	if v != nil && v.rev >= s.seen.Load() && time.Since(checked) < s.o.MaxStaleness {
		return v, nil
	}
	return s.refresh(ctx, time.Now())
}

// refresh reads the head and loads the snapshots of the kinds that
// changed. A refresh that began at or after since, made by another caller
// while this one waited, is as good as its own.
func (s *Store) refresh(ctx context.Context, since time.Time) (*version, error) {
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("jskv: %w", tenant.ErrClosed)
	}
	if v := s.cur; v != nil && !since.IsZero() && !s.checked.Before(since) && v.rev >= s.seen.Load() {
		s.mu.Unlock()
		return v, nil
	}
	s.mu.Unlock()
	const attempts = 5
	var err error
	for attempt := range attempts {
		if attempt > 0 {
			if err := sleep(ctx, time.Duration(attempt)*10*time.Millisecond); err != nil {
				return nil, err
			}
		}
		var v *version
		start := time.Now()
		v, err = s.load(ctx)
		if err == nil {
			return s.install(v, start), nil
		}
		if !errors.Is(err, errGone) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("jskv: the snapshots the head of %s names could not be read (purged by newer commits each time, or lost): %w", s.o.Bucket, err)
}

// errGone: a snapshot named by the head read is no longer there (purged
// after two newer commits, or not yet on the replica that answered).
var errGone = errors.New("jskv: snapshot gone")

// load reads the head and the snapshots it names, reusing the kinds whose
// snapshot is the current version's.
func (s *Store) load(ctx context.Context) (*version, error) {
	e, err := s.kv.Get(ctx, headKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &version{kinds: map[tenant.Kind]*kindData{}}, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("jskv: reading the head of %s: %w", s.o.Bucket, ctx.Err())
		}
		return nil, fmt.Errorf("%w: reading the head of %s: %w", ErrUnreachable, s.o.Bucket, err)
	}
	v := &version{rev: e.Revision(), kinds: map[tenant.Kind]*kindData{}}
	if err := json.Unmarshal(e.Value(), &v.head); err != nil {
		return nil, fmt.Errorf("jskv: the head of %s: %w", s.o.Bucket, err)
	}
	if v.head.V != headVersion {
		return nil, fmt.Errorf("jskv: the head of %s has layout version %d; this kvserve reads version %d", s.o.Bucket, v.head.V, headVersion)
	}
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur != nil && cur.rev == v.rev {
		return cur, nil
	}
	for kind, ref := range v.head.Kinds {
		var prev *kindData
		if cur != nil {
			if old, ok := cur.head.Kinds[kind]; ok && old == ref {
				v.kinds[kind] = cur.kinds[kind]
				continue
			}
			prev = cur.kinds[kind]
		}
		kd, err := s.loadKind(ctx, ref, prev)
		if err != nil {
			return nil, err
		}
		v.kinds[kind] = kd
	}
	return v, nil
}

// install makes v the current version if it is newer, and records that
// the newest head was confirmed at checked; it returns the current one.
func (s *Store) install(v *version, checked time.Time) *version {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || v.rev > s.cur.rev {
		s.cur = v
	}
	if s.cur.rev == v.rev && checked.After(s.checked) {
		s.checked = checked
	}
	return s.cur
}

// loadKind reads and decodes the snapshot ref names, and the large records
// it names that prev (the kind as this store last knew it, or nil) does
// not hold already.
func (s *Store) loadKind(ctx context.Context, ref blob, prev *kindData) (*kindData, error) {
	buf, err := s.readBlob(ctx, ref)
	if err != nil {
		return nil, err
	}
	kd, err := decodeSnapshot(buf)
	if err != nil {
		return nil, fmt.Errorf("jskv: snapshot %s*: %w", ref.Key, err)
	}
	for id, b := range kd.blobs {
		if prev != nil && prev.blobs[id] == b {
			kd.vals[id] = prev.vals[id]
			continue
		}
		if kd.vals[id], err = s.readBlob(ctx, b); err != nil {
			return nil, err
		}
	}
	return kd, nil
}

// readBlob reads the chunks of b and checks that they are b.
func (s *Store) readBlob(ctx context.Context, b blob) ([]byte, error) {
	buf := make([]byte, 0, b.Size)
	for i := range b.Chunks {
		e, err := s.kv.Get(ctx, b.chunkKey(i))
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			return nil, fmt.Errorf("%w: %s", errGone, b.chunkKey(i))
		}
		if err != nil {
			return nil, fmt.Errorf("jskv: reading %s: %w", b.chunkKey(i), err)
		}
		buf = append(buf, e.Value()...)
	}
	sum := sha256.Sum256(buf)
	if len(buf) != b.Size || hex.EncodeToString(sum[:]) != b.SHA256 {
		return nil, fmt.Errorf("jskv: %s*: %d bytes that do not match their digest", b.Key, len(buf))
	}
	return buf, nil
}

// View implements tenant.Store.
func (s *Store) View(ctx context.Context, fn func(tenant.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jskv: %w", err)
	}
	start := time.Now()
	v, err := s.current(ctx)
	if err != nil {
		return err
	}
	err = fn(&tx{base: v})
	if !errors.Is(err, tenant.ErrNotFound) {
		return err
	}
	// A record not found may have been made a moment ago through another
	// gateway (a key created there and used here at once), before the
	// watch told this one: a miss is confirmed against a head read after
	// this view began. Concurrent misses share one read (refresh), so a
	// flood of unknown keys keeps at most one read of the head in flight.
	v2, rerr := s.refresh(ctx, start)
	if rerr != nil || v2.rev == v.rev {
		return err
	}
	return fn(&tx{base: v2})
}

// Update implements tenant.Store.
func (s *Store) Update(ctx context.Context, fn func(tenant.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("jskv: %w", err)
	}
	for attempt := range s.o.MaxAttempts {
		var v *version
		var err error
		if attempt == 0 {
			v, err = s.current(ctx)
		} else {
			// Another process moved the head: wait a little (jittered, so
			// that two writers stop colliding) and start again from it.
			backoff := min(time.Duration(1<<min(attempt, 6))*time.Millisecond, 50*time.Millisecond)
			if err := sleep(ctx, backoff/2+mrand.N(backoff/2+1)); err != nil {
				return err
			}
			v, err = s.refresh(ctx, time.Now())
		}
		if err != nil {
			return err
		}
		t := &tx{base: v, write: true}
		err = fn(t)
		t.done = true
		if err != nil {
			return err
		}
		if len(t.changed) == 0 {
			return nil // read only: serialised at the state it read
		}
		err = s.commit(ctx, v, t.changed)
		if !errors.Is(err, errStale) {
			return err
		}
	}
	return fmt.Errorf("jskv: update of %s: %d attempts: %w", s.o.Bucket, s.o.MaxAttempts, ErrConflict)
}

// errStale: the head moved since the transaction read it.
var errStale = errors.New("jskv: head moved")

// commit writes the changed kinds' snapshots, and the large records put in
// the transaction, and moves the head from base to a head naming them, or
// returns errStale if it is not at base anymore.
func (s *Store) commit(ctx context.Context, base *version, changed map[tenant.Kind]*kindData) error {
	txid := randomHex(8)
	h := head{V: headVersion, Seq: base.head.Seq + 1, Tx: txid, Kinds: maps.Clone(base.head.Kinds)}
	if h.Kinds == nil {
		h.Kinds = map[tenant.Kind]blob{}
	}
	kinds := map[tenant.Kind]*kindData{}
	maps.Copy(kinds, base.kinds)
	var written []string
	fail := func(err error) error {
		s.purge(written...)
		return err
	}
	n := 0
	for _, kind := range slices.Sorted(maps.Keys(changed)) {
		kd := changed[kind]
		for _, id := range kd.ids {
			if v := kd.vals[id]; len(v) > inlineMax {
				if _, ok := kd.blobs[id]; ok {
					continue // unchanged: its blob stays
				}
				b, err := s.writeBlob(ctx, recPrefix+string(kind)+"."+txid+"."+strconv.Itoa(n)+".", v)
				if err != nil {
					return fail(err)
				}
				n++
				written = append(written, b.Key)
				kd.blobs[id] = b
			}
		}
		// What base's kind held and this one does not: its snapshot, and
		// the blobs of the large records replaced or deleted.
		if old, ok := base.head.Kinds[kind]; ok {
			h.Retired = append(h.Retired, old.Key)
		}
		if old := base.kinds[kind]; old != nil {
			for id, b := range old.blobs {
				if kd.blobs[id] != b {
					h.Retired = append(h.Retired, b.Key)
				}
			}
		}
		if len(kd.ids) == 0 {
			delete(h.Kinds, kind)
			delete(kinds, kind)
			continue
		}
		ref, err := s.writeBlob(ctx, snapPrefix+string(kind)+"."+txid+".", encodeSnapshot(kd))
		if err != nil {
			return fail(err)
		}
		written = append(written, ref.Key)
		h.Kinds[kind], kinds[kind] = ref, kd
	}
	slices.Sort(h.Retired)
	b, err := json.Marshal(h)
	if err != nil {
		return fail(fmt.Errorf("jskv: encoding the head: %w", err))
	}
	start := time.Now()
	rev, err := s.kv.Update(ctx, headKey, b, base.rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
		return fail(errStale)
	}
	if err != nil {
		// No answer is not a no: the head may have moved to ours, or may
		// yet (the update can still be on its way). So the blobs stay
		// whatever the head says now: a later Open purges them if no head
		// ever names them.
		e, gerr := s.kv.Get(context.WithoutCancel(ctx), headKey)
		var got head
		if gerr != nil || json.Unmarshal(e.Value(), &got) != nil || got.Tx != txid {
			return fmt.Errorf("jskv: moving the head of %s (the change may or may not have been made): %w", s.o.Bucket, err)
		}
		rev = e.Revision()
	}
	s.install(&version{rev: rev, head: h, kinds: kinds}, start)
	// What base retired belonged to the head before it: no head from base
	// on names it.
	s.purge(base.head.Retired...)
	return nil
}

// writeBlob writes data in chunks under the key prefix key.
func (s *Store) writeBlob(ctx context.Context, key string, data []byte) (blob, error) {
	sum := sha256.Sum256(data)
	b := blob{Key: key, Size: len(data), SHA256: hex.EncodeToString(sum[:]),
		Chunks: (len(data) + s.o.ChunkSize - 1) / s.o.ChunkSize}
	for i := range b.Chunks {
		chunk := data[i*s.o.ChunkSize : min((i+1)*s.o.ChunkSize, len(data))]
		if _, err := s.kv.Create(ctx, b.chunkKey(i), chunk); err != nil {
			if i > 0 {
				s.purge(key)
			}
			return blob{}, fmt.Errorf("jskv: writing %s: %w", b.chunkKey(i), err)
		}
	}
	return b, nil
}

// purge removes the blobs with the key prefixes keys, leaving no delete
// markers. It is best effort: what remains is garbage no head names, which
// Open purges.
func (s *Store) purge(keys ...string) {
	for _, key := range keys {
		// Not the caller's context: a cancelled request must not leave
		// its garbage behind.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(s.subj+key+"*"))
		cancel()
		if err != nil {
			s.log.Warn("jskv: purging a replaced blob", "bucket", s.o.Bucket, "blob", key+"*", "err", err)
		}
	}
}

// purgeOrphans purges the blobs that neither the head (its snapshots and
// the large records they name) nor its retired list names and that are
// older than OrphanAge: those of writers that died before moving the head,
// or whose purge failed.
func (s *Store) purgeOrphans(ctx context.Context) error {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	named := map[string]bool{}
	for _, key := range cur.head.Retired {
		named[key] = true
	}
	for kind, ref := range cur.head.Kinds {
		named[ref.Key] = true
		for _, b := range cur.kinds[kind].blobs {
			named[b.Key] = true
		}
	}
	keys, err := s.kv.ListKeysFiltered(ctx, snapPrefix+">", recPrefix+">")
	if err != nil {
		return fmt.Errorf("jskv: listing %s: %w", s.o.Bucket, err)
	}
	orphans := map[string]string{} // blob key prefix → one of its chunks
	for k := range keys.Keys() {
		if p := k[:strings.LastIndexByte(k, '.')+1]; !named[p] {
			orphans[p] = k
		}
	}
	// A head that moved since cur names blobs cur does not know: leave the
	// sweep to a later Open rather than load it.
	if e, err := s.kv.Get(ctx, headKey); err != nil || e.Revision() != cur.rev {
		return nil
	}
	for p, k := range orphans {
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			continue // gone meanwhile
		}
		if time.Since(e.Created()) < s.o.OrphanAge {
			continue // perhaps a transaction still running
		}
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(s.subj+p+"*")); err != nil {
			return fmt.Errorf("jskv: purging %s*: %w", p, err)
		}
	}
	return nil
}

// tx is a transaction: a View's (read only) or an Update's, whose changes
// are copies of the changed kinds.
type tx struct {
	base    *version
	write   bool
	done    bool
	changed map[tenant.Kind]*kindData
}

func (t *tx) data(kind tenant.Kind) *kindData {
	if kd, ok := t.changed[kind]; ok {
		return kd
	}
	return t.base.kinds[kind]
}

// mutable returns kind's records for writing: copied from the base on the
// first write.
func (t *tx) mutable(kind tenant.Kind) (*kindData, error) {
	if !t.write {
		return nil, errReadOnly
	}
	if t.done {
		return nil, errors.New("jskv: transaction used after it ended")
	}
	if err := validKind(kind); err != nil {
		return nil, err
	}
	if kd, ok := t.changed[kind]; ok {
		return kd, nil
	}
	kd := &kindData{vals: map[string][]byte{}, blobs: map[string]blob{}}
	if b := t.base.kinds[kind]; b != nil {
		kd.ids, kd.vals, kd.blobs = slices.Clone(b.ids), maps.Clone(b.vals), maps.Clone(b.blobs)
	}
	if t.changed == nil {
		t.changed = map[tenant.Kind]*kindData{}
	}
	t.changed[kind] = kd
	return kd, nil
}

// validKind: a kind is part of KV key names.
func validKind(kind tenant.Kind) error {
	if kind == "" {
		return errors.New("jskv: empty kind")
	}
	for _, c := range kind {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("jskv: kind %q: use letters, digits, - and _", kind)
		}
	}
	return nil
}

func (t *tx) Get(kind tenant.Kind, id string) ([]byte, error) {
	if kd := t.data(kind); kd != nil {
		if v, ok := kd.vals[id]; ok {
			return bytes.Clone(v), nil
		}
	}
	return nil, fmt.Errorf("%w: %s/%s", tenant.ErrNotFound, kind, id)
}

func (t *tx) Put(kind tenant.Kind, id string, value []byte) error {
	kd, err := t.mutable(kind)
	if err != nil {
		return fmt.Errorf("jskv: put %s/%s: %w", kind, id, err)
	}
	if _, ok := kd.vals[id]; !ok {
		i, _ := slices.BinarySearch(kd.ids, id)
		kd.ids = slices.Insert(kd.ids, i, id)
	}
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	kd.vals[id] = v
	delete(kd.blobs, id) // a new value: a new blob, if it is large
	return nil
}

func (t *tx) Delete(kind tenant.Kind, id string) error {
	kd, err := t.mutable(kind)
	if err != nil {
		return fmt.Errorf("jskv: delete %s/%s: %w", kind, id, err)
	}
	if _, ok := kd.vals[id]; ok {
		i, _ := slices.BinarySearch(kd.ids, id)
		kd.ids = slices.Delete(kd.ids, i, i+1)
		delete(kd.vals, id)
		delete(kd.blobs, id)
	}
	return nil
}

func (t *tx) List(kind tenant.Kind, fn func(id string, value []byte) error) error {
	kd := t.data(kind)
	if kd == nil {
		return nil
	}
	ids := kd.ids
	if _, mine := t.changed[kind]; mine {
		ids = slices.Clone(ids) // fn may change the kind while we walk it
	}
	for _, id := range ids {
		v, ok := kd.vals[id]
		if !ok {
			continue // deleted by fn
		}
		if err := fn(id, bytes.Clone(v)); err != nil {
			return err
		}
	}
	return nil
}

// encodeSnapshot writes the records in id order: for each, the id's length
// (uvarint) and the id, then either 0, the value's length (uvarint) and
// the value, or 1 and the blob holding the value: its key's length
// (uvarint), its key, its chunks and size (uvarints) and its SHA-256 (32
// bytes). Values larger than inlineMax must have their blob.
func encodeSnapshot(kd *kindData) []byte {
	var buf []byte
	str := func(s []byte) {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	for _, id := range kd.ids {
		str([]byte(id))
		b, ok := kd.blobs[id]
		if !ok {
			buf = append(buf, 0)
			str(kd.vals[id])
			continue
		}
		sum, err := hex.DecodeString(b.SHA256)
		if err != nil || len(sum) != sha256.Size {
			panic("jskv: a blob's digest is not 64 hex digits") // blobs are made by writeBlob
		}
		buf = append(buf, 1)
		str([]byte(b.Key))
		buf = binary.AppendUvarint(buf, uint64(b.Chunks))
		buf = binary.AppendUvarint(buf, uint64(b.Size))
		buf = append(buf, sum...)
	}
	return buf
}

// decodeSnapshot decodes encodeSnapshot's records; the values in blobs are
// left for the caller to read.
func decodeSnapshot(buf []byte) (*kindData, error) {
	kd := &kindData{vals: map[string][]byte{}, blobs: map[string]blob{}}
	errShort := errors.New("truncated record")
	uvarint := func() (uint64, error) {
		n, k := binary.Uvarint(buf)
		if k <= 0 {
			return 0, errShort
		}
		buf = buf[k:]
		return n, nil
	}
	field := func() ([]byte, error) {
		n, err := uvarint()
		if err != nil || n > uint64(len(buf)) {
			return nil, errShort
		}
		f := buf[:n]
		buf = buf[n:]
		return f, nil
	}
	for len(buf) > 0 {
		id, err := field()
		if err != nil {
			return nil, err
		}
		if n := len(kd.ids); n > 0 && kd.ids[n-1] >= string(id) {
			return nil, fmt.Errorf("record %q out of order", id)
		}
		if len(buf) == 0 {
			return nil, errShort
		}
		tag := buf[0]
		buf = buf[1:]
		switch tag {
		case 0:
			v, err := field()
			if err != nil {
				return nil, err
			}
			kd.vals[string(id)] = v
		case 1:
			key, err := field()
			if err != nil {
				return nil, err
			}
			chunks, err := uvarint()
			if err != nil {
				return nil, err
			}
			size, err := uvarint()
			if err != nil || len(buf) < sha256.Size {
				return nil, errShort
			}
			kd.blobs[string(id)] = blob{Key: string(key), Chunks: int(chunks), Size: int(size), SHA256: hex.EncodeToString(buf[:sha256.Size])}
			buf = buf[sha256.Size:]
		default:
			return nil, fmt.Errorf("record %q: unknown tag %d", id, tag)
		}
		kd.ids = append(kd.ids, string(id))
	}
	return kd, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("jskv: crypto/rand: " + err.Error()) // crypto/rand does not fail on supported systems
	}
	return hex.EncodeToString(b)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("jskv: %w", ctx.Err())
	case <-t.C:
		return nil
	}
}
