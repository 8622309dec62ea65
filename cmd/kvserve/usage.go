package main

import (
	"context"

	"errors"
	"fmt"
	"github.com/nats-io/nats.go"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/billing"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/internal/ledger/usagestream"
	"github.com/kvserve/kvserve/internal/pricing"
	"github.com/kvserve/kvserve/internal/ui"
)

// ledgerFile is the usage ledger's file in the data directory.
const ledgerFile = "ledger.db"

// loadPriceBook reads the price book at path, or returns the built-in one.
func loadPriceBook(path string) (*pricing.Book, error) {
	if path == "" {
		return pricing.Default(), nil
	}
	return pricing.Load(path)
}

// storageBooker books each ended context cache's storage in l.
func storageBooker(l *ledger.Ledger, log *slog.Logger) func(context.Context, ctxcache.Cache, time.Time) {
	return func(ctx context.Context, cc ctxcache.Cache, at time.Time) {
		if _, err := l.Add(ctx, api.CacheStorageRecord(cc, at)); err != nil {
			log.Error("the usage ledger lost a cache's storage record", "cache", cc.Name(), "err", err)
		}
	}
}

// openServerLedger opens the data directory's ledger for a server, as
// --usage-ledger says: nil when off, or (auto) when another server holds it.
func openServerLedger(mode, dataDir string, log *slog.Logger, stderr io.Writer) (*ledger.Ledger, error) {
	switch mode {
	case "off":
		return nil, nil
	case "on", "auto":
	default:
		return nil, fmt.Errorf("--usage-ledger %q: want on, off or auto", mode)
	}
	l, interrupted, err := ledger.Open(filepath.Join(dataDir, ledgerFile), ledger.Options{})
	if errors.Is(err, ledger.ErrHeld) && mode == "auto" {
		fmt.Fprintf(stderr, "kvserve: another server on %s holds the usage ledger; this one serves unmetered (--usage-ledger off to say so, or give each server its own --data-dir)\n", dataDir)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the usage ledger (--usage-ledger off serves unmetered): %w", err)
	}
	if interrupted > 0 {
		log.Warn("the usage ledger booked the requests in flight when the server last stopped as interrupted", "requests", interrupted)
	}
	return l, nil
}

// offlineLedger opens the data directory's ledger for a command that ends
// context caches with no server running (the state's lock says none is),
// so their storage is booked. The returned func closes it.
func offlineLedger(dataDir string) (func(context.Context, ctxcache.Cache, time.Time), func(), error) {
	if dataDir == "" {
		dataDir = defaultDataDir(os.Getenv)
	}
	l, _, err := ledger.Open(filepath.Join(dataDir, ledgerFile), ledger.Options{Wait: 200 * time.Millisecond})
	if errors.Is(err, ledger.ErrHeld) {
		// A server runs: it books the storage of the caches it ends; those
		// this command ends go unbooked, and the operator is told.
		fmt.Fprintln(os.Stderr, "kvserve: a running server holds the usage ledger: the storage of context caches this command ends is not booked")
		return nil, func() {}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	return storageBooker(l, log), func() { _ = l.Close() }, nil
}

// replicateUsage copies the gateway's usage ledger into the cluster's
// JetStream stream and makes GET /v1/usage and the dashboard read the
// stream: every gateway's usage. Without a ledger it does nothing. The
// copying stops, after a last copy, when the API closes, before the ledger
// does.
func (a *apiServer) replicateUsage(nc *nats.Conn, log *slog.Logger) error {
	if a.books == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	s, err := usagestream.Open(ctx, nc)
	cancel()
	if err != nil {
		return fmt.Errorf("the cluster's usage ledger (--usage-ledger off serves unmetered): %w", err)
	}
	rep := usagestream.NewReplicator(a.books, s, log)
	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); rep.Run(ctx) }()
	a.usage.UseRecords(s)
	a.closers = append(a.closers, func() error {
		cancel()
		<-done
		// What came in since the last copy, while NATS still answers.
		flush, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		if err := rep.Sync(flush); err != nil {
			log.Warn("usage records wait in the gateway's ledger for its next start", "err", err)
		}
		return nil
	})
	return nil
}

// dashboardCosts is the usage ledger's costs per tenant, as the dashboard
// reads them.
type dashboardCosts struct{ s *billing.Service }

func (d dashboardCosts) TenantCosts(ctx context.Context, since time.Time) ([]ui.TenantCost, error) {
	sum, err := d.s.Summarize(ctx, billing.Query{From: since, GroupBy: []string{billing.ByTenant}})
	if err != nil {
		return nil, err
	}
	out := make([]ui.TenantCost, 0, len(sum.Groups))
	for _, g := range sum.Groups {
		out = append(out, ui.TenantCost{Tenant: g.Tenant, Requests: g.Requests, PromptTokens: g.Tokens.Prompt,
			CachedTokens: g.Tokens.Cached, OutputTokens: g.Tokens.Output, Cost: g.CostTotal,
			CostWithoutCache: g.CostWithoutCache, Currency: sum.Currency})
	}
	return out, nil
}
