package servebench

import (
	"math"
	"slices"
)

// PercentileMethod names the percentile definition used throughout, for
// reports.
const PercentileMethod = "linear interpolation between closest ranks (Hyndman-Fan type 7, numpy's default)"

// Percentile returns the p-th quantile (0 ≤ p ≤ 1) of sorted, which must be
// in ascending order: with h = (n−1)·p, the value at rank ⌊h⌋ plus the
// fraction h−⌊h⌋ of the gap to the next rank. p50 of an even count is the
// mean of the two middle values; p0 and p100 are the minimum and maximum.
// An empty slice gives NaN.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 || math.IsNaN(p) {
		return math.NaN()
	}
	p = min(max(p, 0), 1)
	h := float64(n-1) * p
	lo := int(math.Floor(h))
	if lo >= n-1 {
		return sorted[n-1]
	}
	frac := h - float64(lo)
	return sorted[lo] + frac*(sorted[lo+1]-sorted[lo])
}

// Dist summarises a sample, in the sample's unit (milliseconds in
// reports).
type Dist struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	Min   float64 `json:"min"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Summarize sorts values in place and returns their summary; an empty
// sample gives a zero Dist.
func Summarize(values []float64) Dist {
	if len(values) == 0 {
		return Dist{}
	}
	slices.Sort(values)
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	return Dist{
		Count: len(values),
		Mean:  sum / float64(len(values)),
		Min:   values[0],
		P50:   Percentile(values, 0.50),
		P90:   Percentile(values, 0.90),
		P99:   Percentile(values, 0.99),
		Max:   values[len(values)-1],
	}
}
