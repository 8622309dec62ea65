package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpVec checks the vectorized expf against float64 exp: at most 2
// float32 ulps of relative error over the range that matters, exact special
// values, and the documented cut-offs.
func TestExpVec(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	x := make([]float32, 0, 1<<16)
	for range 1 << 15 {
		x = append(x, float32(rng.Float64()*175-87))
	}
	for range 1 << 14 {
		x = append(x, float32(rng.NormFloat64()*4))
	}
	x = append(x, 0, -0, 1, -1, 0.5, -87.3, 88.7, 1e-8, -1e-8)
	got := append([]float32(nil), x...)
	expVec(got)
	worst := 0.0
	for i, v := range x {
		want := math.Exp(float64(v))
		rel := math.Abs(float64(got[i])-want) / want
		if rel > 2.5e-7 {
			t.Fatalf("exp(%v) = %v, want %v (rel error %.3g)", v, got[i], want, rel)
		}
		worst = max(worst, rel)
	}
	t.Logf("worst relative error %.3g (%.2f ulp at 2^-24)", worst, worst/0x1p-24)
	specials := []struct{ in, want float32 }{
		{float32(math.Inf(-1)), 0},
		{float32(math.Inf(1)), float32(math.Inf(1))},
		{-100, 0},
		{-87.5, 0},
		{89, float32(math.Inf(1))},
		{1000, float32(math.Inf(1))},
	}
	buf := make([]float32, 8*len(specials))
	for i, s := range specials {
		for j := 0; j < 8; j++ {
			buf[8*i+j] = s.in
		}
	}
	expVec(buf)
	for i, s := range specials {
		got := buf[8*i]
		// Below −87.34 the vector code flushes to 0 where the exact
		// result is subnormal; either is accepted.
		if got != s.want && !(s.want == 0 && got == float32(math.Exp(float64(s.in)))) {
			t.Errorf("exp(%v) = %v, want %v", s.in, got, s.want)
		}
	}
	nan := []float32{float32(math.NaN()), 1, 2, 3, 4, 5, 6, 7}
	expVec(nan)
	if !math.IsNaN(float64(nan[0])) {
		t.Errorf("exp(NaN) = %v", nan[0])
	}
}

// TestVectorHelpersMatchScalar checks the vectorized bulk helpers against
// their scalar definitions at lengths around the vector width.
func TestVectorHelpersMatchScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 31, 100} {
		x := randVec(rng, n, 3)
		h := make([]uint16, n)
		F32ToF16Slice(h, x)
		f := make([]float32, n)
		F16ToF32Slice(f, h)
		r := append([]float32(nil), x...)
		RoundF16(r)
		for i := range x {
			if h[i] != F32ToF16(x[i]) || f[i] != F16ToF32(h[i]) || r[i] != f[i] {
				t.Fatalf("n=%d [%d]: f16 %#04x f32 %v round %v", n, i, h[i], f[i], r[i])
			}
		}
		s := append([]float32(nil), x...)
		Scale(s, -0.3)
		for i := range x {
			if s[i] != x[i]*-0.3 {
				t.Fatalf("Scale n=%d [%d] = %v", n, i, s[i])
			}
		}
	}
}

// TestRMSNormKernels checks RMSNorm's vector parts against their portable
// definitions bit for bit (sum of squares in the same lanes and order, scale
// then weight) at lengths around the vector widths and at model widths, in
// place and not, and that the results stay within float32 rounding of an
// exact float64 evaluation.
func TestRMSNormKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	for _, n := range []int{0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 100, 576, 896, 2048} {
		x := randVec(rng, n, 3)
		w := randVec(rng, n, 1)
		// Squares spread over many magnitudes make every change in the
		// order of the float64 additions show in the last bits.
		spread := make([]float32, n)
		for i := range spread {
			spread[i] = x[i] * float32(math.Pow(10, float64(i%7-3)))
		}
		for _, v := range [][]float32{x, spread} {
			if got, want := sumSquares(v), sumSquaresGeneric(v); math.Float64bits(got) != math.Float64bits(want) {
				t.Fatalf("n=%d: sumSquares %v, portable %v", n, got, want)
			}
		}
		got := make([]float32, n)
		want := make([]float32, n)
		scaleMul(got, x, w, 0.37)
		scaleMulGeneric(want, x, w, 0.37)
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("n=%d: scaleMul[%d] = %v, portable %v", n, i, got[i], want[i])
			}
		}
		in := append([]float32(nil), x...)
		RMSNorm(in, in, w, 1e-5)
		RMSNorm(got, x, w, 1e-5)
		var ss float64
		for _, v := range x {
			ss += float64(v) * float64(v)
		}
		for i := range got {
			exact := float64(x[i]) / math.Sqrt(ss/float64(n)+1e-5) * float64(w[i])
			if got[i] != in[i] || math.Abs(float64(got[i])-exact) > 1e-6*math.Abs(exact)+1e-7 {
				t.Fatalf("n=%d: RMSNorm[%d] = %v (in place %v), exact %v", n, i, got[i], in[i], exact)
			}
		}
	}
}

// TestSoftmaxWeightsF16 checks that SoftmaxWeightsF16 equals Scale, Softmax
// and RoundF16 one after another, bit for bit, on rows of every length
// around the vector kernels' width, long rows, rows with −Inf (masked
// positions) and rows whose scaled values reach exp's clamps.
func TestSoftmaxWeightsF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	lengths := []int{1, 2, 7, 8, 9, 15, 16, 17, 33, 64, 100, 4096}
	for _, n := range lengths {
		for _, kind := range []string{"normal", "wide", "masked"} {
			x := make([]float32, n)
			for i := range x {
				switch kind {
				case "normal":
					x[i] = float32(rng.NormFloat64())
				case "wide":
					x[i] = float32(rng.NormFloat64() * 400)
				case "masked":
					x[i] = float32(rng.NormFloat64())
					if rng.IntN(3) == 0 {
						x[i] = float32(math.Inf(-1))
					}
				}
			}
			const s = 0.125
			want := append([]float32(nil), x...)
			Scale(want, s)
			Softmax(want)
			RoundF16(want)
			for name, f := range map[string]func([]float32, float32){"SoftmaxWeightsF16": SoftmaxWeightsF16, "generic": softmaxWeightsF16Generic} {
				got := append([]float32(nil), x...)
				f(got, s)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s n=%d %s: weight %d = %v, Scale+Softmax+RoundF16 %v", name, n, kind, i, got[i], want[i])
					}
				}
			}
		}
	}
}
