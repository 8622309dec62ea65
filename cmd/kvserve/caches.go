package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

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
		// Both: the store confirms a miss (a cache made a moment ago
		// through another gateway) when it sees its own error.
		return nil, fmt.Errorf("%w (%w)", ctxcache.ErrNotFound, err)
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
// ended, when set, is told of every cache that ends (the usage ledger).
func newCacheService(st *state, minTokens int, ended func(context.Context, ctxcache.Cache, time.Time)) (*ctxcache.Service, error) {
	return ctxcache.New(ctxcache.Options{Store: cacheRecords{st.dir.Store()}, Authorizer: cacheAuthz{st.dir},
		Audit: st.audit, MinTokens: minTokens, Ended: ended})
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

// newCacheCmd is `kvserve cache`: the operator's view of context caches in
// the data directory, and the bindings that grant cachedContents.use on
// one cache to named principals.
func newCacheCmd() *cobra.Command {
	var src stateSource
	var tenantName string
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "List context caches and grant their use to principals (bindings)",
	}
	stateFlags(cmd, &src)
	cmd.PersistentFlags().StringVar(&tenantName, "tenant", "", "the tenant (by name) whose caches to act on")
	list := &cobra.Command{
		Use:   "list",
		Short: "List a tenant's live context caches (never their contents)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withState(cmd.Context(), src, func(st *state) error {
				t, err := st.dir.Tenant(cmd.Context(), tenantName)
				if err != nil {
					return err
				}
				ended, closeLedger, err := offlineLedger(src.dataDir)
				if err != nil {
					return err
				}
				defer closeLedger()
				caches, err := newCacheService(st, 0, ended)
				if err != nil {
					return err
				}
				// The operator acts on the data directory itself: a local
				// caller with every permission on that tenant.
				who := ctxcache.Caller{Tenant: t.ID, Principal: localActor().Principal, Open: true}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tDISPLAY NAME\tOWNER\tMODEL\tTOKENS\tEXPIRES\tUSE GRANTED TO")
				token := ""
				for {
					page, next, err := caches.List(cmd.Context(), who, ctxcache.MaxPageSize, token)
					if err != nil {
						return err
					}
					for _, c := range page {
						grants, err := st.dir.Grants(cmd.Context(), t.ID, c.Name())
						if err != nil {
							return err
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", c.Name(), c.DisplayName, c.Owner, c.Model, c.TokenCount,
							c.ExpireTime.Format(time.RFC3339), strings.Join(grants, ","))
					}
					if next == "" {
						return tw.Flush()
					}
					token = next
				}
			})
		},
	}
	grant := func(use string, add bool) *cobra.Command {
		verb := "Grant"
		if !add {
			verb = "Withdraw"
		}
		return &cobra.Command{
			Use:   use + " cachedContents/ID PRINCIPAL",
			Short: verb + " cachedContents.use on one cache to a principal of its tenant",
			Args:  cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				return withState(cmd.Context(), src, func(st *state) error {
					ctx := cmd.Context()
					t, err := st.dir.Tenant(ctx, tenantName)
					if err != nil {
						return err
					}
					id, ok := ctxcache.ParseName(args[0])
					if !ok {
						return fmt.Errorf("cache %q: want cachedContents/ID", args[0])
					}
					name := ctxcache.NamePrefix + id
					if add {
						// Only a live cache of this tenant can be bound; an
						// ungrant works on whatever is recorded.
						err := cacheRecords{st.dir.Store()}.View(ctx, func(tx ctxcache.Tx) error {
							b, err := tx.Get(id)
							if err != nil {
								return err
							}
							var c ctxcache.Cache
							if err := json.Unmarshal(b, &c); err != nil {
								return err
							}
							if c.Tenant != t.ID || !c.ExpireTime.After(time.Now()) {
								return ctxcache.ErrNotFound
							}
							return nil
						})
						if errors.Is(err, ctxcache.ErrNotFound) {
							return fmt.Errorf("tenant %s has no live cache %s", tenantName, name)
						}
						if err != nil {
							return err
						}
						err = st.dir.Grant(ctx, localActor(), t.ID, name, args[1])
						if err == nil {
							fmt.Fprintf(cmd.OutOrStdout(), "%s may use %s\n", args[1], name)
						}
						return err
					}
					err = st.dir.Ungrant(ctx, localActor(), t.ID, name, args[1])
					if err == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "%s may no longer use %s by a binding\n", args[1], name)
					}
					return err
				})
			},
		}
	}
	cmd.AddCommand(list, grant("grant", true), grant("ungrant", false))
	return cmd
}
