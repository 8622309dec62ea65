package sample

import (
	"math"
	"slices"
)

// The fallback selection, for top-k above smallK and for top-p and min-p cuts
// that fall outside the first pass's candidates (flat distributions).
//
// Histogram geometry: the distance of a token below the best one in nats at
// the sampling temperature, d = (max − logit)/T ∈ [0, expCut), falls in
// bucket ⌊d·bucketsPerNat⌋. Multiplying by a power of two is exact, so
// "bucket(d) < b" is exactly "d < b/bucketsPerNat" and gathering a bucket
// needs no integer conversion. Every cut (top-k, top-p, min-p) keeps a prefix
// of the ranked tokens, so it is a bucket plus a rank inside that bucket: the
// histogram names the bucket, and only that bucket's tokens are gathered and
// sorted.
const (
	bucketsPerNat = 32
	nBuckets      = expCut * bucketsPerNat
)

// histPass fills the histogram of token distances at the sampling
// temperature: s.hcnt[b] counts, s.hmass[b] sums the weights of, the tokens
// with ⌊d·bucketsPerNat⌋ = b. Tokens at or beyond expCut are left out.
func (s *Sampler) histPass(z []float32, mx float32) {
	invT := s.invT
	clear(s.hcnt[:])
	clear(s.hmass[:])
	for _, v := range z {
		d := dist(mx, v, invT)
		if !(d < expCut) { // far below, -Inf or NaN
			continue
		}
		b := int(d * bucketsPerNat)
		s.hcnt[b]++
		s.hmass[b] += float64(exp32(-d))
	}
}

// gather appends to dst every token whose bucket lies in [lo, hi), in id order.
func gather(dst []item, z []float32, mx, invT float32, lo, hi int) []item {
	dLo := float32(lo) / bucketsPerNat
	dHi := float32(hi) / bucketsPerNat
	for i, v := range z {
		if d := dist(mx, v, invT); d >= dLo && d < dHi {
			dst = append(dst, item{z: v, id: int32(i)})
		}
	}
	return dst
}

// drawBuckets handles every case but small top-k, from the histogram of
// counts and masses filled by sampleTemp.
func (s *Sampler) drawBuckets(z []float32, mx float32) int32 {
	invT := s.invT
	last := nBuckets - 1
	for last > 0 && s.hcnt[last] == 0 {
		last--
	}
	var total float64
	for _, m := range s.hmass[:last+1] {
		total += m
	}

	// A cut is (bucket, rank): the candidates are every token in buckets
	// before the bucket plus the first rank tokens of that bucket, ranked.
	// none means "no cut": everything up to and including the last bucket.
	none := last + 1
	kB, kR := none, 0
	pB, pR := none, 0
	var listK, listP []item

	// top-k.
	massK := total
	if s.topK > 0 {
		have := 0
		for b := 0; b <= last; b++ {
			if have+int(s.hcnt[b]) >= s.topK {
				listK = gather(s.cand[:0], z, mx, invT, b, b+1)
				s.cand = listK
				slices.SortFunc(listK, byRank)
				kB, kR = b, s.topK-have
				massK = 0
				for _, m := range s.hmass[:b] {
					massK += m
				}
				for _, it := range listK[:kR] {
					massK += float64(weight(mx, it.z, invT))
				}
				break
			}
			have += int(s.hcnt[b])
		}
	}

	// top-p, relative to the top-k mass.
	if s.topP < 1 {
		target := s.topP * massK
		var cum float64
		b := 0
		for ; b < kB && b <= last; b++ {
			if cum+s.hmass[b] >= target {
				break
			}
			cum += s.hmass[b]
		}
		switch {
		case b == kB && kB != none: // inside the top-k cut bucket
			for i, it := range listK[:kR] {
				cum += float64(weight(mx, it.z, invT))
				if cum >= target {
					pB, pR, listP = kB, i+1, listK
					break
				}
			}
		case b <= last:
			listP = gather(s.cand2[:0], z, mx, invT, b, b+1)
			s.cand2 = listP
			slices.SortFunc(listP, byRank)
			pB, pR = b, len(listP)
			for i, it := range listP {
				cum += float64(weight(mx, it.z, invT))
				if cum >= target {
					pR = i + 1
					break
				}
			}
		}
	}

	// min-p: a distance threshold, so its cut bucket holds a prefix too.
	mB := none
	if s.dMin < expCut {
		mB = min(int(s.dMin*bucketsPerNat), none)
	}

	// The final set is the shortest of the three prefixes.
	fB := min(kB, pB, mB)
	var list []item
	r := 0
	if fB != none {
		switch fB {
		case kB:
			list = listK
		case pB:
			list = listP
		default:
			list = gather(s.cand2[:0], z, mx, invT, fB, fB+1)
			s.cand2 = list
			slices.SortFunc(list, byRank)
		}
		r = len(list)
		if fB == kB {
			r = min(r, kR)
		}
		if fB == pB {
			r = min(r, pR)
		}
		if fB == mB {
			for i, it := range list[:r] {
				if dist(mx, it.z, invT) > s.dMin {
					r = i
					break
				}
			}
		}
		list = list[:r]
	} else {
		fB = last + 1
	}
	var full float64
	for _, m := range s.hmass[:fB] {
		full += m
	}
	var part float64
	for _, it := range list {
		part += float64(weight(mx, it.z, invT))
	}
	if full+part <= 0 { // cannot happen (the best token has weight 1); be safe
		if len(list) > 0 {
			return list[0].id
		}
		return argmax(z)
	}
	u := s.uniform() * (full + part)
	if u >= full && len(list) > 0 {
		return pickIn(list, mx, invT, u-full)
	}
	// Find the bucket before fB where the running mass passes u.
	var cum float64
	b := 0
	for ; b < fB-1; b++ {
		if cum+s.hmass[b] > u {
			break
		}
		cum += s.hmass[b]
	}
	c := gather(s.cand2[:0], z, mx, invT, b, b+1)
	s.cand2 = c
	if len(c) == 0 { // only if rounding pointed at an empty bucket
		return argmax(z)
	}
	return pickIn(c, mx, invT, u-cum)
}

// argmax returns the lowest index of the largest entry of z (-1 if none is
// above -Inf).
func argmax(z []float32) int32 {
	mx, arg := float32(math.Inf(-1)), int32(-1)
	for i, v := range z {
		if v > mx {
			mx, arg = v, int32(i)
		}
	}
	return arg
}
