package ledger

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The database's buckets.
var (
	// recordsBucket maps a record's Seq (8 bytes, big-endian) to its JSON.
	recordsBucket = []byte("records")
	// openBucket holds the open records of requests in flight, by Seq.
	openBucket = []byte("open")
	// timeBucket indexes records by start time: Start (Unix nanoseconds,
	// 8 bytes big-endian) then Seq, to nothing.
	timeBucket = []byte("by_start")
	// commitBucket lists final records in the order they were committed
	// (a long request numbered early ends late): a counter to the Seq. A
	// replica follows it.
	commitBucket = []byte("by_commit")
	// metaBucket holds the ledger's source id and its replicas' cursors.
	metaBucket = []byte("meta")
)

// sourceKey names the ledger's source id in metaBucket.
var sourceKey = []byte("source")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("ledger: closed")

// ErrHeld: another process has the ledger open (one process writes a
// ledger at a time).
var ErrHeld = errors.New("ledger: held by another process")

// queueLen bounds the writes waiting for the writer; a full queue makes
// Begin and End wait (the disk is the bottleneck then).
const queueLen = 4096

// batchMax bounds the writes one transaction commits.
const batchMax = 512

// Ledger is the usage ledger over one bbolt file. Its methods are safe for
// concurrent use.
type Ledger struct {
	db  *bolt.DB
	ops chan op
	now func() time.Time

	mu     sync.Mutex // guards seq and closed
	seq    uint64
	closed bool
	wg     sync.WaitGroup
	// source names this ledger among a cluster's (random, kept in the file).
	source string
	// committed is signalled after each commit of final records.
	committed chan struct{}
}

// op is one queued write: put the record (open or final) and, for a final
// record, remove its open one. done, when set, receives the commit's error.
type op struct {
	rec   Record
	final bool
	done  chan error
}

// Options configure Open.
type Options struct {
	// Now is the clock (default time.Now): interrupted records end at
	// Open's time.
	Now func() time.Time
	// Wait is how long Open waits for another process to let the file go
	// before it returns ErrHeld (default 2s).
	Wait time.Duration
}

// Open opens (creating) the ledger at path and closes the books on the
// requests a previous process left open: each becomes a record of outcome
// "interrupted". It returns how many it closed.
func Open(path string, o Options) (*Ledger, int, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Wait <= 0 {
		o.Wait = 2 * time.Second
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: o.Wait})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, 0, fmt.Errorf("%w: %s", ErrHeld, path)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("ledger: opening %s: %w", path, err)
	}
	l := &Ledger{db: db, ops: make(chan op, queueLen), now: o.Now, committed: make(chan struct{}, 1)}
	interrupted := 0
	err = db.Update(func(tx *bolt.Tx) error {
		recs, err := tx.CreateBucketIfNotExists(recordsBucket)
		if err != nil {
			return err
		}
		open, err := tx.CreateBucketIfNotExists(openBucket)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(timeBucket); err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(commitBucket); err != nil {
			return err
		}
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if l.source = string(meta.Get(sourceKey)); l.source == "" {
			l.source = newSource()
			if err := meta.Put(sourceKey, []byte(l.source)); err != nil {
				return err
			}
		}
		if k, _ := recs.Cursor().Last(); k != nil {
			l.seq = binary.BigEndian.Uint64(k)
		}
		var keys [][]byte
		err = open.ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("ledger: open record %x: %w", k, err)
			}
			r.Outcome, r.End, r.Error = OutcomeInterrupted, o.Now().UTC(), "the server stopped while the request was in flight"
			if err := putRecord(tx, r); err != nil {
				return err
			}
			l.seq = max(l.seq, r.Seq)
			keys = append(keys, k)
			interrupted++
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := open.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, 0, fmt.Errorf("ledger: opening %s: %w", path, err)
	}
	l.wg.Add(1)
	go l.write()
	return l, interrupted, nil
}

// Close writes what is queued and closes the database.
func (l *Ledger) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.ops) // no send after closed is set: senders hold mu while sending
	l.mu.Unlock()
	l.wg.Wait()
	return l.db.Close()
}

// Begin records that a request is in flight, assigning its Seq, which it
// returns for End. It does not wait for the disk.
func (l *Ledger) Begin(ctx context.Context, r Record) (uint64, error) {
	r.Outcome = OutcomeOpen
	return l.enqueue(ctx, r, false, nil)
}

// End records r, which Begin numbered (r.Seq), as final, and waits until it
// is committed (or ctx ends).
func (l *Ledger) End(ctx context.Context, r Record) error {
	if r.Seq == 0 {
		return errors.New("ledger: End of a record Begin did not number")
	}
	done := make(chan error, 1)
	if _, err := l.enqueue(ctx, r, true, done); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("ledger: waiting for record %d: %w", r.Seq, ctx.Err())
	}
}

// Add records a final record that had no open one (cache records),
// numbering it, and waits until it is committed.
func (l *Ledger) Add(ctx context.Context, r Record) (uint64, error) {
	done := make(chan error, 1)
	seq, err := l.enqueue(ctx, r, true, done)
	if err != nil {
		return 0, err
	}
	select {
	case err := <-done:
		return seq, err
	case <-ctx.Done():
		return seq, fmt.Errorf("ledger: waiting for record %d: %w", seq, ctx.Err())
	}
}

// enqueue numbers r if it has no Seq and queues it for the writer.
func (l *Ledger) enqueue(ctx context.Context, r Record, final bool, done chan error) (uint64, error) {
	if err := r.Tokens.Check(); err != nil {
		return 0, err
	}
	if r.Start.IsZero() {
		return 0, errors.New("ledger: a record needs its start time")
	}
	r.Start, r.End = r.Start.UTC(), r.End.UTC()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return 0, ErrClosed
	}
	if r.Seq == 0 {
		l.seq++
		r.Seq = l.seq
	}
	select {
	case l.ops <- op{rec: r, final: final, done: done}:
		return r.Seq, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("ledger: queueing a record: %w", ctx.Err())
	}
}

// write commits queued ops in batches until the queue is closed.
func (l *Ledger) write() {
	defer l.wg.Done()
	batch := make([]op, 0, batchMax)
	for first := range l.ops {
		batch = append(batch[:0], first)
	fill:
		for len(batch) < batchMax {
			select {
			case o, ok := <-l.ops:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		err := l.db.Update(func(tx *bolt.Tx) error {
			open := tx.Bucket(openBucket)
			for _, o := range batch {
				key := seqKey(o.rec.Seq)
				if !o.final {
					v, err := json.Marshal(o.rec)
					if err != nil {
						return err
					}
					if err := open.Put(key, v); err != nil {
						return err
					}
					continue
				}
				if err := open.Delete(key); err != nil {
					return err
				}
				if err := putRecord(tx, o.rec); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			err = fmt.Errorf("ledger: committing %d records: %w", len(batch), err)
		} else {
			select {
			case l.committed <- struct{}{}:
			default:
			}
		}
		for _, o := range batch {
			if o.done != nil {
				o.done <- err
			}
		}
	}
}

// putRecord writes a final record and its index entries.
func putRecord(tx *bolt.Tx, r Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := tx.Bucket(recordsBucket).Put(seqKey(r.Seq), v); err != nil {
		return err
	}
	if err := tx.Bucket(timeBucket).Put(timeKey(r.Start, r.Seq), nil); err != nil {
		return err
	}
	commits := tx.Bucket(commitBucket)
	n, err := commits.NextSequence()
	if err != nil {
		return err
	}
	return commits.Put(seqKey(n), seqKey(r.Seq))
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

func timeKey(t time.Time, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(max(0, t.UnixNano()))), seq)
}

// Filter selects records.
type Filter struct {
	// Tenant, when set, keeps only that tenant's records.
	Tenant string
	// From and To bound the records' start times: From ≤ Start < To (zero:
	// unbounded).
	From, To time.Time
	// Open includes the requests still in flight (outcome "open").
	Open bool
}

// Records calls fn with each final record that f selects, in order of
// start time, then the open ones if asked. fn must not keep the ledger
// busy: the scan holds a read transaction.
func (l *Ledger) Records(ctx context.Context, f Filter, fn func(Record) error) error {
	return l.db.View(func(tx *bolt.Tx) error {
		recs, idx := tx.Bucket(recordsBucket), tx.Bucket(timeBucket)
		c := idx.Cursor()
		var k []byte
		if f.From.IsZero() {
			k, _ = c.First()
		} else {
			k, _ = c.Seek(timeKey(f.From, 0))
		}
		var end []byte
		if !f.To.IsZero() {
			end = timeKey(f.To, 0)
		}
		for ; k != nil; k, _ = c.Next() {
			if end != nil && string(k) >= string(end) {
				break
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			v := recs.Get(k[8:])
			if v == nil {
				return fmt.Errorf("ledger: index entry %x without its record", k)
			}
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("ledger: record %x: %w", k[8:], err)
			}
			if f.Tenant != "" && r.Tenant != f.Tenant {
				continue
			}
			if err := fn(r); err != nil {
				return err
			}
		}
		if !f.Open {
			return nil
		}
		return tx.Bucket(openBucket).ForEach(func(_, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			if (f.Tenant != "" && r.Tenant != f.Tenant) || (!f.From.IsZero() && r.Start.Before(f.From)) ||
				(!f.To.IsZero() && !r.Start.Before(f.To)) {
				return nil
			}
			return fn(r)
		})
	})
}
