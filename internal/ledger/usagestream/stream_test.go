package usagestream

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/ledger"
)

func startNATS(t *testing.T) *cluster.Server {
	t.Helper()
	s, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func openLedger(t *testing.T) *ledger.Ledger {
	t.Helper()
	l, _, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func book(t *testing.T, l *ledger.Ledger, tenant string, start time.Time, prompt int64) {
	t.Helper()
	ctx := context.Background()
	seq, err := l.Begin(ctx, ledger.Record{Kind: ledger.KindRequest, Start: start, Tenant: tenant})
	if err == nil {
		err = l.End(ctx, ledger.Record{Seq: seq, Kind: ledger.KindRequest, Start: start, Tenant: tenant, Outcome: ledger.OutcomeCompleted,
			Tokens: ledger.Tokens{Prompt: prompt, Uncached: prompt}})
	}
	if err != nil {
		t.Fatal(err)
	}
}

func collect(t *testing.T, s *Stream, f ledger.Filter) (n int, prompt int64) {
	t.Helper()
	err := s.Records(context.Background(), f, func(r ledger.Record) error {
		n++
		prompt += r.Tokens.Prompt
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, prompt
}

// TestTwoGatewaysOneStream: two gateways' ledgers replicate into one
// stream that either reads whole; a replica that lost its cursor publishes
// again without a record counted twice; records booked while NATS was
// unreachable arrive once it is back.
func TestTwoGatewaysOneStream(t *testing.T) {
	ctx := context.Background()
	ns := startNATS(t)
	connect := func() *Stream {
		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		s, err := Open(ctx, nc)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := connect()
	if n, _ := collect(t, s, ledger.Filter{}); n != 0 {
		t.Fatalf("a new stream holds %d records", n)
	}
	t0 := time.Now().Add(-time.Hour).UTC()
	a, b := openLedger(t), openLedger(t)
	for i := range 3 {
		book(t, a, "acme", t0.Add(time.Duration(i)*time.Minute), 100)
	}
	book(t, b, "beta", t0.Add(30*time.Minute), 7)
	ra, rb := NewReplicator(a, s, nil), NewReplicator(b, s, nil)
	for _, r := range []*Replicator{ra, rb} {
		if err := r.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		f      ledger.Filter
		n      int
		prompt int64
	}{
		{"all", ledger.Filter{}, 4, 307},
		{"one tenant", ledger.Filter{Tenant: "beta"}, 1, 7},
		{"from minute 1", ledger.Filter{From: t0.Add(time.Minute)}, 3, 207},
		{"before minute 1", ledger.Filter{To: t0.Add(time.Minute)}, 1, 100},
		{"after everything", ledger.Filter{From: time.Now().Add(time.Hour)}, 0, 0},
	}
	for _, tc := range tests {
		if n, p := collect(t, s, tc.f); n != tc.n || p != tc.prompt {
			t.Errorf("%s: %d records, %d prompt tokens; want %d, %d", tc.name, n, p, tc.n, tc.prompt)
		}
	}
	// The cursor lost: everything again, deduplicated by source and seq.
	if err := a.SetCursor(cursorName, 0); err != nil {
		t.Fatal(err)
	}
	if err := ra.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := collect(t, s, ledger.Filter{}); n != 4 {
		t.Fatalf("after a repeated copy: %d records, want 4", n)
	}
	// NATS unreachable: the record waits in the ledger.
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	down, err := Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
	book(t, b, "beta", t0.Add(40*time.Minute), 5)
	if err := NewReplicator(b, down, nil).Sync(ctx); err == nil {
		t.Fatal("a copy over a closed connection succeeded")
	}
	if err := rb.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if n, p := collect(t, s, ledger.Filter{Tenant: "beta"}); n != 2 || p != 12 {
		t.Fatalf("after NATS came back: %d records, %d tokens", n, p)
	}
}

// TestRunFollowsCommits: a running replicator copies records as they are
// committed, and ends with its context.
func TestRunFollowsCommits(t *testing.T) {
	ns := startNATS(t)
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := Open(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	l := openLedger(t)
	done := make(chan struct{})
	go func() { defer close(done); NewReplicator(l, s, nil).Run(ctx) }()
	book(t, l, "acme", time.Now(), 9)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if n, _ := collect(t, s, ledger.Filter{}); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the record was not copied")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}
