package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionKernels compares the attention kernels with their portable
// versions on random inputs of many shapes (including ones the fast paths
// hand back to the portable code).
func TestAttentionKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, hd := range []int{8, 16, 24, 64, 128, 72} {
		for _, n := range []int{1, 2, 3, 4, 5, 7, 16, 33} {
			stride := hd*3 + 8*rng.IntN(3)
			k := make([]uint16, n*stride+hd)
			for i := range k {
				k[i] = F32ToF16(float32(rng.NormFloat64()))
			}
			q := make([]float32, hd)
			for i := range q {
				q[i] = F16ToF32(F32ToF16(float32(rng.NormFloat64())))
			}
			got, want := make([]float32, n), make([]float32, n)
			DotsF16(got, q, k, stride)
			dotsF16Generic(want, q, k, stride)
			for j := range got {
				if d := math.Abs(float64(got[j] - want[j])); d > 1e-4*math.Sqrt(float64(hd)) {
					t.Fatalf("DotsF16 hd %d n %d row %d: %v vs portable %v", hd, n, j, got[j], want[j])
				}
			}
			p := make([]float32, n)
			for i := range p {
				p[i] = rng.Float32()
			}
			o1, o2 := make([]float32, hd), make([]float32, hd)
			for i := range o1 {
				o1[i] = float32(rng.NormFloat64())
				o2[i] = o1[i]
			}
			AxpysF16(o1, p, k, stride)
			axpysF16Generic(o2, p, k, stride)
			for i := range o1 {
				if d := math.Abs(float64(o1[i] - o2[i])); d > 1e-4*math.Sqrt(float64(n)) {
					t.Fatalf("AxpysF16 hd %d n %d out %d: %v vs portable %v", hd, n, i, o1[i], o2[i])
				}
			}
		}
	}
}

func BenchmarkDotsF16(b *testing.B) {
	const hd, kvDim, n = 64, 192, 512
	k := make([]uint16, n*kvDim)
	q := make([]float32, hd)
	dst := make([]float32, n)
	for b.Loop() {
		DotsF16(dst, q, k, kvDim)
	}
	b.ReportMetric(float64(n*hd*2)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkAxpysF16(b *testing.B) {
	const hd, kvDim, n = 64, 192, 512
	v := make([]uint16, n*kvDim)
	p := make([]float32, n)
	out := make([]float32, hd)
	for b.Loop() {
		AxpysF16(out, p, v, kvDim)
	}
	b.ReportMetric(float64(n*hd*2)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
