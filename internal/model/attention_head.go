package model

import (
	"math"

	"github.com/kvserve/kvserve/internal/tensor"
)

// The attnByHead path (see attnPathFor): a task per (token, query head),
// for any KV type.

// attendHeads computes the pass's attention a (token, query head) pair per
// task (attnByHead).
func (r *Runner) attendHeads(l int, batch []Seq, T int) {
	c := &r.m.Config
	nw := len(r.workers)
	tasks := T * c.Heads
	r.pool.Parallel(nw, func(lo, hi int) {
		for w := lo; w < hi; w++ {
			for task := tasks * w / nw; task < tasks*(w+1)/nw; task++ {
				r.attendHead(l, batch, task/c.Heads, task%c.Heads, &r.workers[w])
			}
		}
	})
}

// attendHead computes query head head of token t: its scores over the
// keys of positions [0, pos], their softmax, and the values weighted by
// them, for any KV type, one block at a time while the next is prefetched
// (headRows).
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
	if r.kvType == tensor.F16 {
		// ... and the softmax weights to f16 for the product with f16 values.
		tensor.SoftmaxWeightsF16(scores, scale)
	} else {
		tensor.Scale(scores, scale)
		tensor.Softmax(scores)
	}

	out := r.attnOut[t*c.Heads*hdv+head*hdv : t*c.Heads*hdv+(head+1)*hdv]
	clear(out)
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
