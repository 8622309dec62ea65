package model

import (
	"context"
	"fmt"

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
	// sharedWindowRows is how many shared positions attendShared passes
	// over at once (sharedWindowRows; tests lower it).
	sharedWindowRows int
	grouping         groupScratch // passGroups'
	// rope holds each token's RoPE angle table (ropeLen values), computed
	// once per pass instead of twice per layer.
	rope    []float32
	ropeLen int
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

		groupScoreLimit:  maxGroupScores,
		sharedWindowRows: sharedWindowRows,
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
		// Store this token's keys and values in its cache at its position,
		// converted to the KV type.
		cache := batch[r.taskSeq[t]].Cache
		bs := cache.BlockSize()
		kb, vb := cache.Block(l, pos/bs)
		off := pos % bs
		r.storeKV(kb, off*kvDim, k)
		r.storeKV(vb, off*vDim, v)
	})
	// Attention over each token's cache, and its output projection
	// (attention.go chooses how).
	r.attention(l, batch, T, ly.O, r.proj[:T*E])

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
