// Package audit is kvserve's audit trail: an append-only file of JSON
// lines, one record per security-relevant event (a key or tenant change, a
// denied request), chained so that editing, removing or reordering a
// record is evident.
//
// # The chain
//
// Each record carries Prev, the SHA-256 of the previous line's bytes, and
// Hash, the SHA-256 of its own canonical encoding (which includes Prev).
// ParseRecord accepts a line only in canonical form with a matching Hash;
// Verify walks the file and checks that Seq counts up from 1 and that
// every Prev matches the line before it. Changing one byte of record k
// breaks k's Hash; recomputing that Hash breaks k+1's Prev; and so on to
// the end. What the chain cannot show is the loss of the newest records
// (a truncation at a line boundary): Verify reports the last Seq and Hash
// so an operator can keep them elsewhere and compare.
//
// The hashes are not keyed: the chain makes tampering evident to anyone
// holding an earlier copy or anchor, not impossible for someone who can
// rewrite the whole file.
//
// # Durability and concurrency
//
// Every Append writes one line with one write call and fsyncs the file
// before it returns: a record the caller was told about survives a crash.
// Denials are appended on the request path, so a flood of bad keys costs
// an fsync each; batching would trade that against a window of records
// lost on power failure, and the log favours the record.
//
// A Log is safe for concurrent use. Several processes may append to the
// same file (a running server and `kvserve key revoke`): each append takes
// an exclusive flock, and if the file grew since this process last wrote,
// it reads the last record again to continue the chain from it. A torn
// final line (a crash in the middle of a write, never acknowledged) is cut
// off when the next append finds it, and that cut is itself recorded.
//
// Records never hold prompt text or secrets: callers pass names and ids.
package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Options configure a Log. The zero value is the default.
type Options struct {
	// Now returns the current time (default time.Now); tests fix it.
	Now func() time.Time
}

// Log appends records to an audit file.
type Log struct {
	path string
	now  func() time.Time

	mu   sync.Mutex // guards the fields below and orders appends in-process
	f    *os.File
	seq  uint64 // the last record's Seq
	prev string // the hash of the last line's bytes
	size int64  // the file's size after the last line this Log read or wrote
}

// Open opens (creating it with mode 0600) the audit file at path and
// checks its last record, so that appends continue its chain.
func Open(path string, o Options) (*Log, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: open: %w", err)
	}
	if errors.Is(statErr, os.ErrNotExist) {
		// Make the new file's name durable along with its first records.
		if d, err := os.Open(filepath.Dir(path)); err == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	l := &Log{path: path, now: o.Now, f: f, prev: GenesisPrev, size: -1}
	if err := lock(f, true); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: lock %s: %w", path, err)
	}
	err = l.catchUp()
	if uerr := unlock(f); err == nil && uerr != nil {
		err = fmt.Errorf("audit: unlock %s: %w", path, uerr)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// Path returns the file's path.
func (l *Log) Path() string { return l.path }

// Close closes the file.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Append records e and returns its record once it is on disk. Fields
// longer than a kilobyte are shortened.
func (l *Log) Append(ctx context.Context, e Entry) (Record, error) {
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("audit: %w", err)
	}
	if !e.Outcome.valid() {
		return Record{}, fmt.Errorf("audit: outcome %q: want ok, denied or error", e.Outcome)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return Record{}, errors.New("audit: log closed")
	}
	if err := lock(l.f, true); err != nil {
		return Record{}, fmt.Errorf("audit: lock %s: %w", l.path, err)
	}
	defer func() { _ = unlock(l.f) }()
	if err := l.catchUp(); err != nil {
		return Record{}, err
	}
	return l.write(e)
}

// catchUp syncs with the file and records the cut of a torn final line;
// the caller holds the lock.
func (l *Log) catchUp() error {
	torn, err := l.sync()
	if err != nil || torn == 0 {
		return err
	}
	cut := Entry{Principal: "kvserve", Action: "audit.recover", Resource: "audit.log", Outcome: Failed,
		Reason: "cut a torn final line of " + strconv.FormatInt(torn, 10) + " bytes (an append interrupted by a crash)"}
	_, err = l.write(cut)
	return err
}

// write appends one record; the caller holds the lock and has synced.
func (l *Log) write(e Entry) (Record, error) {
	r, line, err := Chain(e, l.seq, l.prev, l.now())
	if err != nil {
		return Record{}, err
	}
	n, err := l.f.Write(append(line, '\n'))
	if err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		// The file may now end in a torn line; the next append cuts it.
		l.size = -1
		return Record{}, fmt.Errorf("audit: append to %s: %w", l.path, err)
	}
	l.seq, l.prev, l.size = r.Seq, lineHash(line), l.size+int64(n)
	return r, nil
}

// sync brings seq and prev up to date with the file's last record when
// the file changed since this Log last read or wrote it (another process
// appended), cutting a torn final line. It returns the bytes cut.
func (l *Log) sync() (torn int64, err error) {
	st, err := l.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("audit: stat %s: %w", l.path, err)
	}
	size := st.Size()
	if size == l.size {
		return 0, nil
	}
	lines, end, err := tailLines(l.f, size, 1)
	if err != nil {
		return 0, fmt.Errorf("audit: read %s: %w", l.path, err)
	}
	if end < size {
		// Bytes after the last newline: an interrupted write.
		torn = size - end
		if err := l.f.Truncate(end); err != nil {
			return 0, fmt.Errorf("audit: cut the torn end of %s: %w", l.path, err)
		}
		size = end
	}
	l.seq, l.prev, l.size = 0, GenesisPrev, size
	if len(lines) == 0 {
		return torn, nil
	}
	last := lines[len(lines)-1]
	r, err := ParseRecord(last)
	if err != nil {
		return 0, fmt.Errorf("audit: the last record of %s is damaged, so the chain cannot continue (run kvserve audit verify): %w", l.path, err)
	}
	l.seq, l.prev = r.Seq, lineHash(last)
	return torn, nil
}

// tailLines returns up to n complete lines (without newlines) at the end
// of the first size bytes of f, oldest first, and where the complete lines
// end: bytes after the last newline are an unfinished line, left out.
func tailLines(f io.ReaderAt, size int64, n int) ([][]byte, int64, error) {
	const chunk = 64 << 10
	var buf []byte // the file's bytes from off to size
	off := size
	for off > 0 && bytes.Count(buf, []byte{'\n'}) <= n {
		if int64(len(buf)) > int64(n+1)*MaxLine+chunk {
			break // longer lines are damage, reported when parsed
		}
		step := min(int64(chunk), off)
		more := make([]byte, step+int64(len(buf)))
		if _, err := f.ReadAt(more[:step], off-step); err != nil {
			return nil, 0, err
		}
		copy(more[step:], buf)
		buf, off = more, off-step
	}
	last := bytes.LastIndexByte(buf, '\n')
	if last < 0 {
		if off > 0 {
			return nil, 0, fmt.Errorf("no line end in the last %d bytes", len(buf))
		}
		return nil, 0, nil
	}
	end := off + int64(last) + 1
	lines := bytes.Split(buf[:last], []byte{'\n'})
	if off > 0 {
		lines = lines[1:] // begins before off: not read whole
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, end, nil
}

// VerifyError reports the first broken record of a log.
type VerifyError struct {
	// Line is the 1-based line number.
	Line int
	// Seq is the sequence number the record at Line should have.
	Seq uint64
	// Reason says what is wrong.
	Reason string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("audit: record %d (line %d) is broken: %s", e.Seq, e.Line, e.Reason)
}

// Summary is what Verify found in an intact log.
type Summary struct {
	// Records is the number of records (the last Seq).
	Records uint64
	// Last is the last record's hash ("" for an empty log): keep it
	// elsewhere to detect a later truncation.
	Last string
	// LastTime is the last record's time.
	LastTime time.Time
}

// Verify checks the whole chain of the log at path and returns its
// summary, or a *VerifyError for the first broken record.
func Verify(path string) (Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Summary{}, fmt.Errorf("audit: verify: %w", err)
	}
	defer f.Close()
	if err := lock(f, false); err != nil {
		return Summary{}, fmt.Errorf("audit: lock %s: %w", path, err)
	}
	defer func() { _ = unlock(f) }()
	return verify(f)
}

func verify(rd io.Reader) (Summary, error) {
	var v Verifier
	br := newLineReader(rd)
	for line := 1; ; line++ {
		b, complete, err := br.next()
		if err == io.EOF {
			return v.Summary(), nil
		}
		if err != nil {
			return v.Summary(), &VerifyError{Line: line, Seq: v.s.Records + 1, Reason: err.Error()}
		}
		if !complete {
			return v.Summary(), &VerifyError{Line: line, Seq: v.s.Records + 1, Reason: "truncated: the last line has no end"}
		}
		if err := v.Add(line, b); err != nil {
			return v.Summary(), err
		}
	}
}

// Verifier checks a chain one line at a time, wherever its lines are kept
// (a file, a stream). The zero value expects the first record.
type Verifier struct {
	s    Summary
	prev string
}

// Add checks the next line (without its newline), found at position pos
// (a line number, a stream sequence: for the error), and returns a
// *VerifyError if it does not continue the chain.
func (v *Verifier) Add(pos int, line []byte) error {
	if v.prev == "" {
		v.prev = GenesisPrev
	}
	want := v.s.Records + 1
	r, err := ParseRecord(line)
	if err != nil {
		return &VerifyError{Line: pos, Seq: want, Reason: err.Error()}
	}
	if r.Seq != want {
		return &VerifyError{Line: pos, Seq: want, Reason: fmt.Sprintf("found seq %d: a record was removed, added or moved", r.Seq)}
	}
	if r.Prev != v.prev {
		return &VerifyError{Line: pos, Seq: want, Reason: "prev does not match the previous line: that line was changed, or a record removed"}
	}
	v.prev = lineHash(line)
	v.s.Records, v.s.Last, v.s.LastTime = r.Seq, r.Hash, r.Time
	return nil
}

// Summary is what the lines added so far hold.
func (v *Verifier) Summary() Summary { return v.s }

// lineReader reads lines of at most MaxLine bytes.
type lineReader struct {
	r   io.Reader
	buf []byte
	eof bool
}

func newLineReader(r io.Reader) *lineReader { return &lineReader{r: r} }

// next returns the next line without its newline, and whether it had one.
func (lr *lineReader) next() ([]byte, bool, error) {
	for {
		if i := bytes.IndexByte(lr.buf, '\n'); i >= 0 {
			line := lr.buf[:i:i]
			lr.buf = lr.buf[i+1:]
			return line, true, nil
		}
		if len(lr.buf) > MaxLine {
			return nil, false, fmt.Errorf("line longer than %d bytes", MaxLine)
		}
		if lr.eof {
			if len(lr.buf) == 0 {
				return nil, false, io.EOF
			}
			line := lr.buf
			lr.buf = nil
			return line, false, nil
		}
		chunk := make([]byte, 32<<10)
		n, err := lr.r.Read(chunk)
		lr.buf = append(lr.buf, chunk[:n]...)
		if err == io.EOF {
			lr.eof = true
		} else if err != nil {
			return nil, false, err
		}
	}
}

// Tail returns the last n records of the log at path (fewer if it holds
// fewer), oldest first. A torn final line is left out; a damaged record
// among them is an error (run Verify).
func Tail(path string, n int) ([]Record, error) {
	if n <= 0 {
		return nil, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: tail: %w", err)
	}
	defer f.Close()
	if err := lock(f, false); err != nil {
		return nil, fmt.Errorf("audit: lock %s: %w", path, err)
	}
	defer func() { _ = unlock(f) }()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit: tail: %w", err)
	}
	lines, _, err := tailLines(f, st.Size(), n)
	if err != nil {
		return nil, fmt.Errorf("audit: tail %s: %w", path, err)
	}
	out := make([]Record, 0, len(lines))
	for _, ln := range lines {
		r, err := ParseRecord(ln)
		if err != nil {
			return out, fmt.Errorf("audit: tail %s: %w (run kvserve audit verify)", path, err)
		}
		out = append(out, r)
	}
	return out, nil
}
