package sample

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// Histogram geometry: the distance of a token below the best one, in nats at
// the sampling temperature, d = (max − logit)/T ∈ [0, expCut), falls in
// bucket ⌊d·bucketsPerNat⌋. Multiplying by a power of two is exact, so
// "bucket(d) ≤ b" is exactly "d < (b+1)/bucketsPerNat" and gathering a bucket
// needs no integer conversion.
const (
	bucketsPerNat = 32
	nBuckets      = expCut * bucketsPerNat
)

// smallK is the largest top-k handled by gathering every candidate and sorting
// them; larger values go through the bucket selection like top-p.
const smallK = 256

// TokenLogprob is one entry of Logprobs.Top.
type TokenLogprob struct {
	Token   int32
	Logprob float32
}

// Logprobs describes one sampling step. Logprob and Top are log-softmax values
// of the logits after logit bias and penalties, before temperature and
// truncation (see the package documentation for why).
type Logprobs struct {
	// Token is the chosen token (as returned by Sample).
	Token int32
	// Logprob is Token's log-probability, or NaN when neither
	// Params.Logprobs nor Params.TopLogprobs asked for it.
	Logprob float32
	// Top holds the Params.TopLogprobs most likely tokens, most likely first
	// (ties: lower id first). It is the Sampler's own buffer, valid until the
	// next call to Sample: copy it to keep it.
	Top []TokenLogprob
}

// biasEntry is one logit-bias entry; the Sampler keeps them sorted by id so
// that applying them is deterministic and map-free.
type biasEntry struct {
	id int32
	v  float32
}

// item is a candidate token with its adjusted logit.
type item struct {
	z  float32
	id int32
}

// byRank orders items most likely first, ties by lower id: the order that
// top-k and top-p cut and greedy decoding picks from.
func byRank(a, b item) int {
	if a.z != b.z {
		if a.z > b.z {
			return -1
		}
		return 1
	}
	return cmp.Compare(a.id, b.id)
}

// Sampler picks tokens for one sequence. It owns its random source and all of
// its scratch space, so it must not be used by two goroutines at once; create
// one per sequence (New is cheap; scratch grows on first use).
//
// Sample makes a few linear passes over the logits (see the package
// documentation) and, once its scratch has grown to the vocabulary size,
// allocates nothing.
type Sampler struct {
	p    Params
	seed uint64
	rng  rand.PCG

	invT         float32 // 1/Temperature (sampling only)
	dMin         float32 // min-p: keep d ≤ dMin; +Inf when off
	topP         float64 // 1 when off
	topK         int     // 0 when off
	repeat       float32 // 1 when off
	repeatLastN  int     // -1: whole history
	wantLogprob  bool
	freqPresence bool
	penaltiesOn  bool
	bias         []biasEntry
	vocabSize    int
	work         []float32
	counts       []int32
	top          []TokenLogprob
	topZ         []float32
	hcnt         [nBuckets]int32
	hmass        [nBuckets]float64
	cand, cand2  []item

	// draw, when set (tests only), replaces the random source.
	draw func() float64
}

// New validates p and returns a Sampler for logits of vocabSize entries.
func New(p Params, vocabSize int) (*Sampler, error) {
	if err := p.validate(vocabSize); err != nil {
		return nil, err
	}
	s := &Sampler{p: p, vocabSize: vocabSize}
	s.seed = p.Seed
	for s.seed == 0 {
		s.seed = rand.Uint64()
	}
	s.rng.Seed(s.seed, s.seed^0x9e3779b97f4a7c15)
	if p.Temperature > 0 {
		s.invT = 1 / p.Temperature
	}
	s.dMin = float32(math.Inf(1))
	if p.MinP > 0 {
		s.dMin = float32(-math.Log(float64(p.MinP)))
	}
	s.topP = 1
	if p.TopP > 0 && p.TopP < 1 {
		s.topP = float64(p.TopP)
	}
	if p.TopK > 0 && p.TopK < vocabSize {
		s.topK = p.TopK
	}
	s.repeat = 1
	if p.RepeatPenalty > 0 {
		s.repeat = p.RepeatPenalty
	}
	s.repeatLastN = p.RepeatLastN
	if s.repeatLastN == 0 {
		s.repeatLastN = DefaultRepeatLastN
	}
	s.freqPresence = p.PresencePenalty != 0 || p.FrequencyPenalty != 0
	s.penaltiesOn = s.repeat != 1 || s.freqPresence
	s.wantLogprob = p.Logprobs || p.TopLogprobs > 0
	for id, v := range p.LogitBias {
		s.bias = append(s.bias, biasEntry{id, v})
	}
	slices.SortFunc(s.bias, func(a, b biasEntry) int { return cmp.Compare(a.id, b.id) })
	s.top = make([]TokenLogprob, 0, p.TopLogprobs)
	s.topZ = make([]float32, 0, p.TopLogprobs)
	s.cand = make([]item, 0, 1024)
	s.cand2 = make([]item, 0, 1024)
	return s, nil
}

// Seed returns the seed in use: Params.Seed, or the one picked for it when it
// was 0. A new Sampler with Params.Seed set to it repeats this one's choices.
func (s *Sampler) Seed() uint64 { return s.seed }

// Params returns the parameters the Sampler was created with.
func (s *Sampler) Params() Params { return s.p }

// Sample picks the next token from logits (one entry per token id; normally
// vocabSize entries, any length works) given the history of tokens to
// penalize, oldest first. Which tokens form the history is the caller's
// choice: OpenAI's presence and frequency penalties count the tokens
// generated so far, llama.cpp's repetition penalty also sees the prompt. The
// logits are not modified. Sample costs O(len(logits) + len(history)).
//
// It returns -1 only when no logit is a number above -Inf (after bias), which
// no working model produces.
func (s *Sampler) Sample(logits []float32, history []int32) (int32, Logprobs) {
	nan := float32(math.NaN())
	z := s.adjust(logits, history)
	mx, arg := s.scanMax(z)
	if arg >= 0 && math.IsInf(float64(mx), 1) {
		z = s.sanitize(z)
		mx, arg = s.scanMax(z)
	}
	if arg < 0 {
		return -1, Logprobs{Token: -1, Logprob: nan}
	}
	// Logprobs are (z − mx) − log Σ exp(z_i − mx): subtracting mx first
	// keeps them exact even for huge logits.
	tok := arg
	logSum := math.NaN()
	if s.p.Temperature == 0 {
		if s.wantLogprob {
			logSum = logSumExpRel(z, mx)
		}
	} else {
		tok, logSum = s.sampleTemp(z, mx)
	}
	lp := Logprobs{Token: tok, Logprob: nan}
	if s.wantLogprob {
		lp.Logprob = float32(float64(z[tok]-mx) - logSum)
		for i := range s.top {
			s.top[i].Logprob = float32(float64(s.topZ[i]-mx) - logSum)
		}
		lp.Top = s.top
	}
	return tok, lp
}

// grow returns buf resized to n entries, reallocating only when it is short.
func grow[T any](buf []T, n int) []T {
	if cap(buf) < n {
		return make([]T, n)
	}
	return buf[:n]
}

// adjust applies logit bias and penalties. It returns logits itself when
// there is nothing to apply, and otherwise a modified copy in s.work.
func (s *Sampler) adjust(logits []float32, history []int32) []float32 {
	n := len(logits)
	pen := s.penaltiesOn && len(history) > 0
	if len(s.bias) == 0 && !pen {
		return logits
	}
	s.work = grow(s.work, n)
	z := s.work
	copy(z, logits)
	for _, b := range s.bias {
		if int(b.id) < n {
			z[b.id] += b.v
		}
	}
	if pen {
		s.counts = grow(s.counts, n) // all zero between calls (see below)
		applyPenalties(z, history, s.counts, s.repeat, s.repeatLastN, s.p.FrequencyPenalty, s.p.PresencePenalty)
	}
	return z
}

// inWindow marks, in a count, that the token occurs within the repetition
// window; the low bits count occurrences in the whole history.
const inWindow = 1 << 30

// applyPenalties applies the repetition penalty to every distinct token among
// the last lastN (−1: all) entries of history, then the frequency and
// presence penalties to every distinct token in history, to z. counts must be
// all zero on entry and is all zero again on return; only the entries of
// history are touched.
func applyPenalties(z []float32, history []int32, counts []int32, repeat float32, lastN int, freq, presence float32) {
	n := int32(len(z))
	split := 0
	if lastN >= 0 && len(history) > lastN {
		split = len(history) - lastN
	}
	freqPresence := freq != 0 || presence != 0
	if freqPresence {
		for _, t := range history[:split] {
			if t >= 0 && t < n {
				counts[t]++
			}
		}
	}
	for _, t := range history[split:] {
		if t >= 0 && t < n {
			counts[t] = (counts[t] + 1) | inWindow
		}
	}
	for _, t := range history {
		if t < 0 || t >= n || counts[t] == 0 {
			continue
		}
		c := counts[t]
		counts[t] = 0
		v := z[t]
		if c&inWindow != 0 && repeat != 1 {
			if v <= 0 {
				v *= repeat
			} else {
				v /= repeat
			}
		}
		if freqPresence {
			v -= float32(c&^inWindow)*freq + presence
		}
		z[t] = v
	}
}

// sanitize copies z into s.work (if it is not there already) with +Inf
// replaced by the largest float32 and NaN by -Inf, so that a model emitting
// +Inf still gets a well-defined distribution (uniform over its +Inf tokens).
func (s *Sampler) sanitize(z []float32) []float32 {
	w := grow(s.work, len(z))
	if len(z) > 0 && &w[0] != &z[0] {
		copy(w, z)
	}
	s.work = w
	for i, v := range w {
		switch {
		case v != v:
			w[i] = float32(math.Inf(-1))
		case v > math.MaxFloat32:
			w[i] = math.MaxFloat32
		}
	}
	return w
}

// scanMax returns the largest entry of z and its lowest index (-1 and -Inf
// when there is no entry above -Inf; NaN never wins), and collects the
// TopLogprobs best entries into s.top/s.topZ.
func (s *Sampler) scanMax(z []float32) (float32, int32) {
	mx := float32(math.Inf(-1))
	arg := int32(-1)
	if cap(s.top) == 0 {
		for i, v := range z {
			if v > mx {
				mx, arg = v, int32(i)
			}
		}
		return mx, arg
	}
	// Keep the best entries in s.topZ/s.top, best first; thr is the value a
	// new entry must beat once the list is full (ties keep the lower id).
	s.top, s.topZ = s.top[:0], s.topZ[:0]
	capN := cap(s.top)
	thr := float32(math.Inf(-1))
	for i, v := range z {
		if !(v > thr) { // thr is -Inf until the list is full
			continue
		}
		if v > mx {
			mx, arg = v, int32(i)
		}
		// Insert after every entry ≥ v.
		j := len(s.topZ)
		if j == capN {
			j--
		} else {
			s.top = append(s.top, TokenLogprob{})
			s.topZ = append(s.topZ, 0)
		}
		for j > 0 && s.topZ[j-1] < v {
			s.topZ[j], s.top[j] = s.topZ[j-1], s.top[j-1]
			j--
		}
		s.topZ[j], s.top[j] = v, TokenLogprob{Token: int32(i)}
		if len(s.topZ) == capN {
			thr = s.topZ[capN-1]
		}
	}
	return mx, arg
}

// logSumExpRel returns log Σ exp(z_i − mx) given mx = max z_i (finite).
// sampleTemp computes the same sum in the same order, so greedy and sampled
// steps report bit-identical logprobs.
func logSumExpRel(z []float32, mx float32) float64 {
	var sum float64
	for _, v := range z {
		if x := v - mx; x >= -expCut {
			sum += float64(exp32(x))
		}
	}
	return math.Log(sum)
}

// dist returns d = (mx − v)/T, the distance below the best token in nats at
// the sampling temperature. Every pass computes it with this one expression
// so that a token lands in the same bucket each time.
func dist(mx, v, invT float32) float32 { return (mx - v) * invT }

// uniform returns a random float64 in [0, 1) with 53 random bits.
func (s *Sampler) uniform() float64 {
	if s.draw != nil {
		return s.draw()
	}
	return float64(s.rng.Uint64()>>11) * 0x1p-53
}

// sampleTemp draws a token at temperature 1/s.invT with top-k, top-p and
// min-p applied, and returns it with log Σ exp(z_i − mx) of the untempered
// distribution (NaN unless logprobs are wanted).
func (s *Sampler) sampleTemp(z []float32, mx float32) (int32, float64) {
	invT := s.invT
	smallTopK := s.topK > 0 && s.topK <= smallK && s.topK < len(z)
	needMass := !smallTopK
	sameExp := invT == 1
	want := s.wantLogprob
	clear(s.hcnt[:])
	if needMass {
		clear(s.hmass[:])
	}
	var lsum float64
	for _, v := range z {
		x := v - mx
		var e1 float32
		if want && x >= -expCut {
			e1 = exp32(x)
			lsum += float64(e1)
		}
		d := dist(mx, v, invT)
		if !(d < expCut) { // far below, -Inf or NaN
			continue
		}
		b := int(d * bucketsPerNat)
		s.hcnt[b]++
		if needMass {
			if !(sameExp && want) {
				e1 = exp32(-d)
			}
			s.hmass[b] += float64(e1)
		}
	}
	logSum := math.NaN()
	if want {
		logSum = math.Log(lsum)
	}
	if smallTopK {
		return s.drawSmallK(z, mx), logSum
	}
	return s.drawBuckets(z, mx), logSum
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

// weight is a candidate's unnormalized probability at the sampling temperature.
func weight(mx, v, invT float32) float32 { return exp32(-dist(mx, v, invT)) }

// drawSmallK handles top-k ≤ smallK: gather the buckets that hold the k best
// tokens, sort them, cut, draw.
func (s *Sampler) drawSmallK(z []float32, mx float32) int32 {
	k := s.topK
	bk, have := 0, 0
	for ; bk < nBuckets; bk++ {
		have += int(s.hcnt[bk])
		if have >= k {
			break
		}
	}
	c := gather(s.cand[:0], z, mx, s.invT, 0, min(bk+1, nBuckets))
	s.cand = c
	slices.SortFunc(c, byRank)
	if len(c) > k {
		c = c[:k]
	}
	return s.drawSorted(c, mx)
}

// drawSorted applies top-p (relative to the mass of c) and min-p to the
// ranked candidates c and draws one.
func (s *Sampler) drawSorted(c []item, mx float32) int32 {
	invT := s.invT
	n := len(c)
	for i, it := range c { // min-p: d ascending along c
		if dist(mx, it.z, invT) > s.dMin {
			n = i
			break
		}
	}
	if s.topP < 1 {
		var total float64
		for _, it := range c {
			total += float64(weight(mx, it.z, invT))
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
	var total float64
	for _, it := range c {
		total += float64(weight(mx, it.z, invT))
	}
	u := s.uniform() * total
	return pickIn(c, mx, invT, u)
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
