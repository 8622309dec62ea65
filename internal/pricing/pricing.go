// Package pricing is the price book: what each model's tokens, a cache's
// storage and a second of compute cost, read from YAML, and the cost of a
// ledger's token counts under it.
//
// Prices are per million tokens (input, cached input, cache write, output),
// per million token-hours (a cache's storage) and per second (compute, for
// self-hosted deployments priced by machine time). A model not in the book
// is priced by its "default" entry.
package pricing

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/kvserve/kvserve/internal/ledger"
)

// DefaultModel names the entry that prices models the book does not list.
const DefaultModel = "default"

// Prices are one model's prices.
type Prices struct {
	// Input, CachedInput, CacheWrite and Output are per million tokens.
	// Uncached prompt tokens cost Input, cached ones CachedInput; tokens
	// written to the cache on request cost CacheWrite instead of Input.
	Input       float64 `yaml:"input"`
	CachedInput float64 `yaml:"cached_input"`
	CacheWrite  float64 `yaml:"cache_write"`
	Output      float64 `yaml:"output"`
	// Storage is per million token-hours of a context cache kept.
	Storage float64 `yaml:"storage"`
	// Compute is per second of a request's time in the server.
	Compute float64 `yaml:"compute"`
	// Flex multiplies the token prices of requests served in the flex
	// service tier (0 or absent: 1, no discount).
	Flex float64 `yaml:"flex"`
}

// tokenFactor is what r's token prices are multiplied by.
func (p Prices) tokenFactor(r ledger.Record) float64 {
	if r.ServiceTier == "flex" && p.Flex > 0 {
		return p.Flex
	}
	return 1
}

// Book is a price book.
type Book struct {
	// Currency is an ISO 4217 code ("USD").
	Currency string `yaml:"currency"`
	// Models prices models by id; "default" prices the others.
	Models map[string]Prices `yaml:"models"`
	// Source says where the book came from (a file, or "built-in").
	Source string `yaml:"-"`
}

//go:embed default.yaml
var defaultBook []byte

// Default returns the built-in example book.
func Default() *Book {
	b, err := Parse(bytes.NewReader(defaultBook))
	if err != nil {
		panic("pricing: the built-in book: " + err.Error())
	}
	b.Source = "built-in"
	return b
}

// DefaultYAML returns the built-in book's text.
func DefaultYAML() []byte { return bytes.Clone(defaultBook) }

// Load reads the book at path.
func Load(path string) (*Book, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("pricing: %w", err)
	}
	defer f.Close()
	b, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("pricing: %s: %w", path, err)
	}
	b.Source = path
	return b, nil
}

// maxBookBytes bounds a book's size: a price book is a few kilobytes.
const maxBookBytes = 1 << 20

// Parse reads a book. Unknown fields, negative or non-finite prices, a
// missing default entry and an empty currency are errors.
func Parse(r io.Reader) (*Book, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxBookBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxBookBytes {
		return nil, fmt.Errorf("the price book is larger than %d bytes", maxBookBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var b Book
	if err := dec.Decode(&b); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the price book is empty")
		}
		return nil, err
	}
	if err := b.validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

func (b *Book) validate() error {
	if len(b.Currency) != 3 || strings.ToUpper(b.Currency) != b.Currency {
		return fmt.Errorf("currency %q is not a three-letter ISO 4217 code like USD", b.Currency)
	}
	if _, ok := b.Models[DefaultModel]; !ok {
		return fmt.Errorf("the book has no %q entry for the models it does not list", DefaultModel)
	}
	for name, p := range b.Models {
		if name == "" {
			return errors.New("a model entry has no name")
		}
		for field, v := range map[string]float64{"input": p.Input, "cached_input": p.CachedInput, "cache_write": p.CacheWrite,
			"output": p.Output, "storage": p.Storage, "compute": p.Compute, "flex": p.Flex} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("model %q: %s is %v; prices are finite and not negative", name, field, v)
			}
		}
	}
	return nil
}

// For returns model's prices (the default entry's when it is not listed).
func (b *Book) For(model string) Prices {
	if p, ok := b.Models[model]; ok {
		return p
	}
	return b.Models[DefaultModel]
}

// Names returns the book's model names, sorted.
func (b *Book) Names() []string {
	names := make([]string, 0, len(b.Models))
	for n := range b.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Cost is a cost split by what it pays for.
type Cost struct {
	Input      float64 `json:"input"`
	CachedRead float64 `json:"cached_input"`
	CacheWrite float64 `json:"cache_write"`
	Output     float64 `json:"output"`
	Storage    float64 `json:"storage"`
	Compute    float64 `json:"compute"`
}

// Total is the sum of the parts.
func (c Cost) Total() float64 {
	return c.Input + c.CachedRead + c.CacheWrite + c.Output + c.Storage + c.Compute
}

// Add adds d to c.
func (c *Cost) Add(d Cost) {
	c.Input += d.Input
	c.CachedRead += d.CachedRead
	c.CacheWrite += d.CacheWrite
	c.Output += d.Output
	c.Storage += d.Storage
	c.Compute += d.Compute
}

const perMillion = 1e-6

// Of returns what a record costs at these prices.
func (p Prices) Of(r ledger.Record) Cost {
	t, f := r.Tokens, p.tokenFactor(r)
	return Cost{
		Input:      float64(t.Uncached-t.CacheWrite) * p.Input * f * perMillion,
		CachedRead: float64(t.Cached) * p.CachedInput * f * perMillion,
		CacheWrite: float64(t.CacheWrite) * p.CacheWrite * f * perMillion,
		Output:     float64(t.Output) * p.Output * f * perMillion,
		Storage:    r.TokenHours * p.Storage * perMillion,
		Compute:    r.DurationMs / 1000 * p.Compute,
	}
}

// Uncached returns what a record would have cost with no cache: every
// prompt token at the input price, no cache writes, no storage. Compute is
// priced as it was (the time a recomputed prefix would take is not known
// from the record).
func (p Prices) Uncached(r ledger.Record) Cost {
	t, f := r.Tokens, p.tokenFactor(r)
	return Cost{
		Input:   float64(t.Prompt) * p.Input * f * perMillion,
		Output:  float64(t.Output) * p.Output * f * perMillion,
		Compute: r.DurationMs / 1000 * p.Compute,
	}
}
