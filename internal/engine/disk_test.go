package engine

import (
	"context"
	"os"
	"path/filepath"
	"slices"
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
