//go:build amd64 && !purego

package tensor

// Assembly in vec_amd64.s (AVX2 + FMA + F16C); n is a multiple of 8.

//go:noescape
func expSubSumAVX2(x *float32, n int, m float32) float64

// expSubSumAVX512 is expSubSumAVX2 in zmm (AVX512F, the VNNI level): the
// same bits.
//
//go:noescape
func expSubSumAVX512(x *float32, n int, m float32) float64

//go:noescape
func expAVX2(x *float32, n int)

//go:noescape
func swigluAVX2(dst, gate, up *float32, n int)

//go:noescape
func maxAVX2(x *float32, n int) float32

//go:noescape
func scaleAVX2(x *float32, n int, s float32)

//go:noescape
func f32ToF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func f16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func sumSquaresAVX2(x *float32, n int) float64

//go:noescape
func scaleMulAVX2(dst, x, w *float32, n int, s float32)

//go:noescape
func scaleMaxAVX2(x *float32, n int, s float32) float32

//go:noescape
func scaleRoundF16AVX2(x *float32, n int, s float32)

// vec8 returns the length of x's prefix that the vector kernels handle:
// a multiple of 8, or 0 when they cannot run.
func vec8(n int) int {
	if !hasAVX2 {
		return 0
	}
	return n &^ 7
}

func softmaxFast(x []float32) {
	n8 := vec8(len(x))
	if n8 == 0 {
		softmaxGeneric(x)
		return
	}
	mx := maxAVX2(&x[0], n8)
	for _, v := range x[n8:] {
		mx = max(mx, v)
	}
	scale(x, float32(1/expSubSum(x, n8, mx)))
}

// softmaxWeightsF16 is Scale, Softmax and RoundF16 in three passes over x
// instead of five, with their results: the scaling joins the maximum's pass
// and the normalization the rounding's.
func softmaxWeightsF16(x []float32, s float32) {
	n8 := vec8(len(x))
	if n8 == 0 {
		softmaxWeightsF16Generic(x, s)
		return
	}
	mx := scaleMaxAVX2(&x[0], n8, s)
	for i := n8; i < len(x); i++ {
		x[i] *= s
		mx = max(mx, x[i])
	}
	inv := float32(1 / expSubSum(x, n8, mx))
	scaleRoundF16AVX2(&x[0], n8, inv)
	for i := n8; i < len(x); i++ {
		x[i] = F16ToF32(F32ToF16(x[i] * inv))
	}
}

// expSubSum sets x[i] = exp(x[i] - mx) and returns their sum, the first n8
// by the vector kernels (softmaxFast, softmaxWeightsF16).
func expSubSum(x []float32, n8 int, mx float32) float64 {
	var sum float64
	if cpuISA >= isaVNNI {
		sum = expSubSumAVX512(&x[0], n8, mx)
	} else {
		sum = expSubSumAVX2(&x[0], n8, mx)
	}
	for i, v := range x[n8:] {
		e := expf(v - mx)
		x[n8+i] = e
		sum += float64(e)
	}
	return sum
}

func scale(x []float32, s float32) {
	n8 := vec8(len(x))
	if n8 > 0 {
		scaleAVX2(&x[0], n8, s)
	}
	for i := n8; i < len(x); i++ {
		x[i] *= s
	}
}

func sumSquares(x []float32) float64 {
	n16 := len(x) &^ 15
	if !hasAVX2 || n16 == 0 {
		return sumSquaresGeneric(x)
	}
	sum := sumSquaresAVX2(&x[0], n16)
	for _, v := range x[n16:] {
		sum += float64(v * v)
	}
	return sum
}

func scaleMul(dst, x, w []float32, s float32) {
	n8 := vec8(len(x))
	if n8 > 0 {
		_, _ = dst[n8-1], w[n8-1]
		scaleMulAVX2(&dst[0], &x[0], &w[0], n8, s)
	}
	scaleMulGeneric(dst[n8:], x[n8:], w[n8:], s)
}

func swiglu(dst, gate, up []float32) {
	n8 := vec8(len(gate))
	if n8 > 0 {
		swigluAVX2(&dst[0], &gate[0], &up[0], n8)
	}
	for i := n8; i < len(gate); i++ {
		dst[i] = silu(gate[i]) * up[i]
	}
}

func f32ToF16Slice(dst []uint16, src []float32) {
	n8 := vec8(len(src))
	if n8 > 0 {
		f32ToF16AVX2(&dst[0], &src[0], n8)
	}
	for i := n8; i < len(src); i++ {
		dst[i] = F32ToF16(src[i])
	}
}

func f16ToF32Slice(dst []float32, src []uint16) {
	n8 := vec8(len(src))
	if n8 > 0 {
		f16ToF32AVX2(&dst[0], &src[0], n8)
	}
	for i := n8; i < len(src); i++ {
		dst[i] = F16ToF32(src[i])
	}
}

func roundF16(x []float32) {
	n8 := vec8(len(x))
	if n8 > 0 {
		scaleRoundF16AVX2(&x[0], n8, 1) // x·1 is x, bit for bit
	}
	for i := n8; i < len(x); i++ {
		x[i] = F16ToF32(F32ToF16(x[i]))
	}
}

// expVec is exp in place (for tests of the vector expf).
func expVec(x []float32) {
	n8 := vec8(len(x))
	if n8 > 0 {
		expAVX2(&x[0], n8)
	}
	for i := n8; i < len(x); i++ {
		x[i] = expf(x[i])
	}
}
