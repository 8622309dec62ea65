package sample

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestExp32Accuracy(t *testing.T) {
	worst := 0.0
	check := func(x float32) {
		got := float64(exp32(x))
		want := math.Exp(float64(x))
		if want < 1e-37 { // float32 subnormal range: exp32 returns 0 below -87
			return
		}
		rel := math.Abs(got-want) / want
		if rel > worst {
			worst = rel
		}
		if rel > 4e-7 {
			t.Fatalf("exp32(%v) = %v, want %v (rel err %.3g)", x, got, want, rel)
		}
	}
	for x := float32(0); x >= -87; x -= 0.0009765625 {
		check(x)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		check(-87 * r.Float32())
	}
	for _, x := range []float32{0, -0, -1e-30, -0.34657359, -0.34657360, -87} {
		check(x)
	}
	t.Logf("worst relative error %.3g", worst)
}

func BenchmarkExp32(b *testing.B) {
	xs := make([]float32, 151936)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range xs {
		xs[i] = -30 * r.Float32()
	}
	var sink float64
	cpuLoop(b, func() { sink += sumExpRel(xs, 0) })
	_ = sink
}
