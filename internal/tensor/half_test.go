package tensor

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// f16Value is an independent float64 reference decoding of binary16.
func f16Value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0:
		return sign * m * math.Pow(2, -24)
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * (1 + m/1024) * math.Pow(2, float64(e-15))
}

func TestF16ToF32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := F16ToF32(h)
		want := f16Value(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, got)
			}
			if math.Float32bits(got)>>31 != uint32(h>>15) {
				t.Fatalf("F16ToF32(%#04x): NaN sign lost", h)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != (h&0x8000 != 0) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, got, want)
		}
		// Every finite or infinite f16 converts back to itself.
		if back := F32ToF16(got); back != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, back)
		}
	}
}

// roundRef rounds x to the nearest of the sorted non-negative finite values
// vals (ties to the one with the even encoding, i.e. even index), returning
// the index, or len(vals) when x rounds to infinity (beyond the largest value
// plus half its ulp, ulp given).
func roundRef(vals []float64, x float64, topUlp float64) int {
	last := len(vals) - 1
	if x >= vals[last]+topUlp/2 {
		return len(vals)
	}
	i := sort.SearchFloat64s(vals, x) // vals[i] >= x
	if i == len(vals) {
		return last
	}
	if vals[i] == x || i == 0 {
		return i
	}
	lo, hi := vals[i-1], vals[i]
	switch {
	case x-lo < hi-x:
		return i - 1
	case x-lo > hi-x:
		return i
	case (i-1)%2 == 0:
		return i - 1
	default:
		return i
	}
}

// halfCases returns float32 inputs that probe every rounding boundary of a
// 16-bit format whose non-negative finite values are vals: each value, the
// midpoints between neighbours and one float32 ulp either side, plus random
// bit patterns.
func halfCases(vals []float64, rng *rand.Rand) []float32 {
	var cs []float32
	add := func(f float32) {
		cs = append(cs, f, -f)
	}
	for i, v := range vals {
		add(float32(v))
		if i+1 < len(vals) {
			m := float32((v + vals[i+1]) / 2)
			add(m)
			add(math.Nextafter32(m, 0))
			add(math.Nextafter32(m, float32(math.Inf(1))))
		}
	}
	for range 200000 {
		cs = append(cs, math.Float32frombits(rng.Uint32()))
	}
	cs = append(cs, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		65504, 65519.996, 65520, 1e-8, 2.9802322e-08, 2.9802326e-08, 5.9604645e-08,
		math.MaxFloat32, math.SmallestNonzeroFloat32)
	return cs
}

func TestF32ToF16(t *testing.T) {
	var vals []float64
	for h := 0; h < 0x7c00; h++ {
		vals = append(vals, f16Value(uint16(h)))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, f := range halfCases(vals, rng) {
		got := F32ToF16(f)
		if math.IsNaN(float64(f)) {
			if got&0x7c00 != 0x7c00 || got&0x3ff == 0 || got&0x200 == 0 {
				t.Fatalf("F32ToF16(NaN %#08x) = %#04x, want a quiet NaN", math.Float32bits(f), got)
			}
			continue
		}
		idx := roundRef(vals, math.Abs(float64(f)), 32)
		want := uint16(idx)
		if idx == len(vals) {
			want = 0x7c00
		}
		if math.Signbit(float64(f)) {
			want |= 0x8000
		}
		if got != want {
			t.Fatalf("F32ToF16(%v = %#08x) = %#04x, want %#04x", f, math.Float32bits(f), got, want)
		}
	}
}

func TestBF16Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := BF16ToF32(h)
		if math.Float32bits(got) != uint32(h)<<16 {
			t.Fatalf("BF16ToF32(%#04x) = %#08x", h, math.Float32bits(got))
		}
		if got == got && F32ToBF16(got) != h {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, F32ToBF16(got))
		}
	}
}

func TestF32ToBF16(t *testing.T) {
	var vals []float64
	for h := 0; h < 0x7f80; h++ {
		vals = append(vals, float64(math.Float32frombits(uint32(h)<<16)))
	}
	topUlp := float64(math.Float32frombits(0x7f7f0000)) - float64(math.Float32frombits(0x7f7e0000))
	rng := rand.New(rand.NewPCG(3, 4))
	for _, f := range halfCases(vals, rng) {
		got := F32ToBF16(f)
		u := math.Float32bits(f)
		if math.IsNaN(float64(f)) {
			if want := uint16(u>>16) | 64; got != want {
				t.Fatalf("F32ToBF16(NaN %#08x) = %#04x, want %#04x", u, got, want)
			}
			continue
		}
		idx := roundRef(vals, math.Abs(float64(f)), topUlp)
		want := uint16(idx)
		if idx == len(vals) {
			want = 0x7f80
		}
		if math.Signbit(float64(f)) {
			want |= 0x8000
		}
		if got != want {
			t.Fatalf("F32ToBF16(%v = %#08x) = %#04x, want %#04x", f, u, got, want)
		}
	}
}

func TestHalfSlices(t *testing.T) {
	src := []float32{0, 1, -2.5, 65504, 1e-7, 3.14159}
	h := make([]uint16, len(src))
	f := make([]float32, len(src))
	F32ToF16Slice(h, src)
	F16ToF32Slice(f, h)
	for i, v := range src {
		if h[i] != F32ToF16(v) || f[i] != F16ToF32(h[i]) {
			t.Fatalf("f16 slice conversion differs from scalar at %d", i)
		}
	}
	F32ToBF16Slice(h, src)
	BF16ToF32Slice(f, h)
	for i, v := range src {
		if h[i] != F32ToBF16(v) || f[i] != BF16ToF32(h[i]) {
			t.Fatalf("bf16 slice conversion differs from scalar at %d", i)
		}
	}
}
