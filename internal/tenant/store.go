package tenant

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Kind names a collection of records: a bbolt bucket here, a JetStream KV
// bucket in a cluster.
type Kind string

// The kinds of record.
const (
	KindTenants  Kind = "tenants"
	KindKeys     Kind = "keys"
	KindBindings Kind = "bindings"
)

var kinds = []Kind{KindTenants, KindKeys, KindBindings, KindCachedContents}

// Store keeps plain records (bytes under a kind and an id). It is the seam
// between the tenant logic and where the records live: an embedded bbolt
// file for one server (OpenBolt), a replicated store for a cluster.
type Store interface {
	// View runs fn in a read-only transaction: it sees one consistent
	// state.
	View(ctx context.Context, fn func(Tx) error) error
	// Update runs fn in a read-write transaction: every change fn makes is
	// kept, or none is if fn (or the commit) fails. Changes that touch
	// several records (deleting a tenant revokes its keys) go in one.
	// Transactions are serialisable. A store shared by several processes
	// may run fn more than once (optimistic concurrency: fn is run again
	// on a fresh state when another process committed first), so fn must
	// change nothing but the transaction, and reset what it collects.
	Update(ctx context.Context, fn func(Tx) error) error
	// Close releases the store.
	Close() error
}

// Tx is one transaction's view of the records. Values passed to or
// returned from its methods are owned by the caller.
type Tx interface {
	// Get returns the record kind/id, or ErrNotFound.
	Get(kind Kind, id string) ([]byte, error)
	// Put stores the record kind/id, replacing any.
	Put(kind Kind, id string, value []byte) error
	// Delete removes the record kind/id (no error if absent).
	Delete(kind Kind, id string) error
	// List calls fn for every record of kind in id order, stopping at the
	// first error, which it returns.
	List(kind Kind, fn func(id string, value []byte) error) error
}

// ErrNotFound is returned for a record, tenant or key that does not exist.
var ErrNotFound = errors.New("tenant: not found")

// ErrClosed is returned by the transactions of a closed Store.
var ErrClosed = errors.New("tenant: store closed")

// BoltOptions configure OpenBolt. The zero value is the default.
type BoltOptions struct {
	// LockTimeout is how long a transaction waits for another process
	// holding the file (default 5s).
	LockTimeout time.Duration
}

// boltStore keeps records in a bbolt file, one bucket per kind.
//
// It opens the file for each transaction and closes it after, rather
// than holding it: bbolt locks the whole file while it is open, and a
// running server must not lock `kvserve key revoke` out of the data
// directory (there is no admin API yet through which to revoke instead).
// Read transactions share the lock, write transactions take it alone; the
// mutex orders this process's own transactions the same way, so that they
// wait on each other without bbolt's lock polling.
type boltStore struct {
	path    string
	timeout time.Duration
	mu      sync.RWMutex
	closed  bool
}

var _ Store = (*boltStore)(nil)

// OpenBolt opens (creating it with mode 0600 and its buckets) the bbolt
// store at path.
func OpenBolt(path string, o BoltOptions) (Store, error) {
	if o.LockTimeout <= 0 {
		o.LockTimeout = 5 * time.Second
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("tenant: store directory: %w", err)
	}
	s := &boltStore{path: path, timeout: o.LockTimeout}
	err := s.Update(context.Background(), func(Tx) error { return nil }) // creates the file and buckets
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("tenant: %s is readable by others and cannot be fixed: %w", path, err)
		}
	}
	return s, nil
}

func (s *boltStore) View(ctx context.Context, fn func(Tx) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.run(ctx, false, fn)
}

func (s *boltStore) Update(ctx context.Context, fn func(Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.run(ctx, true, fn)
}

func (s *boltStore) run(ctx context.Context, write bool, fn func(Tx) error) error {
	if s.closed {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	db, err := bolt.Open(s.path, 0o600, &bolt.Options{Timeout: s.timeout, ReadOnly: !write})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return fmt.Errorf("tenant: %s is held by another process for more than %s", s.path, s.timeout)
	}
	if err != nil {
		return fmt.Errorf("tenant: open %s: %w", s.path, err)
	}
	defer db.Close()
	if !write {
		return db.View(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
	}
	return db.Update(func(tx *bolt.Tx) error {
		for _, k := range kinds {
			if _, err := tx.CreateBucketIfNotExists([]byte(k)); err != nil {
				return fmt.Errorf("tenant: bucket %s: %w", k, err)
			}
		}
		return fn(boltTx{tx})
	})
}

func (s *boltStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

type boltTx struct{ tx *bolt.Tx }

func (t boltTx) bucket(kind Kind) (*bolt.Bucket, error) {
	b := t.tx.Bucket([]byte(kind))
	if b == nil {
		return nil, fmt.Errorf("tenant: no bucket %q", kind)
	}
	return b, nil
}

func (t boltTx) Get(kind Kind, id string) ([]byte, error) {
	b, err := t.bucket(kind)
	if err != nil {
		return nil, err
	}
	v := b.Get([]byte(id))
	if v == nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrNotFound, kind, id)
	}
	return append([]byte(nil), v...), nil // bbolt's bytes live only as long as the transaction
}

func (t boltTx) Put(kind Kind, id string, value []byte) error {
	b, err := t.bucket(kind)
	if err != nil {
		return err
	}
	// bbolt keeps the slice until the commit: the caller owns it.
	if err := b.Put([]byte(id), bytes.Clone(value)); err != nil {
		return fmt.Errorf("tenant: put %s/%s: %w", kind, id, err)
	}
	return nil
}

func (t boltTx) Delete(kind Kind, id string) error {
	b, err := t.bucket(kind)
	if err != nil {
		return err
	}
	if err := b.Delete([]byte(id)); err != nil {
		return fmt.Errorf("tenant: delete %s/%s: %w", kind, id, err)
	}
	return nil
}

func (t boltTx) List(kind Kind, fn func(id string, value []byte) error) error {
	b, err := t.bucket(kind)
	if err != nil {
		return err
	}
	return b.ForEach(func(k, v []byte) error { return fn(string(k), append([]byte(nil), v...)) })
}
