package sample

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// smallK is the largest top-k served from the candidate heap; larger values
// go through the bucket selection.
const smallK = 256

// poolSize is how many of the best tokens the first pass keeps when sampling
// without a small top-k: enough to hold the top-p nucleus and the min-p set of
// most real next-token distributions, so that they need no further pass.
const poolSize = 512

// blockSize is the number of token ids per partial sum of a full-vocabulary
// draw.
const blockSize = 1024

// minTemperature is the smallest temperature that samples; below it decoding
// is greedy (vLLM's threshold), which also keeps 1/T finite.
const minTemperature = 1e-5

// TokenLogprob is one entry of Logprobs.Top.
type TokenLogprob struct {
	Token   int32   `json:"token"`
	Logprob float32 `json:"logprob"`
}

// Logprobs describes one sampling step. Logprob and Top are log-softmax values
// of the logits after logit bias and penalties, before temperature and
// truncation (see the package documentation for why).
type Logprobs struct {
	// Token is the chosen token (as returned by Sample).
	Token int32 `json:"token"`
	// Logprob is Token's log-probability, or NaN when neither
	// Params.Logprobs nor Params.TopLogprobs asked for it.
	Logprob float32 `json:"logprob"`
	// Top holds the Params.TopLogprobs most likely tokens, most likely first
	// (ties: lower id first). It is the Sampler's own buffer, valid until the
	// next call to Sample: copy it to keep it.
	Top []TokenLogprob `json:"top,omitempty"`
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

	greedy       bool
	invT         float32 // 1/Temperature (sampling only)
	dMin         float32 // min-p: keep d ≤ dMin; +Inf when off
	topP         float64 // 1 when off
	topK         int     // 0 when off
	repeat       float32 // 1 when off
	repeatLastN  int     // -1: whole sequence
	wantLogprob  bool
	freqPresence bool
	penaltiesOn  bool
	pool         int // candidates kept by the first pass
	bias         []biasEntry
	vocabSize    int
	work         []float32
	counts       []int32
	heap         []item
	top          []TokenLogprob
	blocks       []float64
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
	s.greedy = p.Temperature < minTemperature
	if !s.greedy {
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
	s.pool = max(1, p.TopLogprobs)
	if !s.greedy {
		if s.topK > 0 && s.topK <= smallK {
			s.pool = max(s.pool, s.topK)
		} else {
			s.pool = max(s.pool, poolSize)
		}
	}
	s.heap = make([]item, 0, s.pool)
	s.top = make([]TokenLogprob, 0, p.TopLogprobs)
	return s, nil
}

// Seed returns the seed in use: Params.Seed, or the one picked for it when it
// was 0. A new Sampler with Params.Seed set to it repeats this one's choices.
func (s *Sampler) Seed() uint64 { return s.seed }

// Params returns the parameters the Sampler was created with.
func (s *Sampler) Params() Params { return s.p }

// Sample picks the next token from logits (one entry per token id; normally
// vocabSize entries, any length works) given the tokens generated so far,
// oldest first, which every penalty sees. A caller that also wants the
// repetition penalty to see the prompt uses SampleSeq. The logits are not
// modified. Sample costs O(len(logits) + len(output)).
//
// It returns -1 only when no logit is a number above -Inf (after bias), which
// no working model produces.
func (s *Sampler) Sample(logits []float32, output []int32) (int32, Logprobs) {
	return s.SampleSeq(logits, output, 0)
}

// SampleSeq is Sample for a whole sequence: seq is the prompt (its first
// prompt entries) followed by the tokens generated so far. The penalties
// follow vLLM, which keeps llama.cpp's repetition penalty and OpenAI's
// presence and frequency penalties apart: the repetition penalty covers the
// last RepeatLastN tokens of seq, prompt included, because a prompt's words
// are as much a repetition as the model's own; presence and frequency
// penalties count generated tokens only, as OpenAI defines them. It costs
// O(len(logits) + len(seq) − prompt + RepeatLastN).
func (s *Sampler) SampleSeq(logits []float32, seq []int32, prompt int) (int32, Logprobs) {
	nan := float32(math.NaN())
	z := s.adjust(logits, seq, prompt)
	top := s.selectTop(z)
	if len(top) > 0 && math.IsInf(float64(top[0].z), 1) {
		z = s.sanitize(z)
		top = s.selectTop(z)
	}
	if len(top) == 0 {
		return -1, Logprobs{Token: -1, Logprob: nan}
	}
	mx := top[0].z
	// Logprobs are (z − mx) − log Σ exp(z_i − mx): subtracting mx first
	// keeps them exact even for huge logits.
	tok := top[0].id
	logSum := math.NaN()
	if s.greedy {
		if s.wantLogprob {
			l, _ := s.massPass(z, mx, true, false, nil)
			logSum = math.Log(l)
		}
	} else {
		tok, logSum = s.sampleTemp(z, top)
	}
	lp := Logprobs{Token: tok, Logprob: nan}
	if s.wantLogprob {
		lp.Logprob = float32(float64(z[tok]-mx) - logSum)
		s.top = s.top[:0]
		for _, it := range top[:min(len(top), s.p.TopLogprobs)] {
			s.top = append(s.top, TokenLogprob{Token: it.id, Logprob: float32(float64(it.z-mx) - logSum)})
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

// adjust applies logit bias and penalties for a sequence seq whose first
// prompt tokens are the prompt (see SampleSeq). It returns logits itself
// when there is nothing to apply, and otherwise a modified copy in s.work.
func (s *Sampler) adjust(logits []float32, seq []int32, prompt int) []float32 {
	n := len(logits)
	prompt = min(max(prompt, 0), len(seq))
	pen := s.penaltiesOn && len(seq) > 0
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
		applyPenalties(z, seq, prompt, s.counts, s.repeat, s.repeatLastN, s.p.FrequencyPenalty, s.p.PresencePenalty)
	}
	return z
}

// inWindow marks, in a count, that the token occurs within the repetition
// window; the low bits count its generated occurrences.
const inWindow = 1 << 30

// applyPenalties applies the repetition penalty to every distinct token among
// the last lastN (−1: all) entries of seq, then the frequency and presence
// penalties to every distinct token in seq[prompt:] (0 ≤ prompt ≤ len(seq)),
// to z. counts must be all zero on entry and is all zero again on return;
// only the entries of seq are touched.
func applyPenalties(z []float32, seq []int32, prompt int, counts []int32, repeat float32, lastN int, freq, presence float32) {
	n := int32(len(z))
	// The penalties look at seq[window:] and seq[output:] only: without a
	// penalty the bound is len(seq), so that a long prompt costs nothing
	// it does not have to.
	window, output := len(seq), len(seq)
	if repeat != 1 {
		window = 0
		if lastN >= 0 && len(seq) > lastN {
			window = len(seq) - lastN
		}
	}
	freqPresence := freq != 0 || presence != 0
	if freqPresence {
		output = prompt
	}
	from := min(window, output)
	for i := from; i < len(seq); i++ {
		t := seq[i]
		if t < 0 || t >= n {
			continue
		}
		if i >= output {
			counts[t]++
		}
		if i >= window {
			counts[t] |= inWindow
		}
	}
	for _, t := range seq[from:] {
		if t < 0 || t >= n || counts[t] == 0 {
			continue
		}
		c := counts[t]
		counts[t] = 0
		v := z[t]
		if c&inWindow != 0 {
			if v <= 0 {
				v *= repeat
			} else {
				v /= repeat
			}
		}
		if k := c &^ inWindow; k > 0 {
			v -= float32(k)*freq + presence
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
