package sim

import (
	"bytes"
	"context"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/testshared"
)

func TestReadTrace(t *testing.T) {
	good := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}
{"timestamp": 10, "input_length": 512, "output_length": 0, "hash_ids": [1]}

`
	tr, err := ReadTrace(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(tr) != 2 || tr[0].InputLength != 600 || tr[1].Timestamp != 10 || len(tr[0].HashIDs) != 2 {
		t.Fatalf("parsed %+v", tr)
	}
	bad := map[string]string{
		"not json":         `{"timestamp": 0,`,
		"too few ids":      `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1]}`,
		"too many ids":     `{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1, 2]}`,
		"empty prompt":     `{"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": []}`,
		"negative output":  `{"timestamp": 0, "input_length": 1, "output_length": -1, "hash_ids": [1]}`,
		"huge prompt":      `{"timestamp": 0, "input_length": 99999999999, "output_length": 1, "hash_ids": [1]}`,
		"time goes back":   `{"timestamp": 5, "input_length": 1, "output_length": 1, "hash_ids": [1]}` + "\n" + `{"timestamp": 4, "input_length": 1, "output_length": 1, "hash_ids": [1]}`,
		"negative time":    `{"timestamp": -1, "input_length": 1, "output_length": 1, "hash_ids": [1]}`,
		"overflowing time": `{"timestamp": 9223372036854775807, "input_length": 1, "output_length": 1, "hash_ids": [1]}`,
	}
	for name, in := range bad {
		if _, err := ReadTrace(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`))
	f.Add([]byte("{}\n{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tr, err := ReadTrace(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, r := range tr {
			a := r.Arrival(64, 1)
			if len(a.Request.Prompt) != r.InputLength || a.At < 0 {
				t.Fatalf("%+v became a prompt of %d tokens at %v", r, len(a.Request.Prompt), a.At)
			}
		}
	})
}

// referenceHitRate is the trace's token-weighted prefix hit rate with an
// unbounded cache, counted at the trace's own 512-token blocks: a request
// hits its leading blocks whose ids came before (the last, partial block
// at its real size). It is independent of the engine.
func referenceHitRate(tr []TraceRequest) float64 {
	seen := map[int64]bool{}
	var hit, total int64
	for _, r := range tr {
		total += int64(r.InputLength)
		prefix := true
		for i, id := range r.HashIDs {
			if prefix && seen[id] {
				hit += int64(min(TraceBlockTokens, r.InputLength-i*TraceBlockTokens))
			} else {
				prefix = false
			}
			seen[id] = true
		}
	}
	return float64(hit) / float64(total)
}

// TestReplayMatchesReference replays the start of the Mooncake
// conversation trace through the simulated engine (its real KV manager,
// 16-token blocks) with room for everything, and checks its prefix hit
// rate against the independent count. The engine recomputes a fully
// cached prompt's last token, so it may fall a little short.
func TestReplayMatchesReference(t *testing.T) {
	path := testshared.Path(t, "traces", "mooncake_fast25_conversation_trace.jsonl")
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("the shared traces are missing: %v", err)
	}
	tr, err := ReadTrace(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	n := 1500
	if testing.Short() {
		n = 400
	}
	tr = tr[:n]
	want := referenceHitRate(tr)

	p := DefaultProfile()
	for _, r := range tr {
		p.Shape.Context = max(p.Shape.Context, r.InputLength+r.OutputLength+1)
	}
	clock := NewVirtualClock()
	e, _, err := NewEngine(&p, Options{Clock: clock, Vocab: 256, EndOfGeneration: -1},
		engine.Config{KVMemoryBytes: 1 << 40, MaxWaiting: n + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	arrivals := make([]Arrival, n)
	for i, r := range tr {
		// Stretched so that requests rarely overlap: the reference counts
		// them one after the other.
		arrivals[i] = r.Arrival(256, 1000)
	}
	outs, err := Run(context.Background(), e, clock, arrivals)
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(outs)
	if s.Failed != 0 {
		t.Fatalf("%d requests failed", s.Failed)
	}
	if got := s.HitRate; got > want+1e-9 || math.Abs(got-want) > 0.01 {
		t.Fatalf("hit rate %.4f, reference %.4f", got, want)
	}
	t.Logf("%d requests: hit rate %.4f, reference %.4f", n, s.HitRate, want)
}

// TestOptimalHitRate: by hand on a small trace; unbounded, it is the plain
// count.
func TestOptimalHitRate(t *testing.T) {
	// Three requests of two full blocks: a, b, a again. With room for two
	// blocks the optimum keeps a's (used again) over b's.
	tr := []TraceRequest{
		{InputLength: 1024, HashIDs: []int64{1, 2}},
		{InputLength: 1024, HashIDs: []int64{3, 4}},
		{InputLength: 1024, HashIDs: []int64{1, 2}},
	}
	if got, want := OptimalHitRate(tr, 1024), 1024.0/3072; math.Abs(got-want) > 1e-12 {
		t.Fatalf("optimum with room for 2 blocks: %v, want %v", got, want)
	}
	if got := OptimalHitRate(tr, 512); got != 1.0/6 {
		t.Fatalf("optimum with room for 1 block: %v, want 1/6", got)
	}
	if got := OptimalHitRate(tr, 0); got != 0 {
		t.Fatalf("no room: %v", got)
	}
	if got, want := OptimalHitRate(tr, 1<<30), referenceHitRate(tr); got != want {
		t.Fatalf("unbounded: %v, want the unbounded count %v", got, want)
	}
}
