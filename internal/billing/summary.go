// Package billing reads the usage ledger under a price book: totals by day,
// model, key and tenant with their cost and what caching saved, for GET
// /v1/usage, kvserve report and the dashboard; and the ledger's records as
// JSON lines or CSV.
package billing

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/internal/pricing"
)

// Dimensions a summary can group by.
const (
	ByDay     = "day"
	ByModel   = "model"
	ByKey     = "key"
	ByTenant  = "tenant"
	ByDialect = "dialect"
)

var dimensions = []string{ByDay, ByModel, ByKey, ByTenant, ByDialect}

// Query selects and groups records.
type Query struct {
	// Tenant, when set, keeps only that tenant's usage.
	Tenant string
	// From ≤ start < To (zero: unbounded).
	From, To time.Time
	// GroupBy lists dimensions (ByDay …); none gives the total only.
	GroupBy []string
}

// ParseGroupBy parses a comma-separated list of dimensions.
func ParseGroupBy(s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for _, d := range strings.Split(s, ",") {
		d = strings.TrimSpace(d)
		if !slices.Contains(dimensions, d) {
			return nil, fmt.Errorf("cannot group by %q; the dimensions are %s", d, strings.Join(dimensions, ", "))
		}
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// Group is the usage of one group (or of everything: Summary.Total).
type Group struct {
	Day     string `json:"day,omitempty"`
	Model   string `json:"model,omitempty"`
	KeyID   string `json:"key_id,omitempty"`
	Tenant  string `json:"tenant,omitempty"`
	Dialect string `json:"dialect,omitempty"`
	// Requests counts generation requests, Failed those that did not
	// complete (failed, cancelled, interrupted); CacheCreates counts
	// context caches prefilled.
	Requests     int64         `json:"requests"`
	Failed       int64         `json:"failed"`
	CacheCreates int64         `json:"cache_creates"`
	Tokens       ledger.Tokens `json:"tokens"`
	// TokenHours is context caches' storage (ended ones from the ledger,
	// live ones accrued to the query's end).
	TokenHours float64 `json:"cache_token_hours"`
	// HitRate is cached prompt tokens over prompt tokens (requests only).
	HitRate float64      `json:"hit_rate"`
	Cost    pricing.Cost `json:"cost"`
	// CostTotal is what was spent; CostWithoutCache what the same requests
	// would have cost with nothing cached; Savings the difference.
	CostTotal        float64 `json:"cost_total"`
	CostWithoutCache float64 `json:"cost_without_cache"`
	Savings          float64 `json:"savings"`

	requestPrompt, requestCached int64
}

// Summary is the answer to a Query.
type Summary struct {
	Object    string    `json:"object"`
	From      time.Time `json:"from,omitzero"`
	To        time.Time `json:"to,omitzero"`
	Currency  string    `json:"currency"`
	PriceBook string    `json:"price_book"`
	GroupBy   []string  `json:"group_by"`
	Groups    []Group   `json:"groups"`
	Total     Group     `json:"total"`
}

// Records iterates over ledger records (*ledger.Ledger).
type Records interface {
	Records(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error
}

// LiveCaches lists the context caches not yet expired (*ctxcache.Service).
type LiveCaches interface {
	All(ctx context.Context) ([]ctxcache.Cache, error)
}

// Summarize totals the records q selects, pricing them with book. Live
// caches (when given) add their storage accrued within [q.From, min(q.To,
// now)).
func Summarize(ctx context.Context, recs Records, live LiveCaches, book *pricing.Book, q Query, now time.Time) (Summary, error) {
	s := Summary{Object: "usage", From: q.From, To: q.To, Currency: book.Currency, PriceBook: book.Source, GroupBy: q.GroupBy}
	if s.GroupBy == nil {
		s.GroupBy = []string{}
	}
	groups := map[Group]*Group{}
	var order []Group
	add := func(r ledger.Record) {
		key := keyOf(r, q.GroupBy)
		g := groups[key]
		if g == nil {
			g = new(Group)
			*g = key
			groups[key] = g
			order = append(order, key)
		}
		for _, g := range []*Group{g, &s.Total} {
			g.add(r, book)
		}
	}
	err := recs.Records(ctx, ledger.Filter{Tenant: q.Tenant, From: q.From, To: q.To}, func(r ledger.Record) error {
		add(r)
		return nil
	})
	if err != nil {
		return Summary{}, err
	}
	if live != nil {
		caches, err := live.All(ctx)
		if err != nil {
			return Summary{}, err
		}
		end := now
		if !q.To.IsZero() && q.To.Before(end) {
			end = q.To
		}
		for _, cc := range caches {
			if q.Tenant != "" && cc.Tenant != q.Tenant {
				continue
			}
			r := accrued(cc, q.From, end)
			if r.TokenHours > 0 {
				add(r)
			}
		}
	}
	for _, k := range order {
		g := groups[k]
		g.finish()
		s.Groups = append(s.Groups, *g)
	}
	if s.Groups == nil {
		s.Groups = []Group{}
	}
	s.Total.finish()
	return s, nil
}

// accrued is a live cache's storage between from (or its creation) and end,
// as a storage record.
func accrued(cc ctxcache.Cache, from, end time.Time) ledger.Record {
	start := cc.CreateTime
	if start.Before(from) {
		start = from
	}
	hours := max(0, end.Sub(start).Hours())
	return ledger.Record{Kind: ledger.KindCacheStorage, ID: cc.Name(), Start: start, End: end, Tenant: cc.Tenant,
		Principal: cc.Owner, Model: cc.Model, Outcome: ledger.OutcomeOpen, TokenHours: float64(cc.TokenCount) * hours}
}

// keyOf is r's group under the dimensions.
func keyOf(r ledger.Record, by []string) Group {
	var g Group
	for _, d := range by {
		switch d {
		case ByDay:
			g.Day = r.Start.UTC().Format(time.DateOnly)
		case ByModel:
			g.Model = r.Model
		case ByKey:
			g.KeyID = r.KeyID
		case ByTenant:
			g.Tenant = r.Tenant
		case ByDialect:
			g.Dialect = r.Dialect
		}
	}
	return g
}

// add counts r into g.
func (g *Group) add(r ledger.Record, book *pricing.Book) {
	p := book.For(r.Model)
	g.Tokens.Add(r.Tokens)
	g.TokenHours += r.TokenHours
	g.Cost.Add(p.Of(r))
	switch r.Kind {
	case ledger.KindRequest:
		g.Requests++
		if r.Outcome != ledger.OutcomeCompleted {
			g.Failed++
		}
		g.requestPrompt += r.Tokens.Prompt
		g.requestCached += r.Tokens.Cached
		g.CostWithoutCache += p.Uncached(r).Total()
	case ledger.KindCacheCreate:
		// Without caching there is no cache to create: its cost is all
		// caching's.
		g.CacheCreates++
	}
}

func (g *Group) finish() {
	if g.requestPrompt > 0 {
		g.HitRate = float64(g.requestCached) / float64(g.requestPrompt)
	}
	g.CostTotal = g.Cost.Total()
	g.Savings = g.CostWithoutCache - g.CostTotal
}
