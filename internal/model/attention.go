package model

import (
	"math"

	"github.com/kvserve/kvserve/internal/tensor"
)

// This file and attention_*.go compute a pass's causal self-attention over
// each token's sequence cache, by one of three paths (attnPath); every path
// follows llama.cpp's non-flash CPU arithmetic per KV type:
//   - f16 keys and values: the query is rounded to f16 and dotted with the
//     keys in f32, the scores are scaled and soft-maxed in f32, and the
//     softmax weights are rounded to f16 before weighting the values;
//   - Q8_0: each query head is quantized to Q8_0 for the product with the
//     keys, and the weights stay f32;
//   - f32: plain f32 products.
// Every path gives each (token, query head) the same products and sums in
// the same order, so the path changes the speed of a pass, never its
// results (TestBatchInvariance, TestSharedPrefixAttention).

// attnPath is one way of splitting a pass's attention into pool tasks.
type attnPath int

const (
	// attnByToken: a task per token (attendTokens), run inside the output
	// projection's job. Tokens whose caches share leading blocks are taken
	// together (attendShared), the others one after another (attendToken);
	// each block is read whole, one contiguous run for all KV heads. f16
	// only.
	attnByToken attnPath = iota
	// attnByGroup: a task per (group of tokens whose caches share leading
	// blocks, KV head) (attendGroup), the query heads of a KV head
	// together, so that each key and value row is read once for all of
	// them. f16 or Q8_0.
	attnByGroup
	// attnByHead: a task per (token, query head) (attendHead). Any KV
	// type.
	attnByHead
)

// attnPathFor is the one place that chooses how a pass of T tokens computes
// its attention: the path that reads each key and value row the fewest
// times while still giving every worker enough tasks.
func (r *Runner) attnPathFor(T int) attnPath {
	c := &r.m.Config
	nw := len(r.workers)
	switch {
	case r.kvType == tensor.F16 && T >= 4*nw:
		// Enough tokens to keep every worker busy a token at a time: a
		// token's blocks are then read whole for all its heads, and the
		// pass waits for the pool once less.
		return attnByToken
	case (r.kvType == tensor.F16 || r.kvType == tensor.Q8_0) && T*c.KVHeads >= 4*nw:
		// At least two (group, KV head) tasks per thread.
		return attnByGroup
	default:
		// Too few tokens to split by KV head (a small batch decoding), or
		// f32 keys and values, which only attendHead computes.
		return attnByHead
	}
}

// attention computes the attention of the pass's T tokens in layer l (into
// r.attnOut) and then its output projection o (into dst). The projection is
// part of it because one path (attnByToken) computes the attention inside
// the projection's job, each token range converted right after it is
// written.
func (r *Runner) attention(l int, batch []Seq, T int, o tensor.Matrix, dst []float32) {
	c := &r.m.Config
	attnOut := r.attnOut[:T*c.Heads*c.HeadDimV]
	switch r.attnPathFor(T) {
	case attnByToken:
		// A token's attention costs about as much as the positions it
		// attends to (plus its own conversions): the token ranges are cut
		// by that, since a prompt's last tokens attend to many times the
		// positions of its first.
		r.pool.MatMulsPrepCost([][]float32{dst}, []tensor.Matrix{o}, attnOut, T, func(t0, t1, thread int) {
			r.attendTokens(l, batch, t0, t1, &r.workers[thread])
		}, func(t int) int { return r.taskPos[t] + 1 + attnTokenOverhead })
		return
	case attnByGroup:
		r.attendGroups(l, batch, T)
	default:
		r.attendHeads(l, batch, T)
	}
	r.pool.MatMul(dst, o, attnOut, T)
}

// attnTokenOverhead is a token's attention work besides its positions, in
// positions: its queries' and output's conversions and its softmax rows'
// fixed costs, about a block's worth.
const attnTokenOverhead = 16

// attnScratch is one worker's attention scratch.
type attnScratch struct {
	scores []float32 // one row per query head
	q16    []uint16  // the queries rounded to f16 (F16 KV)
	qf     []float32 // ... and widened back
	q8     []byte    // the query quantized to Q8_0 (Q8_0 KV)

	// attendTokens and attendShared (grown on first use).
	grouping    groupScratch // the worker's tokens grouped
	tasks       []tokenAttn  // a group's attention
	groupQ      []float32    // their queries rounded to f16
	groupQ8     []byte       // ... or quantized to Q8_0
	groupScores []float32    // their score rows
	window      [][]uint16   // attendShared: a window of shared blocks
	next        []span       // ... and the blocks to request after it
}

// growScores makes each worker's score buffer long enough for the longest
// context in the batch; it grows rarely, so passes do not allocate.
func (r *Runner) growScores(batch []Seq) {
	longest := 0
	for i := range batch {
		longest = max(longest, batch[i].Pos+len(batch[i].Tokens))
	}
	longest *= r.m.Config.Heads
	for i := range r.workers {
		if len(r.workers[i].scores) < longest {
			r.workers[i].scores = make([]float32, max(longest, 2*len(r.workers[i].scores)))
		}
	}
}

// rowSpan locates one KV head's rows in a cache block, in bytes: where the
// first starts, how long each is, and how far apart they are.
type rowSpan struct{ off, len, stride int }

// headRows prefetches one KV head's key and value rows. The blocks live at
// unrelated addresses and, for long contexts, in DRAM: while the keys of
// block b are dotted, the rows of the next key block and of block b's
// values are requested.
type headRows struct{ k, v rowSpan }

// first requests the key rows of block 0 of a sequence of n positions.
func (h headRows) first(cache Cache, l, n int) {
	kb, _ := cache.Block(l, 0)
	tensor.PrefetchRows(kb[h.k.off:], min(n, cache.BlockSize()), h.k.len, h.k.stride)
}

// next requests the key rows of block b+1 and the value rows of block b.
func (h headRows) next(cache Cache, l, b, n int) {
	bs := cache.BlockSize()
	if (b+1)*bs < n {
		nk, _ := cache.Block(l, b+1)
		tensor.PrefetchRows(nk[h.k.off:], min(n-(b+1)*bs, bs), h.k.len, h.k.stride)
	}
	_, vb := cache.Block(l, b)
	tensor.PrefetchRows(vb[h.v.off:], min(n-b*bs, bs), h.v.len, h.v.stride)
}

// f16Queries returns q rounded to f16, as llama.cpp rounds the queries for
// the product with f16 keys, in dst (nil: the worker's scratch).
func (ws *attnScratch) f16Queries(dst, q []float32) []float32 {
	if dst == nil {
		dst = ws.qf
	}
	tensor.F32ToF16Slice(ws.q16[:len(q)], q)
	tensor.F16ToF32Slice(dst[:len(q)], ws.q16[:len(q)])
	return dst[:len(q)]
}

// f16Weights turns each row of n scores into softmax weights after scaling
// them, rounded to f16 (as llama.cpp does for the product with f16 values).
func f16Weights(scores []float32, n int, scale float32) {
	for lo := 0; lo+n <= len(scores); lo += n {
		tensor.SoftmaxWeightsF16(scores[lo:lo+n], scale)
	}
}

// maxSharedTokens bounds how many tokens attendShared takes at once: their
// queries and score rows sit in a worker's scratch together. So does
// maxGroupScores, for long contexts: a group's score rows (all query heads'
// for attendShared, one KV head's for attendGroup) take at most this many
// values (4 MiB; a group is at least one token). It is the default of
// Runner.groupScoreLimit, which tests lower.
//
// sharedWindowRows is how many shared positions attendShared passes over
// at once (a window of blocks, one kernel call per token and KV head): a KV
// head's keys of a window stay in L1/L2 while each token of the group reads
// them, and the calls' setup is paid once per window instead of per block.
const (
	sharedWindowRows = 256
	maxSharedTokens  = 8
	maxGroupScores   = 1 << 20
)

// tokenAttn is one token's attention in a pass (all its query heads, or
// those of one KV head): the positions it attends to, [0, n), its queries,
// its scores (head h's at [h·n, (h+1)·n)) and its output.
type tokenAttn struct {
	cache  Cache
	n      int
	q      []float32 // f16 keys: the queries rounded to f16
	q8     []byte    // Q8_0 keys: each query head quantized to Q8_0
	scores []float32
	out    []float32
}

func (a *tokenAttn) blocks() int { return (a.n + a.cache.BlockSize() - 1) / a.cache.BlockSize() }

// rows is the number of positions of block b that a attends to.
func (a *tokenAttn) rows(b int) int { return min(a.n-b*a.cache.BlockSize(), a.cache.BlockSize()) }

// attnScale is the scores' scale, as llama.cpp: 1.0f/sqrtf(head_dim).
func (r *Runner) attnScale() float32 { return 1 / float32(math.Sqrt(float64(r.m.Config.HeadDim))) }

// storeKV writes one token's keys or values at element offset off of a
// cache block, converting to the KV type.
func (r *Runner) storeKV(block []byte, off int, x []float32) {
	switch r.kvType {
	case tensor.F16:
		tensor.F32ToF16Slice(f16View(block)[off:off+len(x)], x)
	case tensor.Q8_0:
		start := r.kvType.RowBytes(off)
		tensor.QuantizeQ80(block[start:start+r.kvType.RowBytes(len(x))], x)
	default:
		copy(f32View(block)[off:off+len(x)], x)
	}
}
