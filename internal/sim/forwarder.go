package sim

import (
	"context"
	"fmt"

	"time"

	"github.com/kvserve/kvserve/internal/batch"
)

// Options configures a Forwarder. The zero value of each field means its
// default.
type Options struct {
	// Clock, when set, is advanced by each pass's modelled cost (virtual
	// time); when nil, each pass sleeps its cost (real time).
	Clock *VirtualClock
	// Seed varies the generated tokens (default 0).
	Seed uint64
	// EndOfGeneration is the token a sample ends with when it reaches its
	// expected output length; -1 (or any value outside the vocabulary)
	// means never: samples then end at max_tokens.
	EndOfGeneration int32
	// Candidates are the tokens the simulator generates (default: every
	// token but EndOfGeneration). A server passes ordinary words, so that
	// its output reads as text.
	Candidates []int32
	// Vocab overrides the profile's vocabulary size (0: the profile's). A
	// trace replay, whose tokens stand for nothing, uses a small one: the
	// engine's sampler reads every logit of every sequence at every step.
	Vocab int
}

// Forwarder is the simulator's forward pass (engine.Forwarder). It serves
// one engine, from that engine's step loop.
type Forwarder struct {
	profile    *Profile
	shape      batch.Shape
	cost       Cost
	clock      *VirtualClock
	seed       uint64
	eog        int32
	candidates []int32
	background []float32 // a row of the logit every non-candidate gets
}

// The logits: every token gets background, a few candidates stand above it
// in a fixed order, so greedy sampling picks the first, temperature
// sampling one of them (the background's total mass is negligible: e^-30
// per token), and a constraint that masks every candidate leaves the
// background tokens it allows to choose from.
const (
	background    = -30
	numCandidates = 4
)

// NewForwarder builds a simulated forward pass from p.
func NewForwarder(p *Profile, o Options) (*Forwarder, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	shape, err := p.Shape.Batch()
	if err != nil {
		return nil, err
	}
	if o.Vocab > 0 {
		shape.Vocab = o.Vocab
	}
	f := &Forwarder{profile: p, shape: shape, cost: p.Cost, clock: o.Clock, seed: o.Seed, eog: o.EndOfGeneration}
	if int(f.eog) >= shape.Vocab {
		f.eog = -1
	}
	for _, t := range o.Candidates {
		if t < 0 || int(t) >= shape.Vocab {
			return nil, fmt.Errorf("sim: candidate token %d outside the vocabulary of %d", t, shape.Vocab)
		}
		if t != f.eog {
			f.candidates = append(f.candidates, t)
		}
	}
	if len(o.Candidates) > 0 && len(f.candidates) == 0 {
		return nil, fmt.Errorf("sim: no candidate tokens beside the end-of-generation token")
	}
	if len(f.candidates) == 0 && shape.Vocab < 2 {
		return nil, fmt.Errorf("sim: a vocabulary of %d tokens leaves nothing to generate", shape.Vocab)
	}
	f.background = make([]float32, shape.Vocab)
	for i := range f.background {
		f.background[i] = background
	}
	return f, nil
}

// Shape reports the profile's shape.
func (f *Forwarder) Shape() batch.Shape { return f.shape }

// Cost returns the modelled duration of a pass over seqs.
func (f *Forwarder) Cost(seqs []batch.Seq) time.Duration { return f.cost.Time(FeaturesOf(seqs)) }

// Forward fills the requested logits and spends the pass's modelled time.
func (f *Forwarder) Forward(ctx context.Context, seqs []batch.Seq) error {
	start := time.Now()
	d := f.Cost(seqs)
	for i := range seqs {
		if seqs[i].Logits != nil {
			f.logits(&seqs[i])
		}
	}
	if f.clock != nil {
		f.clock.Advance(d)
		return nil
	}
	if rest := d - time.Since(start); rest > 0 {
		t := time.NewTimer(rest)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// logits writes s's next-token logits.
func (f *Forwarder) logits(s *batch.Seq) {
	out := s.Logits[:f.shape.Vocab]
	copy(out, f.background)
	end := s.Pos + len(s.Tokens) // the next token's position
	if f.eog >= 0 && s.ExpectedOutput > 0 && s.PromptLen > 0 && end-s.PromptLen >= s.ExpectedOutput {
		out[f.eog] = 10
		return
	}
	last, prev := int32(-1), int32(-1)
	if n := len(s.Tokens); n > 0 {
		last = s.Tokens[n-1]
		if n > 1 {
			prev = s.Tokens[n-2]
		}
	}
	h := mix(f.seed ^ mix(uint64(uint32(last))<<32|uint64(uint32(prev))) ^ mix(uint64(end)))
	for k := range numCandidates {
		h = mix(h + uint64(k))
		t := f.pick(h)
		// A token already placed keeps its higher logit.
		if out[t] == background {
			out[t] = float32(8 - k)
		}
	}
}

// pick maps a hash to a candidate token.
func (f *Forwarder) pick(h uint64) int32 {
	if len(f.candidates) > 0 {
		return f.candidates[h%uint64(len(f.candidates))]
	}
	t := int32(h % uint64(f.shape.Vocab))
	if t == f.eog {
		t = (t + 1) % int32(f.shape.Vocab)
	}
	return t
}

// mix is a 64-bit finaliser (splitmix64's): every input bit moves every
// output bit.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// Profile returns the profile the forward pass models.
func (f *Forwarder) Profile() *Profile { return f.profile }
