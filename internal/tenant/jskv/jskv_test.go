package jskv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/tenant"
	"github.com/kvserve/kvserve/internal/tenant/jskv"
	"github.com/kvserve/kvserve/internal/tenant/storetest"
)

// startNATS runs an embedded nats-server with JetStream in a temporary
// directory for the test.
func startNATS(t *testing.T) *cluster.Server {
	t.Helper()
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

// connect opens a connection of its own, as a separate process would.
func connect(t *testing.T, ns *cluster.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func open(t *testing.T, nc *nats.Conn, o jskv.Options) *jskv.Store {
	t.Helper()
	s, err := jskv.Open(t.Context(), nc, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the store suite on JetStream KV, each client on its
// own connection. The chunks are small so that most snapshots span
// several.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func(t *testing.T) tenant.Store {
		ns := startNATS(t)
		return func(t *testing.T) tenant.Store {
			return open(t, connect(t, ns), jskv.Options{ChunkSize: 64 << 10})
		}
	})
}

// TestConformanceDefaultChunks runs the suite's large values with the
// chunks the server's payload limit gives.
func TestConformanceDefaultChunks(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func(t *testing.T) tenant.Store {
		ns := startNATS(t)
		return func(t *testing.T) tenant.Store { return open(t, connect(t, ns), jskv.Options{}) }
	})
}

// TestWatchBringsChanges: a store whose local copy could be an hour old
// still sees another's commit promptly, from the watch on the head, which
// outlives the context the store was opened with.
func TestWatchBringsChanges(t *testing.T) {
	ns := startNATS(t)
	a := open(t, connect(t, ns), jskv.Options{})
	defer a.Close()
	ctx, cancel := context.WithCancel(t.Context())
	b, err := jskv.Open(ctx, connect(t, ns), jskv.Options{MaxStaleness: time.Hour})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	time.Sleep(20 * time.Millisecond) // a watch bound to ctx would end now
	if err := b.View(t.Context(), func(tenant.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := a.Update(t.Context(), func(tx tenant.Tx) error { return tx.Put(tenant.KindKeys, "k", []byte("revoked")) }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		var v []byte
		err := b.View(t.Context(), func(tx tenant.Tx) (err error) { v, err = tx.Get(tenant.KindKeys, "k"); return err })
		if err == nil && string(v) == "revoked" {
			break
		}
		if !errors.Is(err, tenant.ErrNotFound) {
			t.Fatal(err)
		}
		if time.Since(start) > 2*time.Second {
			t.Fatal("b did not see a's commit within 2s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestConflictRunsFnAgain: a commit by another store between a
// transaction's read and its commit makes it run fn again on the new
// state; with one attempt allowed, Update fails with ErrConflict and
// changes nothing.
func TestConflictRunsFnAgain(t *testing.T) {
	ns := startNATS(t)
	other := open(t, connect(t, ns), jskv.Options{})
	defer other.Close()
	for _, attempts := range []int{0, 1} {
		s := open(t, connect(t, ns), jskv.Options{MaxAttempts: attempts})
		runs := 0
		err := s.Update(t.Context(), func(tx tenant.Tx) error {
			runs++
			n := 0
			if b, err := tx.Get(tenant.KindTenants, "n"); err == nil {
				n, _ = strconv.Atoi(string(b))
			}
			if runs == 1 { // another gateway commits meanwhile
				err := other.Update(t.Context(), func(tx tenant.Tx) error {
					return tx.Put(tenant.KindTenants, "n", []byte(strconv.Itoa(n+10)))
				})
				if err != nil {
					return err
				}
			}
			return tx.Put(tenant.KindTenants, "n", []byte(strconv.Itoa(n+1)))
		})
		var got []byte
		read := func() {
			t.Helper()
			if verr := s.View(t.Context(), func(tx tenant.Tx) (err error) { got, err = tx.Get(tenant.KindTenants, "n"); return err }); verr != nil {
				t.Fatal(verr)
			}
		}
		read()
		// s's view follows the other store's commit through its watch; it
		// may still show the state before it (11), never a write of its own.
		for start := time.Now(); attempts == 1 && string(got) == "11" && time.Since(start) < 2*time.Second; read() {
			time.Sleep(2 * time.Millisecond)
		}
		switch attempts {
		case 0: // the default: fn runs again on top of the other's commit
			if err != nil || runs != 2 || string(got) != "11" {
				t.Fatalf("default attempts: %v, %d runs, n = %s; want 2 runs and 11", err, runs, got)
			}
		case 1:
			if !errors.Is(err, jskv.ErrConflict) || runs != 1 || string(got) != "21" {
				t.Fatalf("one attempt: %v, %d runs, n = %s; want ErrConflict and the other's 21", err, runs, got)
			}
		}
		s.Close()
	}
}

// snapshots lists the snapshot prefixes (kind and transaction) in the
// bucket, with their chunk counts.
func snapshots(t *testing.T, nc *nats.Conn) map[string]int { return blobs(t, nc, "snap.>") }

// blobs lists the blobs whose keys match filter, with their chunk counts.
func blobs(t *testing.T, nc *nats.Conn, filter string) map[string]int {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(t.Context(), jskv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kv.ListKeysFiltered(t.Context(), filter)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for k := range l.Keys() {
		out[k[:strings.LastIndexByte(k, '.')]]++
	}
	return out
}

// TestReplacedSnapshotsPurged: however many commits, the bucket holds the
// snapshots of the newest head and those it replaced, no more.
func TestReplacedSnapshotsPurged(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns)
	s := open(t, nc, jskv.Options{ChunkSize: 1024})
	defer s.Close()
	for i := range 20 {
		err := s.Update(t.Context(), func(tx tenant.Tx) error {
			v := []byte(strings.Repeat("x", 3000+i)) // three or four chunks
			if err := tx.Put(tenant.KindKeys, "k", v); err != nil {
				return err
			}
			if i%3 == 0 {
				return tx.Put(tenant.KindTenants, "t"+strconv.Itoa(i), v)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	snaps := snapshots(t, nc)
	// keys and tenants now; keys (and perhaps tenants) replaced by the
	// last commit.
	if len(snaps) < 3 || len(snaps) > 4 {
		t.Fatalf("%d snapshots in the bucket after 20 commits: %v", len(snaps), snaps)
	}
	// Emptying a kind drops its snapshot.
	err := s.Update(t.Context(), func(tx tenant.Tx) error { return tx.Delete(tenant.KindKeys, "k") })
	if err != nil {
		t.Fatal(err)
	}
	err = s.Update(t.Context(), func(tx tenant.Tx) error { return tx.Put(tenant.KindBindings, "b", []byte("x")) })
	if err != nil {
		t.Fatal(err)
	}
	for p := range snapshots(t, nc) {
		if strings.HasPrefix(p, "snap.keys.") {
			t.Fatalf("the emptied kind's snapshot %s is still there", p)
		}
	}
}

// TestOrphansPurgedAtOpen: a snapshot no head names (its writer died
// before moving the head) is purged by the next Open once old enough, and
// kept while it could still belong to a running transaction.
func TestOrphansPurgedAtOpen(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns)
	s := open(t, nc, jskv.Options{})
	large := bytes.Repeat([]byte("contents "), 2000)
	err := s.Update(t.Context(), func(tx tenant.Tx) error {
		if err := tx.Put(tenant.KindCachedContents, "c", large); err != nil { // a blob of its own
			return err
		}
		return tx.Put(tenant.KindKeys, "k", []byte("v"))
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(t.Context(), jskv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := kv.Create(t.Context(), "snap.keys.0123456789abcdef."+strconv.Itoa(i), []byte("half a transaction")); err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Create(t.Context(), "rec.keys.0123456789abcdef.0."+strconv.Itoa(i), []byte("its large record")); err != nil {
			t.Fatal(err)
		}
	}
	open(t, nc, jskv.Options{}).Close() // default age: too young to go
	if n := snapshots(t, nc)["snap.keys.0123456789abcdef"]; n != 2 {
		t.Fatalf("a young orphan lost chunks: %d left", n)
	}
	if n := blobs(t, nc, "rec.>")["rec.keys.0123456789abcdef.0"]; n != 2 {
		t.Fatalf("a young orphaned record lost chunks: %d left", n)
	}
	time.Sleep(10 * time.Millisecond)
	s = open(t, nc, jskv.Options{OrphanAge: 5 * time.Millisecond})
	defer s.Close()
	snaps := snapshots(t, nc)
	if _, ok := snaps["snap.keys.0123456789abcdef"]; ok || len(snaps) != 2 {
		t.Fatalf("after Open: %v, want only the head's two snapshots", snaps)
	}
	if recs := blobs(t, nc, "rec.>"); len(recs) != 1 || recs["rec.keys.0123456789abcdef.0"] != 0 {
		t.Fatalf("after Open: %v, want only the large record's blob", recs)
	}
	// What the head names is intact, read by a store that loads it all.
	s2 := open(t, connect(t, ns), jskv.Options{})
	defer s2.Close()
	var v, c []byte
	err = s2.View(t.Context(), func(tx tenant.Tx) (err error) {
		if v, err = tx.Get(tenant.KindKeys, "k"); err != nil {
			return err
		}
		c, err = tx.Get(tenant.KindCachedContents, "c")
		return err
	})
	if err != nil || string(v) != "v" || !bytes.Equal(c, large) {
		t.Fatalf("the records: %q, %d bytes, %v", v, len(c), err)
	}
}

// TestChunkLargerThanPayload: a chunk size the server cannot accept in
// one message is refused at Open.
func TestChunkLargerThanPayload(t *testing.T) {
	nc := connect(t, startNATS(t))
	_, err := jskv.Open(t.Context(), nc, jskv.Options{ChunkSize: int(nc.MaxPayload())})
	if err == nil || !strings.Contains(err.Error(), "chunk size") {
		t.Fatalf("Open: %v", err)
	}
}

// TestFailsClosed: with the NATS server gone, reads use the local copy
// only while it is younger than MaxStaleness; then they fail with
// ErrUnreachable rather than answer from a copy that may predate a
// revocation.
func TestFailsClosed(t *testing.T) {
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, connect(t, ns), jskv.Options{MaxStaleness: 200 * time.Millisecond, Timeout: 200 * time.Millisecond})
	defer s.Close()
	if err := s.Update(t.Context(), func(tx tenant.Tx) error { return tx.Put(tenant.KindKeys, "k", []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	ns.Close()
	time.Sleep(300 * time.Millisecond)
	ran := false
	err = s.View(t.Context(), func(tenant.Tx) error { ran = true; return nil })
	if !errors.Is(err, jskv.ErrUnreachable) || ran {
		t.Fatalf("View with the server gone: %v (fn ran: %v)", err, ran)
	}
	err = s.Update(t.Context(), func(tx tenant.Tx) error { ran = true; return tx.Put(tenant.KindKeys, "k", []byte("w")) })
	if !errors.Is(err, jskv.ErrUnreachable) || ran {
		t.Fatalf("Update with the server gone: %v (fn ran: %v)", err, ran)
	}
	// Close ends the watch at once, server or not.
	start := time.Now()
	if err := s.Close(); err != nil || time.Since(start) > time.Second {
		t.Fatalf("Close with the server gone: %v after %s", err, time.Since(start))
	}
}

// startNATSCluster runs a three-server NATS cluster with JetStream, as
// deploy/k8s does, and returns its client URLs.
func startNATSCluster(t *testing.T) []string {
	t.Helper()
	// The route ports are reserved and released before the servers bind
	// them, so another test package (or a server's own random client
	// port) may take one in between; the servers then never become
	// ready. That happened once in CI: such a start is retried on fresh
	// ports.
	var urls []string
	for attempt := 1; ; attempt++ {
		var err error
		if urls, err = tryNATSCluster(t); err == nil {
			break
		}
		if attempt == 3 {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; trying other ports", attempt, err)
	}
	// JetStream answers once the servers have elected a meta leader.
	nc, err := nats.Connect(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	for deadline := time.Now().Add(30 * time.Second); ; {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the NATS cluster's JetStream did not come up: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return urls
}

// tryNATSCluster starts the three servers on freshly reserved route
// ports. On failure it shuts down what it started.
func tryNATSCluster(t *testing.T) ([]string, error) {
	const n = 3
	// Holding all three reservations at once keeps the ports distinct.
	ports := make([]int, n)
	var held []net.Listener
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for _, l := range held {
		l.Close()
	}
	var servers []*server.Server
	stop := func() {
		for _, s := range servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	var urls []string
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("kvserve-test-%d", i),
			Host:       "127.0.0.1",
			Port:       server.RANDOM_PORT,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
			Cluster:    server.ClusterOpts{Name: "kvserve-test", Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("server %d: %w", i, err)
		}
		servers = append(servers, s)
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			stop()
			return nil, fmt.Errorf("server %d (route port %d) did not start", i, ports[i])
		}
		urls = append(urls, s.ClientURL())
	}
	t.Cleanup(stop)
	return urls, nil
}

// TestConformanceReplicated runs the suite on a bucket with three
// replicas on a three-server cluster, each client connected to another
// server: conflicts are reported differently by replicated streams, and
// reads may be answered by any replica.
func TestConformanceReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-server NATS cluster for each case")
	}
	storetest.Run(t, func(t *testing.T) func(t *testing.T) tenant.Store {
		urls := startNATSCluster(t)
		next := 0
		return func(t *testing.T) tenant.Store {
			nc, err := nats.Connect(urls[next%len(urls)])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(nc.Close)
			next++
			// A replicated consumer (the head's watch) waits for its
			// servers to agree; with three servers and the rest of the
			// suite on two CPUs that took more than the default 5 s once
			// in CI, so each request here may take longer.
			return open(t, nc, jskv.Options{Replicas: 3, ChunkSize: 64 << 10, Logger: slog.Default(), Timeout: 20 * time.Second})
		}
	})
}

// TestLargeRecordsWrittenOnce: a value larger than a snapshot inlines is
// written once, in a blob of its own: changing another record keeps it
// (the same blob), replacing or deleting it purges its blob at the next
// commit, and another store reads it back.
func TestLargeRecordsWrittenOnce(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns)
	s := open(t, nc, jskv.Options{ChunkSize: 8 << 10})
	defer s.Close()
	other := open(t, connect(t, ns), jskv.Options{})
	defer other.Close()
	large := func(i int) []byte { return []byte(strings.Repeat(strconv.Itoa(i%10), 20<<10+i)) } // three chunks
	put := func(id string, v []byte) {
		t.Helper()
		if err := s.Update(t.Context(), func(tx tenant.Tx) error { return tx.Put(tenant.KindCachedContents, id, v) }); err != nil {
			t.Fatal(err)
		}
	}
	err := s.Update(t.Context(), func(tx tenant.Tx) error {
		for i := range 5 {
			if err := tx.Put(tenant.KindCachedContents, "c"+strconv.Itoa(i), large(i)); err != nil {
				return err
			}
		}
		return tx.Put(tenant.KindCachedContents, "small", []byte("inline"))
	})
	if err != nil {
		t.Fatal(err)
	}
	before := blobs(t, nc, "rec.>")
	if len(before) != 5 {
		t.Fatalf("5 large records in %d blobs: %v", len(before), before)
	}
	for p, n := range before {
		if n != 3 {
			t.Fatalf("blob %s has %d chunks, want 3", p, n)
		}
	}
	put("small", []byte("changed")) // the large records' blobs stay as they are
	if after := blobs(t, nc, "rec.>"); !maps.Equal(after, before) {
		t.Fatalf("a small change rewrote large records: %v, then %v", before, after)
	}
	put("c0", large(10)) // a new blob; the old one is retired
	err = s.Update(t.Context(), func(tx tenant.Tx) error { return tx.Delete(tenant.KindCachedContents, "c1") })
	if err != nil {
		t.Fatal(err)
	}
	put("small", []byte("again")) // purges what the delete retired
	after := blobs(t, nc, "rec.>")
	kept := 0
	for p := range after {
		if before[p] != 0 {
			kept++
		}
	}
	if len(after) != 4 || kept != 3 {
		t.Fatalf("after replacing c0 and deleting c1: %d blobs, %d of them from before: %v", len(after), kept, after)
	}
	// Another store reads every value back.
	want := map[string][]byte{"c0": large(10), "c2": large(2), "c3": large(3), "c4": large(4), "small": []byte("again")}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := map[string][]byte{}
		err := other.View(t.Context(), func(tx tenant.Tx) error {
			return tx.List(tenant.KindCachedContents, func(id string, v []byte) error { got[id] = v; return nil })
		})
		if err != nil {
			t.Fatal(err)
		}
		if maps.EqualFunc(got, want, bytes.Equal) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the other store reads %d records, not what was written", len(got))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestUnknownLayoutRefused: a head of another layout version (a newer
// kvserve's) is refused, not read as this one's.
func TestUnknownLayoutRefused(t *testing.T) {
	ns := startNATS(t)
	nc := connect(t, ns)
	s := open(t, nc, jskv.Options{})
	s.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(t.Context(), jskv.DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "head", []byte(`{"v":2,"seq":1,"tx":"00"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := jskv.Open(t.Context(), nc, jskv.Options{}); err == nil || !strings.Contains(err.Error(), "layout version 2") {
		t.Fatalf("Open over a version 2 head: %v", err)
	}
}
