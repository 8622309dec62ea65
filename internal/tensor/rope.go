package tensor

import "math"

// RoPE describes rotary position embedding with ggml_rope_ext semantics
// (ggml_compute_forward_rope_f32 and rope_yarn in llama.cpp): pair p of a
// head (p < Dims/2) is rotated by the angle pos·Base^(-2p/Dims), scaled by
// FreqScale, divided by FreqFactors[p] when given, and blended with the
// unscaled angle by YaRN when ExtFactor is non-zero. The angle is advanced
// from one pair to the next by multiplying by Base^(-2/Dims) in float32, as
// ggml does, so the angles (and results) match llama.cpp's.
//
// The zero value of each optional field means "off": FreqScale 0 is 1,
// AttnFactor 0 is 1, Dims 0 is the whole head, BetaFast 0 is 32 and
// BetaSlow 0 is 1 (llama.cpp's defaults).
type RoPE struct {
	// Dims is the number of rotated dimensions per head (n_rot); the rest
	// pass through unchanged.
	Dims int
	// Base is the frequency base (rope.freq_base, theta).
	Base float32
	// FreqScale is 1/(linear scaling factor).
	FreqScale float32
	// NeoX selects the NeoX order, rotating (i, i+Dims/2); otherwise
	// adjacent pairs (2i, 2i+1) are rotated.
	NeoX bool
	// FreqFactors are optional per-pair divisors of the angle (Llama 3.1's
	// rope_freqs.weight), len Dims/2.
	FreqFactors []float32
	// YaRN parameters (rope.scaling.type = yarn). ExtFactor 0 disables YaRN.
	ExtFactor, AttnFactor, BetaFast, BetaSlow float32
	// OrigCtx is the original training context (rope.scaling.original_context_length).
	OrigCtx int
}

// maxStackDims bounds the angle table that Apply keeps on the stack.
const maxStackDims = 1024

// Apply rotates nHeads heads of headDim values each, laid out back to back
// in x, for position pos.
func (r *RoPE) Apply(x []float32, nHeads, headDim, pos int) {
	dims := r.dims(headDim)
	var buf [maxStackDims]float32
	var cs []float32
	if dims <= maxStackDims {
		cs = buf[:dims]
	} else {
		cs = make([]float32, dims)
	}
	r.Angles(cs, headDim, pos)
	r.ApplyAngles(x, cs, nHeads, headDim)
}

// TableLen is the length of the angle table Angles writes for heads of
// headDim values.
func (r *RoPE) TableLen(headDim int) int { return r.dims(headDim) }

func (r *RoPE) dims(headDim int) int {
	d := r.Dims
	if d <= 0 || d > headDim {
		d = headDim
	}
	return d &^ 1
}

// Angles fills cs[2p], cs[2p+1] with cos and sin (times the YaRN magnitude
// scale) of pair p's angle at position pos, for the Dims(headDim)/2 pairs. The
// table depends only on pos, so a model can compute it once per token and
// apply it to every layer with ApplyAngles.
func (r *RoPE) Angles(cs []float32, headDim, pos int) {
	dims := r.dims(headDim)
	cs = cs[:dims]
	freqScale := r.FreqScale
	if freqScale == 0 {
		freqScale = 1
	}
	mscale := r.AttnFactor
	if mscale == 0 {
		mscale = 1
	}
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(dims))))
	var corr0, corr1 float32
	ext := r.ExtFactor
	if ext != 0 {
		corr0, corr1 = yarnCorrDims(dims, r.OrigCtx, r.Base, r.BetaFast, r.BetaSlow)
		mscale *= 1 + 0.1*logf(1/freqScale)
	}
	theta := float32(pos)
	for i0 := 0; i0 < dims; i0 += 2 {
		te := theta
		if r.FreqFactors != nil && i0/2 < len(r.FreqFactors) {
			te = theta / r.FreqFactors[i0/2]
		}
		th := freqScale * te
		if ext != 0 {
			rampMix := yarnRamp(corr0, corr1, i0) * ext
			th = th*(1-rampMix) + te*rampMix
		}
		cs[i0] = float32(math.Cos(float64(th))) * mscale
		cs[i0+1] = float32(math.Sin(float64(th))) * mscale
		theta *= thetaScale
	}
}

// ApplyAngles rotates nHeads heads of x with a table from Angles.
func (r *RoPE) ApplyAngles(x, cs []float32, nHeads, headDim int) {
	dims := r.dims(headDim)
	cs = cs[:dims]
	x = x[:nHeads*headDim]
	half := dims / 2
	for h := 0; h < nHeads; h++ {
		v := x[h*headDim : h*headDim+dims]
		if r.NeoX {
			for i := 0; i < half; i++ {
				c, s := cs[2*i], cs[2*i+1]
				x0, x1 := v[i], v[i+half]
				v[i] = float32(x0*c) - float32(x1*s)
				v[i+half] = float32(x0*s) + float32(x1*c)
			}
		} else {
			for i := 0; i < dims; i += 2 {
				c, s := cs[i], cs[i+1]
				x0, x1 := v[i], v[i+1]
				v[i] = float32(x0*c) - float32(x1*s)
				v[i+1] = float32(x0*s) + float32(x1*c)
			}
		}
	}
}

func logf(x float32) float32 { return float32(math.Log(float64(x))) }

// yarnRamp is ggml's rope_yarn_ramp.
func yarnRamp(low, high float32, i0 int) float32 {
	y := (float32(i0/2) - low) / max(0.001, high-low)
	return 1 - min(1, max(0, y))
}

// yarnCorrDims is ggml_rope_yarn_corr_dims: the first and last dimension
// whose wavelength crosses the beta_fast and beta_slow rotation counts over
// the original context.
func yarnCorrDims(nDims, nCtxOrig int, base, betaFast, betaSlow float32) (float32, float32) {
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	corrDim := func(nRot float32) float32 {
		return float32(nDims) * logf(float32(nCtxOrig)/(nRot*2*math.Pi)) / (2 * logf(base))
	}
	start := float32(math.Floor(float64(corrDim(betaFast))))
	end := float32(math.Ceil(float64(corrDim(betaSlow))))
	return max(0, start), min(float32(nDims-1), end)
}
