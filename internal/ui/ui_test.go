package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/api/openai"
	"github.com/kvserve/kvserve/internal/ctxcache"
)

const (
	adminKey = "sk-ui-test-admin"
	devKey   = "sk-ui-test-dev"
)

// openAuthz lets every caller do everything on its own tenant: the test
// creates caches directly, as the API would after its own checks.
type openAuthz struct{}

func (openAuthz) Authorize(context.Context, ctxcache.Caller, string, string, string) error {
	return nil
}

// ledger is a usage ledger with fixed contents, recording what it was
// asked.
type ledger struct {
	mu    sync.Mutex
	since []time.Time
	rows  []TenantCost
	err   error
}

func (l *ledger) TenantCosts(_ context.Context, since time.Time) ([]TenantCost, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.since = append(l.since, since)
	return l.rows, l.err
}

// env is a real test server (the tiny model on the real engine, the
// OpenAI dialect, a configured admin key and a developer key of tenant
// "acme") with the dashboard mounted as serve mounts it.
type env struct {
	*apitest.Env
	caches *ctxcache.Service
	dash   *Dashboard
}

func newEnv(t *testing.T, costs TenantCosts) *env {
	t.Helper()
	caches, err := ctxcache.New(ctxcache.Options{Store: &ctxcache.MemStore{}, Authorizer: openAuthz{}, MinTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	e := apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New()},
		Config: api.Config{APIKeys: []api.APIKey{{Key: adminKey}, {Key: devKey, Tenant: "acme"}}, Caches: caches}})
	d, err := New(Config{Metrics: e.Registry, Caches: caches, Sessions: e.Engine, Costs: costs, Top: 3})
	if err != nil {
		t.Fatal(err)
	}
	d.Register(e.Server.HandlePublic, e.Server.HandleAdmin)
	return &env{Env: e, caches: caches, dash: d}
}

func get(t *testing.T, url, key string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, body
}

// chat sends one chat request of tenant acme and fails t unless it
// succeeds.
func (e *env) chat(t *testing.T, system, user, session string) {
	t.Helper()
	// ignore_eos: exactly max_tokens each (the random model may sample its
	// end-of-generation token at any step).
	body := map[string]any{"model": apitest.ModelName, "max_tokens": 4, "ignore_eos": true,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}}}
	if session != "" {
		body["kvserve"] = map[string]any{"session_id": session}
	}
	status, data, _ := apitest.Post(t, e.URL("/v1/chat/completions"), body, "Authorization", "Bearer "+devKey)
	if status != http.StatusOK {
		t.Fatalf("chat: %d %s", status, data)
	}
}

func (e *env) snapshot(t *testing.T) *Snapshot {
	t.Helper()
	status, _, body := get(t, e.URL(APIPath), adminKey)
	if status != http.StatusOK {
		t.Fatalf("GET %s: %d %s", APIPath, status, body)
	}
	var s Snapshot
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return &s
}

// gathered reads one metric from the registry, summed over the series
// carrying the labels.
func (e *env) gathered(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return indexFamilies(fams).sum(name, labels)
}

func (e *env) histogramCount(t *testing.T, name string) uint64 {
	t.Helper()
	fams, err := e.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestSnapshotUnderTraffic checks the JSON against the server's own state
// after real requests: every number is the registry's, the pool's, the
// engine's or the cache service's at that moment.
func TestSnapshotUnderTraffic(t *testing.T) {
	e := newEnv(t, nil)
	system := strings.Repeat("You are the dashboard test's assistant; answer briefly. ", 6)
	before := e.snapshot(t)
	if before.Traffic.Requests != 0 || before.HitRate.Overall != nil || before.TTFT == nil || before.TTFT.Count != 0 {
		t.Fatalf("a fresh server's snapshot: %+v, hit rate %v", before.Traffic, before.HitRate.Overall)
	}
	const requests = 5
	for i := range requests {
		e.chat(t, system, fmt.Sprintf("question %d", i), fmt.Sprintf("agent-%d", i%2))
	}
	e.WaitIdle(t)
	ctx := context.Background()
	caller := ctxcache.Caller{Tenant: "acme", Principal: "p", Open: true}
	for _, n := range []int{40, 900, 300, 700} {
		spec := ctxcache.Spec{Model: apitest.ModelName, DisplayName: fmt.Sprintf("doc-%d", n), TTL: "600s"}
		prefill := func(context.Context, *ctxcache.Cache, time.Duration, int) (int, string, error) {
			return n, apitest.ModelName, nil
		}
		if _, _, err := e.caches.Create(ctx, caller, spec, prefill); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(minGap) // the second poll is kept in the window
	s := e.snapshot(t)

	queries, hits := e.gathered(t, mQueries, nil), e.gathered(t, mHits, nil)
	if hits == 0 {
		t.Fatal("five requests sharing a long system prompt hit no cached block")
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"requests", float64(s.Traffic.Requests), requests},
		{"requests (registry)", float64(s.Traffic.Requests), e.gathered(t, mRequests, nil)},
		{"prompt tokens", float64(s.Traffic.PromptTokens), queries},
		{"cached tokens", float64(s.Traffic.CachedTokens), hits},
		{"generated tokens", float64(s.Traffic.GeneratedTokens), e.gathered(t, mGenerated, nil)},
		{"generated tokens (4 each)", float64(s.Traffic.GeneratedTokens), 4 * requests},
		{"overall hit rate", *s.HitRate.Overall, hits / queries},
		{"hit rate since the first poll", *s.HitRate.LastMinute, hits / queries},
		{"TTFT observations", float64(s.TTFT.Count), float64(e.histogramCount(t, mTTFT))},
		{"TTFT observations (one per request)", float64(s.TTFT.Count), requests},
		{"ITL observations", float64(s.ITL.Count), float64(e.histogramCount(t, mITL))},
		{"pool total", float64(s.Pool.Total), float64(e.Engine.KV().NumBlocks())},
		{"pool cached", float64(s.Pool.Cached), float64(e.Engine.Now().KV.Cached)},
		{"G1 blocks", float64(s.Tiers[0].Blocks), e.gathered(t, mTierBlocks, map[string]string{"tier": "pool"})},
		{"G1 session blocks", float64(s.Tiers[0].Classes[2].Blocks), e.gathered(t, mTierBlocks, map[string]string{"tier": "pool", "retention": "session"})},
		{"sessions", float64(s.Sessions.Count), 2},
		{"live caches", float64(s.Caches.Live), 4},
		{"largest cache", float64(s.Caches.Largest[0].Tokens), 900},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	var bucketed uint64
	for _, b := range s.TTFT.Buckets {
		bucketed += b.Count
	}
	if bucketed+s.TTFT.Over != s.TTFT.Count || s.TTFT.P50 == nil || *s.TTFT.P50 <= 0 || *s.TTFT.P99 < *s.TTFT.P50 {
		t.Errorf("TTFT histogram %+v: buckets hold %d of %d", s.TTFT, bucketed, s.TTFT.Count)
	}
	if len(s.Tiers) != 3 || s.Tiers[0].Blocks == 0 || s.Tiers[0].Label != "G1 pool" || s.Tiers[1].Name != "host" || s.Tiers[2].Name != "disk" {
		t.Errorf("tiers %+v", s.Tiers)
	}
	if n := len(s.Caches.Largest); n != 3 || s.Caches.Largest[1].Tokens != 700 || s.Caches.Largest[0].Tenant != "acme" ||
		!strings.HasPrefix(s.Caches.Largest[0].Name, ctxcache.NamePrefix) {
		t.Errorf("largest caches %+v", s.Caches.Largest)
	}
	if l := s.Sessions.Largest; len(l) != 2 || l[0].Tenant != "acme" || l[0].Tokens == 0 || !l[0].IdleAt.After(l[0].LastTurn) {
		t.Errorf("sessions %+v", l)
	}
	if s.Costs.Enabled || s.Costs.Message != "usage metering is not enabled" {
		t.Errorf("costs without a ledger: %+v", s.Costs)
	}
	if s.Workers != nil {
		t.Errorf("a single server lists workers: %v", s.Workers)
	}
	if s.Traffic.TokensPerSecond == nil || *s.Traffic.TokensPerSecond <= 0 || s.HitRate.WindowSeconds <= 0 || len(s.History) == 0 {
		t.Errorf("rates between two polls: %v tokens/s over %v s, history %v", s.Traffic.TokensPerSecond, s.HitRate.WindowSeconds, s.History)
	}
}

// TestAccess checks who gets the page and who gets the data.
func TestAccess(t *testing.T) {
	e := newEnv(t, nil)
	for _, c := range []struct {
		name, path, key string
		status          int
		contentType     string
		errorType       string
	}{
		{"page without a key", "/ui", "", 200, "text/html", ""},
		{"page with a slash", "/ui/", "", 200, "text/html", ""},
		{"script", "/ui/app.js", "", 200, "text/javascript", ""},
		{"style", "/ui/style.css", "", 200, "text/css", ""},
		{"missing asset", "/ui/nothing.js", "", 404, "", ""},
		{"data for an admin", APIPath, adminKey, 200, "application/json", ""},
		{"data without a key", APIPath, "", 401, "application/json", "invalid_request_error"},
		{"data for a developer", APIPath, devKey, 403, "application/json", "permission_error"},
		{"data for an unknown key", APIPath, "sk-nobody", 401, "application/json", "invalid_request_error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, h, body := get(t, e.URL(c.path), c.key)
			if status != c.status || !strings.HasPrefix(h.Get("Content-Type"), c.contentType) {
				t.Fatalf("GET %s: %d %s, want %d %s: %.200s", c.path, status, h.Get("Content-Type"), c.status, c.contentType, body)
			}
			if strings.HasPrefix(c.path, PagePath) && status == 200 && !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
				t.Errorf("page without its CSP: %q", h.Get("Content-Security-Policy"))
			}
			if c.errorType != "" {
				var eb struct {
					Error struct{ Message, Type string }
				}
				if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Type != c.errorType || eb.Error.Message == "" {
					t.Fatalf("error body %s (%v), want OpenAI's shape of type %s", body, err, c.errorType)
				}
			}
		})
	}
}

// TestOpenServer: without keys (loopback use), the data is served without
// one, as /metrics is.
func TestOpenServer(t *testing.T) {
	e := apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New()}})
	d, err := New(Config{Metrics: e.Registry})
	if err != nil {
		t.Fatal(err)
	}
	d.Register(e.Server.HandlePublic, e.Server.HandleAdmin)
	status, _, body := get(t, e.URL(APIPath), "")
	var s Snapshot
	if status != 200 || json.Unmarshal(body, &s) != nil {
		t.Fatalf("open server: %d %s", status, body)
	}
	if s.Caches != nil || s.Sessions != nil {
		t.Errorf("panels without a source: caches %+v, sessions %+v", s.Caches, s.Sessions)
	}
}

// TestCosts checks the cost panel with and without a ledger.
func TestCosts(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	rows := []TenantCost{{Tenant: "acme", Requests: 3, PromptTokens: 900, CachedTokens: 600, OutputTokens: 30,
		Cost: 0.0012, CostWithoutCache: 0.003, Currency: "USD"}}
	for _, c := range []struct {
		name    string
		ledger  *ledger
		enabled bool
		rows    int
		message string
	}{
		{"no ledger", nil, false, 0, "usage metering is not enabled"},
		{"a ledger", &ledger{rows: rows}, true, 1, ""},
		{"an empty ledger", &ledger{}, true, 0, ""},
		{"a failing ledger", &ledger{err: errors.New("disk gone")}, true, 0, "the usage ledger could not be read: disk gone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Metrics: emptyGatherer{}, Now: func() time.Time { return now }, CostWindow: time.Hour}
			if c.ledger != nil {
				cfg.Costs = c.ledger
			}
			d, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			s, err := d.Snapshot(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := s.Costs
			if got.Enabled != c.enabled || len(got.Tenants) != c.rows || got.Message != c.message || got.Tenants == nil {
				t.Fatalf("costs %+v", got)
			}
			if c.ledger != nil && (len(c.ledger.since) != 1 || !c.ledger.since[0].Equal(now.Add(-time.Hour)) || !got.Since.Equal(c.ledger.since[0])) {
				t.Fatalf("ledger asked since %v, panel says %v", c.ledger.since, got.Since)
			}
			if c.rows == 1 && got.Tenants[0] != rows[0] {
				t.Fatalf("row %+v, want %+v", got.Tenants[0], rows[0])
			}
		})
	}
}

type emptyGatherer struct{}

func (emptyGatherer) Gather() ([]*dto.MetricFamily, error) { return nil, nil }

// TestWindow checks the last minute's base reading and history as polls
// come.
func TestWindow(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(s float64, queries, hits float64) reading {
		return reading{t: t0.Add(time.Duration(s * float64(time.Second))), queries: queries, hits: hits, generated: 10 * s}
	}
	for _, c := range []struct {
		name      string
		polls     []reading
		base      float64 // seconds after t0
		history   int
		lastRate  float64 // hit rate of the last interval (-1: none)
		keptAfter int
	}{
		{"first poll", []reading{at(0, 0, 0)}, 0, 0, -1, 1},
		{"two polls", []reading{at(0, 0, 0), at(1, 100, 50)}, 0, 1, 0.5, 2},
		{"too close to keep", []reading{at(0, 0, 0), at(1, 100, 50), at(1.1, 120, 60)}, 0, 1, 0.5, 2},
		{"no prompt in the interval", []reading{at(0, 0, 0), at(1, 100, 50), at(2, 100, 50)}, 0, 2, -1, 3},
		{"a minute", []reading{at(0, 0, 0), at(30, 100, 0), at(60, 200, 100)}, 0, 2, 1, 3},
		{"a minute on", []reading{at(0, 0, 0), at(30, 100, 0), at(61, 200, 100), at(62, 300, 100)}, 30, 2, 0, 3},
		{"past the minute", []reading{at(0, 0, 0), at(30, 100, 0), at(61, 200, 100), at(95, 300, 100)}, 61, 1, 0, 2},
		{"after a gap", []reading{at(0, 0, 0), at(200, 100, 0), at(201, 200, 100)}, 200, 1, 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := &Dashboard{}
			var base reading
			var hist []Point
			for _, r := range c.polls {
				base, hist = d.record(r)
			}
			if !base.t.Equal(at(c.base, 0, 0).t) || len(hist) != c.history || len(d.window) != c.keptAfter {
				t.Fatalf("base %v, history %d, kept %d; want +%vs, %d, %d", base.t.Sub(t0), len(hist), len(d.window), c.base, c.history, c.keptAfter)
			}
			if c.history > 0 {
				last := hist[len(hist)-1].HitRate
				if (c.lastRate < 0) != (last == nil) || (last != nil && *last != c.lastRate) {
					t.Fatalf("last interval's hit rate %v, want %v", last, c.lastRate)
				}
			}
		})
	}
}

// TestQuantile checks the estimate against histogram_quantile's rule.
func TestQuantile(t *testing.T) {
	h := func(over uint64, counts ...uint64) *Histogram {
		out := &Histogram{Over: over}
		for i, n := range counts {
			out.Buckets = append(out.Buckets, Bucket{LE: float64(i + 1), Count: n})
			out.Count += n
		}
		out.Count += over
		return out
	}
	for _, c := range []struct {
		name string
		h    *Histogram
		q    float64
		want float64 // NaN: nil
	}{
		{"empty", h(0, 0, 0), 0.5, math.NaN()},
		{"all in the first bucket", h(0, 10, 0), 0.5, 0.5},
		{"second bucket", h(0, 10, 10), 0.75, 1.5},
		{"skips empty buckets", h(0, 10, 0, 10), 0.75, 2.5},
		{"beyond the last bound", h(10, 10), 0.99, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.h.quantile(c.q)
			if math.IsNaN(c.want) != (got == nil) || (got != nil && math.Abs(*got-c.want) > 1e-9) {
				t.Fatalf("quantile %v = %v, want %v", c.q, got, c.want)
			}
		})
	}
}

// BenchmarkSnapshot measures one poll's work on the server: gathering the
// registry, reading the caches and sessions, encoding the JSON.
func BenchmarkSnapshot(b *testing.B) {
	caches, err := ctxcache.New(ctxcache.Options{Store: &ctxcache.MemStore{}, Authorizer: openAuthz{}, MinTokens: 1})
	if err != nil {
		b.Fatal(err)
	}
	e := apitest.New(b, apitest.Options{Dialects: []api.Dialect{openai.New()}, Config: api.Config{Caches: caches}})
	for i := range 8 {
		body := map[string]any{"model": apitest.ModelName, "max_tokens": 2, "kvserve": map[string]any{"session_id": fmt.Sprint("s", i)},
			"messages": []map[string]string{{"role": "user", "content": fmt.Sprint("hello ", i)}}}
		if status, data, _ := apitest.Post(b, e.URL("/v1/chat/completions"), body); status != 200 {
			b.Fatalf("%d %s", status, data)
		}
	}
	d, err := New(Config{Metrics: e.Registry, Caches: caches, Sessions: e.Engine})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for b.Loop() {
		s, err := d.Snapshot(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(s); err != nil {
			b.Fatal(err)
		}
	}
}
