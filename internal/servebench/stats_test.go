package servebench

import (
	"math"
	"slices"
	"testing"
)

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

// TestPercentile checks values numpy.percentile(x, 100*p) (method
// "linear") gives.
func TestPercentile(t *testing.T) {
	tests := []struct {
		x    []float64
		p    float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4}, 0.9, 3.7},
		{[]float64{1, 2, 3, 4}, 0.99, 3.97},
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 1, 4},
		{[]float64{15, 20, 35, 40, 50}, 0.4, 29},
		{[]float64{15, 20, 35, 40, 50}, 0.5, 35},
		{[]float64{7}, 0.5, 7},
		{[]float64{7}, 0.99, 7},
		{seq(100), 0.5, 50.5},
		{seq(100), 0.9, 90.1},
		{seq(100), 0.99, 99.01},
		{seq(1000), 0.99, 990.01},
		{[]float64{1, 1, 1, 100}, 0.99, 97.03},
		{[]float64{1, 2}, -1, 1},
		{[]float64{1, 2}, 2, 2},
	}
	for _, tt := range tests {
		if got := Percentile(tt.x, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Percentile(%v, %g) = %g, want %g", tt.x, tt.p, got, tt.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("empty sample: want NaN")
	}
}

// TestPercentileMonotone checks that percentiles never decrease with p and
// stay within the sample's range.
func TestPercentileMonotone(t *testing.T) {
	x := []float64{3, 3, 5, 9, 9, 9, 12, 40, 41, 1000}
	prev := math.Inf(-1)
	for p := 0.0; p <= 1.0001; p += 0.001 {
		v := Percentile(x, p)
		if v < prev || v < x[0] || v > x[len(x)-1] {
			t.Fatalf("p=%g: %g after %g", p, v, prev)
		}
		prev = v
	}
}

func TestSummarize(t *testing.T) {
	x := []float64{5, 1, 4, 2, 3}
	d := Summarize(x)
	want := Dist{Count: 5, Mean: 3, Min: 1, P50: 3, P90: 4.6, P99: 4.96, Max: 5}
	if math.Abs(d.P90-want.P90) > 1e-9 || math.Abs(d.P99-want.P99) > 1e-9 {
		t.Fatalf("%+v, want %+v", d, want)
	}
	d.P90, d.P99 = want.P90, want.P99
	if d != want {
		t.Fatalf("%+v, want %+v", d, want)
	}
	if !slices.IsSorted(x) {
		t.Fatal("Summarize should sort in place")
	}
	if (Summarize(nil) != Dist{}) {
		t.Fatal("empty sample: want zero Dist")
	}
}
