package ui

import (
	"context"
	"fmt"
	"math"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Snapshot is the dashboard's data at one moment: plain data, encoded as
// the JSON the page polls. A nil panel is one this server has no source
// for (no engine on a gateway, no workers on a single server).
type Snapshot struct {
	Time    time.Time `json:"time"`
	Traffic Traffic   `json:"traffic"`
	HitRate HitRate   `json:"hit_rate"`
	// TTFT and ITL are the engine's histograms (on a gateway, absent).
	TTFT *Histogram `json:"ttft"`
	ITL  *Histogram `json:"itl"`
	// Tiers are the findable KV blocks of each tier by retention class,
	// and Pool the pool's (G1's) blocks by state.
	Tiers    []Tier    `json:"tiers"`
	Pool     *Pool     `json:"pool"`
	Caches   *Caches   `json:"caches"`
	Sessions *Sessions `json:"sessions"`
	Workers  []Worker  `json:"workers"`
	Costs    Costs     `json:"costs"`
	// History is the last minute between polls: hit rate and throughput
	// of each interval, oldest first.
	History []Point `json:"history"`
}

// Traffic is what the server has served since it started.
type Traffic struct {
	// Requests counts the HTTP API's answered requests (every dialect
	// route, every status); InFlight those being served.
	Requests int64 `json:"requests"`
	InFlight int64 `json:"in_flight"`
	// Running and Waiting are the engine's sequences.
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
	// PromptTokens counts the prompt tokens looked up in the prefix cache
	// at admission, CachedTokens those found there, GeneratedTokens the
	// tokens generated.
	PromptTokens    int64 `json:"prompt_tokens"`
	CachedTokens    int64 `json:"cached_tokens"`
	GeneratedTokens int64 `json:"generated_tokens"`
	// TokensPerSecond and RequestsPerSecond are over the last minute's
	// window (nil until two polls).
	TokensPerSecond   *float64 `json:"tokens_per_second"`
	RequestsPerSecond *float64 `json:"requests_per_second"`
}

// HitRate is the share of prompt tokens served from the cache.
type HitRate struct {
	// Overall is since the server started, LastMinute over the window
	// (nil: no prompt in it).
	Overall    *float64 `json:"overall"`
	LastMinute *float64 `json:"last_minute"`
	// WindowSeconds is the window LastMinute and the rates cover: a
	// minute, or less while the page has polled for less.
	WindowSeconds float64 `json:"window_seconds"`
}

// Histogram is a latency histogram in seconds, its buckets not
// cumulative: Buckets[i] counts the observations in (Buckets[i-1].LE,
// Buckets[i].LE], and Over those above the last bound.
type Histogram struct {
	Count   uint64   `json:"count"`
	Sum     float64  `json:"sum"`
	Buckets []Bucket `json:"buckets"`
	Over    uint64   `json:"over"`
	// P50, P90 and P99 are estimated from the buckets as Prometheus's
	// histogram_quantile does (nil: no observation).
	P50 *float64 `json:"p50"`
	P90 *float64 `json:"p90"`
	P99 *float64 `json:"p99"`
}

// Bucket is one histogram bucket.
type Bucket struct {
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// Tier is one KV tier's findable blocks by retention class.
type Tier struct {
	// Name is the metric's ("pool", "host", "disk"), Label the dashboard's
	// ("G1 pool").
	Name    string        `json:"name"`
	Label   string        `json:"label"`
	Blocks  int64         `json:"blocks"`
	Classes []ClassBlocks `json:"classes"`
	// Bytes is the disk tier's size on disk (0 elsewhere).
	Bytes int64 `json:"bytes,omitempty"`
}

// ClassBlocks is one retention class's blocks in a tier.
type ClassBlocks struct {
	Class  string `json:"class"`
	Blocks int64  `json:"blocks"`
}

// Pool is the KV pool's (G1's) blocks by state: Total = Free + Active +
// Cached; Pinned is part of Cached.
type Pool struct {
	Total  int64 `json:"total"`
	Free   int64 `json:"free"`
	Active int64 `json:"active"`
	Cached int64 `json:"cached"`
	Pinned int64 `json:"pinned"`
}

// Caches are the largest live context caches of every tenant.
type Caches struct {
	Live    int         `json:"live"`
	Largest []CacheInfo `json:"largest"`
	// Error says why the list could not be read (the rest of the
	// snapshot stands).
	Error string `json:"error,omitempty"`
}

// CacheInfo is one context cache, without its contents.
type CacheInfo struct {
	Name        string    `json:"name"`
	Tenant      string    `json:"tenant"`
	DisplayName string    `json:"display_name,omitempty"`
	Model       string    `json:"model"`
	Tokens      int       `json:"tokens"`
	ExpireTime  time.Time `json:"expire_time"`
}

// Sessions are the largest agent sessions the engine remembers.
type Sessions struct {
	Count   int           `json:"count"`
	Largest []SessionInfo `json:"largest"`
}

// SessionInfo is one agent session.
type SessionInfo struct {
	ID       string    `json:"id"`
	Tenant   string    `json:"tenant"`
	Tokens   int       `json:"tokens"`
	LastTurn time.Time `json:"last_turn"`
	IdleAt   time.Time `json:"idle_at"`
}

// Worker is one worker of a gateway's cluster.
type Worker struct {
	ID       string `json:"id"`
	Draining bool   `json:"draining"`
	Running  int    `json:"running"`
	Waiting  int    `json:"waiting"`
	KVTotal  int    `json:"kv_blocks_total"`
	KVActive int    `json:"kv_blocks_active"`
	KVCached int    `json:"kv_blocks_cached"`
	// Routed counts the requests this gateway's router placed on it.
	Routed int64 `json:"routed"`
}

// Costs is the cost table: per tenant, since Since.
type Costs struct {
	Enabled bool         `json:"enabled"`
	Message string       `json:"message,omitempty"`
	Since   time.Time    `json:"since"`
	Tenants []TenantCost `json:"tenants"`
}

// Point is one interval of the last minute's history.
type Point struct {
	Time time.Time `json:"t"`
	// HitRate is the interval's (nil: no prompt in it).
	HitRate         *float64 `json:"hit_rate"`
	TokensPerSecond float64  `json:"tokens_per_second"`
}

// The metrics read, by name.
const (
	mRequests     = "kvserve_http_requests_total"
	mInFlight     = "kvserve_http_requests_in_flight"
	mRunning      = "kvserve_num_requests_running"
	mWaiting      = "kvserve_num_requests_waiting"
	mQueries      = "kvserve_prefix_cache_queries_total"
	mHits         = "kvserve_prefix_cache_hits_total"
	mGenerated    = "kvserve_generation_tokens_total"
	mTTFT         = "kvserve_time_to_first_token_seconds"
	mITL          = "kvserve_inter_token_latency_seconds"
	mTierBlocks   = "kvserve_kv_tier_blocks"
	mBlocks       = "kvserve_kv_blocks"
	mPinnedBlocks = "kvserve_kv_pinned_blocks"
	mDiskBytes    = "kvserve_kv_disk_bytes"
)

// tiers in display order, and the retention classes (kv.Class names),
// most valuable first.
var (
	tierLabels = []struct{ name, label string }{{"pool", "G1 pool"}, {"host", "G2 host memory"}, {"disk", "G3 disk"}}
	classOrder = []string{"pinned", "persistent", "session", "default", "ephemeral"}
)

// window is how far back the "last minute" reaches.
const window = time.Minute

// minGap is the closest two kept readings may be: polls closer than this
// to the last one kept are not kept, so a few open tabs do not grow the
// window.
const minGap = 200 * time.Millisecond

// reading is the counters read at one poll.
type reading struct {
	t                                  time.Time
	queries, hits, generated, requests float64
}

// Snapshot reads every source now.
func (d *Dashboard) Snapshot(ctx context.Context) (*Snapshot, error) {
	fams, err := d.cfg.Metrics.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	m := indexFamilies(fams)
	now := d.cfg.Now()
	s := &Snapshot{Time: now}
	cur := reading{t: now, queries: m.sum(mQueries, nil), hits: m.sum(mHits, nil),
		generated: m.sum(mGenerated, nil), requests: m.sum(mRequests, nil)}
	s.Traffic = Traffic{
		Requests: int64(cur.requests), InFlight: int64(m.sum(mInFlight, nil)),
		Running: int64(m.sum(mRunning, nil)), Waiting: int64(m.sum(mWaiting, nil)),
		PromptTokens: int64(cur.queries), CachedTokens: int64(cur.hits), GeneratedTokens: int64(cur.generated),
	}
	s.HitRate.Overall = ratio(cur.hits, cur.queries)

	base, history := d.record(cur)
	if span := cur.t.Sub(base.t).Seconds(); span > 0 {
		s.HitRate.WindowSeconds = span
		s.HitRate.LastMinute = ratio(cur.hits-base.hits, cur.queries-base.queries)
		s.Traffic.TokensPerSecond = ptr((cur.generated - base.generated) / span)
		s.Traffic.RequestsPerSecond = ptr((cur.requests - base.requests) / span)
	}
	s.History = history

	s.TTFT = m.histogram(mTTFT)
	s.ITL = m.histogram(mITL)
	if _, ok := m[mTierBlocks]; ok {
		for _, t := range tierLabels {
			tier := Tier{Name: t.name, Label: t.label}
			for _, c := range classOrder {
				n := int64(m.sum(mTierBlocks, map[string]string{"tier": t.name, "retention": c}))
				tier.Classes = append(tier.Classes, ClassBlocks{Class: c, Blocks: n})
				tier.Blocks += n
			}
			if t.name == "disk" {
				tier.Bytes = int64(m.sum(mDiskBytes, nil))
			}
			s.Tiers = append(s.Tiers, tier)
		}
	}
	if _, ok := m[mBlocks]; ok {
		p := &Pool{Free: int64(m.sum(mBlocks, map[string]string{"state": "free"})),
			Active: int64(m.sum(mBlocks, map[string]string{"state": "active"})),
			Cached: int64(m.sum(mBlocks, map[string]string{"state": "cached"})),
			Pinned: int64(m.sum(mPinnedBlocks, nil))}
		p.Total = p.Free + p.Active + p.Cached
		s.Pool = p
	}

	if d.cfg.Caches != nil {
		s.Caches = d.caches(ctx)
	}
	if d.cfg.Sessions != nil {
		all := d.cfg.Sessions.Sessions(0)
		s.Sessions = &Sessions{Count: len(all), Largest: []SessionInfo{}}
		for _, e := range all[:min(len(all), d.cfg.Top)] {
			s.Sessions.Largest = append(s.Sessions.Largest, SessionInfo{ID: e.ID, Tenant: e.Tenant, Tokens: e.Tokens,
				LastTurn: e.LastTurn, IdleAt: e.IdleAt})
		}
	}
	if d.cfg.Workers != nil {
		s.Workers = d.cfg.Workers.Workers()
		if s.Workers == nil {
			s.Workers = []Worker{}
		}
	}
	s.Costs = d.costs(ctx, now)
	return s, nil
}

func (d *Dashboard) caches(ctx context.Context) *Caches {
	top, live, err := d.cfg.Caches.Largest(ctx, d.cfg.Top)
	c := &Caches{Live: live, Largest: []CacheInfo{}}
	if err != nil {
		c.Error = err.Error()
		return c
	}
	for _, cc := range top {
		c.Largest = append(c.Largest, CacheInfo{Name: cc.Name(), Tenant: cc.Tenant, DisplayName: cc.DisplayName,
			Model: cc.Model, Tokens: cc.TokenCount, ExpireTime: cc.ExpireTime})
	}
	return c
}

// notMetered is what the cost panel says without a ledger.
const notMetered = "usage metering is not enabled"

func (d *Dashboard) costs(ctx context.Context, now time.Time) Costs {
	if d.cfg.Costs == nil {
		return Costs{Message: notMetered, Tenants: []TenantCost{}}
	}
	c := Costs{Enabled: true, Since: now.Add(-d.cfg.CostWindow)}
	rows, err := d.cfg.Costs.TenantCosts(ctx, c.Since)
	if err != nil {
		c.Message = "the usage ledger could not be read: " + err.Error()
	}
	c.Tenants = rows
	if c.Tenants == nil {
		c.Tenants = []TenantCost{}
	}
	return c
}

// record keeps cur in the window and returns the reading the window's
// rates start from (the oldest at most a minute old) and the history of
// the intervals since.
func (d *Dashboard) record(cur reading) (reading, []Point) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.window); n == 0 || cur.t.Sub(d.window[n-1].t) >= minGap {
		d.window = append(d.window, cur)
	}
	cut := 0
	for cut < len(d.window)-1 && cur.t.Sub(d.window[cut].t) > window {
		cut++
	}
	d.window = append(d.window[:0], d.window[cut:]...)
	base := d.window[0]
	history := []Point{}
	for i := 1; i < len(d.window); i++ {
		a, b := d.window[i-1], d.window[i]
		span := b.t.Sub(a.t).Seconds()
		if span <= 0 {
			continue
		}
		history = append(history, Point{Time: b.t, HitRate: ratio(b.hits-a.hits, b.queries-a.queries),
			TokensPerSecond: (b.generated - a.generated) / span})
	}
	return base, history
}

func ratio(num, den float64) *float64 {
	if den <= 0 {
		return nil
	}
	return ptr(num / den)
}

func ptr(v float64) *float64 { return &v }

// families indexes gathered metric families by name.
type families map[string]*dto.MetricFamily

func indexFamilies(fams []*dto.MetricFamily) families {
	m := make(families, len(fams))
	for _, f := range fams {
		m[f.GetName()] = f
	}
	return m
}

// matches reports whether metric carries every label of want.
func matches(metric *dto.Metric, want map[string]string) bool {
	for k, v := range want {
		found := false
		for _, l := range metric.GetLabel() {
			if l.GetName() == k {
				found = l.GetValue() == v
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// sum adds the values of name's series that carry the labels of want
// (counters, gauges and untyped alike; 0 when absent).
func (m families) sum(name string, want map[string]string) float64 {
	f, ok := m[name]
	if !ok {
		return 0
	}
	total := 0.0
	for _, metric := range f.GetMetric() {
		if !matches(metric, want) {
			continue
		}
		switch {
		case metric.Counter != nil:
			total += metric.Counter.GetValue()
		case metric.Gauge != nil:
			total += metric.Gauge.GetValue()
		case metric.Untyped != nil:
			total += metric.Untyped.GetValue()
		}
	}
	return total
}

// histogram merges name's histogram series, which share their bucket
// bounds (nil when absent).
func (m families) histogram(name string) *Histogram {
	f, ok := m[name]
	if !ok || f.GetType() != dto.MetricType_HISTOGRAM {
		return nil
	}
	h := &Histogram{Buckets: []Bucket{}}
	var bounds []float64
	cum := map[float64]uint64{}
	for _, metric := range f.GetMetric() {
		ph := metric.GetHistogram()
		h.Count += ph.GetSampleCount()
		h.Sum += ph.GetSampleSum()
		for _, b := range ph.GetBucket() {
			le := b.GetUpperBound()
			if math.IsInf(le, 1) {
				continue
			}
			if _, seen := cum[le]; !seen {
				bounds = append(bounds, le)
			}
			cum[le] += b.GetCumulativeCount()
		}
	}
	var prev uint64
	for _, le := range bounds { // the bounds come in increasing order
		h.Buckets = append(h.Buckets, Bucket{LE: le, Count: cum[le] - prev})
		prev = cum[le]
	}
	h.Over = h.Count - prev
	h.P50, h.P90, h.P99 = h.quantile(0.5), h.quantile(0.9), h.quantile(0.99)
	return h
}

// quantile estimates the q-quantile by linear interpolation within its
// bucket, as Prometheus's histogram_quantile does: the lowest bucket
// starts at 0, and a quantile beyond the last bound is that bound.
func (h *Histogram) quantile(q float64) *float64 {
	if h.Count == 0 {
		return nil
	}
	rank := q * float64(h.Count)
	var cum float64
	lower := 0.0
	for _, b := range h.Buckets {
		next := cum + float64(b.Count)
		if next >= rank && b.Count > 0 {
			return ptr(lower + (b.LE-lower)*(rank-cum)/float64(b.Count))
		}
		cum, lower = next, b.LE
	}
	return ptr(lower)
}
