package model_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// TestBatchInvariance checks that a sequence's logits do not depend on what
// else is in its batch or on how its prompt is chunked: the same tokens give
// bit-identical logits alone, batched with other sequences (mixing prefill
// and decode), and prefilled in chunks of any size. This is what makes
// prefix caching, chunked prefill and continuous batching exact.
func TestBatchInvariance(t *testing.T) {
	shared := sharedDir(t)
	for _, name := range []string{"tiny-f32", "tiny-q8_0", "tiny-q4_k_m", "tiny-qwen2-q8_0", "tiny-bf16"} {
		t.Run(name, func(t *testing.T) {
			m, closeFn := loadModel(t, filepath.Join(shared, "models", name+".gguf"))
			defer closeFn()
			for _, threads := range []int{1, 2} {
				pool := tensor.NewPool(threads)
				checkBatchInvariance(t, m, pool)
				pool.Close()
			}
		})
	}
}

func checkBatchInvariance(t *testing.T, m *model.Model, pool *tensor.Pool) {
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
	r, err := model.NewRunner(m, pool, 256, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	newCache := func() *model.SeqCache {
		c := model.NewSeqCache(cfg, tensor.F16, 16)
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
