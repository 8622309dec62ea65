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
