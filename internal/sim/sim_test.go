package sim

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/sample"
)

// testProfile is a small model with round costs, so expected times are
// easy to state.
func testProfile() *Profile {
	return &Profile{
		Model: "test",
		Shape: Shape{Vocab: 64, Context: 4096, Layers: 2, KVDim: 8, KVType: "f16", MaxTokens: 256},
		Cost: Cost{Fixed: 0.001, PrefillToken: 0.0001, DecodeSeq: 0.0005,
			PrefillAttended: 1e-7, DecodeAttended: 1e-6},
	}
}

func newVirtual(t *testing.T, p *Profile, o Options, cfg engine.Config) (*engine.Engine, *VirtualClock) {
	t.Helper()
	o.Clock = NewVirtualClock()
	e, _, err := NewEngine(p, o, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e, o.Clock
}

func greedy(prompt []int32, maxTokens int) engine.Request {
	return engine.Request{Prompt: prompt, MaxTokens: maxTokens, Sampling: sample.Params{TopP: 1}}
}

func seqPrompt(n int, first int32) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = (first + int32(i)) % 60
	}
	return p
}

func TestFeaturesAndCost(t *testing.T) {
	seqs := []batch.Seq{
		{Pos: 0, Tokens: make([]int32, 100)},  // prefill: attends 1..100
		{Pos: 200, Tokens: make([]int32, 10)}, // a later chunk: 201..210
		{Pos: 50, Tokens: make([]int32, 1)},   // decoding: 51
		{Pos: 7, Tokens: make([]int32, 1)},    // decoding: 8
	}
	f := FeaturesOf(seqs)
	want := Features{PrefillTokens: 110, DecodeSeqs: 2, PrefillAttended: 5050 + 2055, DecodeAttended: 59}
	if f != want {
		t.Fatalf("features %+v, want %+v", f, want)
	}
	c := testProfile().Cost
	got := c.Time(f)
	exact := 0.001 + 110*0.0001 + 2*0.0005 + 7105*1e-7 + 59*1e-6
	if d := math.Abs(got.Seconds() - exact); d > 1e-9 {
		t.Fatalf("cost %v, want %vs", got, exact)
	}
}

// TestFitRecovers: passes priced by a known cost, exact or with noise, fit
// back to it; terms no pass exercises come out zero.
func TestFitRecovers(t *testing.T) {
	tests := []struct {
		name      string
		noise     float64
		noDecode  bool
		tolerance float64
	}{
		{"exact", 0, false, 1e-6},
		{"5% noise", 0.05, false, 0.15},
		{"prefill only", 0, true, 1e-6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := testProfile().Cost
			if tt.noDecode {
				want.DecodeSeq, want.DecodeAttended = 0, 0
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var passes []Pass
			for range 300 {
				var seqs []batch.Seq
				if rng.IntN(3) == 0 {
					n := 2 + rng.IntN(200)
					seqs = append(seqs, batch.Seq{Pos: rng.IntN(3000), Tokens: make([]int32, n)})
				}
				if !tt.noDecode {
					for range rng.IntN(32) {
						seqs = append(seqs, batch.Seq{Pos: rng.IntN(3000), Tokens: make([]int32, 1)})
					}
				}
				if len(seqs) == 0 {
					seqs = append(seqs, batch.Seq{Pos: rng.IntN(3000), Tokens: make([]int32, 2+rng.IntN(100))})
				}
				f := FeaturesOf(seqs)
				d := want.Time(f).Seconds() * (1 + tt.noise*(2*rng.Float64()-1))
				passes = append(passes, Pass{Features: f, Duration: time.Duration(d * 1e9)})
			}
			got, rep, err := Fit(passes)
			if err != nil {
				t.Fatal(err)
			}
			g, w := got.terms(), want.terms()
			for j := range w {
				if w[j] == 0 {
					if g[j] != 0 {
						t.Errorf("term %d: %g, want 0 (never exercised)", j, g[j])
					}
					continue
				}
				if rel := math.Abs(g[j]-w[j]) / w[j]; rel > tt.tolerance {
					t.Errorf("term %d: %g, want %g (off by %.1f%%)", j, g[j], w[j], 100*rel)
				}
			}
			if rep.Passes != len(passes) || rep.MedianError > tt.noise+1e-6 {
				t.Errorf("report %+v", rep)
			}
		})
	}
}

func TestFitErrors(t *testing.T) {
	same := Pass{Features: Features{PrefillTokens: 10, PrefillAttended: 55}, Duration: time.Millisecond}
	tests := []struct {
		name   string
		passes []Pass
	}{
		{"too few", []Pass{same, same}},
		{"inseparable", []Pass{same, same, same, same, same}},
	}
	for _, tt := range tests {
		if _, _, err := Fit(tt.passes); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestParseProfile(t *testing.T) {
	good, err := json.Marshal(testProfile())
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParseProfile(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.Cost != testProfile().Cost || p.Shape != testProfile().Shape {
		t.Fatalf("round trip: %+v", p)
	}
	bad := []string{
		``, `{`, `[]`, `{"shape":{}}`,
		`{"shape":{"vocab":64,"context":64,"layers":1,"kv_dim":8,"kv_type":"q4_k","max_tokens":8},"cost":{"fixed_s":1}}`,
		`{"shape":{"vocab":64,"context":64,"layers":1,"kv_dim":8,"kv_type":"f16","max_tokens":8},"cost":{}}`,
		`{"shape":{"vocab":64,"context":64,"layers":1,"kv_dim":8,"kv_type":"f16","max_tokens":8},"cost":{"fixed_s":-1}}`,
		`{"shape":{"vocab":-64,"context":64,"layers":1,"kv_dim":8,"kv_type":"f16","max_tokens":8},"cost":{"fixed_s":1}}`,
	}
	for _, b := range bad {
		if _, err := ParseProfile([]byte(b)); err == nil {
			t.Errorf("%q: accepted", b)
		}
	}
	if d := DefaultProfile(); d.Validate() != nil {
		t.Fatal(d.Validate())
	}
	if false {
		t.Fatal(err)
	}
}

func FuzzParseProfile(f *testing.F) {
	good, _ := json.Marshal(testProfile())
	f.Add(good)
	f.Add(defaultProfile)
	f.Add([]byte(`{"cost":{"fixed_s":1e308}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProfile(data)
		if err != nil {
			return
		}
		// Whatever parses must drive a forward pass.
		p.Shape.Vocab = min(p.Shape.Vocab, 1<<16)
		if _, err := NewForwarder(p, Options{Clock: NewVirtualClock()}); err != nil {
			t.Fatalf("a valid profile makes no forwarder: %v", err)
		}
	})
}

// TestVirtualTimes: in virtual time a request's token times are exactly the
// modelled passes' costs.
func TestVirtualTimes(t *testing.T) {
	p := testProfile()
	e, clock := newVirtual(t, p, Options{EndOfGeneration: -1}, engine.Config{})
	const promptLen, maxTokens = 100, 4
	out, err := Run(context.Background(), e, clock, []Arrival{{At: time.Second, Request: greedy(seqPrompt(promptLen, 0), maxTokens)}})
	if err != nil {
		t.Fatal(err)
	}
	o := out[0]
	if o.Err != nil || o.Finish != engine.FinishLength || o.Usage.CompletionTokens != maxTokens {
		t.Fatalf("outcome %+v", o)
	}
	prefill := p.Cost.Time(FeaturesOf([]batch.Seq{{Pos: 0, Tokens: make([]int32, promptLen)}}))
	if o.TTFT != prefill {
		t.Errorf("TTFT %v, want the prefill pass's %v", o.TTFT, prefill)
	}
	e2e := prefill
	for i := range maxTokens - 1 {
		e2e += p.Cost.Time(FeaturesOf([]batch.Seq{{Pos: promptLen + i, Tokens: make([]int32, 1)}}))
	}
	if o.E2E != e2e {
		t.Errorf("E2E %v, want %v", o.E2E, e2e)
	}
	if got, want := clock.Since(), time.Second+e2e; got != want {
		t.Errorf("clock at %v, want %v", got, want)
	}
}

// generate runs requests through a fresh virtual-time simulator and
// returns each one's tokens.
func generate(t *testing.T, o Options, reqs ...engine.Request) ([][]int32, []engine.Usage) {
	t.Helper()
	e, _ := newVirtual(t, testProfile(), o, engine.Config{})
	var toks [][]int32
	var usage []engine.Usage
	for _, r := range reqs {
		s, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		for e.Pending() {
			e.Step(context.Background())
		}
		var got []int32
		outs, err := s.Poll(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range outs {
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			if ev.Token >= 0 {
				got = append(got, ev.Token)
			}
		}
		toks = append(toks, got)
		usage = append(usage, s.Usage())
	}
	return toks, usage
}

func TestTokens(t *testing.T) {
	const eog = 63
	prompt := seqPrompt(40, 3)
	a, _ := generate(t, Options{EndOfGeneration: eog, Seed: 1}, greedy(prompt, 20))
	b, _ := generate(t, Options{EndOfGeneration: eog, Seed: 1}, greedy(prompt, 20))
	c, _ := generate(t, Options{EndOfGeneration: eog, Seed: 2}, greedy(prompt, 20))
	if !slices.Equal(a[0], b[0]) {
		t.Errorf("same seed, different tokens: %v vs %v", a[0], b[0])
	}
	if slices.Equal(a[0], c[0]) {
		t.Errorf("seeds 1 and 2 gave the same tokens %v", a[0])
	}
	if len(a[0]) != 20 || slices.Contains(a[0], eog) {
		t.Errorf("without a length hint: %v, want 20 tokens without the end token", a[0])
	}

	// The expected output length ends the sample, with the end token.
	hinted := greedy(prompt, 50)
	hinted.Hints.ExpectedOutputTokens = 7
	h, u := generate(t, Options{EndOfGeneration: eog}, hinted)
	if len(h[0]) != 8 || h[0][7] != eog || u[0].CompletionTokens != 8 {
		t.Errorf("expected_output_tokens 7: %v (usage %+v), want 7 tokens and the end token", h[0], u[0])
	}

	// Candidates restrict what is generated; sampling with a seed repeats.
	words := []int32{10, 11, 12, 13, 14, 15}
	sampled := greedy(prompt, 30)
	sampled.Sampling = sample.Params{Temperature: 1, TopP: 1, Seed: 9}
	s1, _ := generate(t, Options{EndOfGeneration: eog, Candidates: words}, sampled)
	s2, _ := generate(t, Options{EndOfGeneration: eog, Candidates: words}, sampled)
	if !slices.Equal(s1[0], s2[0]) {
		t.Errorf("same request seed, different samples: %v vs %v", s1[0], s2[0])
	}
	for _, tok := range s1[0] {
		if !slices.Contains(words, tok) {
			t.Fatalf("token %d is not a candidate (%v)", tok, s1[0])
		}
	}
}

// TestRunArrivals: idle gaps are skipped, arrivals are timed from when they
// arrive, and a repeated prompt hits the prefix cache.
func TestRunArrivals(t *testing.T) {
	e, clock := newVirtual(t, testProfile(), Options{EndOfGeneration: -1}, engine.Config{})
	shared := seqPrompt(128, 5)
	arrivals := []Arrival{
		{At: 10 * time.Hour, Request: greedy(shared, 3)}, // given out of order
		{At: 0, Request: greedy(shared, 3)},
		{At: time.Millisecond, Request: greedy(seqPrompt(64, 9), 3)}, // arrives while the first runs
		{At: 20 * time.Hour, Request: greedy(seqPrompt(5000, 0), 3)}, // too long: refused
	}
	start := time.Now()
	out, err := Run(context.Background(), e, clock, arrivals)
	if err != nil {
		t.Fatal(err)
	}
	if wall := time.Since(start); wall > 10*time.Second {
		t.Errorf("20 virtual hours took %v of real time", wall)
	}
	for i, o := range out[:3] {
		if o.Err != nil || o.Usage.CompletionTokens != 3 || o.Arrival != arrivals[i].At || o.TTFT <= 0 || o.E2E < o.TTFT {
			t.Errorf("outcome %d: %+v", i, o)
		}
	}
	// The prompt's last token is always computed: its block is not reused.
	if out[0].Usage.CachedTokens != 112 || out[1].Usage.CachedTokens != 0 {
		t.Errorf("cached tokens %d then %d, want 0 then 112", out[1].Usage.CachedTokens, out[0].Usage.CachedTokens)
	}
	if out[3].Err == nil {
		t.Errorf("a prompt longer than the context was accepted")
	}
	if got := clock.Since(); got != 20*time.Hour {
		t.Errorf("clock at %v after the last request", got)
	}
}

// TestPoolWithoutStorage: the simulator's KV pool of tens of millions of
// tokens is bookkeeping only.
func TestPoolWithoutStorage(t *testing.T) {
	p := testProfile()
	p.Shape = Shape{Vocab: 64, Context: 131072, Layers: 32, KVDim: 1024, KVType: "f16", MaxTokens: 512}
	perToken := int64(2 * p.Shape.Layers * p.Shape.KVDim * 2)
	const tokens = 20_000_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	e, _ := newVirtual(t, p, Options{}, engine.Config{KVMemoryBytes: tokens * perToken})
	runtime.GC()
	runtime.ReadMemStats(&after)
	if got := e.KV().NumBlocks() * e.Config().BlockSize; got < tokens*99/100 {
		t.Fatalf("pool of %d tokens, want %d", got, tokens)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<30 {
		t.Errorf("a pool of %d tokens (%d GiB of KV) took %d MiB", tokens, tokens*perToken>>30, grew>>20)
	}
}

// TestRecorder: recording leaves the wrapped pass's results alone and
// captures each pass.
func TestRecorder(t *testing.T) {
	f, err := NewForwarder(testProfile(), Options{Clock: NewVirtualClock()})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(f)
	if r.Shape() != f.Shape() {
		t.Fatal("shape differs")
	}
	logits := make([]float32, f.Shape().Vocab)
	seqs := []batch.Seq{{Pos: 3, Tokens: []int32{1, 2}, Logits: logits}, {Pos: 9, Tokens: []int32{4}}}
	if err := r.Forward(context.Background(), seqs); err != nil {
		t.Fatal(err)
	}
	got := r.Passes()
	if len(got) != 1 || got[0].Features != FeaturesOf(seqs) {
		t.Fatalf("passes %+v", got)
	}
	if slices.Max(logits) <= background {
		t.Fatal("the wrapped pass wrote no logits")
	}
	n := 0
	r.Parallel(10, func(lo, hi int) { n += hi - lo })
	if n != 10 {
		t.Fatalf("Parallel covered %d of 10", n)
	}
}
