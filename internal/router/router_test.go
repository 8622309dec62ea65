package router

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

var testSecret = []byte("router-test-secret")

const testModel = "m"

func prompt(n int, seed int32) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = seed*1000 + int32(i)
	}
	return p
}

// chain is the block hashes a worker computes for p in scope.
func chain(scope string, p []int32) []kv.Hash {
	return kv.NewHasher([]byte(testModel)).Chain(nil, kv.ScopeSalt(testSecret, scope), p, 16)
}

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func newTestRouter(t *testing.T, cfg Config) (*Router, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Secret, cfg.ModelID, cfg.Now = testSecret, testModel, clk.now
	r, err := New(NewIndex(clk.now), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r, clk
}

func TestScore(t *testing.T) {
	p := prompt(100, 1) // 6 full blocks and 4 tokens
	hs := chain("t1", p)
	other := chain("t2", p)
	tests := []struct {
		name   string
		events []kv.Event // on worker w
		worker Worker
		scope  string
		stale  bool // w's events are older than StaleAfter
		want   Score
	}{
		{name: "miss", want: Score{Prefill: 100}},
		{name: "pool prefix", events: []kv.Event{stored(kv.TierPool, hs[:4]...)},
			want: Score{Cached: 64, ByTier: [3]int{64, 0, 0}, Prefill: 36}},
		{name: "host prefix", events: []kv.Event{stored(kv.TierHost, hs[:2]...)},
			want: Score{Cached: 32, ByTier: [3]int{0, 32, 0}, Prefill: 68 + 32*0.1}},
		{name: "disk prefix", events: []kv.Event{stored(kv.TierDisk, hs[:2]...)},
			want: Score{Cached: 32, ByTier: [3]int{0, 0, 32}, Prefill: 68 + 32*0.3}},
		{name: "tiers mixed, best tier counts", events: []kv.Event{stored(kv.TierPool, hs[0]), stored(kv.TierHost, hs[:3]...), stored(kv.TierDisk, hs[3])},
			want: Score{Cached: 64, ByTier: [3]int{16, 32, 16}, Prefill: 36 + 32*0.1 + 16*0.3}},
		{name: "a gap ends the prefix", events: []kv.Event{stored(kv.TierPool, hs[0], hs[2], hs[3])},
			want: Score{Cached: 16, ByTier: [3]int{16, 0, 0}, Prefill: 84}},
		{name: "another tenant's blocks do not count", events: []kv.Event{stored(kv.TierPool, other...)},
			want: Score{Prefill: 100}},
		{name: "the same blocks in their own scope do", scope: "t2", events: []kv.Event{stored(kv.TierPool, other...)},
			want: Score{Cached: 96, ByTier: [3]int{96, 0, 0}, Prefill: 4}},
		{name: "load", worker: Worker{Running: 2, Waiting: 1, Queued: 2, PendingPrefill: 1000},
			want: Score{Prefill: 100, Load: 1000 + 3*512 + 2*32}},
		{name: "load: only waiters of the request's priority or above", worker: Worker{Waiting: 6,
			WaitingByPriority: []engine.PriorityWaiting{{Priority: 3, Requests: 1}, {Priority: 0, Requests: 2}, {Priority: -2, Requests: 3}}},
			want: Score{Prefill: 100, Load: 3 * 512}},
		{name: "stale and busy: no credit", events: []kv.Event{stored(kv.TierPool, hs...)}, stale: true, worker: Worker{Running: 1},
			want: Score{Prefill: 100, Load: 32, Stale: true}},
		{name: "stale but idle: credit", events: []kv.Event{stored(kv.TierPool, hs...)}, stale: true,
			want: Score{Cached: 96, ByTier: [3]int{96, 0, 0}, Prefill: 4}},
		{name: "events announced and missing: no credit", events: []kv.Event{withSeq(stored(kv.TierPool, hs...), 7)}, stale: true,
			worker: Worker{EventSeq: 12}, want: Score{Prefill: 100, Stale: true}},
		{name: "busy, silent, nothing missing: credit", events: []kv.Event{withSeq(stored(kv.TierPool, hs...), 7)}, stale: true,
			worker: Worker{EventSeq: 8, Running: 1}, want: Score{Cached: 96, ByTier: [3]int{96, 0, 0}, Prefill: 4, Load: 32}},
		{name: "events missing, but recently applied: credit", events: []kv.Event{withSeq(stored(kv.TierPool, hs...), 7)},
			worker: Worker{EventSeq: 12}, want: Score{Cached: 96, ByTier: [3]int{96, 0, 0}, Prefill: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, clk := newTestRouter(t, Config{})
			r.Index().Apply("w", false, tt.events)
			if tt.stale {
				clk.t = clk.t.Add(31 * time.Second)
			}
			scope := tt.scope
			if scope == "" {
				scope = "t1"
			}
			w := tt.worker
			w.ID = "w"
			got := r.Score(nil, &engine.Request{Prompt: p, Scope: scope}, []Worker{w})[0]
			tt.want.PeerFrom = -1 // one worker: no peer
			if math.Abs(got.Prefill-tt.want.Prefill) < 1e-9 {
				got.Prefill = tt.want.Prefill
			}
			if got != tt.want {
				t.Errorf("score %+v, want %+v", got, tt.want)
			}
		})
	}
}

func withSeq(e kv.Event, seq uint64) kv.Event {
	e.Seq = seq
	return e
}

func TestChoose(t *testing.T) {
	p := prompt(1024, 2)
	hs := chain("t1", p)
	tests := []struct {
		name    string
		events  map[string][]kv.Event
		workers []Worker
		session string
		last    string // the session's previous worker
		prio    int    // the request's priority
		flex    bool   // the request's service tier is flex
		want    string
		aff     bool
	}{
		{name: "overlap wins", events: map[string][]kv.Event{"b": {stored(kv.TierPool, hs...)}},
			workers: []Worker{{ID: "a"}, {ID: "b", Running: 3}}, want: "b"},
		{name: "more overlap wins", events: map[string][]kv.Event{"a": {stored(kv.TierPool, hs[:10]...)}, "b": {stored(kv.TierPool, hs[:30]...)}},
			workers: []Worker{{ID: "a"}, {ID: "b"}}, want: "b"},
		{name: "pool beats disk", events: map[string][]kv.Event{"a": {stored(kv.TierDisk, hs...)}, "b": {stored(kv.TierPool, hs...)}},
			workers: []Worker{{ID: "a"}, {ID: "b"}}, want: "b"},
		{name: "load beats a small overlap", events: map[string][]kv.Event{"b": {stored(kv.TierPool, hs[:2]...)}},
			workers: []Worker{{ID: "a"}, {ID: "b", Waiting: 4}}, want: "a"},
		{name: "no overlap anywhere: least loaded", workers: []Worker{{ID: "a", Running: 5}, {ID: "b", Running: 1}, {ID: "c", Running: 3}}, want: "b"},
		{name: "affinity", session: "s", last: "a",
			events:  map[string][]kv.Event{"b": {stored(kv.TierPool, hs...)}},
			workers: []Worker{{ID: "a", Running: 1}, {ID: "b"}}, want: "a", aff: true},
		{name: "affinity yields to overload", session: "s", last: "a",
			workers: []Worker{{ID: "a", Waiting: 40}, {ID: "b"}}, want: "b"},
		{name: "affinity to a worker gone", session: "s", last: "z",
			workers: []Worker{{ID: "a", Running: 1}, {ID: "b"}}, want: "b"},
		// b holds the prompt but has eight requests waiting at priority 0.
		{name: "queued behind equal priorities: the idle worker", events: map[string][]kv.Event{"b": {stored(kv.TierPool, hs...)}},
			workers: []Worker{{ID: "a"}, {ID: "b", Waiting: 8, WaitingByPriority: []engine.PriorityWaiting{{Priority: 0, Requests: 8}}}}, want: "a"},
		{name: "a higher priority passes them: the cache", events: map[string][]kv.Event{"b": {stored(kv.TierPool, hs...)}}, prio: 5,
			workers: []Worker{{ID: "a"}, {ID: "b", Waiting: 8, WaitingByPriority: []engine.PriorityWaiting{{Priority: 0, Requests: 8}}}}, want: "b"},
		{name: "but not waiters of its own priority", events: map[string][]kv.Event{"b": {stored(kv.TierPool, hs...)}}, prio: 5,
			workers: []Worker{{ID: "a"}, {ID: "b", Waiting: 8, WaitingByPriority: []engine.PriorityWaiting{{Priority: 5, Requests: 8}}}}, want: "a"},
		// b holds the prompt (1,024 tokens) behind a queue of 4 × 512.
		{name: "a queue longer than the prefill saved: the idle worker", events: map[string][]kv.Event{"b": {stored(kv.TierPool, hs...)}},
			workers: []Worker{{ID: "a"}, {ID: "b", Waiting: 4}}, want: "a"},
		{name: "a flex request waits for its cache", events: map[string][]kv.Event{"b": {stored(kv.TierPool, hs...)}}, flex: true,
			workers: []Worker{{ID: "a"}, {ID: "b", Waiting: 4}}, want: "b"},
		{name: "priorities unknown: every waiter is ahead", events: map[string][]kv.Event{"b": {stored(kv.TierPool, hs...)}}, prio: 5,
			workers: []Worker{{ID: "a"}, {ID: "b", Waiting: 8}}, want: "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newTestRouter(t, Config{})
			for w, evs := range tt.events {
				r.Index().Apply(w, false, evs)
			}
			req := &engine.Request{Prompt: p, Scope: "t1", Priority: tt.prio, Hints: engine.Hints{SessionID: tt.session, Flex: tt.flex}}
			if tt.last != "" {
				// The previous turn: the only candidate was last.
				r.Choose(req, []Worker{{ID: tt.last}})
			}
			d := r.Choose(req, tt.workers)
			if got := tt.workers[d.Index].ID; got != tt.want || d.Affinity != tt.aff {
				t.Errorf("chose %s (affinity %v), want %s (%v); decision %+v", got, d.Affinity, tt.want, tt.aff, d)
			}
		})
	}
}

func TestSessionsExpireAndAreBounded(t *testing.T) {
	r, clk := newTestRouter(t, Config{MaxSessions: 10, SessionTTL: time.Minute})
	ws := []Worker{{ID: "a"}, {ID: "b"}}
	req := &engine.Request{Prompt: prompt(32, 3), Scope: "t", Hints: engine.Hints{SessionID: "s"}}
	r.Choose(req, ws[1:])
	clk.t = clk.t.Add(2 * time.Minute)
	if d := r.Choose(req, ws); d.Affinity {
		t.Error("an expired session kept its affinity")
	}
	for i := range 100 {
		req.Hints.SessionID = fmt.Sprint("s", i)
		r.Choose(req, ws)
		clk.t = clk.t.Add(time.Second)
	}
	if n := len(r.sessions); n > 10 {
		t.Errorf("%d sessions remembered, bound 10", n)
	}
	r.Forget("a")
	for _, s := range r.sessions {
		if s.worker == "a" {
			t.Error("a forgotten worker keeps sessions")
		}
	}
}

func TestTemperatureSpreads(t *testing.T) {
	p := prompt(256, 4)
	hs := chain("t1", p)
	for _, tc := range []struct {
		temp   float64
		spread bool
	}{{0, false}, {1, true}} {
		r, _ := newTestRouter(t, Config{Temperature: tc.temp, Seed: 7})
		r.Index().Apply("a", false, []kv.Event{stored(kv.TierPool, hs[:8]...)})
		ws := []Worker{{ID: "a"}, {ID: "b"}, {ID: "c"}}
		counts := map[string]int{}
		for range 300 {
			counts[ws[r.Choose(&engine.Request{Prompt: p, Scope: "t1"}, ws).Index].ID]++
		}
		if spread := counts["b"]+counts["c"] > 0; spread != tc.spread {
			t.Errorf("temperature %v: placements %v", tc.temp, counts)
		}
		if counts["a"] < 100 {
			t.Errorf("temperature %v: the cheapest worker got only %d of 300", tc.temp, counts["a"])
		}
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(NewIndex(nil), Config{}); err == nil {
		t.Error("no secret: no error")
	}
	if _, err := New(NewIndex(nil), Config{Secret: testSecret, Temperature: -1}); err == nil {
		t.Error("negative temperature: no error")
	}
}

// TestHashCache: scores from remembered block hashes equal the scores
// computed afresh, with a cache small enough to turn over many times.
func TestHashCache(t *testing.T) {
	small, _ := newTestRouter(t, Config{HashCacheBlocks: 64})
	for i := range 50 {
		p := prompt(200+i*7, int32(i%5))
		hs := chain("t1", p)
		small.Index().Apply("w", false, []kv.Event{stored(kv.TierPool, hs[:i%len(hs)]...)})
		fresh, _ := newTestRouter(t, Config{})
		fresh.Index().Apply("w", true, []kv.Event{stored(kv.TierPool, hs[:i%len(hs)]...)})
		req := &engine.Request{Prompt: p, Scope: "t1"}
		for range 2 {
			got := small.Score(nil, req, []Worker{{ID: "w"}})[0]
			want := fresh.Score(nil, req, []Worker{{ID: "w"}})[0]
			if got.Cached != want.Cached || got.Cached != i%len(hs)*16 {
				t.Fatalf("prompt %d: cached %d with the cache, %d without, want %d", i, got.Cached, want.Cached, i%len(hs)*16)
			}
		}
		small.Index().Remove("w")
	}
}

// benchRouter is a router over 32 workers whose indexes hold 2,000 chains
// of 64 blocks each, and an 8,192-token prompt whose first 1,024 tokens
// (a system prompt) every worker holds and whose first half w3 holds.
func benchRouter(b *testing.B) (*Router, []Worker, *engine.Request) {
	r, err := New(NewIndex(nil), Config{Secret: testSecret, ModelID: testModel})
	if err != nil {
		b.Fatal(err)
	}
	ws := make([]Worker, 32)
	for i := range ws {
		ws[i] = Worker{ID: fmt.Sprint("w", i), Running: i % 5, Waiting: i % 3}
		for c := range 2000 / 32 {
			r.Index().Apply(ws[i].ID, false, []kv.Event{stored(kv.TierPool, chain("t", prompt(1024, int32(i*1000+c)))...)})
		}
	}
	p := prompt(8192, 5)
	copy(p, prompt(4096, 3*1000+1))
	r.Index().Apply("w3", false, []kv.Event{stored(kv.TierPool, chain("t", p[:4096])...)})
	for _, w := range ws {
		r.Index().Apply(w.ID, false, []kv.Event{stored(kv.TierPool, chain("t", p[:1024])...)})
	}
	return r, ws, &engine.Request{Prompt: p, Scope: "t"}
}

// BenchmarkChoose32 is one routing decision among 32 workers.
func BenchmarkChoose32(b *testing.B) {
	r, ws, req := benchRouter(b)
	for b.Loop() {
		if d := r.Choose(req, ws); ws[d.Index].ID != "w3" {
			b.Fatalf("chose %s", ws[d.Index].ID)
		}
	}
}

// BenchmarkChoose32Cold is the same decision with the block hashes never
// remembered (a prompt the router has not seen).
func BenchmarkChoose32Cold(b *testing.B) {
	r, ws, req := benchRouter(b)
	for b.Loop() {
		r.hashes = newHashCache(16)
		if d := r.Choose(req, ws); ws[d.Index].ID != "w3" {
			b.Fatalf("chose %s", ws[d.Index].ID)
		}
	}
}

// BenchmarkChoose32Parallel is decisions from every core at once, with a
// worker's events applied meanwhile, as a gateway makes them.
func BenchmarkChoose32Parallel(b *testing.B) {
	r, ws, req := benchRouter(b)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		hs := chain("t", prompt(1024, 99))
		for {
			select {
			case <-stop:
				return
			default:
			}
			r.Index().Apply("w7", false, []kv.Event{stored(kv.TierPool, hs...)})
			r.Index().Apply("w7", false, []kv.Event{removed(kv.TierPool, hs...)})
		}
	}()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Choose(req, ws)
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "decisions/s")
	close(stop)
	<-done
}

// TestConcurrent: decisions, events, snapshots and workers leaving at once
// (run with -race); the index keeps its invariants.
func TestConcurrent(t *testing.T) {
	r, _ := newTestRouter(t, Config{Temperature: 0.5})
	ws := []Worker{{ID: "a"}, {ID: "b"}, {ID: "c"}}
	p := prompt(512, 6)
	hs := chain("t1", p)
	done := make(chan struct{})
	for g := range 3 {
		go func() {
			defer func() { done <- struct{}{} }()
			w := ws[g].ID
			for i := range 200 {
				switch i % 4 {
				case 0, 1:
					r.Index().Apply(w, false, []kv.Event{stored(kv.TierPool, hs[:i%len(hs)+1]...)})
				case 2:
					r.Index().Apply(w, true, []kv.Event{stored(kv.TierHost, hs[:3]...)})
				case 3:
					r.Forget(w)
				}
			}
		}()
	}
	for g := range 3 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 200 {
				req := &engine.Request{Prompt: p, Scope: "t1", Hints: engine.Hints{SessionID: fmt.Sprint(g, i%7)}}
				if d := r.Choose(req, ws); d.Index < 0 || d.Index >= len(ws) {
					t.Errorf("chose %d", d.Index)
				}
			}
		}()
	}
	for range 6 {
		<-done
	}
	if err := r.Index().checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestScorePeers: between workers that copy KV, each is also credited with
// the longest prefix another holds in memory past its own, at the copy's
// price, and told whom to copy from; blocks on disk, workers that do not
// copy and workers of another block size are not.
func TestScorePeers(t *testing.T) {
	p := prompt(100, 1) // 6 full blocks and 4 tokens
	hs := chain("t1", p)
	tests := []struct {
		name   string
		events [3][]kv.Event // on workers a, b, c
		copies [3]bool
		sizes  [3]int
		want   [3]Score
	}{
		{name: "b and c copy a's prefix past their own",
			events: [3][]kv.Event{{stored(kv.TierPool, hs[:4]...), stored(kv.TierHost, hs[4])}, {stored(kv.TierPool, hs[:2]...)}, nil},
			copies: [3]bool{true, true, true},
			want: [3]Score{
				{Cached: 80, ByTier: [3]int{64, 16, 0}, Prefill: 20 + 16*0.1, PeerFrom: -1},
				{Cached: 32, ByTier: [3]int{32, 0, 0}, Prefill: 68 - 48*0.8, Peer: 48, PeerFrom: 0},
				{Prefill: 100 - 80*0.8, Peer: 80, PeerFrom: 0},
			}},
		{name: "blocks on disk are not copied",
			events: [3][]kv.Event{{stored(kv.TierDisk, hs[:4]...)}, {stored(kv.TierPool, hs[:2]...)}, nil},
			copies: [3]bool{true, true, true},
			want: [3]Score{
				{Cached: 64, ByTier: [3]int{0, 0, 64}, Prefill: 36 + 64*0.3, PeerFrom: -1},
				{Cached: 32, ByTier: [3]int{32, 0, 0}, Prefill: 68, PeerFrom: -1},
				{Prefill: 100 - 32*0.8, Peer: 32, PeerFrom: 1},
			}},
		{name: "a worker that does not copy neither gives nor takes",
			events: [3][]kv.Event{{stored(kv.TierPool, hs[:4]...)}, {stored(kv.TierPool, hs[:2]...)}, nil},
			copies: [3]bool{false, true, true},
			want: [3]Score{
				{Cached: 64, ByTier: [3]int{64, 0, 0}, Prefill: 36, PeerFrom: -1},
				{Cached: 32, ByTier: [3]int{32, 0, 0}, Prefill: 68, PeerFrom: -1},
				{Prefill: 100 - 32*0.8, Peer: 32, PeerFrom: 1},
			}},
		{name: "another block size is not copied",
			events: [3][]kv.Event{{stored(kv.TierPool, hs[:4]...)}, nil, nil},
			copies: [3]bool{true, true, true}, sizes: [3]int{16, 16, 32},
			want: [3]Score{
				{Cached: 64, ByTier: [3]int{64, 0, 0}, Prefill: 36, PeerFrom: -1},
				{Prefill: 100 - 64*0.8, Peer: 64, PeerFrom: 0},
				{Prefill: 100, PeerFrom: -1},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newTestRouter(t, Config{})
			ws := make([]Worker, 3)
			for i := range ws {
				ws[i] = Worker{ID: fmt.Sprintf("w%d", i), CopiesKV: tt.copies[i], BlockSize: tt.sizes[i]}
				// Every worker known to the index, holding something (its
				// block size is known from its events).
				r.Index().Apply(ws[i].ID, false, append([]kv.Event{stored(kv.TierPool, chain("other", prompt(16, 9))...)}, tt.events[i]...))
			}
			got := r.Score(nil, &engine.Request{Prompt: p, Scope: "t1"}, ws)
			for i := range got {
				if math.Abs(got[i].Prefill-tt.want[i].Prefill) < 1e-9 {
					got[i].Prefill = tt.want[i].Prefill
				}
				if got[i] != tt.want[i] {
					t.Errorf("worker %d: score %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
