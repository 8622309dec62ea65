package tco

import (
	"math"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/pricing"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

// TestPriceSeed: the seeds' scenario under the built-in book, worked by
// hand (prices per million tokens; see internal/pricing/default.yaml).
func TestPriceSeed(t *testing.T) {
	book := pricing.Default()
	tests := []struct {
		model         string
		without, with float64
	}{
		// fast: without = 10,000 × 500,100 × 0.30 + 10,000 × 300 × 2.50
		// = 1,500.3 + 7.5; with = write 500,000 × 0.375 (0.1875) + storage
		// 500,000 × 24 h × 1.00 (12) + cached 10,000 × 500,000 × 0.03 (150)
		// + input 10,000 × 100 × 0.30 (0.3) + output 7.5.
		{"example-fast", 1507.8, 169.9875},
		// strong: 12,502.5 + 45; with 1.5625 + 54 + 1,250 + 2.5 + 45.
		{"example-strong", 12547.5, 1353.0625},
	}
	for _, tc := range tests {
		p, err := Price(book, tc.model, Seed)
		if err != nil {
			t.Fatal(err)
		}
		if !near(p.WithoutCache.Total(), tc.without) || !near(p.WithCache.Total(), tc.with) || !near(p.Cut, 1-tc.with/tc.without) {
			t.Errorf("%s: without %.4f (want %.4f), with %.4f (want %.4f), cut %.4f", tc.model,
				p.WithoutCache.Total(), tc.without, p.WithCache.Total(), tc.with, p.Cut)
		}
		// The bar: at least a 74% cut with the context cache.
		if p.Cut < 0.74 {
			t.Errorf("%s: the cache cuts %.1f%%, under 74%%", tc.model, 100*p.Cut)
		}
	}
}

func TestPriceCacheLife(t *testing.T) {
	book, err := pricing.Parse(strings.NewReader("currency: USD\nmodels:\n  default: {input: 1, cached_input: 0, cache_write: 1, output: 0, storage: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := Scenario{QueriesPerDay: 1, DocumentTokens: 1e6, CacheHours: 5}
	tests := []struct {
		hours, writes float64
	}{{5, 5}, {24, 1}, {48, 0.5}, {1, 24}}
	for _, tc := range tests {
		s.CacheHours = tc.hours
		p, err := Price(book, "m", s)
		if err != nil {
			t.Fatal(err)
		}
		if !near(p.WithCache.CacheWrite, tc.writes) {
			t.Errorf("a cache kept %v h: %v writes a day, want %v", tc.hours, p.WithCache.CacheWrite, tc.writes)
		}
	}
	for _, bad := range []Scenario{{}, {QueriesPerDay: 1, DocumentTokens: 1}, {QueriesPerDay: 1, CacheHours: 1}} {
		if _, err := Price(book, "m", bad); err == nil {
			t.Errorf("%+v priced", bad)
		}
	}
}

// TestFitAndScale: the fit recovers a known model from exact points, and
// scaling it up is the arithmetic written out.
func TestFitAndScale(t *testing.T) {
	want := Model{ColdA: 1e-4, ColdB: 2e-9, WarmC: 0.01, WarmD: 1e-6}
	var pts []Point
	for _, n := range []int64{1000, 2000, 4000} {
		pts = append(pts, Point{Tokens: n, Cold: want.Cold(n), Warm: want.Warm(n)})
	}
	got, err := Fit(pts)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range [][2]float64{{got.ColdA, want.ColdA}, {got.ColdB, want.ColdB}, {got.WarmC, want.WarmC}, {got.WarmD, want.WarmD}} {
		if math.Abs(f[0]-f[1]) > 1e-6*f[1] {
			t.Fatalf("fit %+v, want %+v", got, want)
		}
	}
	if _, err := Fit(pts[:1]); err == nil {
		t.Fatal("a fit from one point")
	}
	s := Scenario{QueriesPerDay: 100, DocumentTokens: 10000, QuestionTokens: 0, CacheHours: 24}
	m, err := Scale(want, s, 3.6)
	if err != nil {
		t.Fatal(err)
	}
	// cold(10,000) = 1 + 0.2 = 1.2 s; warm = 0.01 + 0.01 = 0.02 s. A day:
	// 100 × 1.2 = 120 s without, 1.2 + 100 × 0.02 = 3.2 s with; at 3.6 an
	// hour, 0.12 and 0.0032.
	if !near(m.TTFTWithoutCache, 1.2) || !near(m.TTFTWithCache, 0.02) || !near(m.SecondsWithoutCache, 120) ||
		!near(m.SecondsWithCache, 3.2) || !near(m.CostWithoutCache, 0.12) || !near(m.CostWithCache, 0.0032) || !near(m.TTFTCut, 60) {
		t.Fatalf("scaled: %+v", m)
	}
}
