// Package ui is the server's live dashboard: one static page at /ui and
// the JSON it polls, GET /v1/admin/dashboard.
//
// # Why the page holds no data
//
// The page (index.html, app.js, style.css, embedded in the binary) is the
// same for everyone and is served without a key, so a browser can open it
// by address. Everything it shows comes from the JSON endpoint, which is an
// operator endpoint like /metrics: behind the API server's admin guard (an
// admin key when keys are configured, 401 without one and 403 with
// another, in OpenAI's error shape; open on a server without keys). The
// page takes the key from the address's fragment (/ui#key=sk-…, which a
// browser never sends to a server) or from its login form, keeps it in
// the tab's sessionStorage, and sends it as a bearer token once a second.
//
// # Where the numbers come from
//
// A Snapshot is built from the server's live state at each poll:
//
//   - the Prometheus registry that /metrics serves, gathered in-process:
//     requests, tokens, the prefix cache's hits, the TTFT and inter-token
//     latency histograms, the KV blocks by tier and retention class — so
//     every number on the page is the one /metrics shows at that moment;
//   - the context-cache service (the largest live caches of every tenant);
//   - the engine (the largest agent sessions it remembers between turns);
//   - a gateway's worker registry (each worker's load);
//   - a TenantCosts source (the usage ledger's costs per tenant), when the
//     server has one.
//
// Rates over the last minute need two readings of a counter: the
// Dashboard keeps the counters it read at each poll for a minute (a short
// ring, no goroutine), so "last minute" is measured between polls, over the
// window the response states (shorter while the page has been open less
// than a minute).
package ui

import (
	"context"
	"embed"
	"errors"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
)

// Routes: the page and the JSON it polls.
const (
	PagePath = "/ui"
	APIPath  = "/v1/admin/dashboard"
)

// CacheLister lists the largest live context caches of every tenant:
// *ctxcache.Service.
type CacheLister interface {
	Largest(ctx context.Context, n int) ([]ctxcache.Cache, int, error)
}

// SessionLister lists the largest agent sessions an engine remembers:
// *engine.Engine.
type SessionLister interface {
	Sessions(n int) []engine.SessionInfo
}

// WorkerLister lists a gateway's workers as it sees them (the cluster
// registry and the router, through an adapter in cmd).
type WorkerLister interface {
	Workers() []Worker
}

// TenantCosts is the usage ledger as the dashboard reads it: what each
// tenant's requests since a time cost, and what they would have cost
// without the cache.
type TenantCosts interface {
	TenantCosts(ctx context.Context, since time.Time) ([]TenantCost, error)
}

// TenantCost is one tenant's usage and its price.
type TenantCost struct {
	Tenant   string `json:"tenant"`
	Requests int64  `json:"requests"`
	// PromptTokens counts every prompt token, CachedTokens those of them
	// served from the cache.
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	Cost         float64 `json:"cost"`
	// CostWithoutCache is what the same requests would have cost had no
	// prompt token been served from the cache.
	CostWithoutCache float64 `json:"cost_without_cache"`
	Currency         string  `json:"currency"`
}

// Config configures a Dashboard. Metrics is required; every other source
// is optional, and its panel says plainly what is missing without it.
type Config struct {
	// Metrics is the registry /metrics serves, with the engine's metrics
	// (or, on a gateway, the cluster's) registered in it.
	Metrics prometheus.Gatherer
	// Caches lists the context caches (nil: the server keeps none).
	Caches CacheLister
	// Sessions lists the engine's agent sessions (nil: no engine here).
	Sessions SessionLister
	// Workers lists a gateway's workers (nil: not a gateway).
	Workers WorkerLister
	// Costs is the usage ledger (nil: the panel says metering is not
	// enabled).
	Costs TenantCosts
	// CostWindow is how far back the cost table reaches (default 24h).
	CostWindow time.Duration
	// Top is how many caches and sessions the tables show (default 10).
	Top int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Dashboard builds snapshots and serves the page and its JSON.
type Dashboard struct {
	cfg Config

	mu     sync.Mutex
	window []reading // guarded by mu
}

// New returns a Dashboard over cfg's sources.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Metrics == nil {
		return nil, errors.New("ui: a metrics registry is required")
	}
	if cfg.CostWindow <= 0 {
		cfg.CostWindow = 24 * time.Hour
	}
	if cfg.Top <= 0 {
		cfg.Top = 10
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Dashboard{cfg: cfg}, nil
}

//go:embed static
var static embed.FS

// Register mounts the page with public (it holds no data and needs no
// key) and the JSON with admin (the API server's operator guard).
func (d *Dashboard) Register(public, admin func(pattern string, h http.Handler)) {
	public("GET "+PagePath, d.Page())
	public("GET "+PagePath+"/", d.Page())
	admin("GET "+APIPath, d.API())
}

// Page serves the dashboard's page and its assets.
func (d *Dashboard) Page() http.Handler {
	files, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	fileServer := http.StripPrefix(PagePath+"/", http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page runs only its own script and talks only to its own
		// server; it is never framed (clickjacking with a key in storage).
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
		if r.URL.Path == PagePath || r.URL.Path == PagePath+"/" {
			http.ServeFileFS(w, r, files, "index.html")
			return
		}
		fileServer.ServeHTTP(w, r)
	})
}

// API serves the snapshot as JSON.
func (d *Dashboard) API() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := d.Snapshot(r.Context())
		if err != nil {
			api.WriteOperatorError(w, api.Errorf(api.CodeInternal, "dashboard: %v", err))
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		_ = api.WriteJSON(w, http.StatusOK, s)
	})
}
