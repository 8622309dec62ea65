package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/audit"
	"github.com/kvserve/kvserve/internal/audit/auditstream"
	"github.com/kvserve/kvserve/internal/tenant"
	"github.com/kvserve/kvserve/internal/tenant/jskv"
)

// auditFile is the audit log's name in the data directory.
const auditFile = "audit.log"

// state is a tenant store and an audit trail, open: the data directory's
// state.db and audit.log (openState), or the cluster's store in JetStream
// KV and audit stream (openClusterState).
type state struct {
	dir   *tenant.Directory
	audit auditTrail
	// nc is the NATS connection the state opened for itself (a CLI
	// command's), closed with it; nil otherwise.
	nc *nats.Conn
}

// openState opens the tenant store and audit log of dataDir (the default
// data directory when empty), creating them on first use.
func openState(dataDir string) (*state, error) {
	if dataDir == "" {
		dataDir = defaultDataDir(os.Getenv)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	log, err := audit.Open(filepath.Join(dataDir, auditFile), audit.Options{})
	if err != nil {
		return nil, err
	}
	d, err := tenant.Open(dataDir, tenant.Options{Audit: log})
	if err != nil {
		log.Close()
		return nil, err
	}
	return &state{dir: d, audit: log}, nil
}

// auditTrail is where a state's audit records go: *audit.Log or
// *auditstream.Stream.
type auditTrail interface {
	Append(ctx context.Context, e audit.Entry) (audit.Record, error)
	Close() error
}

func (s *state) Close() error {
	err := errors.Join(s.dir.Close(), s.audit.Close())
	if s.nc != nil {
		s.nc.Close()
	}
	return err
}

// openClusterState opens the cluster's tenant store, in the JetStream KV
// bucket on nc's server, and its audit stream beside it (each created on
// first use, with replicas copies when replicas > 0): what every gateway
// and CLI command acting on the cluster shares. nc stays the caller's.
func openClusterState(ctx context.Context, nc *nats.Conn, replicas int) (*state, error) {
	trail, err := auditstream.Open(ctx, nc, auditstream.Options{Replicas: replicas})
	if err != nil {
		return nil, fmt.Errorf("the cluster's audit stream: %w", err)
	}
	store, err := jskv.Open(ctx, nc, jskv.Options{Replicas: replicas})
	if err != nil {
		trail.Close()
		return nil, fmt.Errorf("the cluster's tenant store: %w", err)
	}
	return &state{dir: tenant.New(store, tenant.Options{Audit: trail}), audit: trail}, nil
}

// stateOptions choose where a gateway keeps tenants, keys, context-cache
// records and the audit trail.
type stateOptions struct {
	// state is "nats" (the cluster's JetStream KV bucket and audit stream)
	// or "data-dir" (state.db and audit.log).
	state string
	// replicas of the bucket and the stream (0: as they are; 1 when they
	// are created).
	replicas int
}

func addStateFlags(f *pflag.FlagSet, o *stateOptions) {
	f.StringVar(&o.state, "state", "nats", "where tenants, API keys, bindings, context-cache records and the audit trail live: nats (the cluster's JetStream KV bucket "+jskv.DefaultBucket+" and stream "+auditstream.StreamName+", shared by every gateway) or data-dir (this gateway's own state.db and audit.log)")
	f.IntVar(&o.replicas, "state-replicas", 0, "copies of the JetStream KV bucket and audit stream of --state nats: 3 on a three-node NATS cluster (default: as they are; 1 when this gateway creates them)")
}

func (o *stateOptions) validate() error {
	switch o.state {
	case "nats", "data-dir":
	default:
		return fmt.Errorf("--state %q: want nats or data-dir", o.state)
	}
	if o.replicas < 0 || o.replicas > 5 {
		return fmt.Errorf("--state-replicas %d: want 1 to 5 (JetStream's limit), or 0 to keep what the cluster has", o.replicas)
	}
	if o.replicas > 0 && o.state != "nats" {
		return fmt.Errorf("--state-replicas %d: only --state nats keeps copies", o.replicas)
	}
	return nil
}

// opener returns how a gateway on nc opens its state.
func (o *stateOptions) opener(ctx context.Context, dataDir string, nc *nats.Conn) func() (*state, error) {
	if o.state == "data-dir" {
		return func() (*state, error) { return openState(dataDir) }
	}
	return func() (*state, error) { return openClusterState(ctx, nc, o.replicas) }
}

// localActor is who runs a CLI command, for audit records: the operating
// system's user, since the command acts on the data directory directly.
func localActor() tenant.Actor {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return tenant.Actor{Principal: "local:" + name}
}

// serveActor is the server itself, for the changes it makes (the first
// admin key).
var serveActor = tenant.Actor{Principal: "kvserve-serve"}

// storeKeys lets the API server verify keys against the tenant store.
type storeKeys struct{ d *tenant.Directory }

var _ api.KeyVerifier = storeKeys{}

// Verify maps the store's verdicts onto the API's: unknown, expired and
// revoked keys are 401s with the store's message.
func (s storeKeys) Verify(ctx context.Context, key string) (api.Principal, error) {
	p, err := s.d.VerifyKey(ctx, key)
	ap := api.Principal{Tenant: p.Tenant, Name: p.Name, Role: string(p.Role), KeyID: p.KeyID, Models: p.Models}
	for _, perm := range p.Role.Permissions() {
		ap.Permissions = append(ap.Permissions, string(perm))
	}
	switch {
	case err == nil:
		return ap, nil
	case errors.Is(err, tenant.ErrInvalidKey), errors.Is(err, tenant.ErrKeyExpired), errors.Is(err, tenant.ErrKeyRevoked):
		return ap, &api.Error{Code: api.CodeUnauthorized, Message: err.Error(), Err: err}
	case errors.Is(err, jskv.ErrUnreachable):
		// The cluster's store fails closed: no key is trusted from a copy
		// that may predate its revocation.
		return ap, &api.Error{Code: api.CodeUnavailable, Message: "the API key could not be checked: the cluster's tenant store (NATS) does not answer; try again", Err: err}
	}
	return ap, err
}

// isLoopback reports whether the listen address addr only accepts local
// connections: 127.0.0.0/8, ::1 or localhost. An empty host (":8080")
// listens on every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authPlan is how the server authenticates.
type authPlan struct {
	// useStore: verify keys against the tenant store.
	useStore bool
	// open: no key is asked for.
	open bool
}

// planAuth decides how the server authenticates, from the configured keys
// (--api-key), the store's keys, the listen address and
// --allow-unauthenticated:
//
//   - Any active key (configured or stored): keys are required.
//   - --allow-unauthenticated: open, on any address.
//   - An empty store (no key ever created) on a loopback address: open, as
//     before tenants existed, so local use needs no setup.
//   - An empty store on any other address: the first admin key is created
//     (tenant "default", principal "admin") and printed once to stderr.
//   - Keys in the store, none of them active: the server refuses to start,
//     on any address, rather than silently opening up.
//
// Keys created after the start of an open server take effect at its next
// start; keys revoked while it runs take effect at once.
func planAuth(ctx context.Context, d *tenant.Directory, addr string, configured int, allowOpen bool, stderr io.Writer) (authPlan, error) {
	total, active, err := d.KeyCounts(ctx)
	if err != nil {
		return authPlan{}, err
	}
	switch {
	case configured > 0 || active > 0:
		// The store is consulted even when it holds no key yet: keys an
		// administrator creates through the admin API work at once.
		return authPlan{useStore: true}, nil
	case allowOpen:
		if !isLoopback(addr) {
			fmt.Fprintf(stderr, "kvserve: WARNING: --allow-unauthenticated: serving %s to anyone who can reach it, with no API key\n", addr)
		}
		return authPlan{open: true}, nil
	case total == 0 && isLoopback(addr):
		fmt.Fprintf(stderr, "kvserve: no API keys: the server is open on the loopback address %s (create keys with `kvserve key create`; they apply at the next start)\n", addr)
		return authPlan{open: true}, nil
	case total == 0:
		// In one transaction, and only if the store still holds no key:
		// gateways sharing a cluster's store and starting together make
		// one first key between them.
		_, secret, created, err := d.CreateFirstKey(ctx, serveActor, tenant.KeySpec{Tenant: "default", Principal: "admin", Role: tenant.RoleAdmin})
		if err != nil {
			return authPlan{}, err
		}
		if !created { // another server made keys meanwhile: decide on them
			return planAuth(ctx, d, addr, configured, allowOpen, stderr)
		}
		fmt.Fprintf(stderr, "kvserve: %s is not a loopback address and no API key exists: created the first admin key (tenant \"default\", principal \"admin\").\n", addr)
		fmt.Fprintf(stderr, "kvserve: ADMIN API KEY (shown only this once; store it now): %s\n", secret)
		return authPlan{useStore: true}, nil
	}
	return authPlan{}, fmt.Errorf("none of the %d API keys in the tenant store is active (all revoked or expired): create one with `kvserve key create`, or pass --allow-unauthenticated to serve without keys", total)
}
