package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/tenant"
)

// The context-cache service sees the tenant store through these adapters:
// its records in the store's cachedContents bucket, its decisions from the
// directory's role table and bindings. ctxcache and the API stay free of
// the store's package (and of bbolt).

// cacheRecords is the cachedContents bucket of a tenant store.
type cacheRecords struct{ s tenant.Store }

var _ ctxcache.Store = cacheRecords{}

func (r cacheRecords) View(ctx context.Context, fn func(ctxcache.Tx) error) error {
	return r.s.View(ctx, func(tx tenant.Tx) error { return fn(cacheTx{tx}) })
}

func (r cacheRecords) Update(ctx context.Context, fn func(ctxcache.Tx) error) error {
	return r.s.Update(ctx, func(tx tenant.Tx) error { return fn(cacheTx{tx}) })
}

type cacheTx struct{ tx tenant.Tx }

func (t cacheTx) Get(id string) ([]byte, error) {
	b, err := t.tx.Get(tenant.KindCachedContents, id)
	if errors.Is(err, tenant.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ctxcache.ErrNotFound, id)
	}
	return b, err
}

func (t cacheTx) Put(id string, v []byte) error { return t.tx.Put(tenant.KindCachedContents, id, v) }

func (t cacheTx) Delete(id string) error { return t.tx.Delete(tenant.KindCachedContents, id) }

func (t cacheTx) List(fn func(string, []byte) error) error {
	return t.tx.List(tenant.KindCachedContents, fn)
}

// cacheAuthz decides with the tenant directory: another tenant's cache is
// not found, a missing permission forbidden.
type cacheAuthz struct{ d *tenant.Directory }

var _ ctxcache.Authorizer = cacheAuthz{}

func (a cacheAuthz) Authorize(ctx context.Context, c ctxcache.Caller, perm, owner, name string) error {
	p := tenant.Principal{Tenant: c.Tenant, Name: c.Principal, Role: tenant.Role(c.Role)}
	err := a.d.Authorize(ctx, p, tenant.Permission(perm), owner, name)
	switch {
	case errors.Is(err, tenant.ErrHidden):
		return fmt.Errorf("%w: %s belongs to another tenant", ctxcache.ErrNotFound, name)
	case errors.Is(err, tenant.ErrForbidden):
		return fmt.Errorf("%w: %s", ctxcache.ErrForbidden, trimTenantPrefix(err.Error()))
	}
	return err
}

func trimTenantPrefix(s string) string {
	const p = "tenant: permission denied: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// newCacheService returns the context caches of the data directory's state.
func newCacheService(st *state, minTokens int) (*ctxcache.Service, error) {
	return ctxcache.New(ctxcache.Options{Store: cacheRecords{st.dir.Store()}, Authorizer: cacheAuthz{st.dir},
		Audit: st.audit, MinTokens: minTokens})
}

// cacheSweepEvery is how often serve deletes expired cache records. Reads
// never see an expired cache whatever the sweep's period (they check the
// expiry themselves); the sweep only bounds how long a record outlives it.
const cacheSweepEvery = time.Minute

// sweepCaches deletes expired cache records every cacheSweepEvery until
// ctx ends.
func sweepCaches(ctx context.Context, s *ctxcache.Service, log *slog.Logger) {
	t := time.NewTicker(cacheSweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
				log.Warn("kvserve: sweeping expired context caches failed", "err", err)
			} else if n > 0 {
				log.Info("kvserve: expired context caches deleted", "count", n)
			}
		}
	}
}
