// Package tco is the arithmetic of `kvserve simulate tco`: what a workload
// of questions over one long document costs a day with a context cache and
// without, priced by a price book (a cloud API's way) or by machine time
// measured on this server and scaled up (a self-hosted deployment's way).
package tco

import (
	"errors"
	"fmt"
	"math"

	"github.com/kvserve/kvserve/internal/pricing"
)

// Scenario is the workload: QueriesPerDay questions of QuestionTokens over
// one document of DocumentTokens, each answered with OutputTokens; with the
// cache, the document is cached once a day and kept CacheHours.
type Scenario struct {
	QueriesPerDay  int64   `json:"queries_per_day"`
	DocumentTokens int64   `json:"document_tokens"`
	QuestionTokens int64   `json:"question_tokens"`
	OutputTokens   int64   `json:"output_tokens"`
	CacheHours     float64 `json:"cache_hours"`
}

// Seed is the seeds' scenario: 10,000 queries a day over a 500,000-token
// document.
var Seed = Scenario{QueriesPerDay: 10000, DocumentTokens: 500000, QuestionTokens: 100, OutputTokens: 300, CacheHours: 24}

// writesPerDay is how often a day writes the document to the cache: again
// each time it lapses within the day, or a day's share of one write when it
// is kept longer.
func (s Scenario) writesPerDay() float64 {
	if s.CacheHours >= 24 {
		return 24 / s.CacheHours
	}
	return math.Ceil(24 / s.CacheHours)
}

// Validate reports a scenario that cannot be priced.
func (s Scenario) Validate() error {
	switch {
	case s.QueriesPerDay <= 0:
		return errors.New("tco: queries per day must be positive")
	case s.DocumentTokens <= 0 || s.QuestionTokens < 0 || s.OutputTokens < 0:
		return errors.New("tco: the document must have tokens, and questions and answers cannot be negative")
	case s.CacheHours <= 0 || s.CacheHours > 24*365:
		return errors.New("tco: the cache is kept between a moment and a year")
	}
	return nil
}

// Day is a day's cost split by what it pays for.
type Day struct {
	Input      float64 `json:"input"`
	CachedRead float64 `json:"cached_input"`
	CacheWrite float64 `json:"cache_write"`
	Output     float64 `json:"output"`
	Storage    float64 `json:"storage"`
}

// Total is the day's cost.
func (d Day) Total() float64 { return d.Input + d.CachedRead + d.CacheWrite + d.Output + d.Storage }

// Priced is one model's day with the cache and without.
type Priced struct {
	Model        string  `json:"model"`
	WithoutCache Day     `json:"without_cache"`
	WithCache    Day     `json:"with_cache"`
	Cut          float64 `json:"cut"` // 1 − with/without
}

// Price prices a day of s with model's prices: without a cache every query
// sends the whole document as input; with one, the document is written to
// the cache once (at the cache-write price), stored for CacheHours (the
// storage price per token-hour), and each query reads it at the cached
// price and sends only its question as input.
func Price(book *pricing.Book, model string, s Scenario) (Priced, error) {
	if err := s.Validate(); err != nil {
		return Priced{}, err
	}
	p := book.For(model)
	const m = 1e-6
	q := float64(s.QueriesPerDay)
	doc, ask, out := float64(s.DocumentTokens), float64(s.QuestionTokens), float64(s.OutputTokens)
	r := Priced{Model: model}
	r.WithoutCache = Day{Input: q * (doc + ask) * p.Input * m, Output: q * out * p.Output * m}
	// Queries come all day, so the document is in the cache all day: it is
	// stored 24 hours and written writesPerDay times.
	r.WithCache = Day{
		CacheWrite: s.writesPerDay() * doc * p.CacheWrite * m,
		Storage:    doc * 24 * p.Storage * m,
		CachedRead: q * doc * p.CachedInput * m,
		Input:      q * ask * p.Input * m,
		Output:     q * out * p.Output * m,
	}
	if w := r.WithoutCache.Total(); w > 0 {
		r.Cut = 1 - r.WithCache.Total()/w
	}
	return r, nil
}

// Point is one measured prompt: a document of Tokens, the seconds to the
// first token without the cache (Cold: the whole prompt computed) and with
// it (Warm: only the question computed, attending to the cached document).
type Point struct {
	Tokens int64   `json:"document_tokens"`
	Cold   float64 `json:"cold_s"`
	Warm   float64 `json:"warm_s"`
}

// Model is time to first token as a function of the document's length n:
// cold(n) = ColdA·n + ColdB·n² (prefill is linear in the weights and
// quadratic in attention), warm(n) = WarmC + WarmD·n (the question attends
// to every cached token).
type Model struct {
	ColdA, ColdB, WarmC, WarmD float64
}

// Fit fits the model to measured points (at least two lengths) by least
// squares, coefficients kept non-negative.
func Fit(points []Point) (Model, error) {
	if len(points) < 2 {
		return Model{}, errors.New("tco: fitting needs at least two measured lengths")
	}
	// cold: minimise Σ (a·n + b·n² − t)² over a, b.
	var s11, s12, s22, s1t, s2t float64
	// warm: ordinary least squares of t on n.
	var sn, sw, snn, snw float64
	for _, p := range points {
		n := float64(p.Tokens)
		s11 += n * n
		s12 += n * n * n
		s22 += n * n * n * n
		s1t += n * p.Cold
		s2t += n * n * p.Cold
		sn += n
		sw += p.Warm
		snn += n * n
		snw += n * p.Warm
	}
	var m Model
	det := s11*s22 - s12*s12
	if det <= 0 {
		return Model{}, fmt.Errorf("tco: the measured lengths %v do not determine a fit", points)
	}
	m.ColdA = (s1t*s22 - s2t*s12) / det
	m.ColdB = (s11*s2t - s12*s1t) / det
	if m.ColdB < 0 { // no measurable quadratic term: linear through 0
		m.ColdA, m.ColdB = s1t/s11, 0
	}
	if m.ColdA < 0 {
		m.ColdA, m.ColdB = 0, s2t/s22
	}
	k := float64(len(points))
	if d := k*snn - sn*sn; d > 0 {
		m.WarmD = (k*snw - sn*sw) / d
	}
	m.WarmD = max(0, m.WarmD)
	m.WarmC = max(0, (sw-m.WarmD*sn)/k)
	return m, nil
}

// Cold is the fitted time to first token of an n-token document uncached.
func (m Model) Cold(n int64) float64 { x := float64(n); return m.ColdA*x + m.ColdB*x*x }

// Warm is the fitted time to first token of a question over a cached
// n-token document.
func (m Model) Warm(n int64) float64 { return m.WarmC + m.WarmD*float64(n) }

// Machine is a self-hosted day: the machine time the scenario's prefills
// take on the measured machine, and what it costs at PerHour.
type Machine struct {
	TTFTWithoutCache float64 `json:"ttft_without_cache_s"`
	TTFTWithCache    float64 `json:"ttft_with_cache_s"`
	// Seconds of the measured machine per day, and machines needed to keep
	// up (a day has 86,400 of them per machine).
	SecondsWithoutCache float64 `json:"machine_seconds_without_cache"`
	SecondsWithCache    float64 `json:"machine_seconds_with_cache"`
	MachinesWithout     float64 `json:"machines_without_cache"`
	MachinesWith        float64 `json:"machines_with_cache"`
	CostWithoutCache    float64 `json:"cost_without_cache"`
	CostWithCache       float64 `json:"cost_with_cache"`
	Cut                 float64 `json:"cut"`
	TTFTCut             float64 `json:"ttft_cut"` // without / with
}

// Scale scales the fitted model up to s on machines costing perHour: the
// prefill work only (answers' decoding is the same with the cache or
// without, and not counted).
func Scale(m Model, s Scenario, perHour float64) (Machine, error) {
	if err := s.Validate(); err != nil {
		return Machine{}, err
	}
	doc := s.DocumentTokens
	full := doc + s.QuestionTokens
	r := Machine{TTFTWithoutCache: m.Cold(full), TTFTWithCache: m.Warm(doc)}
	q := float64(s.QueriesPerDay)
	r.SecondsWithoutCache = q * r.TTFTWithoutCache
	r.SecondsWithCache = s.writesPerDay()*m.Cold(doc) + q*r.TTFTWithCache
	r.MachinesWithout, r.MachinesWith = r.SecondsWithoutCache/86400, r.SecondsWithCache/86400
	r.CostWithoutCache, r.CostWithCache = r.SecondsWithoutCache/3600*perHour, r.SecondsWithCache/3600*perHour
	if r.SecondsWithoutCache > 0 {
		r.Cut = 1 - r.SecondsWithCache/r.SecondsWithoutCache
	}
	if r.TTFTWithCache > 0 {
		r.TTFTCut = r.TTFTWithoutCache / r.TTFTWithCache
	}
	return r, nil
}
