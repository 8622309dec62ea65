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
	if exp32(-88) != 0 || exp32(float32(math.NaN())) != 0 || exp32(float32(math.Inf(-1))) != 0 {
		t.Fatal("exp32 must be 0 below -87, for -Inf and for NaN")
	}
}

func BenchmarkExp32(b *testing.B) {
	xs := make([]float32, 151936)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range xs {
		xs[i] = -30 * r.Float32()
	}
	var sink float64
	for b.Loop() {
		s := 0.0
		for _, x := range xs {
			s += float64(exp32(x))
		}
		sink += s
	}
	_ = sink
}

func BenchmarkBaselineSum(b *testing.B) {
	xs := make([]float32, 151936)
	var sink float64
	for b.Loop() {
		s := 0.0
		for _, x := range xs {
			s += float64(x)
		}
		sink += s
	}
	_ = sink
}

func BenchmarkBaselineSum4(b *testing.B) {
	xs := make([]float32, 151936)
	var sink float64
	for b.Loop() {
		var s0, s1, s2, s3 float64
		for i := 0; i+4 <= len(xs); i += 4 {
			s0 += float64(xs[i])
			s1 += float64(xs[i+1])
			s2 += float64(xs[i+2])
			s3 += float64(xs[i+3])
		}
		sink += s0 + s1 + s2 + s3
	}
	_ = sink
}

func BenchmarkExp32x4(b *testing.B) {
	xs := make([]float32, 151936)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range xs {
		xs[i] = -30 * r.Float32()
	}
	var sink float64
	for b.Loop() {
		var s0, s1, s2, s3 float32
		for i := 0; i+4 <= len(xs); i += 4 {
			s0 += exp32(xs[i])
			s1 += exp32(xs[i+1])
			s2 += exp32(xs[i+2])
			s3 += exp32(xs[i+3])
		}
		sink += float64(s0 + s1 + s2 + s3)
	}
	_ = sink
}
