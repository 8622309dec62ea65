package tensor

import "math"

// Element-wise kernels on one row. They follow ggml's order of operations
// (and its choice of float64 accumulators) so results track llama.cpp.

// RMSNorm sets dst = x / sqrt(mean(x²) + eps) * weight, like ggml's rms_norm
// followed by mul: the squares are summed in float64, the scale is computed
// in float32 and applied before the weight. weight may be nil (no multiply).
// dst may alias x.
func RMSNorm(dst, x, weight []float32, eps float32) {
	n := len(x)
	if n == 0 {
		return
	}
	dst = dst[:n]
	mean := float32(sumSquares(x) / float64(n))
	scale := 1 / float32(math.Sqrt(float64(mean+eps)))
	if weight == nil {
		copy(dst, x)
		Scale(dst, scale)
		return
	}
	scaleMul(dst, x, weight[:n], scale)
}

// sumSquaresGeneric returns Σ float64(x[i]·x[i]), each product rounded to
// float32 as ggml does. ggml adds the squares in float64 one after the
// other, one chain of dependent additions; here element i of the first
// len(x)&^15 goes to partial sum i mod 16 (the lanes of the vector kernel,
// which adds in exactly this order), the sums are combined pairwise and the
// rest added one by one. The float64 total differs from the sequential one
// in its last bits at most, so the float32 mean is the same except when it
// lies that close to a rounding boundary.
func sumSquaresGeneric(x []float32) float64 {
	n16 := len(x) &^ 15
	var s [16]float64
	for i := 0; i < n16; i += 16 {
		v := x[i : i+16 : i+16]
		for k := range s {
			s[k] += float64(v[k] * v[k])
		}
	}
	var t [4]float64
	for k := range t {
		t[k] = (s[k] + s[4+k]) + (s[8+k] + s[12+k])
	}
	sum := (t[0] + t[2]) + (t[1] + t[3])
	for _, v := range x[n16:] {
		sum += float64(v * v)
	}
	return sum
}

// scaleMulGeneric sets dst[i] = (x[i]·s)·w[i], the scale applied before
// the weight as ggml's rms_norm then mul do. dst may be x.
func scaleMulGeneric(dst, x, w []float32, s float32) {
	w = w[:len(x)]
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = float32(v*s) * w[i]
	}
}

// Softmax replaces x by its softmax, subtracting the maximum first and
// summing the exponentials in float64, as ggml's soft_max does. Entries equal
// to -Inf (masked) become 0.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	softmaxFast(x)
}

// SoftmaxWeightsF16 scales x by s, turns it into softmax weights and rounds
// them to f16 (the attention's weights for f16 values): Scale, Softmax and
// RoundF16 in one call, with their results bit for bit, in fewer passes.
func SoftmaxWeightsF16(x []float32, s float32) {
	if len(x) == 0 {
		return
	}
	softmaxWeightsF16(x, s)
}

func softmaxWeightsF16Generic(x []float32, s float32) {
	Scale(x, s)
	softmaxGeneric(x)
	RoundF16(x)
}

func softmaxGeneric(x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var sum float64
	for i, v := range x {
		e := expf(v - mx)
		x[i] = e
		sum += float64(e)
	}
	Scale(x, float32(1/sum))
}

// expf is float32 exp, correctly rounded for all practical inputs.
func expf(x float32) float32 { return float32(math.Exp(float64(x))) }

// silu is x·sigmoid(x) = x/(1+e^-x), as ggml_silu_f32.
func silu(x float32) float32 { return x / (1 + expf(-x)) }

// SwiGLU sets dst[i] = silu(gate[i])·up[i]. dst may alias gate or up.
func SwiGLU(dst, gate, up []float32) {
	n := len(gate)
	swiglu(dst[:n], gate, up[:n])
}

// Add sets dst[i] += a[i] for i < len(dst).
func Add(dst, a []float32) {
	a = a[:len(dst)]
	for i := range dst {
		dst[i] += a[i]
	}
}

// Scale multiplies every element of x by s.
func Scale(x []float32, s float32) { scale(x, s) }

// Dot returns Σ a[i]·b[i] over len(a), accumulated in float32.
func Dot(a, b []float32) float32 { return dotF32(a, b[:len(a)]) }

func dotF32Generic(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// Axpy sets dst[i] += a·x[i] for i < len(dst).
func Axpy(dst []float32, a float32, x []float32) { axpyF32(dst, a, x[:len(dst)]) }

func axpyF32Generic(dst []float32, a float32, x []float32) {
	for i, v := range x {
		dst[i] += a * v
	}
}

// DotF16 returns Σ a[i]·b[i] of two binary16 vectors (len(a) elements), with
// the products and the sum in float32 — the attention score q·k with q
// rounded to f16, as ggml_vec_dot_f16.
func DotF16(a, b []uint16) float32 {
	return dotF16(a, b[:len(a)])
}

func dotF16Generic(a, b []uint16) float32 {
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += F16ToF32(a[i]) * F16ToF32(b[i])
		s1 += F16ToF32(a[i+1]) * F16ToF32(b[i+1])
		s2 += F16ToF32(a[i+2]) * F16ToF32(b[i+2])
		s3 += F16ToF32(a[i+3]) * F16ToF32(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += F16ToF32(a[i]) * F16ToF32(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// AxpyF16 sets dst[i] += a·x[i] for a binary16 vector x (len(dst) elements):
// the weighted sum of V rows in attention.
func AxpyF16(dst []float32, a float32, x []uint16) {
	axpyF16(dst, a, x[:len(dst)])
}

func axpyF16Generic(dst []float32, a float32, x []uint16) {
	for i, v := range x {
		dst[i] += a * F16ToF32(v)
	}
}
