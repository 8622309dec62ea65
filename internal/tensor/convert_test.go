package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// activationCases returns rows of activations that exercise the quantizers:
// Gaussian data, all-zero and single-value blocks, ties between +max and
// −max, tiny and huge magnitudes.
func activationCases(rng *rand.Rand, n int) [][]float32 {
	var cs [][]float32
	cs = append(cs, randVec(rng, n, 1), randVec(rng, n, 1e-20), randVec(rng, n, 1e20))
	z := make([]float32, n)
	cs = append(cs, z)
	tie := randVec(rng, n, 1)
	for b := 0; b < n; b += 32 {
		tie[b+3], tie[b+17] = -5, 5 // equal magnitudes, negative first
	}
	cs = append(cs, tie)
	one := make([]float32, n)
	for i := range one {
		if i%37 == 0 {
			one[i] = float32(i) - 100.5
		}
	}
	cs = append(cs, one)
	// Values that land exactly on .5 after scaling (ties of the rounding).
	half := make([]float32, n)
	for i := range half {
		half[i] = float32(i%255-127) / 2
	}
	cs = append(cs, half)
	return cs
}

// TestQuantizeActivationsMatchReference checks that the quantizers the
// kernels use (assembly where available) produce exactly the bytes of the
// Go reference implementations.
func TestQuantizeActivationsMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{256, 512, 2048} {
		for ci, x := range activationCases(rng, n) {
			nb := n / 32
			q1, q2 := make([]int8, n), make([]int8, n)
			d1, d2 := make([]float32, nb), make([]float32, nb)
			s1, s2 := make([]int32, nb), make([]int32, nb)
			quantizeActQ80Generic(q1, d1, s1, x)
			quantizeActQ80(q2, d2, s2, x)
			for i := range q1 {
				if q1[i] != q2[i] {
					t.Fatalf("Q8_0 case %d n=%d: q[%d] = %d, reference %d", ci, n, i, q2[i], q1[i])
				}
			}
			for b := range d1 {
				if math.Float32bits(d1[b]) != math.Float32bits(d2[b]) || s1[b] != s2[b] {
					t.Fatalf("Q8_0 case %d n=%d block %d: d %v s %d, reference d %v s %d", ci, n, b, d2[b], s2[b], d1[b], s1[b])
				}
			}
			nk := n / 256
			bs1, bs2 := make([]int16, n/16), make([]int16, n/16)
			quantizeActQ8KGeneric(q1, d1[:nk], bs1, x)
			quantizeActQ8K(q2, d2[:nk], bs2, x)
			for i := range q1 {
				if q1[i] != q2[i] {
					t.Fatalf("Q8_K case %d n=%d: q[%d] = %d, reference %d", ci, n, i, q2[i], q1[i])
				}
			}
			for b := 0; b < nk; b++ {
				if math.Float32bits(d1[b]) != math.Float32bits(d2[b]) {
					t.Fatalf("Q8_K case %d n=%d block %d: d %v, reference %v", ci, n, b, d2[b], d1[b])
				}
			}
			for i := range bs1 {
				if bs1[i] != bs2[i] {
					t.Fatalf("Q8_K case %d n=%d: bsums[%d] = %d, reference %d", ci, n, i, bs2[i], bs1[i])
				}
			}
		}
	}
	// NaN and infinity must not crash (results are unspecified).
	x := randVec(rng, 256, 1)
	x[7], x[100] = float32(math.NaN()), float32(math.Inf(1))
	quantizeActQ80(make([]int8, 256), make([]float32, 8), make([]int32, 8), x)
	quantizeActQ8K(make([]int8, 256), make([]float32, 1), make([]int16, 16), x)
	for i := range x {
		x[i] = float32(math.NaN())
	}
	quantizeActQ8K(make([]int8, 256), make([]float32, 1), make([]int16, 16), x)
}

func TestConvertF16MatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for _, n := range []int{1, 7, 8, 9, 64, 100} {
		x := randVec(rng, n, 100)
		x[0] = 65519.99 // rounds to the largest f16
		h1, h2 := make([]uint16, n), make([]uint16, n)
		f1, f2 := make([]float32, n), make([]float32, n)
		convertF16ActGeneric(h1, f1, x)
		convertF16Act(h2, f2, x)
		for i := range h1 {
			if h1[i] != h2[i] || math.Float32bits(f1[i]) != math.Float32bits(f2[i]) {
				t.Fatalf("n=%d [%d]: (%#04x, %v), reference (%#04x, %v)", n, i, h2[i], f2[i], h1[i], f1[i])
			}
		}
	}
}
