package engine

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/testshared/sharedmodel"
)

func sharedModel(t testing.TB, name string) *model.Model {
	t.Helper()
	return sharedmodel.Load(t, name)
}

// newTestEngine starts an engine on m with a forward pass made from fo;
// the forward pass is closed when the test ends (after the engine: the
// test's own deferred Close runs first).
func newTestEngine(t testing.TB, m *model.Model, fo model.ForwarderOptions, cfg Config) (*Engine, error) {
	t.Helper()
	f, err := model.NewForwarder(m, fo)
	if err != nil {
		return nil, err
	}
	t.Cleanup(f.Close)
	e, err := New(f, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(e.Close)
	return e, nil
}

// greedyReference generates with the model directly, one sequence at a time.
func greedyReference(t *testing.T, m *model.Model, prompt []int32, n int) []int32 {
	pool := tensor.NewPool(1)
	defer pool.Close()
	r, err := model.NewRunner(m, pool, 512, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	cache := model.NewSeqCache(&m.Config, tensor.F16, 16)
	cache.Reserve(len(prompt) + n)
	logits := make([]float32, m.Config.Vocab)
	seq := model.Seq{Cache: cache, Tokens: prompt, Logits: logits}
	var out []int32
	for i := 0; i < n; i++ {
		if err := r.Forward(context.Background(), []model.Seq{seq}); err != nil {
			t.Fatal(err)
		}
		best := int32(0)
		for j, v := range logits {
			if v > logits[best] {
				best = int32(j)
			}
		}
		out = append(out, best)
		seq.Pos += len(seq.Tokens)
		seq.Tokens = []int32{best}
	}
	return out
}

// collect reads a stream to its end and returns each sample's tokens.
func collect(t *testing.T, st *Stream, n int) ([][]int32, []FinishReason) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	toks := make([][]int32, n)
	fins := make([]FinishReason, n)
	var buf []Output
	for {
		var err error
		buf, err = st.Recv(ctx, buf[:0])
		for _, o := range buf {
			if o.Err != nil {
				t.Fatalf("sample %d: %v", o.Index, o.Err)
			}
			if o.Token >= 0 {
				toks[o.Index] = append(toks[o.Index], o.Token)
			}
			if o.Finish != FinishNone {
				fins[o.Index] = o.Finish
			}
		}
		if errors.Is(err, ErrDone) {
			return toks, fins
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func randomPrompts(seed uint64, count, minLen, maxLen, vocab int, shared []int32) [][]int32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([][]int32, count)
	for i := range out {
		p := slices.Clone(shared)
		for n := minLen + rng.IntN(maxLen-minLen+1); len(p) < n; {
			p = append(p, int32(3+rng.IntN(vocab-3)))
		}
		out[i] = p
	}
	return out
}

// TestEquivalence runs the same greedy requests concurrently under every
// scheduling regime and checks each output equals single-sequence greedy
// generation: prefix caching on and off, paged and contiguous, chunked
// prefill at several chunk sizes, and a pool so small that preemption is
// forced.
func TestEquivalence(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	const gen = 24
	shared := randomPrompts(99, 1, 40, 40, m.Config.Vocab, nil)[0]
	prompts := randomPrompts(1, 8, 45, 90, m.Config.Vocab, shared)
	want := make([][]int32, len(prompts))
	for i, p := range prompts {
		want[i] = greedyReference(t, m, p, gen)
	}
	kvPerToken := int64(m.Config.KVBytesPerToken(2))
	f16 := model.ForwarderOptions{KVType: tensor.F16}
	cases := []struct {
		name string
		cfg  Config
		fo   model.ForwarderOptions
	}{
		{"paged", Config{}, f16},
		{"no-prefix-cache", Config{DisablePrefixCache: true}, f16},
		{"contiguous", Config{Contiguous: true}, f16},
		{"chunk-1", Config{MaxBatchTokens: 1}, f16},
		{"chunk-7", Config{MaxBatchTokens: 7}, f16},
		{"chunk-16", Config{MaxBatchTokens: 16}, f16},
		{"chunk-33", Config{MaxBatchTokens: 33}, f16},
		// Room for about two sequences at a time: preemption is certain.
		{"preempt", Config{KVMemoryBytes: kvPerToken * 16 * 14, BlockSize: 16}, f16},
		// The same with the memory tiers below: what comes back from
		// host memory or disk is what was computed.
		{"preempt-host", Config{KVMemoryBytes: kvPerToken * 16 * 14, BlockSize: 16, KVHostMemoryBytes: kvPerToken * 16 * 3}, f16},
		{"preempt-disk", Config{KVMemoryBytes: kvPerToken * 16 * 14, BlockSize: 16, KVDiskDir: t.TempDir(), KVDiskBytes: 1 << 30}, f16},
		{"preempt-host-disk", Config{KVMemoryBytes: kvPerToken * 16 * 14, BlockSize: 16, KVHostMemoryBytes: kvPerToken * 16 * 3,
			KVDiskDir: t.TempDir(), KVDiskBytes: 1 << 30}, f16},
		{"preempt-contiguous", Config{KVMemoryBytes: kvPerToken * 16 * 16, BlockSize: 16, Contiguous: true}, f16},
		{"kv-f32", Config{}, model.ForwarderOptions{KVType: tensor.F32}},
		{"kv-q8_0", Config{}, model.ForwarderOptions{KVType: tensor.Q8_0}},
		// Lowered compute threads (a mild nice: other test packages may
		// be running beside this one) compute the same.
		{"background-compute", Config{}, model.ForwarderOptions{Nice: 5, KVType: tensor.F16}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fo := tc.fo
			fo.Threads = 2
			fo.MaxTokens = max(tc.cfg.MaxBatchTokens, 512)
			e, err := newTestEngine(t, m, fo, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			var wg sync.WaitGroup
			got := make([][]int32, len(prompts))
			for i, p := range prompts {
				st, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: gen, IgnoreEOS: true})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					toks, _ := collect(t, st, 1)
					got[i] = toks[0]
				}()
			}
			wg.Wait()
			for i := range prompts {
				if e.Shape().KVType != tensor.F16 {
					continue // a different cache precision legitimately changes outputs
				}
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("prompt %d: got %v, want %v", i, got[i], want[i])
				}
			}
			if e.Shape().KVType != tensor.F16 {
				for i := range got {
					if len(got[i]) != gen {
						t.Errorf("prompt %d: %d tokens", i, len(got[i]))
					}
				}
			}
			if err := e.KV().CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if st := e.KV().Stats(); st.Active != 0 {
				t.Fatalf("blocks still referenced after all requests ended: %+v", st)
			}
		})
	}
}

func TestPrefixHitReported(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompt := randomPrompts(3, 1, 100, 100, m.Config.Vocab, nil)[0]
	run := func(p []int32, scope string) Usage {
		st, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 2, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		collect(t, st, 1)
		return st.Usage()
	}
	if u := run(prompt, "a"); u.CachedTokens != 0 {
		t.Fatalf("cold request reported %d cached tokens", u.CachedTokens)
	}
	if u := run(append(slices.Clone(prompt), 7, 8, 9), "a"); u.CachedTokens != 96 {
		t.Fatalf("warm request reported %d cached tokens, want 96 (6 full blocks)", u.CachedTokens)
	}
	if u := run(prompt, "b"); u.CachedTokens != 0 {
		t.Fatalf("another scope reported %d cached tokens", u.CachedTokens)
	}
}

func TestParallelSamplesShareBlocks(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompt := randomPrompts(5, 1, 64, 64, m.Config.Vocab, nil)[0]
	st, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 8, N: 4,
		Sampling: sample.Params{Temperature: 1, Seed: 42}, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	toks, fins := collect(t, st, 4)
	for i := range toks {
		if len(toks[i]) != 8 || fins[i] != FinishLength {
			t.Fatalf("sample %d: %d tokens, finish %v", i, len(toks[i]), fins[i])
		}
	}
	if slices.Equal(toks[0], toks[1]) && slices.Equal(toks[1], toks[2]) && slices.Equal(toks[2], toks[3]) {
		t.Fatal("four samples at temperature 1 are identical")
	}
	// Same seed → same samples.
	st2, _ := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 8, N: 4,
		Sampling: sample.Params{Temperature: 1, Seed: 42}, IgnoreEOS: true})
	toks2, _ := collect(t, st2, 4)
	for i := range toks {
		if !slices.Equal(toks[i], toks2[i]) {
			t.Fatalf("sample %d not reproducible with the same seed", i)
		}
	}
	if u := st.Usage(); u.CompletionTokens != 32 || u.PromptTokens != 64 {
		t.Fatalf("usage %+v", u)
	}
}

func TestCancelFreesBlocks(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	prompt := randomPrompts(6, 1, 40, 40, m.Config.Vocab, nil)[0]
	st, err := e.Submit(ctx, Request{Prompt: prompt, MaxTokens: 200, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	var buf []Output
	if buf, err = st.Recv(context.Background(), buf); err != nil { // wait until it runs
		t.Fatal(err)
	}
	cancel()
	toks, fins := collect(t, st, 1)
	if fins[0] != FinishCancel {
		t.Fatalf("finish %v after cancel (%d tokens)", fins[0], len(toks[0]))
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.KV().Stats().Active != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("blocks still active after cancel: %+v", e.KV().Stats())
		}
		time.Sleep(time.Millisecond)
	}
	if st := e.KV().Stats(); st.Cached < 2 {
		t.Fatalf("full blocks of the cancelled request were not kept cached: %+v", st)
	}
}

func TestRejectsImpossibleRequests(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 1, KVType: tensor.F16}, Config{KVMemoryBytes: int64(m.Config.KVBytesPerToken(2)) * 16 * 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	cases := []struct {
		req  Request
		want error
	}{
		{Request{Prompt: nil, MaxTokens: 1}, ErrInvalid},
		{Request{Prompt: []int32{5}, MaxTokens: 0}, ErrInvalid},
		{Request{Prompt: []int32{int32(m.Config.Vocab)}, MaxTokens: 1}, ErrInvalid},
		{Request{Prompt: make([]int32, 250), MaxTokens: 10}, ErrTooLong}, // past the 256 context
		{Request{Prompt: make([]int32, 60), MaxTokens: 10}, ErrTooLong},  // needs 5 of the pool's 4 blocks
		{Request{Prompt: []int32{5}, MaxTokens: 1, N: 1000}, ErrInvalid}, // absurd n
		{Request{Prompt: []int32{5}, MaxTokens: 1, Sampling: sample.Params{TopP: 2}}, ErrInvalid},
	}
	for i, c := range cases {
		if _, err := e.Submit(ctx, c.req); !errors.Is(err, c.want) {
			t.Errorf("case %d: got %v, want %v", i, err, c.want)
		}
	}
	// A request that fits still runs.
	st, err := e.Submit(ctx, Request{Prompt: make([]int32, 40), MaxTokens: 4})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, st, 1)
}

func TestPriorityOrder(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	// One sequence at a time, so admission order is observable.
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 1, KVType: tensor.F16}, Config{MaxRunning: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx := context.Background()
	block, _ := e.Submit(ctx, Request{Prompt: []int32{5, 6, 7}, MaxTokens: 30, IgnoreEOS: true})
	var streams []*Stream
	for i, prio := range []int{0, 5, 1, 5} {
		st, err := e.Submit(ctx, Request{Prompt: []int32{5, 6, int32(10 + i)}, MaxTokens: 1, Priority: prio})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	collect(t, block, 1)
	for _, st := range streams {
		collect(t, st, 1)
	}
	order := []int{0, 1, 2, 3}
	slices.SortFunc(order, func(a, b int) int { return streams[a].admitted.Compare(streams[b].admitted) })
	if !slices.Equal(order, []int{1, 3, 2, 0}) {
		t.Fatalf("admission order %v, want priority then FCFS: [1 3 2 0]", order)
	}
}

// TestConcurrentSharedPrefixComputedOnce submits requests sharing a long
// prefix all at once: the first computes the prefix, the others wait for its
// blocks instead of computing them again.
func TestConcurrentSharedPrefixComputedOnce(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	shared := randomPrompts(8, 1, 64, 64, m.Config.Vocab, nil)[0]
	prompts := randomPrompts(9, 8, 70, 80, m.Config.Vocab, shared)
	var streams []*Stream
	for _, p := range prompts {
		st, err := e.Submit(context.Background(), Request{Prompt: p, MaxTokens: 1})
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, st)
	}
	cached := 0
	for _, st := range streams {
		collect(t, st, 1)
		cached += st.Usage().CachedTokens
	}
	if want := 7 * 64; cached != want {
		t.Fatalf("%d prompt tokens served from cache, want %d (the shared prefix computed once)", cached, want)
	}
}

// allowOnly is a LogitsProcessor that permits a fixed token sequence.
type allowOnly struct {
	seq []int32
	pos int
}

func (a *allowOnly) Process(logits []float32) {
	want := a.seq[min(a.pos, len(a.seq)-1)]
	for i := range logits {
		if int32(i) != want {
			logits[i] = float32(math.Inf(-1))
		}
	}
}

func (a *allowOnly) Accept(tok int32) { a.pos++ }

func TestLogitsProcessorConstrainsEachSample(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	forced := [][]int32{{10, 11, 12}, {20, 21, 22}}
	next := 0
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 1, KVType: tensor.F16}, Config{
		Constraints: testCompiler{"forced": func() LogitsProcessor { next++; return &allowOnly{seq: forced[next-1]} }}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st, err := e.Submit(context.Background(), Request{Prompt: []int32{5, 6, 7}, MaxTokens: 3, N: 2,
		Sampling:   sample.Params{Temperature: 1, Seed: 3},
		Constraint: &Constraint{Kind: "forced"}})
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := collect(t, st, 2)
	for i := range forced {
		if !slices.Equal(toks[i], forced[i]) {
			t.Fatalf("sample %d: %v, want %v", i, toks[i], forced[i])
		}
	}
}

// fixedLogits is a LogitsProcessor that replaces the model's logits with
// the same small scores at every step: 0 everywhere but the listed tokens.
type fixedLogits map[int32]float32

func (f fixedLogits) Process(logits []float32) {
	for i := range logits {
		logits[i] = f[int32(i)]
	}
}

func (fixedLogits) Accept(int32) {}

// TestPenaltiesSeePromptOrOutput checks the history the engine gives the
// sampler: the repetition penalty covers the prompt, presence and
// frequency penalties only the generated tokens.
func TestPenaltiesSeePromptOrOutput(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	// Token 5 is in the prompt and scores best, then 9, then 11.
	scores := fixedLogits{5: 3, 9: 2, 11: 1}
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 1, KVType: tensor.F16}, Config{
		Constraints: testCompiler{"scores": func() LogitsProcessor { return scores }}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tests := []struct {
		name string
		p    sample.Params
		want []int32
	}{
		{"no penalty", sample.Params{}, []int32{5, 5}},
		{"repetition penalty sees the prompt", sample.Params{RepeatPenalty: 2}, []int32{9, 5}},
		{"presence penalty ignores the prompt", sample.Params{PresencePenalty: 2}, []int32{5, 9}},
		{"frequency penalty ignores the prompt", sample.Params{FrequencyPenalty: 1.5}, []int32{5, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := e.Submit(context.Background(), Request{Prompt: []int32{4, 5, 6}, MaxTokens: 2, IgnoreEOS: true,
				Sampling: tt.p, Constraint: &Constraint{Kind: "scores"}})
			if err != nil {
				t.Fatal(err)
			}
			if toks, _ := collect(t, st, 1); !slices.Equal(toks[0], tt.want) {
				t.Fatalf("tokens %v, want %v", toks[0], tt.want)
			}
		})
	}
}

// TestCloseFailsEverySubmission submits from many goroutines while the
// engine closes: every request that Submit accepted must end (with an error
// or normally), none may hang.
func TestCloseFailsEverySubmission(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	for round := 0; round < 5; round++ {
		e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 1, KVType: tensor.F16}, Config{})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				st, err := e.Submit(context.Background(), Request{Prompt: []int32{5, 6, 7}, MaxTokens: 50, IgnoreEOS: true})
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("Submit: %v", err)
					}
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				var buf []Output
				for {
					buf, err = st.Recv(ctx, buf[:0])
					if errors.Is(err, ErrDone) {
						return
					}
					if err != nil {
						t.Errorf("stream did not end after Close: %v", err)
						return
					}
				}
			}()
		}
		time.Sleep(time.Duration(round) * time.Millisecond)
		e.Close()
		wg.Wait()
	}
}

// TestRetentionClassesRecorded: the pool records each block's retention
// class from the request's segments (raised to the class of any later
// block, since blocks are reused only as prefixes), and a later request
// that shares the blocks with a higher class raises them.
func TestRetentionClassesRecorded(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16}, Config{BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompt := randomPrompts(5, 1, 80, 80, m.Config.Vocab, nil)[0]
	run := func(segs []Segment, hints Hints) [NumRetention]int {
		t.Helper()
		// 8 generated tokens: 87 positions computed, 5 full blocks.
		st, err := e.Submit(context.Background(), Request{Prompt: prompt, MaxTokens: 8, IgnoreEOS: true, Segments: segs, Hints: hints})
		if err != nil {
			t.Fatal(err)
		}
		collect(t, st, 1)
		if err := e.KV().CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		var got [NumRetention]int
		byClass := e.KV().Stats().ByClass
		copy(got[:], byClass[:NumRetention])
		return got
	}
	// Blocks 0-1 persistent, 2 session, 3-4 ephemeral: the ephemeral ones
	// (and anything after them) are freed when the request ends, never
	// cached.
	got := run([]Segment{{0, 32, RetentionPersistent}, {32, 48, RetentionSession}, {48, 80, RetentionEphemeral}}, Hints{})
	if want := [NumRetention]int{RetentionSession: 1, RetentionPersistent: 2}; got != want {
		t.Fatalf("blocks by class %v, want %v", got, want)
	}
	// A session tail after persistent blocks lifts nothing above it, but an
	// ephemeral block followed by a persistent one is kept as persistent.
	e.KV().Clear()
	got = run([]Segment{{0, 16, RetentionEphemeral}, {16, 80, RetentionPersistent}}, Hints{Retention: RetentionEphemeral})
	if want := [NumRetention]int{RetentionPersistent: 5}; got != want {
		t.Fatalf("blocks by class %v, want %v", got, want)
	}
	// The same prompt pinned: every shared block rises to pinned.
	got = run([]Segment{{0, 80, RetentionPinned}}, Hints{})
	if want := [NumRetention]int{RetentionPinned: 5}; got != want {
		t.Fatalf("after a pinned request: blocks by class %v, want %v", got, want)
	}
	// Unsegmented tokens take the hint.
	e.KV().Clear()
	if got = run(nil, Hints{Retention: RetentionPersistent}); got != [NumRetention]int{RetentionPersistent: 5} {
		t.Fatalf("hinted request: blocks by class %v", got)
	}
}

// TestSamplingIndependentOfBatch checks that seeded sampling gives each
// request the same tokens whether it runs alone (its draws made one at a
// time on the engine's thread) or among others (draws split over the
// compute pool), and that samples ending at different steps all finish.
func TestSamplingIndependentOfBatch(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	prompts := randomPrompts(11, 6, 20, 50, m.Config.Vocab, nil)
	req := func(i int) Request {
		return Request{Prompt: prompts[i], MaxTokens: 6 + 2*i, IgnoreEOS: true,
			Sampling: sample.Params{Temperature: 0.9, TopP: 0.95, TopK: 40, Seed: uint64(100 + i)}}
	}
	alone := make([][]int32, len(prompts))
	for i := range prompts {
		st, err := e.Submit(context.Background(), req(i))
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := collect(t, st, 1)
		alone[i] = toks[0]
	}
	streams := make([]*Stream, len(prompts))
	for i := range prompts {
		if streams[i], err = e.Submit(context.Background(), req(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, st := range streams {
		toks, fins := collect(t, st, 1)
		if fins[0] != FinishLength || len(toks[0]) != 6+2*i {
			t.Fatalf("request %d: %d tokens, finish %v", i, len(toks[0]), fins[0])
		}
		if !slices.Equal(toks[0], alone[i]) {
			t.Fatalf("request %d: %v together, %v alone", i, toks[0], alone[i])
		}
	}
}

// maskAll is a LogitsProcessor that leaves no token possible.
type maskAll struct{}

func (maskAll) Process(logits []float32) {
	for i := range logits {
		logits[i] = float32(math.Inf(-1))
	}
}
func (maskAll) Accept(int32) {}

// TestNoUsableLogitsEndsWithError checks that a sample whose logits hold
// no number above -Inf (as a broken model's NaNs would) ends with an error
// instead of bringing the engine down, and that the engine serves on.
func TestNoUsableLogitsEndsWithError(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 1, KVType: tensor.F16}, Config{
		Constraints: testCompiler{"mask all": func() LogitsProcessor { return maskAll{} }}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	st, err := e.Submit(context.Background(), Request{Prompt: []int32{5, 6, 7}, MaxTokens: 3,
		Constraint: &Constraint{Kind: "mask all"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var outs []Output
	for {
		var err error
		outs, err = st.Recv(ctx, outs)
		if errors.Is(err, ErrDone) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(outs) != 1 || outs[0].Finish != FinishError || !errors.Is(outs[0].Err, errNoLogits) || outs[0].Token != -1 {
		t.Fatalf("outputs %+v, want one error finish", outs)
	}
	st2, err := e.Submit(context.Background(), Request{Prompt: []int32{5, 6, 7}, MaxTokens: 2, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if toks, _ := collect(t, st2, 1); len(toks[0]) != 2 {
		t.Fatalf("next request got %d tokens, want 2", len(toks[0]))
	}
}

// TestStreamDrained: a stream's drained signal closes when its reader has
// taken the last output of every sample, not before.
func TestStreamDrained(t *testing.T) {
	st := newStream(context.Background(), 2, realClock{})
	isClosed := func() bool {
		select {
		case <-st.drained:
			return true
		default:
			return false
		}
	}
	ctx := context.Background()
	st.push(Output{Index: 0, Token: 7})
	st.push(Output{Index: 0, Token: -1, Finish: FinishLength})
	if _, err := st.Recv(ctx, nil); err != nil || isClosed() {
		t.Fatalf("after sample 0 ended: err %v, drained %v", err, isClosed())
	}
	st.push(Output{Index: 1, Token: -1, Finish: FinishStop})
	if isClosed() {
		t.Fatal("drained before the reader took the last output")
	}
	if outs, err := st.Recv(ctx, nil); err != nil || len(outs) != 1 || !isClosed() {
		t.Fatalf("reading the last output: %v, err %v, drained %v", outs, err, isClosed())
	}
	if _, err := st.Recv(ctx, nil); !errors.Is(err, ErrDone) {
		t.Fatalf("after the end: err %v, want ErrDone", err)
	}
}

// TestHandOffBounded: the loop's wait for the readers of ended streams is
// bounded, so a stream nobody reads does not hold up the requests after it.
func TestHandOffBounded(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 1, KVType: tensor.F16}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for i := range 3 {
		// Never read: its reader went away.
		if _, err := e.Submit(context.Background(), Request{Prompt: []int32{5, 6, int32(7 + i)}, MaxTokens: 1, IgnoreEOS: true}); err != nil {
			t.Fatal(err)
		}
	}
	st, err := e.Submit(context.Background(), Request{Prompt: []int32{5, 6, 7}, MaxTokens: 4, IgnoreEOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if toks, _ := collect(t, st, 1); len(toks[0]) != 4 {
		t.Fatalf("got %d tokens, want 4", len(toks[0]))
	}
}
