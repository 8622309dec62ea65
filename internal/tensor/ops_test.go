package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

func closeTo(got float32, want float64, rel, abs float64) bool {
	return math.Abs(float64(got)-want) <= rel*math.Abs(want)+abs
}

func TestRMSNorm(t *testing.T) {
	tests := []struct {
		name   string
		x, w   []float32
		eps    float32
		want   []float64
		nilArg bool
	}{
		{"plain", []float32{1, 2, 3, 4}, []float32{1, 1, 1, 1}, 0,
			[]float64{1 / math.Sqrt(7.5), 2 / math.Sqrt(7.5), 3 / math.Sqrt(7.5), 4 / math.Sqrt(7.5)}, false},
		{"weights and eps", []float32{3, -4}, []float32{2, 0.5}, 1,
			[]float64{2 * 3 / math.Sqrt(13.5), 0.5 * -4 / math.Sqrt(13.5)}, false},
		{"nil weight", []float32{2, 2}, nil, 0, []float64{1, 1}, true},
		{"zeros", []float32{0, 0, 0}, []float32{1, 1, 1}, 1e-5, []float64{0, 0, 0}, false},
	}
	for _, tc := range tests {
		dst := make([]float32, len(tc.x))
		RMSNorm(dst, tc.x, tc.w, tc.eps)
		for i := range dst {
			if !closeTo(dst[i], tc.want[i], 1e-6, 1e-7) {
				t.Errorf("%s: dst[%d] = %v, want %v", tc.name, i, dst[i], tc.want[i])
			}
		}
	}
	// In place, random, against float64.
	rng := rand.New(rand.NewPCG(1, 2))
	x := randVec(rng, 576, 3)
	w := randVec(rng, 576, 1)
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	scale := 1 / math.Sqrt(ss/576+1e-5)
	want := make([]float64, len(x))
	for i := range x {
		want[i] = float64(x[i]) * scale * float64(w[i])
	}
	RMSNorm(x, x, w, 1e-5)
	for i := range x {
		if !closeTo(x[i], want[i], 1e-6, 1e-7) {
			t.Fatalf("in place: x[%d] = %v, want %v", i, x[i], want[i])
		}
	}
}

func TestSoftmax(t *testing.T) {
	ninf := float32(math.Inf(-1))
	tests := []struct {
		name string
		x    []float32
	}{
		{"simple", []float32{1, 2, 3}},
		{"large", []float32{1000, 1001, 999}},
		{"masked", []float32{0.5, ninf, 2, ninf}},
		{"single", []float32{-7}},
		{"equal", []float32{3, 3, 3, 3}},
		{"long", randVec(rand.New(rand.NewPCG(1, 1)), 1000, 5)},
		{"long masked", func() []float32 {
			v := randVec(rand.New(rand.NewPCG(2, 2)), 77, 20)
			for i := 3; i < len(v); i += 5 {
				v[i] = ninf
			}
			return v
		}()},
	}
	for _, tc := range tests {
		mx := math.Inf(-1)
		for _, v := range tc.x {
			mx = math.Max(mx, float64(v))
		}
		var sum float64
		want := make([]float64, len(tc.x))
		for i, v := range tc.x {
			want[i] = math.Exp(float64(v) - mx)
			sum += want[i]
		}
		x := append([]float32(nil), tc.x...)
		Softmax(x)
		var total float64
		for i := range x {
			if !closeTo(x[i], want[i]/sum, 1e-6, 1e-9) {
				t.Errorf("%s: x[%d] = %v, want %v", tc.name, i, x[i], want[i]/sum)
			}
			if tc.x[i] == ninf && x[i] != 0 {
				t.Errorf("%s: masked entry %d = %v", tc.name, i, x[i])
			}
			total += float64(x[i])
		}
		if math.Abs(total-1) > 1e-6 {
			t.Errorf("%s: sums to %v", tc.name, total)
		}
	}
	Softmax(nil)
}

func TestSwiGLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	g := randVec(rng, 100, 4)
	g = append(g, 0, -100, 100, 88, -88)
	u := randVec(rng, len(g), 1)
	dst := make([]float32, len(g))
	SwiGLU(dst, g, u)
	for i := range g {
		gv := float64(g[i])
		want := gv / (1 + math.Exp(-gv)) * float64(u[i])
		if !closeTo(dst[i], want, 1e-6, 1e-30) {
			t.Fatalf("SwiGLU[%d] (g=%v u=%v) = %v, want %v", i, g[i], u[i], dst[i], want)
		}
	}
	// Aliasing dst and gate.
	SwiGLU(g, g, u)
	for i := range g {
		if g[i] != dst[i] {
			t.Fatalf("aliased SwiGLU differs at %d", i)
		}
	}
}

func TestVectorOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 3, 4, 7, 64, 129} {
		a := randVec(rng, n, 1)
		b := randVec(rng, n, 1)
		var dot, abs float64
		for i := range a {
			dot += float64(a[i]) * float64(b[i])
			abs += math.Abs(float64(a[i]) * float64(b[i]))
		}
		if got := Dot(a, b); !closeTo(got, dot, 0, 1e-6*abs+1e-30) {
			t.Errorf("Dot n=%d = %v, want %v", n, got, dot)
		}
		c := append([]float32(nil), a...)
		Add(c, b)
		for i := range c {
			if c[i] != a[i]+b[i] {
				t.Fatalf("Add n=%d: [%d] = %v", n, i, c[i])
			}
		}
		c = append(c[:0], a...)
		Scale(c, -1.5)
		for i := range c {
			if c[i] != a[i]*-1.5 {
				t.Fatalf("Scale n=%d: [%d] = %v", n, i, c[i])
			}
		}
		c = append(c[:0], a...)
		Axpy(c, 0.25, b)
		for i := range c {
			if !closeTo(c[i], float64(a[i])+0.25*float64(b[i]), 1e-6, 1e-7) {
				t.Fatalf("Axpy n=%d: [%d] = %v", n, i, c[i])
			}
		}
		// Half-precision variants.
		ah := make([]uint16, n)
		bh := make([]uint16, n)
		F32ToF16Slice(ah, a)
		F32ToF16Slice(bh, b)
		dot, abs = 0, 0
		for i := range a {
			p := float64(F16ToF32(ah[i])) * float64(F16ToF32(bh[i]))
			dot += p
			abs += math.Abs(p)
		}
		if got := DotF16(ah, bh); !closeTo(got, dot, 0, 1e-6*abs+1e-30) {
			t.Errorf("DotF16 n=%d = %v, want %v", n, got, dot)
		}
		c = append(c[:0], a...)
		AxpyF16(c, -0.75, bh)
		for i := range c {
			want := float64(a[i]) - 0.75*float64(F16ToF32(bh[i]))
			if !closeTo(c[i], want, 1e-6, 1e-7) {
				t.Fatalf("AxpyF16 n=%d: [%d] = %v, want %v", n, i, c[i], want)
			}
		}
	}
}
