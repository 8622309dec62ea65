package ledger

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func open(t *testing.T, path string, now time.Time) (*Ledger, int) {
	t.Helper()
	l, n, err := Open(path, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return l, n
}

func tokens(prompt, cached, out int64) Tokens {
	return Tokens{Prompt: prompt, Uncached: prompt - cached, Cached: cached, CachedG1: cached, Output: out}
}

func all(t *testing.T, l *Ledger, f Filter) []Record {
	t.Helper()
	var out []Record
	if err := l.Records(context.Background(), f, func(r Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBeginEnd: a request is open until it ends; its final record replaces
// the open one; records come back by start time and tenant.
func TestBeginEnd(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	l, _ := open(t, filepath.Join(t.TempDir(), "ledger.db"), t0)
	defer l.Close()
	var seqs []uint64
	for i, tenant := range []string{"a", "b", "a"} {
		seq, err := l.Begin(ctx, Record{Kind: KindRequest, ID: fmt.Sprint("req", i), Start: t0.Add(time.Duration(i) * time.Hour), Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := l.End(ctx, Record{Seq: seqs[1], Kind: KindRequest, ID: "req1", Start: t0.Add(time.Hour), Tenant: "b",
		Tokens: tokens(100, 64, 10), Outcome: OutcomeCompleted, Status: 200}); err != nil {
		t.Fatal(err)
	}
	if got := all(t, l, Filter{}); len(got) != 1 || got[0].Seq != seqs[1] || got[0].Tokens.Cached != 64 {
		t.Fatalf("final records %+v", got)
	}
	open := all(t, l, Filter{Open: true})
	if len(open) != 3 {
		t.Fatalf("with the open ones: %d records, want 3", len(open))
	}
	for _, seq := range []uint64{seqs[0], seqs[2]} {
		if err := l.End(ctx, Record{Seq: seq, Kind: KindRequest, Start: t0.Add(time.Duration(seq-seqs[0]) * time.Hour), Tenant: "a",
			Tokens: tokens(50, 0, 5), Outcome: OutcomeCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		f    Filter
		want []uint64
	}{
		{"all", Filter{}, seqs},
		{"tenant a", Filter{Tenant: "a"}, []uint64{seqs[0], seqs[2]}},
		{"from the second hour", Filter{From: t0.Add(time.Hour)}, seqs[1:]},
		{"first hour only", Filter{To: t0.Add(time.Hour)}, seqs[:1]},
		{"none", Filter{Tenant: "c"}, nil},
	}
	for _, tc := range tests {
		got := all(t, l, tc.f)
		if len(got) != len(tc.want) {
			t.Fatalf("%s: %d records, want %d", tc.name, len(got), len(tc.want))
		}
		for i := range got {
			if got[i].Seq != tc.want[i] {
				t.Fatalf("%s: record %d is seq %d, want %d", tc.name, i, got[i].Seq, tc.want[i])
			}
		}
	}
}

// TestInterrupted: requests open when the process stopped (no Close: a
// kill) are closed on the books as interrupted by the next Open, and
// numbering goes on after them.
func TestInterrupted(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	l, _ := open(t, path, t0)
	done, err := l.Begin(ctx, Record{Kind: KindRequest, Start: t0, Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.End(ctx, Record{Seq: done, Kind: KindRequest, Start: t0, Tenant: "a", Tokens: tokens(10, 0, 1), Outcome: OutcomeCompleted}); err != nil {
		t.Fatal(err)
	}
	inflight, err := l.Begin(ctx, Record{Kind: KindRequest, ID: "lost", Start: t0.Add(time.Second), Tenant: "a", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped with a request in flight (Close writes the queue and leaves
	// open records open, as a kill leaves them; kvserve's kill -9 test
	// covers the real thing).
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	restart := t0.Add(time.Minute)
	l2, n := open(t, path, restart)
	defer l2.Close()
	if n != 1 {
		t.Fatalf("closed %d interrupted requests, want 1", n)
	}
	got := all(t, l2, Filter{Open: true})
	if len(got) != 2 || got[1].Seq != inflight || got[1].Outcome != OutcomeInterrupted || !got[1].End.Equal(restart) || got[1].Model != "m" {
		t.Fatalf("records after the restart: %+v", got)
	}
	next, err := l2.Begin(ctx, Record{Kind: KindRequest, Start: restart, Tenant: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if next <= inflight {
		t.Fatalf("numbering restarted at %d after %d", next, inflight)
	}
}

// TestConcurrent: many writers at once, every record committed once.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	l, _ := open(t, filepath.Join(t.TempDir(), "ledger.db"), time.Now())
	const writers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				start := time.Unix(int64(1000+i), int64(w))
				seq, err := l.Begin(ctx, Record{Kind: KindRequest, Start: start, Tenant: fmt.Sprint(w)})
				if err == nil {
					err = l.End(ctx, Record{Seq: seq, Kind: KindRequest, Start: start, Tenant: fmt.Sprint(w), Tokens: tokens(int64(i), 0, 1), Outcome: OutcomeCompleted})
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var sum Tokens
	seen := map[uint64]bool{}
	for _, r := range all(t, l, Filter{Open: true}) {
		if seen[r.Seq] || r.Outcome != OutcomeCompleted {
			t.Fatalf("record %+v twice or not completed", r)
		}
		seen[r.Seq] = true
		sum.Add(r.Tokens)
	}
	if len(seen) != writers*each || sum.Prompt != writers*each*(each-1)/2 {
		t.Fatalf("%d records, %d prompt tokens", len(seen), sum.Prompt)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(ctx, Record{Start: time.Now()}); err != ErrClosed {
		t.Fatalf("Begin after Close: %v", err)
	}
}

func TestTokensCheck(t *testing.T) {
	tests := []struct {
		name string
		t    Tokens
		ok   bool
	}{
		{"consistent", Tokens{Prompt: 10, Uncached: 4, Cached: 6, CachedG1: 2, CachedG2: 3, CachedG3: 1, CacheWrite: 4, Output: 3, Reasoning: 1}, true},
		{"zero", Tokens{}, true},
		{"prompt split wrong", Tokens{Prompt: 10, Uncached: 5, Cached: 6, CachedG1: 6}, false},
		{"tiers split wrong", Tokens{Prompt: 10, Uncached: 4, Cached: 6, CachedG1: 5}, false},
		{"write beyond computed", Tokens{Prompt: 10, Uncached: 4, Cached: 6, CachedG1: 6, CacheWrite: 5}, false},
		{"reasoning beyond output", Tokens{Output: 1, Reasoning: 2}, false},
		{"negative", Tokens{Prompt: -1, Uncached: -1}, false},
	}
	for _, tc := range tests {
		if err := tc.t.Check(); (err == nil) != tc.ok {
			t.Errorf("%s: Check() = %v", tc.name, err)
		}
	}
}

// BenchmarkBeginEnd: a request's two writes, from 16 goroutines at once
// (what group commit is for).
func BenchmarkBeginEnd(b *testing.B) {
	ctx := context.Background()
	l, _, err := Open(filepath.Join(b.TempDir(), "ledger.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			start := time.Now()
			seq, err := l.Begin(ctx, Record{Kind: KindRequest, Start: start, Tenant: "t", Model: "m"})
			if err == nil {
				err = l.End(ctx, Record{Seq: seq, Kind: KindRequest, Start: start, Tenant: "t", Model: "m",
					Tokens: tokens(1000, 600, 50), Outcome: OutcomeCompleted})
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestCommitOrder: a replica reads final records in the order they were
// committed (a request numbered first but ended last comes last), resumes
// from its cursor, and the source id survives a reopen.
func TestCommitOrder(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	l, _ := open(t, path, t0)
	long, _ := l.Begin(ctx, Record{Kind: KindRequest, Start: t0, Tenant: "a"})
	short, _ := l.Begin(ctx, Record{Kind: KindRequest, Start: t0.Add(time.Second), Tenant: "a"})
	for _, seq := range []uint64{short, long} {
		if err := l.End(ctx, Record{Seq: seq, Kind: KindRequest, Start: t0, Tenant: "a", Outcome: OutcomeCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	recs, last, err := l.CommittedAfter(ctx, 0, 10)
	if err != nil || len(recs) != 2 || recs[0].Seq != short || recs[1].Seq != long || last != 2 {
		t.Fatalf("commit order: %v %d %v", recs, last, err)
	}
	if recs, _, _ := l.CommittedAfter(ctx, 0, 1); len(recs) != 1 {
		t.Fatalf("limit 1 gave %d", len(recs))
	}
	if err := l.SetCursor("js", 1); err != nil {
		t.Fatal(err)
	}
	source := l.Source()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, _ := open(t, path, t0)
	defer l2.Close()
	if c, err := l2.Cursor("js"); err != nil || c != 1 || l2.Source() != source || source == "" {
		t.Fatalf("after a reopen: cursor %d (%v), source %q then %q", c, err, source, l2.Source())
	}
	if recs, last, _ := l2.CommittedAfter(ctx, 1, 10); len(recs) != 1 || recs[0].Seq != long || last != 2 {
		t.Fatalf("after the cursor: %v", recs)
	}
	if c, _ := l2.Cursor("other"); c != 0 {
		t.Fatalf("an unknown replica's cursor is %d", c)
	}
}
