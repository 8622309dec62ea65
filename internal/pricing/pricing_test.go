package pricing

import (
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/ledger"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, book, err string
	}{
		{"minimal", "currency: EUR\nmodels:\n  default: {input: 1}\n", ""},
		{"empty", "", "empty"},
		{"no default", "currency: USD\nmodels:\n  m: {input: 1}\n", `no "default" entry`},
		{"bad currency", "currency: dollars\nmodels:\n  default: {}\n", "ISO 4217"},
		{"negative", "currency: USD\nmodels:\n  default: {output: -1}\n", "output is -1"},
		{"NaN", "currency: USD\nmodels:\n  default: {input: .nan}\n", "input is NaN"},
		{"unknown field", "currency: USD\nmodels:\n  default: {inptu: 1}\n", "inptu"},
		{"unknown top-level field", "currency: USD\nmodel: {}\n", "model"},
		{"not a map", "- 1\n- 2\n", "cannot unmarshal"},
	}
	for _, tc := range tests {
		_, err := Parse(strings.NewReader(tc.book))
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.err)
		}
	}
}

func TestDefaultBook(t *testing.T) {
	b := Default()
	if b.Source != "built-in" || b.Currency != "USD" || b.For("no-such-model") != b.Models[DefaultModel] {
		t.Fatalf("built-in book: %+v", b)
	}
	for _, name := range []string{"example-fast", "example-strong"} {
		if p := b.For(name); p.Input <= 0 || p.CachedInput >= p.Input || p.Output <= p.Input {
			t.Errorf("%s: %+v", name, p)
		}
	}
}

func TestCost(t *testing.T) {
	p := Prices{Input: 2, CachedInput: 0.5, CacheWrite: 2.5, Output: 8, Storage: 3, Compute: 0.25}
	r := ledger.Record{Tokens: ledger.Tokens{Prompt: 3e6, Uncached: 1e6, Cached: 2e6, CachedG1: 2e6, CacheWrite: 4e5, Output: 5e5},
		TokenHours: 2e6, DurationMs: 4000}
	// input 0.6M×2 = 1.2; cached 2M×0.5 = 1; write 0.4M×2.5 = 1; output
	// 0.5M×8 = 4; storage 2M×3 = 6; compute 4 s×0.25 = 1.
	want := Cost{Input: 1.2, CachedRead: 1, CacheWrite: 1, Output: 4, Storage: 6, Compute: 1}
	if got := p.Of(r); got != want || got.Total() != 14.2 {
		t.Fatalf("Of = %+v (%v), want %+v", got, got.Total(), want)
	}
	// Uncached: 3M×2 + 4 + 1.
	if got := p.Uncached(r); got.Total() != 11 {
		t.Fatalf("Uncached = %+v", got)
	}
	// The flex tier at half price: the tokens halve, storage and compute
	// do not; a book without a flex factor charges flex in full.
	r.ServiceTier = "flex"
	if got := p.Of(r); got.Total() != 14.2 {
		t.Fatalf("flex with no flex factor: %+v", got)
	}
	p.Flex = 0.5
	if got, want := p.Of(r), (Cost{Input: 0.6, CachedRead: 0.5, CacheWrite: 0.5, Output: 2, Storage: 6, Compute: 1}); got != want {
		t.Fatalf("flex at half: %+v, want %+v", got, want)
	}
	if got := p.Uncached(r); got.Total() != 3+2+1 {
		t.Fatalf("flex uncached: %+v", got)
	}
	r.ServiceTier = "default"
	if got := p.Of(r); got.Total() != 14.2 {
		t.Fatalf("default tier with a flex factor: %+v", got)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(string(DefaultYAML()))
	f.Add("currency: USD\nmodels:\n  default: {input: 1e308, output: 1e308}\n")
	f.Add("currency: USD\nmodels: {default: {}, '': {}}\n")
	f.Fuzz(func(t *testing.T, s string) {
		b, err := Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		if _, ok := b.Models[DefaultModel]; !ok {
			t.Fatal("a parsed book without a default entry")
		}
		for _, p := range b.Models {
			_ = p.Of(ledger.Record{Tokens: ledger.Tokens{Prompt: 1, Uncached: 1, Output: 1}})
		}
	})
}
