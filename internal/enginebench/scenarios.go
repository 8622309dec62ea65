package enginebench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/model"
)

func needContext(m *model.Model, n int) error {
	if m.Config.Context < n {
		return fmt.Errorf("enginebench: scenario needs a context of %d tokens, the model has %d", n, m.Config.Context)
	}
	return nil
}

func concat(a, b []int32) []int32 { return append(slices.Clone(a), b...) }

// prefixTTFT: a 2,000-token prefix plus 64 new tokens, cold vs with the
// prefix cached.
func prefixTTFT(ctx context.Context, m *model.Model, o Options) (Result, error) {
	if err := needContext(m, 2100); err != nil {
		return nil, err
	}
	e, err := newEngine(m, o, engine.Config{})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	prefix := tokens(rng, m, 2000)
	o.logf("prefix-ttft: cold")
	cold, err := run(ctx, e.Engine, engine.Request{Prompt: concat(prefix, tokens(rng, m, 64)), MaxTokens: 1, Scope: "cold"}, 0)
	if err != nil {
		return nil, err
	}
	o.logf("prefix-ttft: caching the prefix")
	if _, err := run(ctx, e.Engine, engine.Request{Prompt: prefix, MaxTokens: 1, Scope: "warm"}, 0); err != nil {
		return nil, err
	}
	o.logf("prefix-ttft: warm")
	warm, err := run(ctx, e.Engine, engine.Request{Prompt: concat(prefix, tokens(rng, m, 64)), MaxTokens: 1, Scope: "warm"}, 0)
	if err != nil {
		return nil, err
	}
	return Result{
		"cold_ttft_ms":  round(ms(cold.ttft), 1),
		"warm_ttft_ms":  round(ms(warm.ttft), 1),
		"ratio":         round(ms(warm.ttft)/ms(cold.ttft), 4),
		"cached_tokens": warm.usage.CachedTokens,
	}, nil
}

// interleaved: prompt A, then a different prompt B of the same length, then
// A + 64 new tokens. A per-slot cache (llama.cpp's server with one slot)
// has lost A by then; a shared block pool still holds it.
func interleaved(ctx context.Context, m *model.Model, o Options) (Result, error) {
	if err := needContext(m, 2100); err != nil {
		return nil, err
	}
	e, err := newEngine(m, o, engine.Config{})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(2, 2))
	a, b := tokens(rng, m, 2000), tokens(rng, m, 2000)
	o.logf("interleaved: A")
	first, err := run(ctx, e.Engine, engine.Request{Prompt: a, MaxTokens: 1}, 0)
	if err != nil {
		return nil, err
	}
	o.logf("interleaved: B")
	if _, err := run(ctx, e.Engine, engine.Request{Prompt: b, MaxTokens: 1}, 0); err != nil {
		return nil, err
	}
	o.logf("interleaved: A + 64")
	again, err := run(ctx, e.Engine, engine.Request{Prompt: concat(a, tokens(rng, m, 64)), MaxTokens: 1}, 0)
	if err != nil {
		return nil, err
	}
	return Result{
		"cold_ttft_ms":    round(ms(first.ttft), 1),
		"a_again_ttft_ms": round(ms(again.ttft), 1),
		"ratio":           round(ms(again.ttft)/ms(first.ttft), 4),
		"cached_tokens":   again.usage.CachedTokens,
	}, nil
}

// mixedWorkload is requests with mixed prompt and output lengths. Every
// request declares maxDeclared output tokens (as clients do: an upper
// bound) but stops after its actual length, as if the model ended there.
func mixedWorkload(m *model.Model, n, promptMin, promptMax, outMin, outMax, maxDeclared int, seed uint64) ([]engine.Request, []int) {
	rng := rand.New(rand.NewPCG(seed, 3))
	reqs := make([]engine.Request, n)
	stops := make([]int, n)
	for i := range reqs {
		reqs[i] = engine.Request{
			Prompt:    tokens(rng, m, promptMin+rng.IntN(promptMax-promptMin+1)),
			MaxTokens: maxDeclared,
			IgnoreEOS: true,
		}
		stops[i] = outMin + rng.IntN(outMax-outMin+1)
	}
	return reqs, stops
}

// waste: fraction of allocated KV slots not holding a token, averaged over
// the steps of a mixed-length workload, paged vs contiguous.
func waste(ctx context.Context, m *model.Model, o Options) (Result, error) {
	if err := needContext(m, 1100); err != nil {
		return nil, err
	}
	reqs, stops := mixedWorkload(m, o.scaled(48), 32, 512, 16, 256, 512, 4)
	res := Result{}
	for _, mode := range []struct {
		name       string
		contiguous bool
	}{{"paged", false}, {"contiguous", true}} {
		e, err := newEngine(m, o, engine.Config{Contiguous: mode.contiguous})
		if err != nil {
			return nil, err
		}
		o.logf("waste: %s", mode.name)
		_, err = runAll(ctx, e.Engine, reqs, stops, 16)
		st := e.Now()
		e.Close()
		if err != nil {
			return nil, err
		}
		res[mode.name+"_waste"] = round(1-float64(st.UsedSlots)/float64(st.AllocatedSlots), 4)
	}
	return res, nil
}

// concurrency: with the same KV budget, how many sequences run at once and
// how many tokens per second come out, paged vs contiguous.
func concurrency(ctx context.Context, m *model.Model, o Options) (Result, error) {
	if err := needContext(m, 800); err != nil {
		return nil, err
	}
	const budgetTokens = 4096
	kvBytes := int64(budgetTokens * m.Config.KVBytesPerToken(2))
	reqs, stops := mixedWorkload(m, o.scaled(64), 64, 256, 32, 192, 512, 5)
	res := Result{"kv_budget_tokens": budgetTokens}
	for _, mode := range []struct {
		name       string
		contiguous bool
	}{{"paged", false}, {"contiguous", true}} {
		e, err := newEngine(m, o, engine.Config{Contiguous: mode.contiguous, KVMemoryBytes: kvBytes})
		if err != nil {
			return nil, err
		}
		o.logf("concurrency: %s", mode.name)
		start := time.Now()
		outs, err := runAll(ctx, e.Engine, reqs, stops, len(reqs))
		elapsed := time.Since(start)
		st := e.Now()
		e.Close()
		if err != nil {
			return nil, err
		}
		total := 0
		for _, out := range outs {
			total += out.generated
		}
		res[mode.name+"_max_seqs"] = st.PeakRunning
		res[mode.name+"_tok_s"] = round(float64(total)/elapsed.Seconds(), 1)
	}
	return res, nil
}

// batchDecode: steady-state decode throughput of 1 and of 16 concurrent
// sequences (128-token prompts, 128 generated tokens each), like
// llama-batched-bench's decode figure: tokens sampled while every sequence
// is decoding — after the last one's first token (all prefills done),
// before the first one ends — divided by that window. The two sizes run in
// alternation, batchDecodeRounds times, and each figure is the median of
// its rounds, so a machine whose speed drifts between phases moves both.
// compute_parallelism (computeParallelism, before each round) says how
// many cores' compute the threads had.
func batchDecode(ctx context.Context, m *model.Model, o Options) (Result, error) {
	if err := needContext(m, 256); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(6, 6))
	sizes := []int{1, 16}
	rates := make([][]float64, len(sizes))
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	var parallel []float64
	for round := range batchDecodeRounds {
		p, err := computeParallelism(threads)
		if err != nil {
			return nil, err
		}
		parallel = append(parallel, p)
		for i, n := range sizes {
			o.logf("batch-decode: %d (round %d of %d)", n, round+1, batchDecodeRounds)
			r, err := decodeRate(ctx, m, o, rng, n)
			if err != nil {
				return nil, err
			}
			rates[i] = append(rates[i], r)
		}
	}
	res := Result{}
	for i, n := range sizes {
		res[fmt.Sprintf("batch%d_tok_s", n)] = round(median(rates[i]), 1)
	}
	res["ratio"] = round(res["batch16_tok_s"].(float64)/res["batch1_tok_s"].(float64), 2)
	// How many cores' compute the threads had (computeParallelism), before
	// each round: on a VM it can drop to ~1 for minutes, and batch 16 with it.
	res["compute_parallelism"] = round(median(parallel), 2)
	return res, nil
}

// batchDecodeRounds is how many times batchDecode measures each size.
const batchDecodeRounds = 3

// decodeRate is one steady-state measurement of n concurrent sequences.
func decodeRate(ctx context.Context, m *model.Model, o Options, rng *rand.Rand, n int) (float64, error) {
	e, err := newEngine(m, o, engine.Config{})
	if err != nil {
		return 0, err
	}
	reqs := make([]engine.Request, n)
	for i := range reqs {
		reqs[i] = engine.Request{Prompt: tokens(rng, m, 128), MaxTokens: 128, IgnoreEOS: true}
	}
	outs, err := runAllTimed(ctx, e.Engine, reqs, nil, n, true)
	e.Close()
	if err != nil {
		return 0, err
	}
	from, to := outs[0].first, outs[0].end
	for _, out := range outs {
		if out.first.After(from) {
			from = out.first
		}
		if out.end.Before(to) {
			to = out.end
		}
	}
	count := 0
	for _, out := range outs {
		for _, at := range out.arrivals {
			if at.After(from) && !at.After(to) {
				count++
			}
		}
	}
	if !to.After(from) || count == 0 {
		return 0, fmt.Errorf("enginebench: batch-decode %d: no window where all sequences decode", n)
	}
	return float64(count) / to.Sub(from).Seconds(), nil
}

// sharedPrefix: groups of prompts sharing a 2,048-token system prompt, each
// with its own 128-token question, arriving interleaved across groups.
// ideal_hit_rate counts every shared full block as a hit except in the
// first prompt of each group.
func sharedPrefix(ctx context.Context, m *model.Model, o Options) (Result, error) {
	const system, question, perGroup = 2048, 128, 16
	if err := needContext(m, system+question+8); err != nil {
		return nil, err
	}
	groups := o.scaled(64)
	// Room for every group's prefix and the questions in flight.
	kvBytes := int64((groups*system + 64*(system+question)) * m.Config.KVBytesPerToken(2))
	e, err := newEngine(m, o, engine.Config{KVMemoryBytes: kvBytes})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	var reqs []engine.Request
	for g := 0; g < groups; g++ {
		sys := tokens(rng, m, system)
		for q := 0; q < perGroup; q++ {
			reqs = append(reqs, engine.Request{Prompt: concat(sys, tokens(rng, m, question)), MaxTokens: 1})
		}
	}
	rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	o.logf("shared-prefix: %d requests", len(reqs))
	start := time.Now()
	outs, err := runAll(ctx, e.Engine, reqs, nil, 32)
	if err != nil {
		return nil, err
	}
	var prompt, cached int
	ttfts := make([]float64, len(outs))
	for i, out := range outs {
		prompt += out.usage.PromptTokens
		cached += out.usage.CachedTokens
		ttfts[i] = ms(out.ttft)
	}
	bs := e.Config().BlockSize
	ideal := groups * (perGroup - 1) * (system / bs * bs)
	return Result{
		"requests":       len(reqs),
		"hit_rate":       round(float64(cached)/float64(prompt), 4),
		"ideal_hit_rate": round(float64(ideal)/float64(prompt), 4),
		"ttft_p50_ms":    round(median(ttfts), 1),
		"elapsed_s":      round(time.Since(start).Seconds(), 1),
	}, nil
}

// onboard: a 4,096-token prefix served from the pool (G1), from host memory
// (G2, after other traffic pushed it out of the pool), from disk (G3, the
// same without G2; and again by a new engine on the same directory, as
// after a restart), and computed from scratch: the TTFT of each, 64 new
// tokens after the prefix. The disk reads are of files the page cache may
// still hold, as they would be on a serving machine shortly after writing.

func onboard(ctx context.Context, m *model.Model, o Options) (Result, error) {
	const prefixLen, suffixLen = 4096, 64
	if err := needContext(m, prefixLen+2*suffixLen); err != nil {
		return nil, err
	}
	perToken := int64(m.Config.KVBytesPerToken(2)) // f16
	// The pool holds one prefix and a little more: the next prompt pushes
	// the first one down to G2, which has room for both.
	e, err := newEngine(m, o, engine.Config{
		KVMemoryBytes:     (prefixLen + 4*suffixLen) * perToken,
		KVHostMemoryBytes: 3 * prefixLen * perToken,
	})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	rng := rand.New(rand.NewPCG(4, 4))
	prefix, other := tokens(rng, m, prefixLen), tokens(rng, m, prefixLen)
	req := func(p []int32) engine.Request {
		return engine.Request{Prompt: concat(p, tokens(rng, m, suffixLen)), MaxTokens: 1, Scope: "onboard"}
	}
	o.logf("onboard: cold (computing the prefix)")
	cold, err := run(ctx, e.Engine, req(prefix), 0)
	if err != nil {
		return nil, err
	}
	o.logf("onboard: from the pool (G1)")
	g1, err := run(ctx, e.Engine, req(prefix), 0)
	if err != nil {
		return nil, err
	}
	o.logf("onboard: another prompt pushes the prefix down to host memory (G2)")
	if _, err := run(ctx, e.Engine, req(other), 0); err != nil {
		return nil, err
	}
	before := e.KV().Stats().Host
	o.logf("onboard: from host memory (G2)")
	g2, err := run(ctx, e.Engine, req(prefix), 0)
	if err != nil {
		return nil, err
	}
	after := e.KV().Stats().Host

	dir, err := os.MkdirTemp("", "kvserve-onboard-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	diskEngine := func() (*benchEngine, error) {
		return newEngine(m, o, engine.Config{
			KVMemoryBytes: (prefixLen + 4*suffixLen) * perToken,
			KVDiskDir:     dir, KVDiskBytes: 4 * prefixLen * perToken,
		})
	}
	d, err := diskEngine()
	if err != nil {
		return nil, err
	}
	o.logf("onboard: without G2, another prompt pushes the prefix down to disk (G3)")
	var g3Read time.Duration
	g3, err := func() (outcome, error) {
		defer d.Close() // writes the pool to disk, as a server does at shutdown
		for _, p := range [][]int32{prefix, other} {
			if _, err := run(ctx, d.Engine, req(p), 0); err != nil {
				return outcome{}, err
			}
		}
		for d.KV().Stats().Disk.QueueDepth > 0 {
			time.Sleep(time.Millisecond)
		}
		o.logf("onboard: from disk (G3)")
		out, err := run(ctx, d.Engine, req(prefix), 0)
		g3Read = time.Duration(d.KV().Stats().Disk.LoadNanos)
		return out, err
	}()
	if err != nil {
		return nil, err
	}
	o.logf("onboard: from disk (G3) in a new engine, as after a restart")
	r, err := diskEngine()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	restart, err := run(ctx, r.Engine, req(prefix), 0)
	if err != nil {
		return nil, err
	}
	return Result{
		"cold_ttft_ms":          round(ms(cold.ttft), 1),
		"g1_ttft_ms":            round(ms(g1.ttft), 1),
		"g2_ttft_ms":            round(ms(g2.ttft), 1),
		"g3_ttft_ms":            round(ms(g3.ttft), 1),
		"g3_read_ms":            round(ms(g3Read), 1),
		"restart_g3_ttft_ms":    round(ms(restart.ttft), 1),
		"g1_speedup":            round(ms(cold.ttft)/ms(g1.ttft), 1),
		"g2_speedup":            round(ms(cold.ttft)/ms(g2.ttft), 1),
		"g3_speedup":            round(ms(cold.ttft)/ms(g3.ttft), 1),
		"restart_g3_speedup":    round(ms(cold.ttft)/ms(restart.ttft), 1),
		"g2_cached_tokens":      g2.usage.CachedTokens,
		"g2_onboarded_blocks":   after.Onboarded - before.Onboarded,
		"g3_cached_tokens":      g3.usage.CachedTokens,
		"restart_cached_tokens": restart.usage.CachedTokens,
	}, nil
}

// contextCache: the seed scenario — a long document cached once and many
// short questions asked of it (20,000 tokens and 200 questions of 50
// tokens; the document is shortened to what the model's context holds
// beside a question). With the cache each question computes only its own
// tokens; without it (prefix caching off) each recomputes the document, so
// a few uncached questions are timed and the rest counted.
func contextCache(ctx context.Context, m *model.Model, o Options) (Result, error) {
	const questionLen, uncachedSamples = 50, 3
	docLen := min(20000, m.Config.Context-questionLen-16)
	if docLen < 1000 {
		return nil, needContext(m, 1000+questionLen+16)
	}
	questions := o.scaled(200)
	perToken := int64(m.Config.KVBytesPerToken(2))
	// Room for the document and a few questions beside it, the pins (the
	// document) within 95% of it however long the document is.
	kvBytes := int64(docLen+docLen/16+8*questionLen+256) * perToken
	rng := rand.New(rand.NewPCG(5, 5))
	doc := tokens(rng, m, docLen)
	asks := make([][]int32, questions)
	for i := range asks {
		asks[i] = tokens(rng, m, questionLen)
	}
	cached, err := newEngine(m, o, engine.Config{KVMemoryBytes: kvBytes, MaxPinnedFraction: 0.95, MaxPinnedPerTenant: 0.95})
	if err != nil {
		return nil, err
	}
	defer cached.Close()
	o.logf("context-cache: caching a %d-token document (pinned)", docLen)
	start := time.Now()
	if _, err := run(ctx, cached.Engine, engine.Request{Prompt: doc, MaxTokens: 1, Scope: "tenant",
		Hints: engine.Hints{Retention: engine.RetentionPinned, TTL: time.Hour}}, 0); err != nil {
		return nil, err
	}
	createS := time.Since(start).Seconds()
	var ttfts []float64
	computed := 0
	o.logf("context-cache: %d questions with the cache", questions)
	for _, q := range asks {
		out, err := run(ctx, cached.Engine, engine.Request{Prompt: concat(doc, q), MaxTokens: 1, Scope: "tenant"}, 0)
		if err != nil {
			return nil, err
		}
		ttfts = append(ttfts, ms(out.ttft))
		computed += out.usage.PromptTokens - out.usage.CachedTokens
	}
	cached.Close()

	plain, err := newEngine(m, o, engine.Config{KVMemoryBytes: kvBytes, DisablePrefixCache: true})
	if err != nil {
		return nil, err
	}
	defer plain.Close()
	var cold []float64
	// Each costs about the cache's creation: one when that took minutes.
	samples := uncachedSamples
	if createS > 60 {
		samples = 1
	}
	o.logf("context-cache: %d questions without it", samples)
	for _, q := range asks[:min(samples, len(asks))] {
		out, err := run(ctx, plain.Engine, engine.Request{Prompt: concat(doc, q), MaxTokens: 1, Scope: "tenant"}, 0)
		if err != nil {
			return nil, err
		}
		cold = append(cold, ms(out.ttft))
	}
	return Result{
		"document_tokens":          docLen,
		"questions":                questions,
		"cache_create_s":           round(createS, 1),
		"ttft_p50_cached_ms":       round(median(ttfts), 1),
		"ttft_p50_uncached_ms":     round(median(cold), 1),
		"ttft_cut":                 round(median(cold)/median(ttfts), 1),
		"tokens_computed_cached":   computed + docLen,
		"tokens_computed_uncached": questions * (docLen + questionLen),
		"uncached_questions_timed": len(cold),
	}, nil
}

// DocumentTiming is a document's time to first token for a question asked
// over it, computed whole (Cold) and with the document cached (Warm).
type DocumentTiming struct {
	Tokens     int
	Cold, Warm time.Duration
}

// DocumentTTFT measures, for each document length, the time to the first
// token of a questionLen-token question over a random document: cold (the
// whole prompt computed, the median of coldSamples) and warm (the document
// cached and pinned first, the median of warmSamples questions). It is what
// `kvserve simulate tco` scales up.
func DocumentTTFT(ctx context.Context, m *model.Model, o Options, lengths []int, questionLen, coldSamples, warmSamples int) ([]DocumentTiming, error) {
	rng := rand.New(rand.NewPCG(11, 13))
	perToken := int64(m.Config.KVBytesPerToken(2))
	var out []DocumentTiming
	for _, n := range lengths {
		if n+questionLen+16 > m.Config.Context {
			return nil, needContext(m, n+questionLen+16)
		}
		doc := tokens(rng, m, n)
		asks := make([][]int32, max(coldSamples, warmSamples))
		for i := range asks {
			asks[i] = tokens(rng, m, questionLen)
		}
		kvBytes := int64(n+4*questionLen+256) * perToken
		timing := DocumentTiming{Tokens: n}
		cached, err := newEngine(m, o, engine.Config{KVMemoryBytes: kvBytes, MaxPinnedFraction: 0.95, MaxPinnedPerTenant: 0.95})
		if err != nil {
			return nil, err
		}
		o.logf("simulate: a %d-token document, cached", n)
		_, err = run(ctx, cached.Engine, engine.Request{Prompt: doc, MaxTokens: 1, Scope: "tenant",
			Hints: engine.Hints{Retention: engine.RetentionPinned, TTL: time.Hour}}, 0)
		var warm []float64
		for _, q := range asks[:warmSamples] {
			if err != nil {
				break
			}
			var r outcome
			r, err = run(ctx, cached.Engine, engine.Request{Prompt: concat(doc, q), MaxTokens: 1, Scope: "tenant"}, 0)
			if err == nil && r.usage.CachedTokens == 0 {
				err = fmt.Errorf("enginebench: the cached %d-token document was not reused", n)
			}
			warm = append(warm, r.ttft.Seconds())
		}
		cached.Close()
		if err != nil {
			return nil, err
		}
		plain, err := newEngine(m, o, engine.Config{KVMemoryBytes: kvBytes, DisablePrefixCache: true})
		if err != nil {
			return nil, err
		}
		o.logf("simulate: a %d-token document, computed whole", n)
		var cold []float64
		for _, q := range asks[:coldSamples] {
			var r outcome
			if r, err = run(ctx, plain.Engine, engine.Request{Prompt: concat(doc, q), MaxTokens: 1, Scope: "tenant"}, 0); err != nil {
				break
			}
			cold = append(cold, r.ttft.Seconds())
		}
		plain.Close()
		if err != nil {
			return nil, err
		}
		timing.Cold = time.Duration(median(cold) * float64(time.Second))
		timing.Warm = time.Duration(median(warm) * float64(time.Second))
		out = append(out, timing)
	}
	return out, nil
}
