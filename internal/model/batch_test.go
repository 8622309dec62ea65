package model_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/testshared"
)

// TestBatchInvariance checks that a sequence's logits do not depend on what
// else is in its batch or on how its prompt is chunked: the same tokens give
// bit-identical logits alone, batched with other sequences (mixing prefill
// and decode), and prefilled in chunks of any size. This is what makes
// prefix caching, chunked prefill and continuous batching exact.
func TestBatchInvariance(t *testing.T) {
	for _, name := range []string{"tiny-f32", "tiny-q8_0", "tiny-q4_k_m", "tiny-qwen2-q8_0", "tiny-bf16", "tiny-q5_0", "tiny-q5_k_m", "tiny-q4_1", "tiny-q5_1", "tiny-iq4_nl", "tiny-q3_k_m", "tiny-q2_k", "tiny-iq4_xs"} {
		t.Run(name, func(t *testing.T) {
			m, closeFn := loadModel(t, modelPath(t, name))
			defer closeFn()
			for _, threads := range []int{1, 2} {
				pool := tensor.NewPool(threads)
				checkBatchInvariance(t, m, pool, tensor.F16)
				pool.Close()
			}
		})
	}
}

// TestBatchInvarianceKVTypes is TestBatchInvariance with keys and values
// stored as Q8_0 and as f32: their attention takes other kernels (and, for
// Q8_0, a query head or a group of tokens and KV head per task).
func TestBatchInvarianceKVTypes(t *testing.T) {
	m, closeFn := loadModel(t, filepath.Join(testshared.Dir(t), "models", "tiny-q8_0.gguf"))
	defer closeFn()
	for _, kvType := range []tensor.DType{tensor.Q8_0, tensor.F32} {
		for _, threads := range []int{1, 2} {
			pool := tensor.NewPool(threads)
			checkBatchInvariance(t, m, pool, kvType)
			pool.Close()
		}
	}
}

func checkBatchInvariance(t *testing.T, m *model.Model, pool *tensor.Pool, kvType tensor.DType) {
	ctx := context.Background()
	cfg := &m.Config
	rng := rand.New(rand.NewPCG(7, 7))
	prompts := make([][]int32, 4)
	for i := range prompts {
		prompts[i] = make([]int32, 5+rng.IntN(60))
		for j := range prompts[i] {
			prompts[i][j] = int32(3 + rng.IntN(cfg.Vocab-3))
		}
	}
	r, err := model.NewRunner(m, pool, 256, kvType)
	if err != nil {
		t.Fatal(err)
	}
	newCache := func() *model.SeqCache {
		c := model.NewSeqCache(cfg, kvType, 16)
		c.Reserve(128)
		return c
	}

	// Reference: each prompt alone in one pass.
	want := make([][]float32, len(prompts))
	for i, p := range prompts {
		want[i] = make([]float32, cfg.Vocab)
		if err := r.Forward(ctx, []model.Seq{{Cache: newCache(), Tokens: p, Logits: want[i]}}); err != nil {
			t.Fatal(err)
		}
	}

	// Everything below passes over at most two shared blocks at a time
	// (the default is more than these contexts hold): the logits must not
	// depend on how the blocks are taken either.
	model.SetSharedWindowRows(r, 32)

	// Chunked: every chunk size from 1 to 17.
	got := make([]float32, cfg.Vocab)
	for chunk := 1; chunk <= 17; chunk += 4 {
		for i, p := range prompts {
			cache := newCache()
			for pos := 0; pos < len(p); pos += chunk {
				end := min(pos+chunk, len(p))
				seq := model.Seq{Cache: cache, Pos: pos, Tokens: p[pos:end]}
				if end == len(p) {
					seq.Logits = got
				}
				if err := r.Forward(ctx, []model.Seq{seq}); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got, want[i]) {
				t.Fatalf("prompt %d prefilled in chunks of %d: logits differ from one pass", i, chunk)
			}
		}
	}

	// Batched: all prompts in one pass, and a mixed pass where two sequences
	// decode one token while the others prefill.
	batch := make([]model.Seq, len(prompts))
	outs := make([][]float32, len(prompts))
	for i, p := range prompts {
		outs[i] = make([]float32, cfg.Vocab)
		batch[i] = model.Seq{Cache: newCache(), Tokens: p, Logits: outs[i]}
	}
	if err := r.Forward(ctx, batch); err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if !slices.Equal(outs[i], want[i]) {
			t.Fatalf("prompt %d batched with %d others: logits differ from alone", i, len(prompts)-1)
		}
	}
	mixed := make([]model.Seq, len(prompts))
	for i, p := range prompts {
		cache := newCache()
		if i < 2 { // prefill all but the last token first, then decode it in the mixed batch
			if err := r.Forward(ctx, []model.Seq{{Cache: cache, Tokens: p[:len(p)-1]}}); err != nil {
				t.Fatal(err)
			}
			mixed[i] = model.Seq{Cache: cache, Pos: len(p) - 1, Tokens: p[len(p)-1:], Logits: outs[i]}
		} else {
			mixed[i] = model.Seq{Cache: cache, Tokens: p, Logits: outs[i]}
		}
	}
	if err := r.Forward(ctx, mixed); err != nil {
		t.Fatal(err)
	}
	for i := range prompts {
		if !slices.Equal(outs[i], want[i]) {
			t.Fatalf("prompt %d in a mixed prefill/decode batch: logits differ from alone", i)
		}
	}

	// Decode: one token per sequence, every prompt twice (enough sequences
	// for attention a token per task, which runs inside the output
	// projection's job).
	decode := make([]model.Seq, 2*len(prompts))
	douts := make([][]float32, len(decode))
	for i := range decode {
		p := prompts[i%len(prompts)]
		cache := newCache()
		if err := r.Forward(ctx, []model.Seq{{Cache: cache, Tokens: p[:len(p)-1]}}); err != nil {
			t.Fatal(err)
		}
		douts[i] = make([]float32, cfg.Vocab)
		decode[i] = model.Seq{Cache: cache, Pos: len(p) - 1, Tokens: p[len(p)-1:], Logits: douts[i]}
	}
	if err := r.Forward(ctx, decode); err != nil {
		t.Fatal(err)
	}
	for i := range decode {
		if !slices.Equal(douts[i], want[i%len(prompts)]) {
			t.Fatalf("sequence %d (prompt %d) in a decode batch of %d: logits differ from alone", i, i%len(prompts), len(decode))
		}
	}
}

// forkCache is a sequence's cache whose first blocks are another cache's
// (the same memory, as the engine's pool hands out a cached prefix) and
// whose later blocks are its own.
type forkCache struct {
	base   model.Cache
	shared int // blocks taken from base
	own    *model.SeqCache
}

func (c *forkCache) BlockSize() int { return c.own.BlockSize() }

func (c *forkCache) Block(l, b int) (k, v []byte) {
	if b < c.shared {
		return c.base.Block(l, b)
	}
	return c.own.Block(l, b)
}

// TestSharedPrefixAttention decodes, in one pass, sequences whose caches
// share leading blocks (attention then reads each shared block once for
// several tokens): every sequence's logits must equal its logits computed
// alone with a cache of its own, bit for bit. The batch mixes sequences
// sharing three blocks, sequences sharing only the first of them, one with
// a different prefix and one shorter than a block.
func TestSharedPrefixAttention(t *testing.T) {
	m, closeFn := loadModel(t, filepath.Join(testshared.Dir(t), "models", "tiny-q8_0.gguf"))
	defer closeFn()
	cfg := &m.Config
	const bs = 16
	rng := rand.New(rand.NewPCG(9, 9))
	randTokens := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(3 + rng.IntN(cfg.Vocab-3))
		}
		return p
	}
	ctx := context.Background()
	for _, threads := range []int{1, 2} {
		pool := tensor.NewPool(threads)
		r, err := model.NewRunner(m, pool, 256, tensor.F16)
		if err != nil {
			t.Fatal(err)
		}
		newCache := func() *model.SeqCache {
			c := model.NewSeqCache(cfg, tensor.F16, bs)
			c.Reserve(128)
			return c
		}
		prefill := func(c model.Cache, pos int, tokens []int32) {
			t.Helper()
			if err := r.Forward(ctx, []model.Seq{{Cache: c, Pos: pos, Tokens: tokens}}); err != nil {
				t.Fatal(err)
			}
		}
		// Two prefixes sharing their first block: 3 full blocks + 5.
		prefixA := randTokens(3*bs + 5)
		prefixB := append(slices.Clone(prefixA[:bs]), randTokens(2*bs+5)...)
		baseA, baseB := newCache(), newCache()
		prefill(baseA, 0, prefixA)
		prefill(baseB, 0, prefixB)

		type seqSpec struct {
			prompt []int32
			cache  model.Cache
		}
		var specs []seqSpec
		// fork shares base's first shared blocks and copies the rest of
		// the prefix (the partly filled block) into its own blocks, as
		// copy-on-write does.
		fork := func(base *model.SeqCache, prefix []int32, shared int) {
			own := newCache()
			for l := range cfg.Layers {
				for b := shared; b*bs < len(prefix); b++ {
					k, v := base.Block(l, b)
					ok, ov := own.Block(l, b)
					copy(ok, k)
					copy(ov, v)
				}
			}
			c := &forkCache{base: base, shared: shared, own: own}
			suffix := randTokens(1 + rng.IntN(20))
			prefill(c, len(prefix), suffix)
			specs = append(specs, seqSpec{prompt: append(slices.Clone(prefix), suffix...), cache: c})
		}
		for range 5 {
			fork(baseA, prefixA, 3)
		}
		for range 3 {
			fork(baseB, prefixB, 1) // shares only block 0 with baseA's forks
		}
		for _, n := range []int{40, 9} { // nothing shared; shorter than a block
			c := newCache()
			p := randTokens(n)
			prefill(c, 0, p)
			specs = append(specs, seqSpec{prompt: p, cache: c})
		}
		next := randTokens(len(specs))
		want := make([][]float32, len(specs))
		for i, s := range specs {
			want[i] = make([]float32, cfg.Vocab)
			seq := model.Seq{Cache: newCache(), Tokens: append(slices.Clone(s.prompt), next[i]), Logits: want[i]}
			if err := r.Forward(ctx, []model.Seq{seq}); err != nil {
				t.Fatal(err)
			}
		}
		// Decode one token for several of them in one pass: all ten
		// (attention a token range per task), and fewer (a group and KV
		// head per task, or a range for one thread).
		all := rng.Perm(len(specs))
		picks := [][]int{all, {0, 1, 2, 5}, {3, 4, 1}, {5, 6, 0, 8, 9}}
		// Then again with the groups' scores limited to about two tokens'
		// (all query heads, then one KV head's), so that groups split, and
		// with the shared blocks passed over two at a time (windows cut
		// short by the shared blocks' end).
		for round, pick := range slices.Concat(picks, picks, picks, picks) {
			switch round {
			case len(picks):
				model.SetGroupScoreLimit(r, 2*cfg.Heads*(4*bs+20))
			case 2 * len(picks):
				model.SetGroupScoreLimit(r, 2*cfg.Heads/cfg.KVHeads*(4*bs+20))
			case 3 * len(picks):
				model.SetGroupScoreLimit(r, 1<<20)
				model.SetSharedWindowRows(r, 2*bs)
			}
			batch := make([]model.Seq, len(pick))
			got := make([][]float32, len(pick))
			for j, i := range pick {
				got[j] = make([]float32, cfg.Vocab)
				batch[j] = model.Seq{Cache: specs[i].cache, Pos: len(specs[i].prompt), Tokens: next[i : i+1], Logits: got[j]}
			}
			if err := r.Forward(ctx, batch); err != nil {
				t.Fatal(err)
			}
			for j, i := range pick {
				if !slices.Equal(got[j], want[i]) {
					t.Fatalf("threads %d, round %d: sequence %d (%d tokens) decoded beside %d sequences, some sharing its blocks: logits differ from alone", threads, round, i, len(specs[i].prompt)+1, len(pick)-1)
				}
			}
		}
		pool.Close()
	}
}
