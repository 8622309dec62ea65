package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/admin"
	"github.com/kvserve/kvserve/internal/audit"
	"github.com/kvserve/kvserve/internal/audit/auditstream"
	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/kv/diskstore"
	"github.com/kvserve/kvserve/internal/tenant"
)

// The tenant, key and audit commands work on a data directory directly.
// They may run beside a server using the same directory: the store and
// the audit log are locked per change, and the server sees a revocation
// on the key's next use.

// dataDirFlag adds --data-dir to a command group.
func dataDirFlag(cmd *cobra.Command, dir *string) {
	cmd.PersistentFlags().StringVar(dir, "data-dir", "", "data directory holding state.db and audit.log (default $XDG_DATA_HOME/kvserve or ~/.local/share/kvserve)")
}

// diskShredder destroys a tenant's disk KV key in a data directory no
// engine holds (admin.Forgetter for the CLI).
type diskShredder struct{ dataDir string }

func (s diskShredder) ForgetScope(tenantID string) error { return shredTenantKV(s.dataDir, tenantID) }

// shredTenantKV destroys a tenant's key of the disk KV tier in dataDir. A
// data directory no server has used has no secret and nothing to shred.
func shredTenantKV(dataDir, tenantID string) error {
	if dataDir == "" {
		dataDir = defaultDataDir(os.Getenv)
	}
	path := filepath.Join(dataDir, "secret")
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	secret, err := loadSecret(path)
	if err != nil {
		return err
	}
	return diskstore.ShredScope(diskTierDir(dataDir), kv.ScopeSalt(secret, tenantID))
}

// stateSource is where a CLI command finds the tenant store and audit
// trail: the data directory's state.db and audit.log, or with --nats the
// cluster's JetStream KV bucket and audit stream (those of gateways with
// --state nats).
type stateSource struct {
	dataDir string
	natsURL string
}

// stateFlags adds --data-dir and --nats to a command group.
func stateFlags(cmd *cobra.Command, src *stateSource) {
	dataDirFlag(cmd, &src.dataDir)
	cmd.PersistentFlags().StringVar(&src.natsURL, "nats", "", "act on a cluster's tenant store and audit trail, in JetStream on this NATS server (what gateways with --state nats share), rather than the data directory's")
}

// withState runs fn on the state src names.
func withState(ctx context.Context, src stateSource, fn func(*state) error) error {
	var st *state
	var err error
	if src.natsURL == "" {
		st, err = openState(src.dataDir)
	} else {
		st, err = dialClusterState(ctx, src)
	}
	if err != nil {
		return err
	}
	err = fn(st)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}

// dialClusterState connects to src's NATS server for one command and opens
// the cluster's state there.
func dialClusterState(ctx context.Context, src stateSource) (*state, error) {
	nc, err := nats.Connect(src.natsURL, nats.Name("kvserve cli"))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", src.natsURL, err)
	}
	st, err := openClusterState(ctx, nc, 0)
	if err != nil {
		nc.Close()
		return nil, err
	}
	st.nc = nc
	return st, nil
}

func newTenantCmd() *cobra.Command {
	var src stateSource
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Create, list and delete tenants (isolation boundaries: their keys, caches and KV are their own)",
	}
	stateFlags(cmd, &src)
	cmd.AddCommand(&cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withState(cmd.Context(), src, func(st *state) error {
				t, err := st.dir.CreateTenant(cmd.Context(), localActor(), args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "tenant %s created (id %s)\n", t.Name, t.ID)
				return nil
			})
		},
	}, &cobra.Command{
		Use:   "list",
		Short: "List the tenants",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withState(cmd.Context(), src, func(st *state) error {
				ts, err := st.dir.Tenants(cmd.Context())
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tID\tCREATED")
				for _, t := range ts {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.ID, t.Created.Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}, &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a tenant, revoke its keys and destroy its disk KV key",
		Long: `Deletes the tenant and revokes all its keys in one change. The revoked keys stay
listed (kvserve key list) so audit records can still name them. Then it destroys
the tenant's key of the disk KV tier (crypto-shredding): its blocks on disk can no
longer be decrypted by anyone, and the server deletes their files when it next
starts (a server running meanwhile cannot serve them: no key of the tenant is valid).
Its context caches are deleted too (their pins lapse at their expiry).

With --nats the tenant, its keys and its caches go from the cluster's store, at
once for every gateway; no disk key is destroyed: the workers' disk tiers are in
their own data directories (their blocks stay until evicted, unreachable: the
tenant's id is never reused and its keys are revoked).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withState(cmd.Context(), src, func(st *state) error {
				ended, closeLedger, err := offlineLedger(src.dataDir)
				if err != nil {
					return err
				}
				defer closeLedger()
				caches, err := newCacheService(st, 0, ended)
				if err != nil {
					return err
				}
				// No engine runs here: the disk key is destroyed in the data
				// directory, and the server drops the files at its next start;
				// a cluster's workers are told through the forget stream.
				var forget admin.Forgetter
				if src.natsURL == "" {
					forget = diskShredder{src.dataDir}
				} else if st.nc != nil {
					f, err := cluster.NewForgetter(cmd.Context(), st.nc, 0)
					if err != nil {
						return err
					}
					forget = f
				}
				d, err := admin.DeleteTenant(cmd.Context(), st.dir, caches, forget, localActor(), args[0])
				if d.ID == "" {
					return err
				}
				if d.DeletedCaches > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "%d context caches deleted\n", d.DeletedCaches)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "tenant %s deleted; %d keys revoked", args[0], len(d.RevokedKeys))
				if len(d.RevokedKeys) > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), ": %s", strings.Join(d.RevokedKeys, ", "))
				}
				fmt.Fprintln(cmd.OutOrStdout())
				return err
			})
		},
	})
	return cmd
}

func newKeyCmd() *cobra.Command {
	var src stateSource
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Create, list and revoke API keys",
	}
	stateFlags(cmd, &src)

	var spec tenant.KeySpec
	var role string
	create := &cobra.Command{
		Use:   "create --tenant T --role R [--principal P] [--model M]... [--expires 720h]",
		Short: "Create an API key and print it (the only time it is shown)",
		Long: `Creates an API key for a principal of a tenant and prints it on stdout. Only its
SHA-256 is stored: this is the only time the key can be read. Roles:
  admin      everything, including /metrics
  developer  create, read, update, delete and use context caches; generate; read usage
  user       read, list and use context caches; generate
  viewer     read and list context caches; read usage`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := tenant.ParseRole(role)
			if err != nil {
				return err
			}
			spec.Role = r
			return withState(cmd.Context(), src, func(st *state) error {
				k, secret, err := st.dir.CreateKey(cmd.Context(), localActor(), spec)
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), secret)
				expires := "never"
				if !k.Expires.IsZero() {
					expires = k.Expires.Format(time.RFC3339)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "key %s created for tenant %s, principal %s, role %s, expires %s: store it now, it is not shown again\n",
					k.ID, spec.Tenant, k.Principal, k.Role, expires)
				return nil
			})
		},
	}
	f := create.Flags()
	f.StringVar(&spec.Tenant, "tenant", "", "the tenant's name (required)")
	f.StringVar(&role, "role", "", "admin, developer, user or viewer (required)")
	f.StringVar(&spec.Principal, "principal", "", "who the key acts as (default: key-<id>)")
	f.StringArrayVar(&spec.Models, "model", nil, "a model the key may use (repeatable; default: every model)")
	f.DurationVar(&spec.TTL, "expires", 0, "how long the key works, e.g. 720h (default: until revoked)")
	_ = create.MarkFlagRequired("tenant")
	_ = create.MarkFlagRequired("role")

	var listTenant string
	list := &cobra.Command{
		Use:   "list [--tenant T]",
		Short: "List API keys (never their secrets)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withState(cmd.Context(), src, func(st *state) error {
				return listKeys(cmd, st, listTenant)
			})
		},
	}
	list.Flags().StringVar(&listTenant, "tenant", "", "only this tenant's keys")

	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API key (a running server refuses it from its next use)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withState(cmd.Context(), src, func(st *state) error {
				k, err := st.dir.RevokeKey(cmd.Context(), localActor(), args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "key %s revoked at %s\n", k.ID, k.Revoked.Format(time.RFC3339))
				return nil
			})
		},
	}
	cmd.AddCommand(create, list, revoke)
	return cmd
}

func listKeys(cmd *cobra.Command, st *state, tenantName string) error {
	ctx := cmd.Context()
	ts, err := st.dir.Tenants(ctx)
	if err != nil {
		return err
	}
	names := map[string]string{}
	for _, t := range ts {
		names[t.ID] = t.Name
	}
	id := ""
	if tenantName != "" {
		t, err := st.dir.Tenant(ctx, tenantName)
		if err != nil {
			return err
		}
		id = t.ID
	}
	keys, err := st.dir.Keys(ctx, id)
	if err != nil {
		return err
	}
	now := time.Now()
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tPRINCIPAL\tROLE\tMODELS\tCREATED\tEXPIRES\tSTATUS")
	for _, k := range keys {
		tn := names[k.Tenant]
		if tn == "" {
			tn = k.Tenant + " (deleted)"
		}
		models := "all"
		if len(k.Models) > 0 {
			models = strings.Join(k.Models, ",")
		}
		expires := "-"
		if !k.Expires.IsZero() {
			expires = k.Expires.Format(time.RFC3339)
		}
		status := "active"
		switch {
		case !k.Revoked.IsZero():
			status = "revoked " + k.Revoked.Format(time.RFC3339)
		case !k.Active(now):
			status = "expired"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, tn, k.Principal, k.Role, models,
			k.Created.Format(time.RFC3339), expires, status)
	}
	return tw.Flush()
}

func newAuditCmd() *cobra.Command {
	var dataDir, natsURL string
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Check and read the audit trail (data directory's audit.log, or a cluster's stream with --nats)",
	}
	dataDirFlag(cmd, &dataDir)
	cmd.PersistentFlags().StringVar(&natsURL, "nats", "", "read a cluster's audit stream ("+auditstream.StreamName+") on this NATS server (what gateways with --state nats write) rather than the data directory's audit.log")
	path := func() string {
		if dataDir == "" {
			dataDir = defaultDataDir(os.Getenv)
		}
		return filepath.Join(dataDir, auditFile)
	}
	// withStream runs fn on the cluster's audit stream.
	withStream := func(ctx context.Context, fn func(*auditstream.Stream) error) error {
		nc, err := nats.Connect(natsURL, nats.Name("kvserve cli"))
		if err != nil {
			return fmt.Errorf("connect to NATS at %s: %w", natsURL, err)
		}
		defer nc.Close()
		s, err := auditstream.Open(ctx, nc, auditstream.Options{})
		if err != nil {
			return err
		}
		defer s.Close()
		return fn(s)
	}
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit trail's hash chain; fails at the first broken record",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var s audit.Summary
			var err error
			where := path()
			if natsURL != "" {
				where = "stream " + auditstream.StreamName
				err = withStream(cmd.Context(), func(st *auditstream.Stream) (err error) {
					s, err = st.Verify(cmd.Context())
					return err
				})
			} else {
				s, err = audit.Verify(where)
			}
			if err != nil {
				return err
			}
			if s.Records == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: empty\n", where)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d records, chain intact; last record %s, hash %s\n",
				where, s.Records, s.LastTime.Format(time.RFC3339), s.Last)
			return nil
		},
	}
	var n int
	tail := &cobra.Command{
		Use:   "tail [-n 20]",
		Short: "Print the last records of the audit trail",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if n <= 0 {
				return fmt.Errorf("-n %d: want a positive number", n)
			}
			var recs []audit.Record
			var err error
			if natsURL != "" {
				err = withStream(cmd.Context(), func(st *auditstream.Stream) (err error) {
					recs, err = st.Tail(cmd.Context(), n)
					return err
				})
			} else {
				recs, err = audit.Tail(path(), n)
			}
			printRecords(cmd.OutOrStdout(), recs)
			return err
		},
	}
	tail.Flags().IntVarP(&n, "lines", "n", 20, "how many records")
	cmd.AddCommand(verify, tail)
	return cmd
}

func printRecords(w io.Writer, recs []audit.Record) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tOUTCOME\tPRINCIPAL\tTENANT\tACTION\tRESOURCE\tREASON")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, r := range recs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.Format(time.RFC3339), r.Outcome,
			dash(r.Principal), dash(r.Tenant), r.Action, dash(r.Resource), r.Reason)
	}
	_ = tw.Flush()
}
