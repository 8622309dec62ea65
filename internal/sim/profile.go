package sim

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/kv"
)

// Profile is what the simulator needs to stand in for one model on one
// machine: the model's shape (so the KV pool is sized as for the real one)
// and the fitted cost of a forward pass.
type Profile struct {
	// Model and CPU say what was measured (informational).
	Model   string `json:"model"`
	CPU     string `json:"cpu,omitempty"`
	Threads int    `json:"threads,omitempty"`
	// WeightBytes is the size of the model's weights, for scaling the
	// profile to another model (Scale).
	WeightBytes int64 `json:"weight_bytes,omitempty"`
	Shape       Shape `json:"shape"`
	Cost        Cost  `json:"cost"`
	// Fit describes how well Cost matched the measured passes.
	Fit *FitReport `json:"fit,omitempty"`
}

// Shape is batch.Shape in a file.
type Shape struct {
	Vocab     int    `json:"vocab"`
	Context   int    `json:"context"`
	Layers    int    `json:"layers"`
	KVDim     int    `json:"kv_dim"`
	KVType    string `json:"kv_type"`
	MaxTokens int    `json:"max_tokens"`
}

// ShapeOf records s.
func ShapeOf(s batch.Shape) Shape {
	return Shape{Vocab: s.Vocab, Context: s.Context, Layers: s.Layers, KVDim: s.KVDim,
		KVType: s.KVType.String(), MaxTokens: s.MaxTokens}
}

// Batch returns the shape as the engine takes it.
func (s Shape) Batch() (batch.Shape, error) {
	t, err := kv.ParseElemType(s.KVType)
	if err != nil {
		return batch.Shape{}, fmt.Errorf("sim: profile shape: %w", err)
	}
	b := batch.Shape{Vocab: s.Vocab, Context: s.Context, Layers: s.Layers, KVDim: s.KVDim,
		KVType: t.DType(), MaxTokens: s.MaxTokens}
	if b.Vocab <= 0 || b.Context <= 0 || b.Layers <= 0 || b.KVDim <= 0 || b.MaxTokens <= 0 {
		return batch.Shape{}, fmt.Errorf("sim: profile shape %+v: every size must be positive", s)
	}
	return b, nil
}

// Cost is the modelled time of one forward pass: a fixed part, a part per
// prompt token computed (sequences with more than one new token), a part
// per decoding sequence (one new token), and a part per attended KV
// position (each new token at position p attends to p+1 positions). All in
// seconds.
//
// Attention is priced twice: a prompt's tokens attend together, in tiles
// that reuse each key they load, while a decoding sequence reads its whole
// KV for one query — the same position costs several times more there.
type Cost struct {
	Fixed           float64 `json:"fixed_s"`
	PrefillToken    float64 `json:"per_prefill_token_s"`
	DecodeSeq       float64 `json:"per_decode_seq_s"`
	PrefillAttended float64 `json:"per_prefill_attended_s"`
	DecodeAttended  float64 `json:"per_decode_attended_s"`
}

const numTerms = 5

func (c Cost) terms() [numTerms]float64 {
	return [numTerms]float64{c.Fixed, c.PrefillToken, c.DecodeSeq, c.PrefillAttended, c.DecodeAttended}
}

func costOf(x [numTerms]float64) Cost {
	return Cost{Fixed: x[0], PrefillToken: x[1], DecodeSeq: x[2], PrefillAttended: x[3], DecodeAttended: x[4]}
}

// Features are the quantities of one pass that Cost prices.
type Features struct {
	PrefillTokens   int   `json:"prefill_tokens"`
	DecodeSeqs      int   `json:"decode_seqs"`
	PrefillAttended int64 `json:"prefill_attended"`
	DecodeAttended  int64 `json:"decode_attended"`
}

func (f Features) terms() [numTerms]float64 {
	return [numTerms]float64{1, float64(f.PrefillTokens), float64(f.DecodeSeqs), float64(f.PrefillAttended), float64(f.DecodeAttended)}
}

// FeaturesOf measures a pass.
func FeaturesOf(seqs []batch.Seq) Features {
	var f Features
	for i := range seqs {
		n := len(seqs[i].Tokens)
		// Σ_{j<n} (Pos+j+1)
		p := int64(seqs[i].Pos)
		att := int64(n)*p + int64(n)*int64(n+1)/2
		if n == 1 {
			f.DecodeSeqs++
			f.DecodeAttended += att
		} else {
			f.PrefillTokens += n
			f.PrefillAttended += att
		}
	}
	return f
}

// Time is the modelled duration of a pass with features f.
func (c Cost) Time(f Features) time.Duration {
	s := 0.0
	x, w := f.terms(), c.terms()
	for j := range x {
		s += x[j] * w[j]
	}
	return time.Duration(s * float64(time.Second))
}

func (c Cost) valid() error {
	for _, v := range c.terms() {
		if v < 0 || v != v || v > 3600 {
			return fmt.Errorf("sim: cost %+v: every term must be a finite number of seconds ≥ 0", c)
		}
	}
	if c.terms() == [numTerms]float64{} {
		return fmt.Errorf("sim: cost is zero: a profile must price something")
	}
	return nil
}

// Validate checks a profile read from a file.
func (p *Profile) Validate() error {
	if _, err := p.Shape.Batch(); err != nil {
		return err
	}
	return p.Cost.valid()
}

// Scale adapts p, measured on one model, to another of the given shape and
// weight size on the same machine: the fixed and per-token terms follow
// the weights read and multiplied, the attention term the KV per token. It
// is a first-order estimate; calibrate the model itself for figures that
// matter.
func (p Profile) Scale(s batch.Shape, weightBytes int64, model string) Profile {
	q := p
	q.Model = model
	q.Fit = nil
	q.Shape = ShapeOf(s)
	if p.WeightBytes > 0 && weightBytes > 0 {
		r := float64(weightBytes) / float64(p.WeightBytes)
		q.Cost.Fixed *= r
		q.Cost.PrefillToken *= r
		q.Cost.DecodeSeq *= r
		q.WeightBytes = weightBytes
	}
	if old := p.Shape.Layers * p.Shape.KVDim; old > 0 {
		r := float64(s.Layers*s.KVDim) / float64(old)
		q.Cost.PrefillAttended *= r
		q.Cost.DecodeAttended *= r
	}
	return q
}

// ReadProfile loads and checks a profile file.
func ReadProfile(path string) (*Profile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return ParseProfile(data)
}

// ParseProfile decodes and checks a profile.
func ParseProfile(data []byte) (*Profile, error) {
	var p Profile
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("sim: profile: %w", err)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// defaultProfile was measured with `kvserve sim calibrate` on a synthetic
// SmolLM2-135M Q8_0 (`kvserve model synth --shape smollm2-135m --type q8_0
// --seed 1`), 2 threads, the serving defaults.
//
//go:embed default_profile.json
var defaultProfile []byte

// DefaultProfile is the built-in profile, for a simulator that was given
// none: Scale it to the model served.
func DefaultProfile() Profile {
	p, err := ParseProfile(defaultProfile)
	if err != nil {
		panic("sim: the built-in profile is invalid: " + err.Error())
	}
	return *p
}
