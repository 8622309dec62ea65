package sample

import (
	"math"
	"slices"
)

// selectTop returns the s.pool best entries of z (fewer when z has fewer
// entries above -Inf), best first, ties by lower id. NaN and -Inf entries are
// never selected.
//
// It is the one pass every Sample makes over the whole vocabulary: a binary
// heap holds the candidates with the worst at its root, and an entry costs a
// single comparison with that root unless it gets in — which, for logits in
// token-id order, happens O(pool·log(n/pool)) times. The worst case is
// logits that rise with the token id (every token gets in): measured at 2–7
// ms on a 151,936-token vocabulary, against about 0.1 ms for model-like
// logits. No model's output looks like that.
func (s *Sampler) selectTop(z []float32) []item {
	m := s.pool
	h := s.heap[:0]
	thr := float32(math.Inf(-1)) // the root's logit once the heap is full
	for i, v := range z {
		if !(v > thr) {
			// Not better than the worst candidate; an equal logit loses the
			// tie because its id is higher.
			continue
		}
		if len(h) < m {
			h = append(h, item{z: v, id: int32(i)})
			heapUp(h, len(h)-1)
			if len(h) == m {
				thr = h[0].z
			}
			continue
		}
		h[0] = item{z: v, id: int32(i)}
		heapDown(h, 0)
		thr = h[0].z
	}
	s.heap = h
	slices.SortFunc(h, byRank)
	return h
}

// worse reports whether a ranks below b (lower logit, or equal and higher id).
func worse(a, b item) bool { return a.z < b.z || a.z == b.z && a.id > b.id }

// heapUp and heapDown maintain a min-heap under worse: the worst item at 0.
func heapUp(h []item, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !worse(h[i], h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func heapDown(h []item, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		c := l
		if r := l + 1; r < len(h) && worse(h[r], h[l]) {
			c = r
		}
		if !worse(h[c], h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// dist returns d = (mx − v)/T, the distance below the best token in nats at
// the sampling temperature. Every pass computes it with this one expression
// so that a token gets the same weight and bucket each time.
func dist(mx, v, invT float32) float32 { return (mx - v) * invT }

// weight is a token's unnormalized probability at the sampling temperature:
// e^-d, and 0 beyond expCut.
func weight(mx, v, invT float32) float32 {
	d := dist(mx, v, invT)
	if !(d < expCut) {
		return 0
	}
	return exp32(-d)
}

// massPass sums over z, in one pass: with wantL, Σ exp(z_i − mx) (the
// untempered normalizer for logprobs); with wantT, Σ weight(z_i) at the
// sampling temperature, and the same per block of blockSize ids into blocks
// when it is not nil. The normalizer comes out bit-identical whatever else is
// computed alongside it, so greedy and sampled steps report the same
// logprobs.
//
// This is the only loop that evaluates an exponential per vocabulary entry,
// so each combination has its own loop body, and two accumulators per sum
// keep the float64 additions from serializing the loop.
func (s *Sampler) massPass(z []float32, mx float32, wantL, wantT bool, blocks []float64) (lsum, tsum float64) {
	invT := s.invT
	for b := 0; b*blockSize < len(z); b++ {
		blk := z[b*blockSize : min((b+1)*blockSize, len(z))]
		var l, t float64
		switch {
		case wantL && !wantT:
			l = sumExpRel(blk, mx)
		case wantT && !wantL:
			t = sumWeights(blk, mx, invT)
		case invT == 1:
			l = sumExpRel(blk, mx)
			t = l
		default:
			l, t = sumBoth(blk, mx, invT)
		}
		lsum += l
		tsum += t
		if blocks != nil {
			blocks[b] = t
		}
	}
	return lsum, tsum
}

// sumExpRel returns Σ exp(v − mx) over the entries within expCut of mx.
func sumExpRel(z []float32, mx float32) float64 {
	var a0, a1 float64
	i := 0
	for ; i+2 <= len(z); i += 2 {
		if x := z[i] - mx; x >= -expCut {
			a0 += float64(exp32(x))
		}
		if x := z[i+1] - mx; x >= -expCut {
			a1 += float64(exp32(x))
		}
	}
	if i < len(z) {
		if x := z[i] - mx; x >= -expCut {
			a0 += float64(exp32(x))
		}
	}
	return a0 + a1
}

// sumWeights returns Σ weight(v) at temperature 1/invT; with invT = 1 it
// equals sumExpRel bit for bit.
func sumWeights(z []float32, mx, invT float32) float64 {
	var a0, a1 float64
	i := 0
	for ; i+2 <= len(z); i += 2 {
		if d := dist(mx, z[i], invT); d < expCut {
			a0 += float64(exp32(-d))
		}
		if d := dist(mx, z[i+1], invT); d < expCut {
			a1 += float64(exp32(-d))
		}
	}
	if i < len(z) {
		if d := dist(mx, z[i], invT); d < expCut {
			a0 += float64(exp32(-d))
		}
	}
	return a0 + a1
}

// sumBoth computes sumExpRel and sumWeights in one loop, accumulating each
// exactly as they do.
func sumBoth(z []float32, mx, invT float32) (l, t float64) {
	var a0, a1, b0, b1 float64
	i := 0
	for ; i+2 <= len(z); i += 2 {
		v0, v1 := z[i], z[i+1]
		if x := v0 - mx; x >= -expCut {
			a0 += float64(exp32(x))
		}
		if x := v1 - mx; x >= -expCut {
			a1 += float64(exp32(x))
		}
		if d := dist(mx, v0, invT); d < expCut {
			b0 += float64(exp32(-d))
		}
		if d := dist(mx, v1, invT); d < expCut {
			b1 += float64(exp32(-d))
		}
	}
	if i < len(z) {
		if x := z[i] - mx; x >= -expCut {
			a0 += float64(exp32(x))
		}
		if d := dist(mx, z[i], invT); d < expCut {
			b0 += float64(exp32(-d))
		}
	}
	return a0 + a1, b0 + b1
}

// uniform returns a random float64 in [0, 1) with 53 random bits.
func (s *Sampler) uniform() float64 {
	if s.draw != nil {
		return s.draw()
	}
	return float64(s.rng.Uint64()>>11) * 0x1p-53
}

// sampleTemp draws a token at temperature 1/s.invT with top-k, top-p and
// min-p applied, given the pass-one candidates top (best first). It returns
// the token and log Σ exp(z_i − mx) of the untempered distribution (NaN
// unless logprobs are wanted).
//
// The candidates settle most requests without another look at the
// vocabulary: top-k ≤ smallK takes its k tokens from them; top-p needs one
// more pass for the total mass, then finds its nucleus among them unless the
// distribution is too flat; min-p needs nothing more when its threshold falls
// inside them; plain sampling needs one pass of partial sums. Everything else
// falls back to bucket selection (drawBuckets).
func (s *Sampler) sampleTemp(z []float32, top []item) (tok int32, logSum float64) {
	mx := top[0].z
	logSum = math.NaN()
	haveLogSum := false
	normalizer := func() {
		if s.wantLogprob && !haveLogSum {
			l, _ := s.massPass(z, mx, true, false, nil)
			logSum, haveLogSum = math.Log(l), true
		}
	}
	complete := len(top) < s.pool // top holds every token above -Inf
	k := s.topK
	if complete && k >= len(top) {
		k = 0
	}
	switch {
	case k > 0 && k <= len(top):
		normalizer()
		return s.drawSorted(top[:k], mx, 0), logSum
	case k > 0: // a large top-k: bucket selection
	case complete:
		normalizer()
		return s.drawSorted(top, mx, 0), logSum
	case s.topP < 1:
		l, total := s.massPass(z, mx, s.wantLogprob, true, nil)
		if s.wantLogprob {
			logSum, haveLogSum = math.Log(l), true
		}
		var cum float64
		for _, it := range top {
			cum += float64(weight(mx, it.z, s.invT))
		}
		if cum >= s.topP*total { // the nucleus lies within top
			return s.drawSorted(top, mx, total), logSum
		}
	case s.dMin < expCut: // min-p alone
		if dist(mx, top[len(top)-1].z, s.invT) > s.dMin { // its cut lies within top
			normalizer()
			return s.drawSorted(top, mx, 0), logSum
		}
	default: // nothing to cut: draw from the whole vocabulary
		nb := (len(z) + blockSize - 1) / blockSize
		s.blocks = grow(s.blocks, nb)
		l, total := s.massPass(z, mx, s.wantLogprob, true, s.blocks)
		if s.wantLogprob {
			logSum = math.Log(l)
		}
		return s.drawFull(z, mx, total), logSum
	}
	normalizer()
	s.histPass(z, mx)
	return s.drawBuckets(z, mx), logSum
}

// drawSorted applies top-p and min-p to the ranked candidates c and draws
// one. The top-p target is TopP times total, or times the mass of c when
// total is 0 (c is then the whole top-k set or the whole vocabulary).
func (s *Sampler) drawSorted(c []item, mx float32, total float64) int32 {
	invT := s.invT
	n := len(c)
	for i, it := range c { // min-p: d ascends along c
		if dist(mx, it.z, invT) > s.dMin {
			n = i
			break
		}
	}
	if s.topP < 1 {
		if total == 0 {
			for _, it := range c {
				total += float64(weight(mx, it.z, invT))
			}
		}
		target := s.topP * total
		var cum float64
		for i, it := range c[:n] {
			cum += float64(weight(mx, it.z, invT))
			if cum >= target {
				n = i + 1
				break
			}
		}
	}
	c = c[:max(n, 1)]
	var sum float64
	for _, it := range c {
		sum += float64(weight(mx, it.z, invT))
	}
	return pickIn(c, mx, invT, s.uniform()*sum)
}

// pickIn returns the first candidate at which the running weight exceeds u,
// or the last candidate with positive weight when rounding leaves u beyond
// the sum.
func pickIn(c []item, mx, invT float32, u float64) int32 {
	var cum float64
	last := c[0].id
	for _, it := range c {
		w := float64(weight(mx, it.z, invT))
		if w > 0 {
			last = it.id
		}
		cum += w
		if cum > u {
			return it.id
		}
	}
	return last
}

// drawFull draws from the whole vocabulary in id order, using the per-block
// masses left in s.blocks by massPass: it walks the blocks, then the ids of
// one block.
func (s *Sampler) drawFull(z []float32, mx float32, total float64) int32 {
	invT := s.invT
	u := s.uniform() * total
	var cum float64
	for b, m := range s.blocks {
		if cum+m <= u && b < len(s.blocks)-1 {
			cum += m
			continue
		}
		last := int32(-1)
		lo := b * blockSize
		for i, v := range z[lo:min(lo+blockSize, len(z))] {
			w := float64(weight(mx, v, invT))
			if w > 0 {
				last = int32(lo + i)
			}
			cum += w
			if cum > u {
				return int32(lo + i)
			}
		}
		if last >= 0 { // rounding left u just past this block's sum
			return last
		}
		break
	}
	return argmax(z)
}
