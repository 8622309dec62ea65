// Package storetest is the conformance suite of tenant.Store: every
// implementation (the bbolt file, the JetStream KV bucket) runs the same
// cases, so that the tenant directory and the context caches behave the
// same on one server and on a cluster.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/tenant"
)

// Backend makes the shared storage of one case and returns a function
// opening a client of it: the stores one backend opens share their
// records, as two processes on one data directory or one NATS bucket do.
// Stores are closed by the suite; the backend cleans up with t.Cleanup.
type Backend func(t *testing.T) (open func(t *testing.T) tenant.Store)

// Visible is how long a change committed through one client may take to
// be seen through another (a cluster's store reads a local copy with
// bounded staleness).
const Visible = 5 * time.Second

// Run runs every case on stores from b.
func Run(t *testing.T, b Backend) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open func(t *testing.T) tenant.Store)
	}{
		{"GetPutDeleteList", testGetPutDeleteList},
		{"CallerOwnsValues", testCallerOwnsValues},
		{"OwnWritesInTransaction", testOwnWrites},
		{"FailedUpdateKeepsNothing", testAtomicity},
		{"ViewIsReadOnly", testViewReadOnly},
		{"ChangesReachOtherClients", testOtherClients},
		{"ConcurrentIncrements", testIncrements},
		{"ConsistentViews", testConsistentViews},
		{"LargeValues", testLargeValues},
		{"Closed", testClosed},
		{"CancelledContext", testCancelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, b(t)) })
	}
}

func client(t *testing.T, open func(t *testing.T) tenant.Store) tenant.Store {
	t.Helper()
	s := open(t)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func put(t *testing.T, s tenant.Store, kind tenant.Kind, id, v string) {
	t.Helper()
	if err := s.Update(context.Background(), func(tx tenant.Tx) error { return tx.Put(kind, id, []byte(v)) }); err != nil {
		t.Fatalf("put %s/%s: %v", kind, id, err)
	}
}

// get returns the record's value, or "" and false when it is absent.
func get(t *testing.T, s tenant.Store, kind tenant.Kind, id string) (string, bool) {
	t.Helper()
	var v []byte
	err := s.View(context.Background(), func(tx tenant.Tx) (err error) {
		v, err = tx.Get(kind, id)
		return err
	})
	if errors.Is(err, tenant.ErrNotFound) {
		return "", false
	}
	if err != nil {
		t.Fatalf("get %s/%s: %v", kind, id, err)
	}
	return string(v), true
}

func ids(t *testing.T, s tenant.Store, kind tenant.Kind) []string {
	t.Helper()
	var out []string
	err := s.View(context.Background(), func(tx tenant.Tx) error {
		return tx.List(kind, func(id string, _ []byte) error { out = append(out, id); return nil })
	})
	if err != nil {
		t.Fatalf("list %s: %v", kind, err)
	}
	return out
}

func testGetPutDeleteList(t *testing.T, open func(t *testing.T) tenant.Store) {
	s := client(t, open)
	if _, ok := get(t, s, tenant.KindKeys, "nope"); ok {
		t.Fatal("a record of an empty store")
	}
	if got := ids(t, s, tenant.KindKeys); len(got) != 0 {
		t.Fatalf("an empty store lists %q", got)
	}
	// Stored out of order, listed in byte order of the ids.
	want := []string{"A", "a", "a/b", "ab", "b", "tn_1", "tn_10", "tn_2"}
	for _, i := range rand.Perm(len(want)) {
		put(t, s, tenant.KindKeys, want[i], "v-"+want[i])
	}
	put(t, s, tenant.KindTenants, "a", "tenant a") // same id, another kind
	if got := ids(t, s, tenant.KindKeys); !slices.Equal(got, want) {
		t.Fatalf("list: %q, want %q", got, want)
	}
	var vals []string
	err := s.View(context.Background(), func(tx tenant.Tx) error {
		return tx.List(tenant.KindKeys, func(id string, v []byte) error { vals = append(vals, id+"="+string(v)); return nil })
	})
	if err != nil || vals[0] != "A=v-A" || vals[len(vals)-1] != "tn_2=v-tn_2" {
		t.Fatalf("list values: %q %v", vals, err)
	}
	if v, ok := get(t, s, tenant.KindTenants, "a"); !ok || v != "tenant a" {
		t.Fatalf("tenants/a: %q %v", v, ok)
	}
	put(t, s, tenant.KindKeys, "b", "replaced")
	if v, _ := get(t, s, tenant.KindKeys, "b"); v != "replaced" {
		t.Fatalf("replaced value: %q", v)
	}
	err = s.Update(context.Background(), func(tx tenant.Tx) error {
		if err := tx.Delete(tenant.KindKeys, "b"); err != nil {
			return err
		}
		return tx.Delete(tenant.KindKeys, "never-stored") // no error
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, s, tenant.KindKeys, "b"); ok {
		t.Fatal("a deleted record is still there")
	}
	if got := ids(t, s, tenant.KindKeys); len(got) != len(want)-1 || slices.Contains(got, "b") {
		t.Fatalf("after delete: %q", got)
	}
	// List stops at fn's first error and returns it.
	stop := errors.New("stop")
	n := 0
	err = s.View(context.Background(), func(tx tenant.Tx) error {
		return tx.List(tenant.KindKeys, func(string, []byte) error { n++; return stop })
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("list with an error: %v after %d records", err, n)
	}
	// A missing record's error names it and is ErrNotFound.
	err = s.View(context.Background(), func(tx tenant.Tx) error { _, err := tx.Get(tenant.KindBindings, "x"); return err })
	if !errors.Is(err, tenant.ErrNotFound) {
		t.Fatalf("missing record: %v", err)
	}
}

func testCallerOwnsValues(t *testing.T, open func(t *testing.T) tenant.Store) {
	s := client(t, open)
	v := []byte("original")
	err := s.Update(context.Background(), func(tx tenant.Tx) error {
		err := tx.Put(tenant.KindKeys, "k", v)
		v[0] = 'X' // the caller's slice, changed after Put
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(context.Background(), func(tx tenant.Tx) error {
		b, err := tx.Get(tenant.KindKeys, "k")
		if err != nil {
			return err
		}
		b[0] = 'Y' // the returned slice, changed
		return tx.List(tenant.KindKeys, func(_ string, b []byte) error { b[1] = 'Z'; return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := get(t, s, tenant.KindKeys, "k"); got != "original" {
		t.Fatalf("stored value changed through the caller's slices: %q", got)
	}
}

func testOwnWrites(t *testing.T, open func(t *testing.T) tenant.Store) {
	s := client(t, open)
	put(t, s, tenant.KindKeys, "old", "1")
	put(t, s, tenant.KindKeys, "gone", "1")
	err := s.Update(context.Background(), func(tx tenant.Tx) error {
		if err := tx.Put(tenant.KindKeys, "new", []byte("2")); err != nil {
			return err
		}
		if err := tx.Delete(tenant.KindKeys, "gone"); err != nil {
			return err
		}
		if v, err := tx.Get(tenant.KindKeys, "new"); err != nil || string(v) != "2" {
			return fmt.Errorf("own put not visible: %q %v", v, err)
		}
		if _, err := tx.Get(tenant.KindKeys, "gone"); !errors.Is(err, tenant.ErrNotFound) {
			return fmt.Errorf("own delete not visible: %v", err)
		}
		var got []string
		// Deleting while listing (collect, then delete, is what callers
		// do; a store must at least list what it holds at the start).
		err := tx.List(tenant.KindKeys, func(id string, _ []byte) error { got = append(got, id); return nil })
		if err != nil || !slices.Equal(got, []string{"new", "old"}) {
			return fmt.Errorf("list in the transaction: %q %v", got, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(t, s, tenant.KindKeys); !slices.Equal(got, []string{"new", "old"}) {
		t.Fatalf("after commit: %q", got)
	}
}

func testAtomicity(t *testing.T, open func(t *testing.T) tenant.Store) {
	s := client(t, open)
	put(t, s, tenant.KindTenants, "t1", "kept")
	put(t, s, tenant.KindKeys, "k1", "kept")
	boom := errors.New("boom")
	err := s.Update(context.Background(), func(tx tenant.Tx) error {
		for _, op := range []error{
			tx.Put(tenant.KindTenants, "t2", []byte("new")),
			tx.Put(tenant.KindKeys, "k1", []byte("changed")),
			tx.Delete(tenant.KindTenants, "t1"),
			tx.Put(tenant.KindCachedContents, "c1", []byte("new")),
		} {
			if op != nil {
				return op
			}
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want fn's error", err)
	}
	if got := ids(t, s, tenant.KindTenants); !slices.Equal(got, []string{"t1"}) {
		t.Fatalf("tenants after a failed update: %q", got)
	}
	if v, _ := get(t, s, tenant.KindKeys, "k1"); v != "kept" {
		t.Fatalf("keys/k1 after a failed update: %q", v)
	}
	if got := ids(t, s, tenant.KindCachedContents); len(got) != 0 {
		t.Fatalf("caches after a failed update: %q", got)
	}
	// The store still works after it.
	put(t, s, tenant.KindTenants, "t3", "after")
	if got := ids(t, s, tenant.KindTenants); !slices.Equal(got, []string{"t1", "t3"}) {
		t.Fatalf("tenants: %q", got)
	}
}

func testViewReadOnly(t *testing.T, open func(t *testing.T) tenant.Store) {
	s := client(t, open)
	put(t, s, tenant.KindKeys, "k", "v")
	err := s.View(context.Background(), func(tx tenant.Tx) error {
		perr := tx.Put(tenant.KindKeys, "other", []byte("v"))
		derr := tx.Delete(tenant.KindKeys, "k")
		if perr == nil || derr == nil {
			return fmt.Errorf("a read-only transaction wrote: put %v, delete %v", perr, derr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(t, s, tenant.KindKeys); !slices.Equal(got, []string{"k"}) {
		t.Fatalf("after a View: %q", got)
	}
}

// eventually polls cond until it holds or Visible has passed.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(Visible); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, Visible)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testOtherClients(t *testing.T, open func(t *testing.T) tenant.Store) {
	a, b := client(t, open), client(t, open)
	put(t, a, tenant.KindKeys, "k", "from a")
	eventually(t, "b sees a's record", func() bool { v, _ := get(t, b, tenant.KindKeys, "k"); return v == "from a" })
	err := b.Update(context.Background(), func(tx tenant.Tx) error { return tx.Delete(tenant.KindKeys, "k") })
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "a sees b's delete", func() bool { _, ok := get(t, a, tenant.KindKeys, "k"); return !ok })
	// A client opened afterwards sees the state at once.
	c := client(t, open)
	put(t, a, tenant.KindTenants, "t", "x")
	eventually(t, "a new client sees the state", func() bool { v, _ := get(t, c, tenant.KindTenants, "t"); return v == "x" })
}

// testIncrements: two clients, two goroutines each, increment one
// counter concurrently; no increment is lost (each Update reads and writes
// the counter: a store that does not serialise them loses some).
func testIncrements(t *testing.T, open func(t *testing.T) tenant.Store) {
	const clients, each = 2, 50
	stores := []tenant.Store{client(t, open), client(t, open)}
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	for g := range 2 * clients {
		c := g % clients
		wg.Go(func() {
			for range each / 2 {
				errs <- stores[c].Update(context.Background(), func(tx tenant.Tx) error {
					n := 0
					b, err := tx.Get(tenant.KindTenants, "counter")
					if err == nil {
						if n, err = strconv.Atoi(string(b)); err != nil {
							return err
						}
					} else if !errors.Is(err, tenant.ErrNotFound) {
						return err
					}
					// A second record of another kind, changed with it.
					if err := tx.Put(tenant.KindKeys, "last", []byte(strconv.Itoa(c))); err != nil {
						return err
					}
					return tx.Put(tenant.KindTenants, "counter", []byte(strconv.Itoa(n+1)))
				})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range stores {
		eventually(t, fmt.Sprintf("client %d sees %d increments", i, clients*each), func() bool {
			v, _ := get(t, s, tenant.KindTenants, "counter")
			return v == strconv.Itoa(clients*each)
		})
	}
}

// testConsistentViews: one client moves amounts between two records of
// different kinds while another reads both in one View: every read sees
// the same total.
func testConsistentViews(t *testing.T, open func(t *testing.T) tenant.Store) {
	const total = 1000
	w, r := client(t, open), client(t, open)
	err := w.Update(context.Background(), func(tx tenant.Tx) error {
		if err := tx.Put(tenant.KindTenants, "left", []byte(strconv.Itoa(total))); err != nil {
			return err
		}
		return tx.Put(tenant.KindKeys, "right", []byte("0"))
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the reader sees the records", func() bool {
		_, l := get(t, r, tenant.KindTenants, "left")
		_, rt := get(t, r, tenant.KindKeys, "right")
		return l && rt
	})
	read := func(tx tenant.Tx, kind tenant.Kind, id string) (int, error) {
		b, err := tx.Get(kind, id)
		if err != nil {
			return 0, err
		}
		return strconv.Atoi(string(b))
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	var readErr error
	reads := 0
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			err := r.View(context.Background(), func(tx tenant.Tx) error {
				l, err := read(tx, tenant.KindTenants, "left")
				if err != nil {
					return err
				}
				rt, err := read(tx, tenant.KindKeys, "right")
				if err != nil {
					return err
				}
				if l+rt != total {
					return fmt.Errorf("a view saw %d + %d", l, rt)
				}
				return nil
			})
			if err != nil {
				readErr = err
				return
			}
			reads++
		}
	})
	for i := range 30 {
		err := w.Update(context.Background(), func(tx tenant.Tx) error {
			l, err := read(tx, tenant.KindTenants, "left")
			if err != nil {
				return err
			}
			rt, err := read(tx, tenant.KindKeys, "right")
			if err != nil {
				return err
			}
			d := i + 1
			if err := tx.Put(tenant.KindTenants, "left", []byte(strconv.Itoa(l-d))); err != nil {
				return err
			}
			return tx.Put(tenant.KindKeys, "right", []byte(strconv.Itoa(rt+d)))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if readErr != nil {
		t.Fatal(readErr)
	}
	if reads == 0 {
		t.Fatal("no view ran")
	}
}

// testLargeValues: values larger than a NATS message (1 MiB by default)
// and many records, which a store must split and join.
func testLargeValues(t *testing.T, open func(t *testing.T) tenant.Store) {
	a, b := client(t, open), client(t, open)
	big := make([]byte, 3<<20+12345)
	for i := range big {
		big[i] = byte(rand.N(256))
	}
	small := map[string][]byte{}
	err := a.Update(context.Background(), func(tx tenant.Tx) error {
		for i := range 300 {
			id := fmt.Sprintf("c%04d", i)
			v := bytes.Repeat([]byte{byte(i)}, 1000+i*37)
			small[id] = v
			if err := tx.Put(tenant.KindCachedContents, id, v); err != nil {
				return err
			}
		}
		return tx.Put(tenant.KindCachedContents, "big", big)
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(s tenant.Store) bool {
		n := 0
		ok := true
		err := s.View(context.Background(), func(tx tenant.Tx) error {
			return tx.List(tenant.KindCachedContents, func(id string, v []byte) error {
				n++
				if id == "big" {
					ok = ok && bytes.Equal(v, big)
				} else {
					ok = ok && bytes.Equal(v, small[id])
				}
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return ok && n == 301
	}
	eventually(t, "another client reads the large values back", func() bool { return check(b) })
	if !check(a) {
		t.Fatal("the writing client reads different values")
	}
	// A change to a small record keeps the large one.
	put(t, a, tenant.KindCachedContents, "c0000", "short")
	small["c0000"] = []byte("short")
	eventually(t, "after a small change", func() bool { return check(b) })
}

func testClosed(t *testing.T, open func(t *testing.T) tenant.Store) {
	s := open(t)
	put(t, s, tenant.KindKeys, "k", "v")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := s.View(context.Background(), func(tenant.Tx) error { ran = true; return nil })
	if !errors.Is(err, tenant.ErrClosed) || ran {
		t.Fatalf("View on a closed store: %v (fn ran: %v)", err, ran)
	}
	err = s.Update(context.Background(), func(tenant.Tx) error { ran = true; return nil })
	if !errors.Is(err, tenant.ErrClosed) || ran {
		t.Fatalf("Update on a closed store: %v (fn ran: %v)", err, ran)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	// The records outlive the client.
	if v, ok := get(t, client(t, open), tenant.KindKeys, "k"); !ok || v != "v" {
		t.Fatalf("after reopening: %q %v", v, ok)
	}
}

func testCancelled(t *testing.T, open func(t *testing.T) tenant.Store) {
	s := client(t, open)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ran := false
	if err := s.View(ctx, func(tenant.Tx) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("View: %v (fn ran: %v)", err, ran)
	}
	err := s.Update(ctx, func(tx tenant.Tx) error { ran = true; return tx.Put(tenant.KindKeys, "k", []byte("v")) })
	if !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Update: %v (fn ran: %v)", err, ran)
	}
	if _, ok := get(t, s, tenant.KindKeys, "k"); ok {
		t.Fatal("a cancelled Update wrote")
	}
}
