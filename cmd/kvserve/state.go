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

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/audit"
	"github.com/kvserve/kvserve/internal/tenant"
)

// auditFile is the audit log's name in the data directory.
const auditFile = "audit.log"

// state is a data directory's tenant store and audit log, open.
type state struct {
	dir   *tenant.Directory
	audit *audit.Log
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

func (s *state) Close() error {
	return errors.Join(s.dir.Close(), s.audit.Close())
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
		secret, err := bootstrapAdminKey(ctx, d)
		if err != nil {
			return authPlan{}, err
		}
		fmt.Fprintf(stderr, "kvserve: %s is not a loopback address and no API key exists: created the first admin key (tenant \"default\", principal \"admin\").\n", addr)
		fmt.Fprintf(stderr, "kvserve: ADMIN API KEY (shown only this once; store it now): %s\n", secret)
		return authPlan{useStore: true}, nil
	}
	return authPlan{}, fmt.Errorf("none of the %d API keys in the data directory is active (all revoked or expired): create one with `kvserve key create`, or pass --allow-unauthenticated to serve without keys", total)
}

// bootstrapAdminKey creates the first admin key, in the tenant "default"
// (made if missing), and returns its secret.
func bootstrapAdminKey(ctx context.Context, d *tenant.Directory) (string, error) {
	const name = "default"
	if _, err := d.Tenant(ctx, name); errors.Is(err, tenant.ErrNotFound) {
		if _, err := d.CreateTenant(ctx, serveActor, name); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	_, secret, err := d.CreateKey(ctx, serveActor, tenant.KeySpec{Tenant: name, Principal: "admin", Role: tenant.RoleAdmin})
	return secret, err
}
