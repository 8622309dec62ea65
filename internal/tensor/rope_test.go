package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ropeRef applies the rotation in float64 with angles computed as ggml does
// (float32 progressive products), so only the trigonometry and the rotation
// arithmetic differ from the kernel.
func ropeRef(r RoPE, x []float32, nHeads, headDim, pos int) []float64 {
	dims := r.dims(headDim)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	fs := float64(r.FreqScale)
	if fs == 0 {
		fs = 1
	}
	thetaScale := float32(math.Pow(float64(r.Base), float64(-2/float32(dims))))
	theta := float32(pos)
	for p := 0; p < dims/2; p++ {
		th := float64(theta)
		if r.FreqFactors != nil {
			th = float64(theta / r.FreqFactors[p])
		}
		th *= fs
		c, s := math.Cos(th), math.Sin(th)
		for h := 0; h < nHeads; h++ {
			i0, i1 := h*headDim+2*p, h*headDim+2*p+1
			if r.NeoX {
				i0, i1 = h*headDim+p, h*headDim+p+dims/2
			}
			x0, x1 := float64(x[i0]), float64(x[i1])
			out[i0] = x0*c - x1*s
			out[i1] = x0*s + x1*c
		}
		theta *= thetaScale
	}
	return out
}

func TestRoPE(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tests := []struct {
		name    string
		r       RoPE
		headDim int
	}{
		{"normal", RoPE{Dims: 64, Base: 10000}, 64},
		{"neox", RoPE{Dims: 64, Base: 10000, NeoX: true}, 64},
		{"partial", RoPE{Dims: 32, Base: 10000}, 64},
		{"partial neox", RoPE{Dims: 16, Base: 500000, NeoX: true}, 64},
		{"linear scaling", RoPE{Dims: 64, Base: 10000, FreqScale: 0.25}, 64},
		{"dims zero means head", RoPE{Base: 10000}, 16},
		{"freq factors", RoPE{Dims: 8, Base: 10000, FreqFactors: []float32{1, 2, 4, 8}}, 8},
	}
	for _, tc := range tests {
		for _, pos := range []int{0, 1, 7, 100, 4095} {
			nHeads := 3
			x := randVec(rng, nHeads*tc.headDim, 1)
			want := ropeRef(tc.r, x, nHeads, tc.headDim, pos)
			got := append([]float32(nil), x...)
			tc.r.Apply(got, nHeads, tc.headDim, pos)
			for i := range got {
				if !closeTo(got[i], want[i], 0, 2e-6) {
					t.Fatalf("%s pos %d: x[%d] = %v, want %v", tc.name, pos, i, got[i], want[i])
				}
			}
			dims := tc.r.dims(tc.headDim)
			for h := 0; h < nHeads; h++ {
				for i := dims; i < tc.headDim; i++ {
					if got[h*tc.headDim+i] != x[h*tc.headDim+i] {
						t.Fatalf("%s: pass-through dim %d changed", tc.name, i)
					}
				}
			}
			// Angles + ApplyAngles is the same as Apply.
			cs := make([]float32, dims)
			tc.r.Angles(cs, tc.headDim, pos)
			got2 := append([]float32(nil), x...)
			tc.r.ApplyAngles(got2, cs, nHeads, tc.headDim)
			for i := range got {
				if got[i] != got2[i] {
					t.Fatalf("%s: ApplyAngles differs from Apply at %d", tc.name, i)
				}
			}
		}
	}
}

// TestRoPEAnglesExact checks the angle of every pair against the exact
// pos·base^(-2p/dims) for small positions, where the float32 recurrence has
// not drifted.
func TestRoPEAnglesExact(t *testing.T) {
	r := RoPE{Dims: 128, Base: 500000}
	cs := make([]float32, 128)
	for _, pos := range []int{1, 3, 10} {
		r.Angles(cs, 128, pos)
		for p := 0; p < 64; p++ {
			th := float64(pos) * math.Pow(500000, -2*float64(p)/128)
			if !closeTo(cs[2*p], math.Cos(th), 0, 1e-5) || !closeTo(cs[2*p+1], math.Sin(th), 0, 1e-5) {
				t.Fatalf("pos %d pair %d: (%v, %v), want (%v, %v)", pos, p, cs[2*p], cs[2*p+1], math.Cos(th), math.Sin(th))
			}
		}
	}
}

func TestRoPEYaRN(t *testing.T) {
	const dims = 64
	base := RoPE{Dims: dims, Base: 10000}
	// With no frequency scaling YaRN changes nothing but the rounding of
	// the blended angle (a few float32 ulps of an angle near 1234).
	same := RoPE{Dims: dims, Base: 10000, FreqScale: 1, ExtFactor: 1, OrigCtx: 4096}
	a, b := make([]float32, dims), make([]float32, dims)
	base.Angles(a, dims, 1234)
	same.Angles(b, dims, 1234)
	for i := range a {
		if !closeTo(b[i], float64(a[i]), 0, 5e-4) {
			t.Fatalf("YaRN with scale 1 changed angle %d: %v vs %v", i, b[i], a[i])
		}
	}
	// With scale 1/4: the fast pairs (below the low correction dim) keep the
	// unscaled angle, the slow ones (above the high dim) take the
	// interpolated one, all times mscale = 1 + 0.1 ln 4.
	y := RoPE{Dims: dims, Base: 10000, FreqScale: 0.25, ExtFactor: 1, AttnFactor: 1, OrigCtx: 4096}
	lin := RoPE{Dims: dims, Base: 10000, FreqScale: 0.25}
	lo, hi := yarnCorrDims(dims, 4096, 10000, 32, 1)
	if !(lo > 0 && hi < dims-1 && lo < hi) {
		t.Fatalf("corr dims %v %v", lo, hi)
	}
	mscale := 1 + 0.1*math.Log(4)
	pos := 1000
	got, unscaled, interp := make([]float32, dims), make([]float32, dims), make([]float32, dims)
	y.Angles(got, dims, pos)
	base.Angles(unscaled, dims, pos)
	lin.Angles(interp, dims, pos)
	for p := 0; p < dims/2; p++ {
		var ref []float32
		switch {
		case float32(p) <= lo:
			ref = unscaled
		case float32(p) >= hi:
			ref = interp
		default:
			continue
		}
		for k := 0; k < 2; k++ {
			if !closeTo(got[2*p+k], float64(ref[2*p+k])*mscale, 1e-5, 1e-6) {
				t.Fatalf("pair %d (corr %v..%v): %v, want %v", p, lo, hi, got[2*p+k], float64(ref[2*p+k])*mscale)
			}
		}
	}
}

// TestRoPEPreservesNorm checks that each rotated pair keeps its length.
func TestRoPEPreservesNorm(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, neox := range []bool{false, true} {
		r := RoPE{Dims: 64, Base: 10000, NeoX: neox}
		x := randVec(rng, 128, 1)
		y := append([]float32(nil), x...)
		r.Apply(y, 2, 64, 777)
		for h := 0; h < 2; h++ {
			for p := 0; p < 32; p++ {
				i0, i1 := h*64+2*p, h*64+2*p+1
				if neox {
					i0, i1 = h*64+p, h*64+p+32
				}
				n0 := math.Hypot(float64(x[i0]), float64(x[i1]))
				n1 := math.Hypot(float64(y[i0]), float64(y[i1]))
				if math.Abs(n0-n1) > 1e-5*n0+1e-7 {
					t.Fatalf("neox=%v head %d pair %d: norm %v -> %v", neox, h, p, n0, n1)
				}
			}
		}
	}
}
