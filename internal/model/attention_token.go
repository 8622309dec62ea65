package model

import "github.com/kvserve/kvserve/internal/tensor"

// The attnByToken path (see attnPathFor): a task per token, for f16 keys
// and values, inside the output projection's job.

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
// addresses, mostly in DRAM for a batch of long contexts, and computing on
// a block takes far less time than fetching the next, so the request for
// the next block is spread over the block's work: a share of its lines
// before each KV head's products. Requesting a whole block at once fills
// the core's miss queue and stalls it until the lines begin to arrive.
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

// span is bytes of a cache block to request (keySpan, valueSpan).
type span struct {
	b    []byte
	size int
}

func spanOf(b []byte, size int) span { return span{b, size} }

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

	// The shared blocks' keys, a window of them at a time, then each
	// token's own keys and weights. After the shared blocks come the first
	// token's own keys (its values when it has none).
	kb, size := r.keySpan(l, first, 0)
	tensor.PrefetchRows(kb, 1, size, 0)
	tail := spanOf(r.keySpan(l, first, shared))
	if tail.b == nil {
		tail = spanOf(r.valueSpan(l, first, 0))
	}
	r.sharedWindows(ws, l, first, shared, false, tail, func(kvh, w0, rows int, table [][]uint16) {
		for i := range tasks {
			a := &tasks[i]
			tensor.DotsF16HeadsPaged(a.scores[kvh*G*a.n+w0*bs:], a.n, rows, a.q[kvh*G*hd:(kvh+1)*G*hd], hd, table, kvh*hd, bs, kvDim)
		}
	})
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

	// The shared blocks' values, a window at a time, then each token's own
	// values; after the shared ones come the first token's own.
	r.sharedWindows(ws, l, first, shared, true, spanOf(r.valueSpan(l, first, shared)), func(kvh, w0, rows int, table [][]uint16) {
		for i := range tasks {
			a := &tasks[i]
			tensor.AxpysF16HeadsPaged(a.out[kvh*G*hdv:(kvh+1)*G*hdv], hdv, a.scores[kvh*G*a.n+w0*bs:], a.n, rows, table, kvh*hdv, bs, vDim)
		}
	})
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

// sharedWindows passes over the first shared blocks of a's cache in layer l
// (keys, or values when values is set), a window of r.sharedWindowRows
// positions at a time: for each window and KV head it requests that head's
// share of what follows the window (the next window, or after the last,
// tail) and calls fn with the window's first block, its positions and its
// blocks as f16 rows.
func (r *Runner) sharedWindows(ws *attnScratch, l int, a *tokenAttn, shared int, values bool, tail span, fn func(kvh, w0, rows int, table [][]uint16)) {
	bs := a.cache.BlockSize()
	win := max(1, r.sharedWindowRows/bs)
	blockSpan := r.keySpan
	if values {
		blockSpan = r.valueSpan
	}
	for w0 := 0; w0 < shared; w0 += win {
		w1 := min(w0+win, shared)
		table := ws.window[:0]
		for b := w0; b < w1; b++ {
			kb, vb := a.cache.Block(l, b)
			if values {
				kb = vb
			}
			table = append(table, f16View(kb))
		}
		next := ws.next[:0]
		for b := w1; b < min(w1+win, shared); b++ {
			next = append(next, spanOf(blockSpan(l, a, b)))
		}
		if w1 == shared {
			next = append(next, tail)
		}
		for kvh := range r.m.Config.KVHeads {
			for _, n := range next {
				r.request(n.b, n.size, kvh)
			}
			fn(kvh, w0, (w1-w0)*bs, table)
		}
		ws.window, ws.next = table, next
	}
}
