package ledger

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// newSource returns a random source id.
func newSource() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "led_" + hex.EncodeToString(b[:])
}

// Source is the ledger's id among a cluster's ledgers: random, made with
// the file and kept in it, so that a replica can tell (Source, Seq) pairs
// apart and a restarted server goes on under the same id.
func (l *Ledger) Source() string { return l.source }

// Committed is signalled (without blocking; it may coalesce) after final
// records are committed: a replica's cue to read on.
func (l *Ledger) Committed() <-chan struct{} { return l.committed }

// cursorKey names a replica's cursor in metaBucket.
func cursorKey(name string) []byte { return []byte("cursor:" + name) }

// Cursor returns how far the replica called name has copied the final
// records, in commit order (0: nothing yet).
func (l *Ledger) Cursor(name string) (uint64, error) {
	var c uint64
	err := l.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(metaBucket).Get(cursorKey(name)); len(v) == 8 {
			c = binary.BigEndian.Uint64(v)
		}
		return nil
	})
	return c, err
}

// SetCursor records that the replica called name has copied the final
// records up to commit position c.
func (l *Ledger) SetCursor(name string, c uint64) error {
	return l.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Put(cursorKey(name), seqKey(c)) })
}

// CommittedAfter returns the final records in commit order after a
// position, up to limit of them, with the position of the last.
func (l *Ledger) CommittedAfter(ctx context.Context, after uint64, limit int) (recs []Record, last uint64, err error) {
	last = after
	err = l.db.View(func(tx *bolt.Tx) error {
		byCommit, records := tx.Bucket(commitBucket), tx.Bucket(recordsBucket)
		c := byCommit.Cursor()
		for k, v := c.Seek(seqKey(after + 1)); k != nil && len(recs) < limit; k, v = c.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			data := records.Get(v)
			if data == nil {
				return fmt.Errorf("ledger: commit entry %x without its record", k)
			}
			var r Record
			if err := json.Unmarshal(data, &r); err != nil {
				return fmt.Errorf("ledger: record %x: %w", v, err)
			}
			recs = append(recs, r)
			last = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return recs, last, err
}
