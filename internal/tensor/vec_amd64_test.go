//go:build amd64 && !purego

package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The zmm softmax kernel must give the AVX2 kernel's bits, values and sum,
// on ordinary rows and on the edges EXPF clamps (masked −Inf, overflow,
// underflow, NaN).
func TestExpSubSumAVX512(t *testing.T) {
	if cpuISA < isaVNNI {
		t.Skipf("this CPU runs the %s kernels, not AVX-512: expSubSumAVX512 not compared", cpuISA)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	edges := []float32{
		float32(math.Inf(-1)), float32(math.Inf(1)), float32(math.NaN()),
		-87.3, -87.4, -100, 88.7, 88.8, 200, 0, float32(math.Copysign(0, -1)), 1e-30,
	}
	for _, n := range []int{8, 16, 24, 40, 64, 200, 1000, 4096} {
		for _, withEdges := range []bool{false, true} {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 12)
				if withEdges && rng.IntN(4) == 0 {
					x[i] = edges[rng.IntN(len(edges))]
				}
			}
			m := float32(rng.NormFloat64())
			want := append([]float32(nil), x...)
			got := append([]float32(nil), x...)
			ws := expSubSumAVX2(&want[0], n, m)
			gs := expSubSumAVX512(&got[0], n, m)
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("n %d edges %v: exp(%v − %v) = %v, AVX2 %v", n, withEdges, x[i], m, got[i], want[i])
				}
			}
			if math.Float64bits(gs) != math.Float64bits(ws) && !(math.IsNaN(gs) && math.IsNaN(ws)) {
				t.Fatalf("n %d edges %v: sum %v, AVX2 %v", n, withEdges, gs, ws)
			}
		}
	}
}
