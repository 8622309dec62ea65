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
// (headRows); f16 a window of blocks at a time (attendHeadF16).
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
	if r.kvType == tensor.F16 {
		r.attendHeadF16(l, cache, n, q, kvh, pf, scores, r.attnOut[t*c.Heads*hdv+head*hdv:t*c.Heads*hdv+(head+1)*hdv], ws)
		return
	}
	for b := 0; b*bs < n; b++ {
		kb, _ := cache.Block(l, b)
		pf.next(cache, l, b, n)
		dst := scores[b*bs : min(n, (b+1)*bs)]
		switch r.kvType {
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
	for b := 0; b*bs < n; b++ {
		_, vb := cache.Block(l, b)
		p := scores[b*bs : min(n, (b+1)*bs)]
		switch r.kvType {
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

// attendHeadF16 is attendHead's f16 path: a window of blocks a call
// (attnWindowRows), the next window's keys and this window's values
// requested before it is read.
func (r *Runner) attendHeadF16(l int, cache Cache, n int, q []float32, kvh int, pf headRows, scores, out []float32, ws *attnScratch) {
	c := &r.m.Config
	hd, hdv, kvDim, vDim := c.HeadDim, c.HeadDimV, c.KVDim(), c.KVHeads*c.HeadDimV
	bs := cache.BlockSize()
	win := max(1, r.windowRows/bs)
	blocks := (n + bs - 1) / bs
	for b := 1; b < min(win, blocks); b++ { // the first window's (attendHead requested block 0)
		pf.keys(cache, l, b, n)
	}
	for w0 := 0; w0 < blocks; w0 += win {
		w1 := min(w0+win, blocks)
		table := ws.window[:0]
		for b := w0; b < w1; b++ {
			kb, _ := cache.Block(l, b)
			table = append(table, f16View(kb))
			pf.values(cache, l, b, n)
			if b+win < blocks {
				pf.keys(cache, l, b+win, n)
			}
		}
		ws.window = table
		rows := min(n, w1*bs) - w0*bs
		tensor.DotsF16HeadsPaged(scores[w0*bs:], rows, rows, q, hd, table, kvh*hd, bs, kvDim)
	}
	tensor.Scale(scores, r.attnScale())
	tensor.Softmax(scores)
	tensor.RoundF16(scores) // the weights to f16 for the product with f16 values
	clear(out)
	for w0 := 0; w0 < blocks; w0 += win {
		w1 := min(w0+win, blocks)
		table := ws.window[:0]
		for b := w0; b < w1; b++ {
			_, vb := cache.Block(l, b)
			table = append(table, f16View(vb))
		}
		ws.window = table
		rows := min(n, w1*bs) - w0*bs
		tensor.AxpysF16HeadsPaged(out, hdv, scores[w0*bs:], rows, rows, table, kvh*hdv, bs, vDim)
	}
}
