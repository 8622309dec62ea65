package enginebench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// SpeedOptions configure a raw forward-pass speed run, the counterpart of
// llama.cpp's llama-bench: pp = prefill of Prompt tokens in one pass, tg =
// Generate tokens decoded one at a time, both after Depth tokens already in
// the cache (llama-bench's -d; 0: from an empty context).
type SpeedOptions struct {
	Prompt, Generate int // default 512 and 128
	Depth            int
	Threads          int
	Repetitions      int // default 3
	// BlockSize is the KV cache's block in tokens (default 256, which
	// llama.cpp's comparisons use; the server's pool defaults to 16, and
	// attention over a long context costs per block).
	BlockSize int
	// Bandwidth also measures memory bandwidth and the decode limit it sets.
	Bandwidth bool
}

// SpeedResult is tokens per second, mean and standard deviation over the
// repetitions.
type SpeedResult struct {
	PromptTokens   int     `json:"prompt_tokens"`
	Depth          int     `json:"depth,omitempty"`
	PrefillTokS    float64 `json:"prefill_tok_s"`
	PrefillStd     float64 `json:"prefill_std"`
	GenerateTokens int     `json:"generate_tokens"`
	DecodeTokS     float64 `json:"decode_tok_s"`
	DecodeStd      float64 `json:"decode_std"`
	Threads        int     `json:"threads"`
	WeightBytes    int64   `json:"weight_bytes"`
	DecodeGBPerSec float64 `json:"decode_weight_gb_s"` // weight bytes read per second while decoding
	// MemoryGBPerSec is the machine's copy bandwidth with the same threads,
	// measured in the same run; DecodeLimitTokS = it ÷ weight bytes per token.
	MemoryGBPerSec  float64 `json:"memory_gb_s,omitempty"`
	DecodeLimitTokS float64 `json:"decode_limit_tok_s,omitempty"`
}

// Speed measures prefill and decode speed of m.
func Speed(ctx context.Context, m *model.Model, o SpeedOptions) (SpeedResult, error) {
	if o.Prompt <= 0 {
		o.Prompt = 512
	}
	if o.Generate <= 0 {
		o.Generate = 128
	}
	if o.Repetitions <= 0 {
		o.Repetitions = 3
	}
	if o.BlockSize <= 0 {
		o.BlockSize = 256
	}
	if o.Depth < 0 {
		return SpeedResult{}, fmt.Errorf("enginebench: depth %d is negative", o.Depth)
	}
	// Without a depth the lengths stay unchecked, as before (and as
	// llama-bench leaves them): a speed run may pass the trained context.
	if need := o.Depth + max(o.Prompt, o.Generate); o.Depth > 0 && need > m.Config.Context {
		return SpeedResult{}, fmt.Errorf("enginebench: depth %d + %d tokens exceed the model's %d-token context", o.Depth, max(o.Prompt, o.Generate), m.Config.Context)
	}
	pool := tensor.NewPool(o.Threads)
	defer pool.Close()
	const depthChunk = 512 // the depth is prefilled in passes of at most this many tokens
	r, err := model.NewRunner(m, pool, max(o.Prompt, min(o.Depth, depthChunk)), tensor.F16)
	if err != nil {
		return SpeedResult{}, err
	}
	rng := rand.New(rand.NewPCG(1, 1))
	prompt := tokens(rng, m, o.Prompt)
	logits := make([]float32, m.Config.Vocab)
	// One cache for every run: positions below the depth are written once;
	// pp and tg rewrite the positions from the depth on (a pass attends only
	// to positions up to its own, so what a previous run left there is never
	// read).
	cache := model.NewSeqCache(&m.Config, tensor.F16, o.BlockSize)
	cache.Reserve(o.Depth + max(o.Prompt, o.Generate+1))
	history := tokens(rng, m, o.Depth)
	for pos := 0; pos < o.Depth; pos += depthChunk {
		end := min(pos+depthChunk, o.Depth)
		if err := r.Forward(ctx, []model.Seq{{Cache: cache, Pos: pos, Tokens: history[pos:end]}}); err != nil {
			return SpeedResult{}, err
		}
	}
	var pp, tg []float64
	// One unmeasured warm-up run pages the weights in and sizes buffers.
	for rep := -1; rep < o.Repetitions; rep++ {
		start := time.Now()
		if err := r.Forward(ctx, []model.Seq{{Cache: cache, Pos: o.Depth, Tokens: prompt, Logits: logits}}); err != nil {
			return SpeedResult{}, err
		}
		ppTime := time.Since(start)
		// Decode like llama-bench's tg: one token per pass, from the depth.
		start = time.Now()
		tok := prompt[0]
		for i := 0; i < o.Generate; i++ {
			if err := r.Forward(ctx, []model.Seq{{Cache: cache, Pos: o.Depth + i, Tokens: []int32{tok}, Logits: logits}}); err != nil {
				return SpeedResult{}, err
			}
			tok = prompt[(i+1)%len(prompt)]
		}
		tgTime := time.Since(start)
		if rep >= 0 {
			pp = append(pp, float64(o.Prompt)/ppTime.Seconds())
			tg = append(tg, float64(o.Generate)/tgTime.Seconds())
		}
	}
	res := SpeedResult{PromptTokens: o.Prompt, Depth: o.Depth, GenerateTokens: o.Generate, Threads: pool.Threads(), WeightBytes: m.WeightBytes}
	res.PrefillTokS, res.PrefillStd = meanStd(pp)
	res.DecodeTokS, res.DecodeStd = meanStd(tg)
	res.PrefillTokS, res.PrefillStd = round(res.PrefillTokS, 1), round(res.PrefillStd, 1)
	res.DecodeTokS, res.DecodeStd = round(res.DecodeTokS, 1), round(res.DecodeStd, 1)
	res.DecodeGBPerSec = round(res.DecodeTokS*float64(m.DecodeBytes())/1e9, 2)
	if o.Bandwidth {
		res.MemoryGBPerSec = round(MemoryBandwidth(pool.Threads()), 1)
		res.DecodeLimitTokS = round(res.MemoryGBPerSec*1e9/float64(m.DecodeBytes()), 1)
	}
	return res, nil
}

func meanStd(xs []float64) (float64, float64) {
	var s float64
	for _, x := range xs {
		s += x
	}
	mean := s / float64(len(xs))
	var v float64
	for _, x := range xs {
		v += (x - mean) * (x - mean)
	}
	if len(xs) > 1 {
		v /= float64(len(xs) - 1)
	}
	return mean, math.Sqrt(v)
}
