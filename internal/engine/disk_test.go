package engine

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// TestDiskTierAcrossRestarts: a prompt pushed out of memory comes back from
// disk as a prefix hit; a new engine on the same directory (a restarted
// server) reports it cached too; with the files damaged it is recomputed.
// The tokens are always the ones computed from scratch.
func TestDiskTierAcrossRestarts(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	kvPerToken := int64(m.Config.KVBytesPerToken(2))
	dir := t.TempDir()
	prompts := randomPrompts(11, 2, 100, 100, m.Config.Vocab, nil)
	a, b := prompts[0], prompts[1]
	const gen = 6
	want := greedyReference(t, m, a, gen)
	var reg *prometheus.Registry
	start := func() *Engine {
		reg = prometheus.NewRegistry()
		f, err := model.NewForwarder(m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		// Room for one prompt at a time: the next pushes the last out.
		e, err := New(f, Config{KVMemoryBytes: kvPerToken * 16 * 8, BlockSize: 16, KVDiskDir: dir, KVDiskBytes: 1 << 30, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		return e
	}
	run := func(e *Engine, p []int32) ([]int32, Usage) {
		t.Helper()
		st, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: gen, IgnoreEOS: true, Scope: "tenant"})
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := collect(t, st, 1)
		return toks[0], st.Usage()
	}
	e := start()
	run(e, a)
	run(e, b)
	for deadline := time.Now().Add(10 * time.Second); e.KV().Stats().Disk.QueueDepth > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the disk tier did not write its queue")
		}
	}
	if e.KV().Stats().Disk.Blocks == 0 {
		t.Fatal("nothing reached the disk tier")
	}
	got, u := run(e, a)
	if u.CachedTokens != 96 || !slices.Equal(got, want) {
		t.Fatalf("from disk: %d cached tokens (want 96), tokens %v (want %v)", u.CachedTokens, got, want)
	}
	if st := e.KV().Stats().Disk; st.Hits == 0 {
		t.Fatalf("no block came from disk: %+v", st)
	}
	// The metrics tell the same: blocks on disk by class, and at most one
	// request's wait (none when its prefetch, started when it was queued,
	// was done before it reached the front).
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var onDisk, waits, odds float64
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			switch f.GetName() {
			case "kvserve_kv_tier_blocks":
				for _, l := range mt.GetLabel() {
					if l.GetName() == "tier" && l.GetValue() == "disk" {
						onDisk += mt.GetGauge().GetValue()
					}
				}
			case "kvserve_kv_disk_wait_seconds":
				waits += float64(mt.GetHistogram().GetSampleCount())
			case "kvserve_kv_reuse_odds":
				if v := mt.GetGauge().GetValue(); v > 0 && v < 1 {
					odds++
				}
			}
		}
	}
	if onDisk == 0 || waits > 1 || odds != 20 {
		t.Fatalf("metrics: %v blocks on disk, %v waits for disk, %v reuse classes with odds in (0, 1) (want > 0, ≤ 1, 20)", onDisk, waits, odds)
	}
	e.Close()

	e = start()
	got, u = run(e, a)
	if u.CachedTokens != 96 || !slices.Equal(got, want) {
		t.Fatalf("after a restart: %d cached tokens (want 96), tokens %v (want %v)", u.CachedTokens, got, want)
	}
	e.Close()

	// Damage every block file: flip one byte in some, cut others short.
	n := 0
	err = filepath.WalkDir(filepath.Join(dir, "blocks"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if n%2 == 0 {
			data = data[:len(data)-3]
		} else {
			data[len(data)/2] ^= 0x10
		}
		return os.WriteFile(path, data, 0o600)
	})
	if err != nil || n == 0 {
		t.Fatalf("damaging %d files: %v", n, err)
	}
	e = start()
	got, u = run(e, a)
	if u.CachedTokens != 0 || !slices.Equal(got, want) {
		t.Fatalf("with damaged files: %d cached tokens (want 0), tokens %v (want %v)", u.CachedTokens, got, want)
	}
	if err := e.KV().CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestPrefetchWhileQueued: a queued request's blocks start coming up from
// disk when it is queued, while another request runs, not when it reaches
// the front of the queue.
func TestPrefetchWhileQueued(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	kvPerToken := int64(m.Config.KVBytesPerToken(2))
	dir := t.TempDir()
	a := randomPrompts(12, 1, 100, 100, m.Config.Vocab, nil)[0]
	f, err := model.NewForwarder(m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg := Config{KVMemoryBytes: kvPerToken * 16 * 16, BlockSize: 16, KVDiskDir: dir, KVDiskBytes: 1 << 30, MaxRunning: 1}
	e, err := NewStepped(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	drive := func() {
		for e.Pending() {
			e.Step(ctx)
		}
	}
	if _, err := e.Submit(ctx, Request{Prompt: a, MaxTokens: 1}); err != nil {
		t.Fatal(err)
	}
	drive()
	e.Close() // writes a's blocks to disk

	e, err = NewStepped(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	busy := randomPrompts(13, 1, 40, 40, m.Config.Vocab, nil)[0]
	if _, err := e.Submit(ctx, Request{Prompt: busy, MaxTokens: 50, IgnoreEOS: true}); err != nil {
		t.Fatal(err)
	}
	e.Step(ctx) // busy runs, alone (MaxRunning 1)
	st, err := e.Submit(ctx, Request{Prompt: a, MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	e.Step(ctx) // a is queued behind busy
	deadline := time.Now().Add(10 * time.Second)
	for e.KV().Stats().Disk.Loaded < 6 {
		if time.Now().After(deadline) {
			t.Fatalf("a's blocks were not loaded while it waited: %+v", e.KV().Stats().Disk)
		}
		time.Sleep(time.Millisecond)
	}
	if st.QueueTime() != 0 {
		t.Fatal("a was admitted before its blocks were loaded: the test shows nothing")
	}
	drive()
	if u := st.Usage(); u.CachedTokens != 96 {
		t.Fatalf("a reported %d cached tokens, want 96", u.CachedTokens)
	}
}

// TestDiskTierFaults: a disk that refuses every write, and a budget too
// small for one block, cost hits but never a wrong token; the engine
// keeps serving and its pool stays consistent.
func TestDiskTierFaults(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	kvPerToken := int64(m.Config.KVBytesPerToken(2))
	prompts := randomPrompts(14, 3, 100, 100, m.Config.Vocab, nil)
	const gen = 4
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		want[i] = greedyReference(t, m, p, gen)
	}
	cases := []struct {
		name  string
		bytes int64
		fault func(dir string) error
		check func(st Stats) bool
	}{
		{"refusing filesystem", 1 << 30, func(dir string) error {
			// Where the block files go is a file now: every write fails.
			if err := os.RemoveAll(filepath.Join(dir, "blocks")); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "blocks"), nil, 0o600)
		}, func(st Stats) bool { return st.KV.Disk.WriteErrors > 0 && st.KV.Disk.Blocks == 0 }},
		{"budget below a block", 1, nil, func(st Stats) bool { return st.KV.Disk.Dropped > 0 && st.KV.Disk.Blocks == 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16},
				Config{KVMemoryBytes: kvPerToken * 16 * 8, BlockSize: 16, KVDiskDir: dir, KVDiskBytes: tc.bytes})
			if err != nil {
				t.Fatal(err)
			}
			if tc.fault != nil {
				if err := tc.fault(dir); err != nil {
					t.Fatal(err)
				}
			}
			for round := range 2 {
				for i, p := range prompts {
					st, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: gen, IgnoreEOS: true})
					if err != nil {
						t.Fatal(err)
					}
					toks, _ := collect(t, st, 1)
					if !slices.Equal(toks[0], want[i]) {
						t.Fatalf("round %d prompt %d: %v, want %v", round, i, toks[0], want[i])
					}
				}
			}
			for deadline := time.Now().Add(10 * time.Second); e.KV().Stats().Disk.QueueDepth > 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the disk tier's queue did not drain")
				}
			}
			if st := e.Now(); !tc.check(st) {
				t.Fatalf("disk tier: %+v", st.KV.Disk)
			}
			if err := e.KV().CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// stepClock is a clock a test moves by hand.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestSessionPrefetch: a session's blocks pushed to disk while it pauses
// are read back into memory before its next turn is expected (its shortest
// pause so far, less the lead), and not before; that turn then finds them
// without waiting for the disk. A session with no pause to go by is not
// prefetched, and its turn waits.
func TestSessionPrefetch(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	kvPerToken := int64(m.Config.KVBytesPerToken(2))
	f, err := model.NewForwarder(m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	clock := &stepClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	// Room for one prompt at a time: the next pushes the last to disk.
	e, err := NewStepped(f, Config{KVMemoryBytes: kvPerToken * 16 * 8, BlockSize: 16, KVDiskDir: t.TempDir(),
		KVDiskBytes: 1 << 30, Clock: clock, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	prompts := randomPrompts(15, 4, 100, 100, m.Config.Vocab, nil)
	a, b := randomPrompts(17, 1, 52, 52, m.Config.Vocab, nil)[0], prompts[1]
	extra := randomPrompts(16, 1, 12, 12, m.Config.Vocab, nil)[0]
	run := func(p []int32, session string) Usage {
		t.Helper()
		st, err := e.Submit(ctx, Request{Prompt: p, MaxTokens: 1, Scope: "tenant", Hints: Hints{SessionID: session}})
		if err != nil {
			t.Fatal(err)
		}
		for e.Pending() {
			e.Step(ctx)
		}
		if toks, _ := collect(t, st, 1); !slices.Equal(toks[0], greedyReference(t, m, p, 1)) {
			t.Fatalf("tokens %v, want %v", toks[0], greedyReference(t, m, p, 1))
		}
		return st.Usage()
	}
	counts := func() (waits, sessions, blocks float64) {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, fam := range families {
			for _, mt := range fam.GetMetric() {
				switch fam.GetName() {
				case "kvserve_kv_disk_wait_seconds":
					waits += float64(mt.GetHistogram().GetSampleCount())
				case "kvserve_sessions_prefetched_total":
					sessions += mt.GetCounter().GetValue()
				case "kvserve_session_prefetched_blocks_total":
					blocks += mt.GetCounter().GetValue()
				}
			}
		}
		return waits, sessions, blocks
	}
	toDisk := func(other []int32) {
		t.Helper()
		run(other, "") // pushes the last prompt's blocks out of the pool
		for deadline := time.Now().Add(10 * time.Second); e.KV().Stats().Disk.QueueDepth > 0; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the disk tier did not write its queue")
			}
		}
	}
	loaded := func() int64 { return e.KV().Stats().Disk.Loaded }

	// Session s: two turns 10 s apart, then its blocks go to disk.
	run(a, "s")
	clock.advance(10 * time.Second)
	turn2 := append(slices.Clone(a), extra...) // 64 tokens: 4 full blocks
	run(turn2, "s")
	toDisk(prompts[2])
	before := loaded()
	clock.advance(10*time.Second - sessionFetchLead - time.Second)
	e.Step(ctx) // nothing runs; the step looks at sessions
	time.Sleep(50 * time.Millisecond)
	if got := loaded(); got != before {
		t.Fatalf("%d blocks loaded a second before the session's prefetch was due", got-before)
	}
	clock.advance(1500 * time.Millisecond)
	e.Step(ctx)
	// Three blocks: the other prompt took seven of the pool's eight, and
	// the chain's head, evicted last, stayed. (A guess may fill half of the
	// disk tier's staging area, here as large as the pool.)
	for deadline := time.Now().Add(10 * time.Second); loaded()-before < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the session's blocks were not read back ahead of its turn: %d loaded", loaded()-before)
		}
	}
	if _, sessions, blocks := counts(); sessions != 1 || blocks != 3 {
		t.Fatalf("metrics: %v sessions, %v blocks prefetched (want 1, 3)", sessions, blocks)
	}
	clock.advance(3 * time.Second)
	turn3 := append(slices.Clone(turn2), extra...)
	if u := run(turn3, "s"); u.CachedTokens != 64 {
		t.Fatalf("the session's next turn found %d cached tokens, want 64", u.CachedTokens)
	}
	if waits, _, _ := counts(); waits != 0 {
		t.Fatalf("the prefetched turn waited for the disk (%v waits)", waits)
	}

	// Session u: one turn, nothing to predict its next by (fewer pauses
	// than the engine needs): no session prefetch reads its blocks before
	// its next turn comes, which reads them from disk when it is queued
	// (and waits for them, unless the read is done before the scheduler
	// first looks at it: the count of waits is 0 or 1).
	run(b, "u")
	toDisk(prompts[3])
	clock.advance(5 * time.Second)
	e.Step(ctx)
	time.Sleep(50 * time.Millisecond)
	before = loaded()
	if u := run(append(slices.Clone(b), extra...), "u"); u.CachedTokens != 96 {
		t.Fatalf("session u's next turn found %d cached tokens, want 96", u.CachedTokens)
	}
	if got := loaded() - before; got < 1 {
		t.Fatalf("session u's next turn read %d blocks from disk, want its prompt's", got)
	}
	if waits, sessions, _ := counts(); waits > 1 || sessions != 1 {
		t.Fatalf("session u: %v waits for disk, %v sessions prefetched (want at most 1, 1)", waits, sessions)
	}
	if err := e.KV().CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestExpectedPause(t *testing.T) {
	s := time.Second
	many := []time.Duration{9 * s, 3 * s, 7 * s, 1 * s, 5 * s, 8 * s, 2 * s, 6 * s} // lower quartile: 3 s
	for _, c := range []struct {
		name     string
		own, all []time.Duration
		want     time.Duration
		wantOK   bool
	}{
		{"own pauses: the shortest", []time.Duration{20 * s, 4 * s, 9 * s}, many, 4 * s, true},
		{"first pause: all sessions' lower quartile", nil, many, 3 * s, true},
		{"first pause, too few known", nil, many[:enginePausesMin-1], 0, false},
		{"nothing known", nil, nil, 0, false},
	} {
		e := &Engine{}
		for _, p := range c.all {
			e.notePause(p)
		}
		got, ok := e.expectedPause(c.own)
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: %v, %v; want %v, %v", c.name, got, ok, c.want, c.wantOK)
		}
	}
	// The engine keeps its latest pauses only.
	e := &Engine{}
	for i := range enginePauses + 10 {
		e.notePause(time.Duration(i) * s)
	}
	if len(e.pauses) != enginePauses || slices.Min(e.pauses) != 10*s {
		t.Fatalf("kept %d pauses from %v; want %d from 10s", len(e.pauses), slices.Min(e.pauses), enginePauses)
	}
}
