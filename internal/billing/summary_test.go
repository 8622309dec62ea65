package billing

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/internal/pricing"
)

const testBook = `
currency: USD
models:
  default: {input: 1, cached_input: 0.1, cache_write: 1.25, output: 4, storage: 2, compute: 0}
  dear:    {input: 10, cached_input: 1, cache_write: 12.5, output: 40, storage: 20, compute: 0.5}
`

type liveCaches []ctxcache.Cache

func (l liveCaches) All(context.Context) ([]ctxcache.Cache, error) { return l, nil }

// TestSummarize checks costs and savings against numbers worked by hand.
func TestSummarize(t *testing.T) {
	ctx := context.Background()
	book, err := pricing.Parse(strings.NewReader(testBook))
	if err != nil {
		t.Fatal(err)
	}
	l, _, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	day1 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	day2 := day1.AddDate(0, 0, 1)
	recs := []ledger.Record{
		// 1M prompt tokens, 600k cached (500k G1, 100k G3), 200k of the
		// 400k computed written on request; 100k output.
		{Kind: ledger.KindRequest, Start: day1, Tenant: "a", Model: "cheap", KeyID: "k1", Outcome: ledger.OutcomeCompleted,
			Tokens: ledger.Tokens{Prompt: 1e6, Uncached: 4e5, Cached: 6e5, CachedG1: 5e5, CachedG3: 1e5, CacheWrite: 2e5, Output: 1e5}},
		// The dear model, nothing cached, 2 s of compute; failed.
		{Kind: ledger.KindRequest, Start: day2, Tenant: "b", Model: "dear", Outcome: ledger.OutcomeFailed, DurationMs: 2000,
			Tokens: ledger.Tokens{Prompt: 1e5, Uncached: 1e5, Output: 1e4}},
		// A cache's creation (200k written) and its storage (1M token-hours).
		{Kind: ledger.KindCacheCreate, Start: day2, Tenant: "a", Model: "cheap", Outcome: ledger.OutcomeCompleted,
			Tokens: ledger.Tokens{Prompt: 2e5, Uncached: 2e5, CacheWrite: 2e5}},
		{Kind: ledger.KindCacheStorage, Start: day1, Tenant: "a", Model: "cheap", Outcome: ledger.OutcomeCompleted, TokenHours: 1e6},
	}
	for _, r := range recs {
		if _, err := l.Add(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// A live cache of 100k tokens created 5 hours before now: 500k
	// token-hours, of tenant a.
	now := day2.Add(12 * time.Hour)
	live := liveCaches{{ID: "c1", Tenant: "a", Model: "cheap", TokenCount: 1e5, CreateTime: now.Add(-5 * time.Hour), ExpireTime: now.Add(time.Hour)}}

	// Hand-worked, default prices (per million): request 1 = input 0.2M×1
	// + cached 0.6M×0.1 + write 0.2M×1.25 + output 0.1M×4 = 0.2 + 0.06 +
	// 0.25 + 0.4 = 0.91; without cache 1M×1 + 0.4 = 1.4. Cache create =
	// 0.2M×1.25 = 0.25. Storage = (1M + 0.5M) token-hours × 2 = 3.0.
	// Dear request = 0.1M×10 + 0.01M×40 + 2 s×0.5 = 1 + 0.4 + 1 = 2.4,
	// the same without cache.
	tests := []struct {
		name     string
		q        Query
		total    float64
		without  float64
		requests int64
		groups   int
	}{
		{"everything", Query{}, 0.91 + 0.25 + 3.0 + 2.4, 1.4 + 2.4, 2, 0},
		{"tenant a by day", Query{Tenant: "a", GroupBy: []string{ByDay}}, 0.91 + 0.25 + 3.0, 1.4, 1, 2},
		{"by model", Query{GroupBy: []string{ByModel}}, 0.91 + 0.25 + 3.0 + 2.4, 1.4 + 2.4, 2, 2},
		// The live cache's accrual stops at To: 2 of its 5 hours.
		{"day 2 until 2 h after the cache's start", Query{From: day2, To: now.Add(-3 * time.Hour)}, 2.4 + 0.25 + 0.2e6*2/1e6, 2.4, 1, 0},
	}
	for _, tc := range tests {
		s, err := Summarize(ctx, l, live, book, tc.q, now)
		if err != nil {
			t.Fatal(err)
		}
		if !near(s.Total.CostTotal, tc.total) || !near(s.Total.CostWithoutCache, tc.without) || s.Total.Requests != tc.requests {
			t.Errorf("%s: cost %.6f (want %.6f), without cache %.6f (want %.6f), %d requests (want %d)", tc.name,
				s.Total.CostTotal, tc.total, s.Total.CostWithoutCache, tc.without, s.Total.Requests, tc.requests)
		}
		if tc.groups > 0 && len(s.Groups) != tc.groups {
			t.Errorf("%s: %d groups, want %d", tc.name, len(s.Groups), tc.groups)
		}
		if !near(s.Total.Savings, s.Total.CostWithoutCache-s.Total.CostTotal) {
			t.Errorf("%s: savings %.6f", tc.name, s.Total.Savings)
		}
	}
	s, err := Summarize(ctx, l, live, book, Query{GroupBy: []string{ByTenant}}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range s.Groups {
		if g.Tenant == "b" && (g.Failed != 1 || g.HitRate != 0) {
			t.Errorf("tenant b: %+v", g)
		}
		if g.Tenant == "a" && (!near(g.HitRate, 0.6) || !near(g.TokenHours, 1.5e6) || g.CacheCreates != 1) {
			t.Errorf("tenant a: hit rate %v, token-hours %v, creates %d", g.HitRate, g.TokenHours, g.CacheCreates)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }

func TestParseGroupBy(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"", "", true},
		{"day", "day", true},
		{"day, model,day", "day,model", true},
		{"key,tenant,dialect", "key,tenant,dialect", true},
		{"week", "", false},
	}
	for _, tc := range tests {
		got, err := ParseGroupBy(tc.in)
		if (err == nil) != tc.ok || strings.Join(got, ",") != tc.want {
			t.Errorf("ParseGroupBy(%q) = %v, %v", tc.in, got, err)
		}
	}
}
