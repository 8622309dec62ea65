package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/admin"
	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/anthropic"
	"github.com/kvserve/kvserve/internal/api/gemini"
	"github.com/kvserve/kvserve/internal/api/openai"
	"github.com/kvserve/kvserve/internal/billing"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/internal/pricing"
	"github.com/kvserve/kvserve/internal/ui"
)

// apiOptions are the settings of the HTTP API: shared by serve, gateway and
// cluster up, so a gateway answers exactly as a server does.
type apiOptions struct {
	modelAliases    []string
	addr            string
	dataDir         string
	configPath      string
	apiKeys         []string
	allowOpen       bool
	bodyLimit       byteSize
	shutdownTimeout time.Duration
	pprofAddr       string
	cacheMinTokens  int
	ledger          string
	priceBook       string
}

// addAPIFlags defines the API flags on f.
func addAPIFlags(f *pflag.FlagSet, o *apiOptions) {
	f.StringArrayVar(&o.modelAliases, "model-alias", nil, "another model name to accept, exact or a pattern like 'claude-*' or 'gpt-*' (repeatable), for clients that send their own model names")
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address")
	addDataDirFlags(f, &o.dataDir, &o.configPath)
	f.StringArrayVar(&o.apiKeys, "api-key", nil, "accepted API key besides the tenant store's, KEY (an admin) or KEY=TENANT (a developer of TENANT) (repeatable)")
	f.BoolVar(&o.allowOpen, "allow-unauthenticated", false, "serve with no API key when none is active, on any address (default: only on a loopback address; elsewhere the first start creates an admin key)")
	o.bodyLimit = api.DefaultBodyLimit
	f.Var(&o.bodyLimit, "body-limit", "largest request body")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight requests may run on after SIGINT/SIGTERM")
	f.IntVar(&o.cacheMinTokens, "cache-min-tokens", ctxcache.DefaultMinTokens, "smallest context cache (cachedContents) in tokens: a shorter prefix is refused with 400")
	f.StringVar(&o.ledger, "usage-ledger", "auto", "book every request's tokens and every context cache's storage in the usage ledger (DATA/ledger.db), served by GET /v1/usage and read by kvserve report: on, off (serve unmetered), or auto (on, unless another server on this data directory holds the ledger: then off, saying so)")
	f.StringVar(&o.priceBook, "price-book", "", "price book (YAML) that prices the usage ledger (default: the built-in example book; kvserve report --print-price-book shows it)")
	f.StringVar(&o.pprofAddr, "pprof-addr", "", "serve Go's profiling endpoints (/debug/pprof/: CPU, block, mutex, heap, execution trace) on this separate address, e.g. 127.0.0.1:6060 (default: off)")
}

// addDataDirFlags defines --data-dir and --config.
func addDataDirFlags(f *pflag.FlagSet, dataDir, configPath *string) {
	f.StringVar(dataDir, "data-dir", "", "data directory: server secret, tenant store, audit log, synthetic model (default $XDG_DATA_HOME/kvserve or ~/.local/share/kvserve)")
	f.StringVar(configPath, "config", "", "YAML file with settings (keys are these flag names)")
}

// validate checks the settings that can be checked before anything starts.
func (o *apiOptions) validate() error {
	for _, a := range o.modelAliases {
		if err := api.ValidAlias(a); err != nil {
			return fmt.Errorf("--model-alias: %w", err)
		}
	}
	if o.cacheMinTokens < 1 {
		return fmt.Errorf("--cache-min-tokens %d: want at least 1", o.cacheMinTokens)
	}
	_, err := parseAPIKeys(o.apiKeys)
	return err
}

// openDataDir returns the data directory (made if needed) and its secret.
func openDataDir(dataDir string) (string, []byte, error) {
	if dataDir == "" {
		dataDir = defaultDataDir(os.Getenv)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", nil, fmt.Errorf("data directory: %w", err)
	}
	secret, err := loadSecret(filepath.Join(dataDir, "secret"))
	if err != nil {
		return "", nil, err
	}
	return dataDir, secret, nil
}

// apiServer is the HTTP API listening, its model not yet set.
type apiServer struct {
	srv      *api.Server
	admin    *admin.Server
	caches   *ctxcache.Service
	reg      *prometheus.Registry
	usage    *billing.Service
	books    *ledger.Ledger // nil: unmetered
	hs       *http.Server
	ln       net.Listener
	serveErr chan error
	closers  []func() error
}

// startAPI opens the tenant store and audit log with open (the data
// directory's, or a cluster's store), builds the API server with every
// dialect and starts listening on o.addr: clients get answers (503 while
// loading) rather than connection errors from then on.
func startAPI(ctx context.Context, o *apiOptions, dataDir string, open func() (*state, error), log *slog.Logger, stderr io.Writer) (*apiServer, error) {
	keys, err := parseAPIKeys(o.apiKeys)
	if err != nil {
		return nil, err
	}
	a := &apiServer{}
	ok := false
	defer func() {
		if !ok {
			a.close()
		}
	}()
	st, err := open()
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, st.Close)
	plan, err := planAuth(ctx, st.dir, o.addr, len(keys), o.allowOpen, stderr)
	if err != nil {
		return nil, fmt.Errorf("--addr %s: %w", o.addr, err)
	}
	var storeVerifier api.KeyVerifier
	if plan.useStore {
		storeVerifier = storeKeys{st.dir}
	}
	if o.pprofAddr != "" {
		dbg, err := startDebugServer(o.pprofAddr, log, stderr)
		if err != nil {
			return nil, err
		}
		a.closers = append(a.closers, dbg.Close)
	}
	var book *pricing.Book
	if book, err = loadPriceBook(o.priceBook); err != nil {
		return nil, err
	}
	books, err := openServerLedger(o.ledger, dataDir, log, stderr)
	if err != nil {
		return nil, err
	}
	var ended func(context.Context, ctxcache.Cache, time.Time)
	if books != nil {
		a.closers = append(a.closers, books.Close)
		ended = storageBooker(books, log)
	}
	caches, err := newCacheService(st, o.cacheMinTokens, ended)
	if err != nil {
		return nil, err
	}
	sweepCtx, stopSweep := context.WithCancel(context.Background())
	sweepDone := make(chan struct{})
	go func() { defer close(sweepDone); sweepCaches(sweepCtx, caches, log) }()
	a.closers = append(a.closers, func() error { stopSweep(); <-sweepDone; return nil })
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := api.Config{BodyLimit: int64(o.bodyLimit), APIKeys: keys, Keys: storeVerifier, Audit: st.audit,
		Caches: caches, Registry: a.reg, Logger: log}
	var recs billing.Records
	if books != nil {
		cfg.Ledger, recs = books, books
		a.books = books
	}
	a.srv, err = api.New(cfg)
	if err != nil {
		return nil, err
	}
	a.usage = billing.NewService(recs, book, caches)
	a.srv.HandleKeyed("GET /v1/usage", http.HandlerFunc(a.usage.Summary))
	a.srv.HandleKeyed("GET /v1/usage/records", http.HandlerFunc(a.usage.Records))
	a.caches = caches
	a.admin = admin.New(st.dir, caches)
	a.admin.Register(a.srv.HandleAdmin)
	for _, d := range []api.Dialect{openai.New(), anthropic.New(anthropic.Options{Registerer: a.reg}), gemini.New()} {
		if err := a.srv.Register(d); err != nil {
			return nil, err
		}
	}
	a.ln, err = net.Listen("tcp", o.addr)
	if err != nil {
		return nil, err
	}
	a.hs = &http.Server{Handler: a.srv, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	a.serveErr = make(chan error, 1)
	hs, ln := a.hs, a.ln
	go func() { a.serveErr <- hs.Serve(ln) }()
	ok = true
	return a, nil
}

// startDashboard serves the live dashboard (/ui and the JSON it polls,
// admin only) from the server's registry and context caches and cfg's
// other sources.
func (a *apiServer) startDashboard(cfg ui.Config) error {
	cfg.Metrics = a.reg
	if a.caches != nil {
		cfg.Caches = a.caches
	}
	if a.usage != nil && a.usage.Metered() {
		cfg.Costs = dashboardCosts{a.usage}
	}
	d, err := ui.New(cfg)
	if err != nil {
		return err
	}
	d.Register(a.srv.HandlePublic, a.srv.HandleAdmin)
	return nil
}

// shutdown stops taking connections, gives in-flight requests up to
// timeout, and closes what startAPI opened.
func (a *apiServer) shutdown(timeout time.Duration) {
	if a.hs != nil {
		shutdownHTTP(a.hs, timeout)
		a.hs = nil
	}
	a.close()
}

func (a *apiServer) close() {
	if a.hs != nil {
		a.hs.Close()
		a.hs = nil
	}
	for i := len(a.closers) - 1; i >= 0; i-- {
		_ = a.closers[i]()
	}
	a.closers = nil
}
