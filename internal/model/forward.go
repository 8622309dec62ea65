package model

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/tensor"
)

// Seq is one sequence's part of a batch (see package batch).
type Seq = batch.Seq

// Runner runs forward passes of one model. It owns scratch memory sized for
// MaxTokens tokens per pass and is not safe for concurrent use: one pass at
// a time.
type Runner struct {
	m         *Model
	pool      *tensor.Pool
	maxTokens int
	kvType    tensor.DType

	// Activations, token-major, sized for maxTokens.
	x, h     []float32 // [T][Embed]: residual stream, normalised input
	q        []float32 // [T][Heads*HeadDim]
	k, v     []float32 // [T][KVDim]
	attnOut  []float32 // [T][Heads*HeadDimV]
	proj     []float32 // [T][Embed]: attention or FFN output projection
	gate, up []float32 // [T][FFN]
	outRows  []float32 // [outputs][Embed]
	logits   []float32 // [outputs][Vocab]
	workers  []attnScratch
	taskSeq  []int // token index → sequence index in the batch
	taskPos  []int // token index → position
	// groupScoreLimit bounds the score values of a group of tokens whose
	// attention is computed together (maxGroupScores).
	groupScoreLimit int
	grouping        groupScratch // passGroups'
	// rope holds each token's RoPE angle table (ropeLen values), computed
	// once per pass instead of twice per layer.
	rope    []float32
	ropeLen int
}

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
}

// NewRunner returns a Runner for m that computes on pool, accepting up to
// maxTokens tokens per forward pass (summed over the batch) and reading and
// writing caches whose K and V are stored as kvType (F16, F32 or Q8_0).
func NewRunner(m *Model, pool *tensor.Pool, maxTokens int, kvType tensor.DType) (*Runner, error) {
	if maxTokens <= 0 {
		maxTokens = 512
	}
	c := &m.Config
	switch kvType {
	case tensor.F16, tensor.F32:
	case tensor.Q8_0:
		if c.HeadDim%32 != 0 || c.HeadDimV%32 != 0 {
			return nil, fmt.Errorf("model: a q8_0 KV cache needs head widths that are multiples of 32, not %d", c.HeadDim)
		}
	default:
		return nil, fmt.Errorf("model: unsupported KV cache type %s (f16, f32, q8_0)", kvType)
	}
	qDim := c.Heads * c.HeadDim
	r := &Runner{
		m: m, pool: pool, maxTokens: maxTokens, kvType: kvType,
		x:       make([]float32, maxTokens*c.Embed),
		h:       make([]float32, maxTokens*c.Embed),
		q:       make([]float32, maxTokens*qDim),
		k:       make([]float32, maxTokens*c.KVDim()),
		v:       make([]float32, maxTokens*c.KVHeads*c.HeadDimV),
		attnOut: make([]float32, maxTokens*c.Heads*c.HeadDimV),
		proj:    make([]float32, maxTokens*c.Embed),
		gate:    make([]float32, maxTokens*c.FFN),
		up:      make([]float32, maxTokens*c.FFN),
		taskSeq: make([]int, maxTokens),
		taskPos: make([]int, maxTokens),
		ropeLen: c.Rope.TableLen(c.HeadDim),
		workers: make([]attnScratch, pool.Threads()),

		groupScoreLimit: maxGroupScores,
	}
	r.rope = make([]float32, maxTokens*r.ropeLen)
	for i := range r.workers {
		r.workers[i].q16 = make([]uint16, c.Heads*c.HeadDim)
		r.workers[i].qf = make([]float32, c.Heads*c.HeadDim)
		if kvType == tensor.Q8_0 {
			r.workers[i].q8 = make([]byte, kvType.RowBytes(c.HeadDim))
		}
	}
	return r, nil
}

// KVType is the element type of the caches the runner reads and writes.
func (r *Runner) KVType() tensor.DType { return r.kvType }

// MaxTokens is the most tokens one forward pass accepts.
func (r *Runner) MaxTokens() int { return r.maxTokens }

// Model returns the runner's model.
func (r *Runner) Model() *Model { return r.m }

// Forward runs one pass over the batch: it appends every sequence's new
// tokens to its cache and fills the requested logits.
func (r *Runner) Forward(ctx context.Context, batch []Seq) error {
	c := &r.m.Config
	T, nOut := 0, 0
	for i := range batch {
		s := &batch[i]
		if len(s.Tokens) == 0 {
			return fmt.Errorf("model: sequence %d of the batch has no tokens", i)
		}
		if s.Pos < 0 {
			return fmt.Errorf("model: sequence %d has negative position %d", i, s.Pos)
		}
		if s.Logits != nil {
			if len(s.Logits) != c.Vocab {
				return fmt.Errorf("model: sequence %d logits buffer has %d entries, want %d", i, len(s.Logits), c.Vocab)
			}
			nOut++
		}
		T += len(s.Tokens)
	}
	if T > r.maxTokens {
		return fmt.Errorf("model: batch of %d tokens exceeds the runner's %d", T, r.maxTokens)
	}
	t := 0
	for i := range batch {
		s := &batch[i]
		for j, tok := range s.Tokens {
			if tok < 0 || int(tok) >= c.Vocab {
				return fmt.Errorf("model: token id %d out of range [0, %d)", tok, c.Vocab)
			}
			r.taskSeq[t], r.taskPos[t] = i, s.Pos+j
			r.m.TokenEmbed.DequantizeRow(r.x[t*c.Embed:(t+1)*c.Embed], int(tok))
			t++
		}
	}
	r.growScores(batch)
	for t := range T {
		c.Rope.Angles(r.rope[t*r.ropeLen:(t+1)*r.ropeLen], c.HeadDim, r.taskPos[t])
	}

	for l := range r.m.Layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		r.layer(l, batch, T)
	}

	if nOut == 0 {
		return nil
	}
	if need := nOut * c.Embed; len(r.outRows) < need {
		r.outRows = make([]float32, need)
		r.logits = make([]float32, nOut*c.Vocab)
	}
	o, t := 0, 0
	for i := range batch {
		t += len(batch[i].Tokens)
		if batch[i].Logits != nil {
			last := t - 1
			// The last layer's residual add (see layer), needed only here.
			x := r.x[last*c.Embed : (last+1)*c.Embed]
			tensor.Add(x, r.proj[last*c.Embed:(last+1)*c.Embed])
			tensor.RMSNorm(r.outRows[o*c.Embed:(o+1)*c.Embed], x, r.m.OutputNorm, c.NormEps)
			o++
		}
	}
	r.pool.MatMul(r.logits[:nOut*c.Vocab], r.m.Output, r.outRows[:nOut*c.Embed], nOut)
	o = 0
	for i := range batch {
		if batch[i].Logits != nil {
			copy(batch[i].Logits, r.logits[o*c.Vocab:(o+1)*c.Vocab])
			o++
		}
	}
	return nil
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

// forTokens runs fn for every token of the pass, split over the pool when
// there are enough tokens to be worth it.
func (r *Runner) forTokens(T int, fn func(t int)) {
	if T < 8 {
		for t := 0; t < T; t++ {
			fn(t)
		}
		return
	}
	r.pool.Parallel(T, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			fn(t)
		}
	})
}

// matMulsPrep computes dsts[i] = ws[i]·x for products that share their
// input, which prep writes first (see tensor.MatMulsPrep; prep's thread
// indexes r.workers): as one pool job when the matrices have one type, else
// (quantization mixes can give V or a feed-forward matrix its own type) the
// first with prep and the others after it.
func (r *Runner) matMulsPrep(dsts [][]float32, ws []tensor.Matrix, x []float32, T int, prep func(t0, t1, thread int)) {
	for _, w := range ws[1:] {
		if w.Type != ws[0].Type {
			r.pool.MatMulsPrep(dsts[:1], ws[:1], x, T, prep)
			for i := 1; i < len(ws); i++ {
				r.pool.MatMul(dsts[i], ws[i], x, T)
			}
			return
		}
	}
	r.pool.MatMulsPrep(dsts, ws, x, T, prep)
}

// layer runs layer l on the pass's T tokens. The element-wise steps that
// produce a product's input (a norm, the attention, SwiGLU) run inside the
// product's job (matMulsPrep), each token range converted right after it is
// written: with many tokens a layer waits for the pool's threads nine times
// (four conversions, four products, RoPE) instead of thirteen. The residual
// add after the feed-forward block is done by the next layer (with its input
// norm), or for the last layer by Forward.
func (r *Runner) layer(l int, batch []Seq, T int) {
	c := &r.m.Config
	ly := &r.m.Layers[l]
	E, qDim, kvDim, vDim := c.Embed, c.Heads*c.HeadDim, c.KVDim(), c.KVHeads*c.HeadDimV

	// Attention block: its input is the norm of the residual stream, after
	// the previous layer's feed-forward output is added.
	h := r.h[:T*E]
	r.matMulsPrep([][]float32{r.q[:T*qDim], r.k[:T*kvDim], r.v[:T*vDim]}, []tensor.Matrix{ly.Q, ly.K, ly.V}, h, T, func(t0, t1, _ int) {
		for t := t0; t < t1; t++ {
			x := r.x[t*E : (t+1)*E]
			if l > 0 {
				tensor.Add(x, r.proj[t*E:(t+1)*E])
			}
			tensor.RMSNorm(r.h[t*E:(t+1)*E], x, ly.AttnNorm, c.NormEps)
		}
	})
	r.forTokens(T, func(t int) {
		q, k, v := r.q[t*qDim:(t+1)*qDim], r.k[t*kvDim:(t+1)*kvDim], r.v[t*vDim:(t+1)*vDim]
		if ly.QBias != nil {
			tensor.Add(q, ly.QBias)
		}
		if ly.KBias != nil {
			tensor.Add(k, ly.KBias)
		}
		if ly.VBias != nil {
			tensor.Add(v, ly.VBias)
		}
		if ly.QNorm != nil {
			for hd := 0; hd < c.Heads; hd++ {
				x := q[hd*c.HeadDim : (hd+1)*c.HeadDim]
				tensor.RMSNorm(x, x, ly.QNorm, c.NormEps)
			}
			for hd := 0; hd < c.KVHeads; hd++ {
				x := k[hd*c.HeadDim : (hd+1)*c.HeadDim]
				tensor.RMSNorm(x, x, ly.KNorm, c.NormEps)
			}
		}
		pos := r.taskPos[t]
		angles := r.rope[t*r.ropeLen : (t+1)*r.ropeLen]
		c.Rope.ApplyAngles(q, angles, c.Heads, c.HeadDim)
		c.Rope.ApplyAngles(k, angles, c.KVHeads, c.HeadDim)
		// Store this token's keys and values as f16 at its position.
		cache := batch[r.taskSeq[t]].Cache
		bs := cache.BlockSize()
		kb, vb := cache.Block(l, pos/bs)
		off := pos % bs
		r.storeKV(kb, off*kvDim, k)
		r.storeKV(vb, off*vDim, v)
	})
	attnOut := r.attnOut[:T*c.Heads*c.HeadDimV]
	if r.byToken(T) {
		r.matMulsPrep([][]float32{r.proj[:T*E]}, []tensor.Matrix{ly.O}, attnOut, T, func(t0, t1, thread int) {
			r.attendTokens(l, batch, t0, t1, &r.workers[thread])
		})
	} else {
		r.attention(l, batch, T)
		r.pool.MatMul(r.proj[:T*E], ly.O, attnOut, T)
	}

	// Feed-forward block (SwiGLU): its input is the norm of the residual
	// stream after the attention output is added.
	F := c.FFN
	r.matMulsPrep([][]float32{r.gate[:T*F], r.up[:T*F]}, []tensor.Matrix{ly.Gate, ly.Up}, h, T, func(t0, t1, _ int) {
		for t := t0; t < t1; t++ {
			p := r.proj[t*E : (t+1)*E]
			if ly.OBias != nil {
				tensor.Add(p, ly.OBias)
			}
			tensor.Add(r.x[t*E:(t+1)*E], p)
			tensor.RMSNorm(r.h[t*E:(t+1)*E], r.x[t*E:(t+1)*E], ly.FFNNorm, c.NormEps)
		}
	})
	r.matMulsPrep([][]float32{r.proj[:T*E]}, []tensor.Matrix{ly.Down}, r.gate[:T*F], T, func(t0, t1, _ int) {
		for t := t0; t < t1; t++ {
			tensor.SwiGLU(r.gate[t*F:(t+1)*F], r.gate[t*F:(t+1)*F], r.up[t*F:(t+1)*F])
		}
	})
}

// byToken reports whether a pass of T tokens computes its attention a token
// per task (attendTokens, inside the output projection's job), with f16
// keys and values and enough tokens to keep every worker busy: each token's
// blocks are then read whole, one contiguous run per block for all KV heads
// (SmolLM2-135M batch 16 decode: ~2% less CPU per pass than a task per
// (token, KV head)).
func (r *Runner) byToken(T int) bool {
	return r.kvType == tensor.F16 && T >= 4*len(r.workers)
}

// attention computes causal self-attention for every (token, head) of the
// pass over each token's sequence cache, splitting the work over the pool.
// Per llama.cpp's non-flash CPU path: the query is rounded to f16 and dotted
// with the f16 keys in f32, scores are scaled and soft-maxed in f32, and the
// softmax weights are rounded to f16 before weighting the f16 values.
//
// With f16 or Q8_0 keys and values, the query heads sharing a KV head are
// computed together, and so are the tokens whose caches share blocks
// (passGroups): each key and value row is read once for all of them (same
// results as one head and token at a time, bit for bit), a (group of
// tokens, KV head) pair per task. Passes with many tokens and f16 keys and
// values use attendTokens instead (see byToken).
func (r *Runner) attention(l int, batch []Seq, T int) {
	c := &r.m.Config
	nw := len(r.workers)
	if (r.kvType == tensor.F16 || r.kvType == tensor.Q8_0) && T*c.KVHeads >= 4*nw {
		// At least two tasks per thread.
		groups := r.passGroups(l, batch, T, (2*nw+c.KVHeads-1)/c.KVHeads)
		tasks := len(groups) * c.KVHeads
		r.pool.Parallel(nw, func(lo, hi int) {
			for w := lo; w < hi; w++ {
				for task := tasks * w / nw; task < tasks*(w+1)/nw; task++ {
					g := &groups[task/c.KVHeads]
					r.attendGroup(l, batch, g.tokens, g.shared, task%c.KVHeads, &r.workers[w])
				}
			}
		})
		return
	}
	tasks := T * c.Heads
	r.pool.Parallel(nw, func(lo, hi int) {
		for w := lo; w < hi; w++ {
			for task := tasks * w / nw; task < tasks*(w+1)/nw; task++ {
				r.attendHead(l, batch, task/c.Heads, task%c.Heads, &r.workers[w])
			}
		}
	})
}

// tokenGroup is tokens of a pass whose first shared blocks (of the layer
// being computed) are the same memory.
type tokenGroup struct {
	tokens []int
	shared int
}

// passGroups groups the pass's T tokens by the blocks their caches share in
// layer l (groupTokens; one KV head's scores per token), then splits the
// largest groups until there are at least minGroups (or every group is one
// token), so that the pool's threads get enough tasks.
func (r *Runner) passGroups(l int, batch []Seq, T, minGroups int) []tokenGroup {
	groups := r.groupTokens(&r.grouping, l, batch, 0, T, r.m.Config.Heads/r.m.Config.KVHeads)
	for len(groups) < minGroups {
		big := 0
		for i := range groups {
			if len(groups[i].tokens) > len(groups[big].tokens) {
				big = i
			}
		}
		g := groups[big].tokens
		if len(g) < 2 {
			break
		}
		groups[big].tokens = g[: len(g)/2 : len(g)/2]
		groups = append(groups, tokenGroup{tokens: g[len(g)/2:]})
	}
	r.grouping.groups = groups // keep what append grew
	for i := range groups {
		if g := groups[i].tokens; len(g) > 1 {
			groups[i].shared = r.sharedBlocks(l, batch, g)
		}
	}
	return groups
}

// groupScratch is groupTokens' scratch.
type groupScratch struct {
	keyed  []keyedToken
	tokens []int
	groups []tokenGroup
}

// keyedToken is a token and the address of its first full key block (0
// for none).
type keyedToken struct {
	first uintptr
	t     int
}

// groupTokens groups tokens [t0, t1) by the memory of their first full key
// block in layer l (firstBlock), each token's looked up once: tokens with
// the same one form groups, in token order, of at most maxSharedTokens
// tokens and r.groupScoreLimit score values (perPos per attended
// position); the others are groups of one. The groups come in the order of
// their first tokens and live in s until its next use.
func (r *Runner) groupTokens(s *groupScratch, l int, batch []Seq, t0, t1, perPos int) []tokenGroup {
	s.keyed = s.keyed[:0]
	for t := t0; t < t1; t++ {
		var first uintptr
		if p := r.firstBlock(l, batch, t); p != nil {
			first = uintptr(unsafe.Pointer(p))
		}
		s.keyed = append(s.keyed, keyedToken{first, t})
	}
	slices.SortFunc(s.keyed, func(a, b keyedToken) int {
		return cmp.Or(cmp.Compare(a.first, b.first), cmp.Compare(a.t, b.t))
	})
	// The groups' tokens are slices of s.tokens: room for all of them up
	// front, so that appending never moves it.
	if cap(s.tokens) < t1-t0 {
		s.tokens = make([]int, 0, t1-t0)
	}
	s.tokens = s.tokens[:0]
	s.groups = s.groups[:0]
	scores := 0 // of the last group
	for i, k := range s.keyed {
		n := perPos * (r.taskPos[k.t] + 1)
		if last := len(s.groups) - 1; i > 0 && k.first != 0 && k.first == s.keyed[i-1].first &&
			len(s.groups[last].tokens) < maxSharedTokens && scores+n <= r.groupScoreLimit {
			s.tokens = append(s.tokens, k.t)
			s.groups[last].tokens = s.tokens[len(s.tokens)-len(s.groups[last].tokens)-1:]
			scores += n
			continue
		}
		s.tokens = append(s.tokens, k.t)
		s.groups = append(s.groups, tokenGroup{tokens: s.tokens[len(s.tokens)-1:]})
		scores = n
	}
	for i := range s.groups {
		g := s.groups[i].tokens
		s.groups[i].tokens = g[:len(g):len(g)]
	}
	slices.SortFunc(s.groups, func(a, b tokenGroup) int { return cmp.Compare(a.tokens[0], b.tokens[0]) })
	return s.groups
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
		s := scores[lo : lo+n]
		tensor.Scale(s, scale)
		tensor.Softmax(s)
		tensor.RoundF16(s)
	}
}

// maxSharedTokens bounds how many tokens attendShared takes at once: their
// queries and score rows sit in a worker's scratch together. So does
// maxGroupScores, for long contexts: a group's score rows (all query heads'
// for attendShared, one KV head's for attendGroup) take at most this many
// values (4 MiB; a group is at least one token). It is the default of
// Runner.groupScoreLimit, which tests lower.
const (
	maxSharedTokens = 8
	maxGroupScores  = 1 << 20
)

// attendTokens computes the attention of tokens [t0, t1), for f16 keys and
// values. Tokens whose caches begin with the same full blocks — sequences
// decoding after one cached prefix, whose block tables point at the same
// pool blocks, or the tokens of one sequence's prefill chunk — are grouped
// (groupTokens) and taken together by attendShared: each shared
// block is then read from memory once for all of them instead of once per
// token. The others go one after another (attendToken), each warming the
// next one's first key block. Either way a token's results are
// attendGroup's, bit for bit.
func (r *Runner) attendTokens(l int, batch []Seq, t0, t1 int, ws *attnScratch) {
	groups := r.groupTokens(&ws.grouping, l, batch, t0, t1, r.m.Config.Heads)
	for i, g := range groups {
		next := -1 // the token taken after this group
		if i+1 < len(groups) {
			next = groups[i+1].tokens[0]
		}
		if len(g.tokens) > 1 {
			r.attendShared(l, batch, g.tokens, r.sharedBlocks(l, batch, g.tokens), next, ws)
		} else {
			r.attendToken(l, batch, g.tokens[0], next, ws)
		}
	}
}

// firstBlock returns the address of token t's first key block in layer l
// when the token attends to all of it, else nil: tokens with the same
// address read the same memory.
func (r *Runner) firstBlock(l int, batch []Seq, t int) *byte {
	cache := batch[r.taskSeq[t]].Cache
	if r.taskPos[t]+1 < cache.BlockSize() {
		return nil
	}
	kb, _ := cache.Block(l, 0)
	return &kb[0]
}

// sharedBlocks returns how many leading blocks of layer l every token of
// group attends to in full and finds at the same address (at least one:
// attendTokens groups tokens by their full first block).
func (r *Runner) sharedBlocks(l int, batch []Seq, group []int) int {
	first := batch[r.taskSeq[group[0]]].Cache
	bs := first.BlockSize()
	shared := (r.taskPos[group[0]] + 1) / bs
	for _, t := range group[1:] {
		shared = min(shared, (r.taskPos[t]+1)/bs)
	}
	for b := 1; b < shared; b++ {
		kb, _ := first.Block(l, b)
		for _, t := range group[1:] {
			if ob, _ := batch[r.taskSeq[t]].Cache.Block(l, b); &ob[0] != &kb[0] {
				return b
			}
		}
	}
	return shared
}

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

// keySpan returns a's key block b of layer l and the bytes it attends to
// there (nil, 0 when a has no block b): what to request next.
func (r *Runner) keySpan(l int, a *tokenAttn, b int) ([]byte, int) {
	if b >= a.blocks() {
		return nil, 0
	}
	kb, _ := a.cache.Block(l, b)
	return kb, 2 * a.rows(b) * r.m.Config.KVDim()
}

// valueSpan is keySpan for the values.
func (r *Runner) valueSpan(l int, a *tokenAttn, b int) ([]byte, int) {
	if b >= a.blocks() {
		return nil, 0
	}
	_, vb := a.cache.Block(l, b)
	return vb, 2 * a.rows(b) * r.m.Config.KVHeads * r.m.Config.HeadDimV
}

// request issues part kvh of KVHeads parts of the prefetch of the first
// size bytes of b (nil: nothing to request). The blocks live at unrelated
// addresses, mostly in DRAM (at batch 16 the pass's keys and values are
// ~70 MB for SmolLM2-135M), and computing on a block takes far less time
// than fetching the next, so the request for the next block is spread over
// the block's work: a third of its lines before each KV head's products.
// Requesting a whole block at once filled the core's miss queue and stalled
// it until the lines began to arrive; spread, attention at batch 16 took
// 15-20% less time (4.9-5.5 → 4.3-4.6 ms per pass).
func (r *Runner) request(b []byte, size, kvh int) {
	if b == nil {
		return
	}
	per := (size/r.m.Config.KVHeads + 63) &^ 63 // whole cache lines
	if lo := kvh * per; lo < size {
		tensor.PrefetchRows(b[lo:], 1, min(per, size-lo), 0)
	}
}

// keyBlocks computes a's scores over its key blocks [from, a.blocks()),
// each block's keys one contiguous run of bytes for all KV heads, read
// once while the next block's are requested; after the last it requests
// next (nextSize bytes).
func (r *Runner) keyBlocks(l int, a *tokenAttn, from int, next []byte, nextSize int) {
	c := &r.m.Config
	hd, kvDim, G := c.HeadDim, c.KVDim(), c.Heads/c.KVHeads
	bs := a.cache.BlockSize()
	for b := from; b < a.blocks(); b++ {
		kb, _ := a.cache.Block(l, b)
		nb, size := next, nextSize
		if b+1 < a.blocks() {
			nb, size = r.keySpan(l, a, b+1)
		}
		kf := f16View(kb)
		for kvh := range c.KVHeads {
			r.request(nb, size, kvh)
			tensor.DotsF16Heads(a.scores[kvh*G*a.n+b*bs:], a.n, a.rows(b), a.q[kvh*G*hd:(kvh+1)*G*hd], hd, kf[kvh*hd:], kvDim)
		}
	}
}

// valueBlocks adds to a's output its value blocks [from, a.blocks()),
// weighted by its scores, as keyBlocks reads the keys.
func (r *Runner) valueBlocks(l int, a *tokenAttn, from int, next []byte, nextSize int) {
	c := &r.m.Config
	hdv, vDim, G := c.HeadDimV, c.KVHeads*c.HeadDimV, c.Heads/c.KVHeads
	bs := a.cache.BlockSize()
	for b := from; b < a.blocks(); b++ {
		_, vb := a.cache.Block(l, b)
		nb, size := next, nextSize
		if b+1 < a.blocks() {
			nb, size = r.valueSpan(l, a, b+1)
		}
		vf := f16View(vb)
		for kvh := range c.KVHeads {
			r.request(nb, size, kvh)
			tensor.AxpysF16Heads(a.out[kvh*G*hdv:(kvh+1)*G*hdv], hdv, a.scores[kvh*G*a.n+b*bs:], a.n, a.rows(b), vf[kvh*hdv:], vDim)
		}
	}
}

// tokenTask describes token t's attention with its f16 queries in q and
// its scores in scores (at least Heads·n values).
func (r *Runner) tokenTask(batch []Seq, t int, q, scores []float32) tokenAttn {
	c := &r.m.Config
	n := r.taskPos[t] + 1 // attend to positions [0, pos]
	return tokenAttn{
		cache:  batch[r.taskSeq[t]].Cache,
		n:      n,
		q:      q,
		scores: scores[:c.Heads*n],
		out:    r.attnOut[t*c.Heads*c.HeadDimV : (t+1)*c.Heads*c.HeadDimV],
	}
}

// attnScale is the scores' scale, as llama.cpp: 1.0f/sqrtf(head_dim).
func (r *Runner) attnScale() float32 { return 1 / float32(math.Sqrt(float64(r.m.Config.HeadDim))) }

// attendToken computes every query head of token t, for f16 keys and
// values, a block at a time (keyBlocks, valueBlocks). The last value block
// requests the next token's (next, -1 for none) first key block, so the
// worker's next token starts warm.
func (r *Runner) attendToken(l int, batch []Seq, t, next int, ws *attnScratch) {
	c := &r.m.Config
	qDim := c.Heads * c.HeadDim
	a := r.tokenTask(batch, t, ws.f16Queries(nil, r.q[t*qDim:(t+1)*qDim]), ws.scores)
	kb, size := r.keySpan(l, &a, 0)
	tensor.PrefetchRows(kb, 1, size, 0)
	vb, vsize := r.valueSpan(l, &a, 0)
	r.keyBlocks(l, &a, 0, vb, vsize)
	f16Weights(a.scores, a.n, r.attnScale())
	clear(a.out)
	nb, nsize := r.nextKeys(l, batch, next)
	r.valueBlocks(l, &a, 0, nb, nsize)
}

// nextKeys returns token next's first key block and the bytes it attends
// to there (nil, 0 for next < 0).
func (r *Runner) nextKeys(l int, batch []Seq, next int) ([]byte, int) {
	if next < 0 {
		return nil, 0
	}
	nc := batch[r.taskSeq[next]].Cache
	kb, _ := nc.Block(l, 0)
	return kb, 2 * min(r.taskPos[next]+1, nc.BlockSize()) * r.m.Config.KVDim()
}

// attendShared computes the attention of the tokens of group, whose first
// shared blocks are the same memory: the keys of each shared block are
// dotted with every token's queries, and later its values weighted by
// every token's scores, while the block is in cache; each token's own
// blocks follow its shared ones. For every token the products and sums are
// attendToken's, in the same order, so its results are the same bit for
// bit; only the memory traffic changes (a shared block is read once per
// group instead of once per token). next is the token the worker takes
// after the group (-1 for none).
func (r *Runner) attendShared(l int, batch []Seq, group []int, shared, next int, ws *attnScratch) {
	c := &r.m.Config
	hd, hdv, kvDim, vDim := c.HeadDim, c.HeadDimV, c.KVDim(), c.KVHeads*c.HeadDimV
	G, qDim := c.Heads/c.KVHeads, c.Heads*c.HeadDim
	need := 0
	for _, t := range group {
		need += c.Heads * (r.taskPos[t] + 1)
	}
	if len(ws.groupScores) < need {
		ws.groupScores = make([]float32, max(need, 2*len(ws.groupScores)))
	}
	if len(ws.groupQ) < len(group)*qDim {
		ws.groupQ = make([]float32, maxSharedTokens*qDim)
	}
	tasks := ws.tasks[:0]
	off := 0
	for i, t := range group {
		q := ws.groupQ[i*qDim : (i+1)*qDim]
		ws.f16Queries(q, r.q[t*qDim:(t+1)*qDim])
		tasks = append(tasks, r.tokenTask(batch, t, q, ws.groupScores[off:]))
		off += len(tasks[i].scores)
	}
	ws.tasks = tasks
	first := &tasks[0]
	bs := first.cache.BlockSize()

	// The shared blocks' keys, then each token's own keys and weights.
	kb, size := r.keySpan(l, first, 0)
	tensor.PrefetchRows(kb, 1, size, 0)
	for b := range shared {
		kb, _ := first.cache.Block(l, b)
		nb, size := r.keySpan(l, first, b+1)
		if b+1 == shared {
			nb, size = r.keySpan(l, first, shared)
			if nb == nil {
				nb, size = r.valueSpan(l, first, 0)
			}
		}
		kf := f16View(kb)
		for kvh := range c.KVHeads {
			r.request(nb, size, kvh)
			for i := range tasks {
				a := &tasks[i]
				tensor.DotsF16Heads(a.scores[kvh*G*a.n+b*bs:], a.n, bs, a.q[kvh*G*hd:(kvh+1)*G*hd], hd, kf[kvh*hd:], kvDim)
			}
		}
	}
	for i := range tasks {
		a := &tasks[i]
		var nb []byte
		var size int
		if i+1 < len(tasks) {
			nb, size = r.keySpan(l, &tasks[i+1], shared)
		} else {
			nb, size = r.valueSpan(l, first, 0)
		}
		r.keyBlocks(l, a, shared, nb, size)
		f16Weights(a.scores, a.n, r.attnScale())
		clear(a.out)
	}

	// The shared blocks' values, then each token's own values.
	for b := range shared {
		_, vb := first.cache.Block(l, b)
		nb, size := r.valueSpan(l, first, b+1)
		vf := f16View(vb)
		for kvh := range c.KVHeads {
			r.request(nb, size, kvh)
			for i := range tasks {
				a := &tasks[i]
				tensor.AxpysF16Heads(a.out[kvh*G*hdv:(kvh+1)*G*hdv], hdv, a.scores[kvh*G*a.n+b*bs:], a.n, bs, vf[kvh*hdv:], vDim)
			}
		}
	}
	for i := range tasks {
		var nb []byte
		var size int
		if i+1 < len(tasks) {
			nb, size = r.valueSpan(l, &tasks[i+1], shared)
		} else {
			nb, size = r.nextKeys(l, batch, next)
		}
		r.valueBlocks(l, &tasks[i], shared, nb, size)
	}
}

// attendGroup computes the query heads that share KV head kvh of the
// tokens of group, for f16 or Q8_0 keys and values. The group's first
// shared blocks are the same memory for all its tokens (one token: shared
// is 0), so they are read once for all: each shared block's keys are dotted
// with every token's queries, and later its values weighted by every
// token's scores; each token's own blocks follow. Per query head the
// products and sums are attendHead's, in the same order, whatever the
// group (and for f16, with the query heads of a KV head computed together,
// each key and value row converted once for all of them).
func (r *Runner) attendGroup(l int, batch []Seq, group []int, shared, kvh int, ws *attnScratch) {
	c := &r.m.Config
	hd, hdv, kvDim, vDim := c.HeadDim, c.HeadDimV, c.KVDim(), c.KVHeads*c.HeadDimV
	kt := r.kvType
	G := c.Heads / c.KVHeads
	qDim, qRow := G*hd, kt.RowBytes(hd) // f16 queries; Q8_0: bytes per query head
	need := 0
	for _, t := range group {
		need += G * (r.taskPos[t] + 1)
	}
	if len(ws.groupScores) < need {
		ws.groupScores = make([]float32, max(need, 2*len(ws.groupScores)))
	}
	if len(ws.groupQ) < len(group)*qDim {
		ws.groupQ = make([]float32, len(group)*qDim)
	}
	if kt == tensor.Q8_0 && len(ws.groupQ8) < len(group)*G*qRow {
		ws.groupQ8 = make([]byte, len(group)*G*qRow)
	}
	// Each token's queries, scores (head g's at [g·n, (g+1)·n)) and output
	// for this KV head's query heads.
	tasks := ws.tasks[:0]
	off := 0
	for i, t := range group {
		n := r.taskPos[t] + 1 // attend to positions [0, pos]
		a := tokenAttn{
			cache:  batch[r.taskSeq[t]].Cache,
			n:      n,
			scores: ws.groupScores[off : off+G*n],
			out:    r.attnOut[(t*c.Heads+kvh*G)*hdv : (t*c.Heads+(kvh+1)*G)*hdv],
		}
		q := r.q[(t*c.Heads+kvh*G)*hd : (t*c.Heads+(kvh+1)*G)*hd]
		if kt == tensor.Q8_0 {
			// Each query head quantized to Q8_0 for the product with
			// Q8_0 keys, as llama.cpp does.
			a.q8 = ws.groupQ8[i*G*qRow : (i+1)*G*qRow]
			for g := range G {
				tensor.QuantizeQ80(a.q8[g*qRow:(g+1)*qRow], q[g*hd:(g+1)*hd])
			}
		} else {
			a.q = ws.groupQ[i*qDim : (i+1)*qDim]
			ws.f16Queries(a.q, q)
		}
		tasks = append(tasks, a)
		off += G * n
	}
	ws.tasks = tasks
	bs := tasks[0].cache.BlockSize()
	kRow, vRow := kt.RowBytes(kvDim), kt.RowBytes(vDim)
	pf := headRows{k: rowSpan{kt.RowBytes(kvh * hd), kt.RowBytes(hd), kRow}, v: rowSpan{kt.RowBytes(kvh * hdv), kt.RowBytes(hdv), vRow}}
	// dots sets a's scores of the rows positions of key block kb at b;
	// values adds a's weighted values of value block vb.
	dots := func(a *tokenAttn, kb []byte, b, rows int) {
		if kt == tensor.Q8_0 {
			for g := range G {
				tensor.DotsQ80(a.scores[g*a.n+b*bs:g*a.n+b*bs+rows], a.q8[g*qRow:(g+1)*qRow], kb[pf.k.off:], kRow)
			}
			return
		}
		tensor.DotsF16Heads(a.scores[b*bs:], a.n, rows, a.q, hd, f16View(kb)[kvh*hd:], kvDim)
	}
	values := func(a *tokenAttn, vb []byte, b, rows int) {
		if kt == tensor.Q8_0 {
			for g := range G {
				tensor.AxpysQ80(a.out[g*hdv:(g+1)*hdv], a.scores[g*a.n+b*bs:g*a.n+b*bs+rows], vb[pf.v.off:], vRow)
			}
			return
		}
		tensor.AxpysF16Heads(a.out, hdv, a.scores[b*bs:], a.n, rows, f16View(vb)[kvh*hdv:], vDim)
	}

	first := &tasks[0]
	pf.first(first.cache, l, first.n)
	for b := range shared {
		kb, _ := first.cache.Block(l, b)
		pf.next(first.cache, l, b, first.n)
		for i := range tasks {
			dots(&tasks[i], kb, b, bs)
		}
	}
	for i := range tasks {
		a := &tasks[i]
		for b := shared; b < a.blocks(); b++ {
			kb, _ := a.cache.Block(l, b)
			pf.next(a.cache, l, b, a.n)
			dots(a, kb, b, a.rows(b))
		}
		if kt == tensor.Q8_0 {
			for g := range G {
				s := a.scores[g*a.n : (g+1)*a.n]
				tensor.Scale(s, r.attnScale())
				tensor.Softmax(s)
			}
		} else {
			f16Weights(a.scores, a.n, r.attnScale())
		}
		clear(a.out)
	}
	for b := range shared {
		_, vb := first.cache.Block(l, b)
		for i := range tasks {
			values(&tasks[i], vb, b, bs)
		}
	}
	for i := range tasks {
		a := &tasks[i]
		for b := shared; b < a.blocks(); b++ {
			_, vb := a.cache.Block(l, b)
			values(a, vb, b, a.rows(b))
		}
	}
}

func (r *Runner) attendHead(l int, batch []Seq, t, head int, ws *attnScratch) {
	c := &r.m.Config
	hd, hdv, kvDim, vDim := c.HeadDim, c.HeadDimV, c.KVDim(), c.KVHeads*c.HeadDimV
	kvh := head / (c.Heads / c.KVHeads)
	cache := batch[r.taskSeq[t]].Cache
	bs := cache.BlockSize()
	n := r.taskPos[t] + 1                        // attend to positions [0, pos]
	scale := 1 / float32(math.Sqrt(float64(hd))) // as llama.cpp: 1.0f/sqrtf(head_dim)

	q := r.q[t*c.Heads*hd+head*hd : t*c.Heads*hd+(head+1)*hd]
	switch r.kvType {
	case tensor.F16:
		q = ws.f16Queries(nil, q)
	case tensor.Q8_0:
		// ... and quantizes it to Q8_0 for the product with Q8_0 keys.
		tensor.QuantizeQ80(ws.q8, q)
	}
	kRow, vRow := r.kvType.RowBytes(kvDim), r.kvType.RowBytes(vDim)
	kt := r.kvType
	pf := headRows{k: rowSpan{kt.RowBytes(kvh * hd), kt.RowBytes(hd), kRow}, v: rowSpan{kt.RowBytes(kvh * hdv), kt.RowBytes(hdv), vRow}}
	pf.first(cache, l, n)
	scores := ws.scores[:n]
	for b := 0; b*bs < n; b++ {
		kb, _ := cache.Block(l, b)
		pf.next(cache, l, b, n)
		dst := scores[b*bs : min(n, (b+1)*bs)]
		switch r.kvType {
		case tensor.F16:
			tensor.DotsF16(dst, q, f16View(kb)[kvh*hd:], kvDim)
		case tensor.Q8_0:
			tensor.DotsQ80(dst, ws.q8, kb[kvh*r.kvType.RowBytes(hd):], kRow)
		default:
			k := f32View(kb)
			for j := range dst {
				off := j*kvDim + kvh*hd
				dst[j] = tensor.Dot(q, k[off:off+hd])
			}
		}
	}
	tensor.Scale(scores, scale)
	tensor.Softmax(scores)

	out := r.attnOut[t*c.Heads*hdv+head*hdv : t*c.Heads*hdv+(head+1)*hdv]
	clear(out)
	if r.kvType == tensor.F16 {
		// ... and the softmax weights to f16 for the product with f16 values.
		tensor.RoundF16(scores)
	}
	for b := 0; b*bs < n; b++ {
		_, vb := cache.Block(l, b)
		p := scores[b*bs : min(n, (b+1)*bs)]
		switch r.kvType {
		case tensor.F16:
			tensor.AxpysF16(out, p, f16View(vb)[kvh*hdv:], vDim)
		case tensor.Q8_0:
			tensor.AxpysQ80(out, p, vb[kvh*r.kvType.RowBytes(hdv):], vRow)
		default:
			v := f32View(vb)
			for j, w := range p {
				off := j*vDim + kvh*hdv
				tensor.Axpy(out, w, v[off:off+hdv])
			}
		}
	}
}

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
