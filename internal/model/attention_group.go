package model

import (
	"cmp"
	"slices"
	"unsafe"

	"github.com/kvserve/kvserve/internal/tensor"
)

// The attnByGroup path (see attnPathFor): a task per (group of tokens
// sharing cache blocks, KV head), for f16 or Q8_0 keys and values; and the
// grouping of a pass's tokens by the blocks their caches share, which
// attnByToken uses too.

// attendGroups computes the pass's attention a (group of tokens, KV head)
// pair per task (attnByGroup): the tokens whose caches share blocks are
// grouped (passGroups), split until there are at least two tasks per
// thread.
func (r *Runner) attendGroups(l int, batch []Seq, T int) {
	c := &r.m.Config
	nw := len(r.workers)
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
