package tenant

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/audit"
)

// clock is a settable time for expiry tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

var by = Actor{Principal: "test"}

// env is a Directory in a fresh data directory, with its audit log.
type env struct {
	dir   string
	clock *clock
	log   *audit.Log
	d     *Directory
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{dir: t.TempDir(), clock: &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}}
	e.open(t)
	return e
}

func (e *env) open(t *testing.T) {
	t.Helper()
	log, err := audit.Open(filepath.Join(e.dir, "audit.log"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := Open(e.dir, Options{Audit: log, Now: e.clock.now})
	if err != nil {
		t.Fatal(err)
	}
	e.log, e.d = log, d
	t.Cleanup(func() { d.Close(); log.Close() })
}

func (e *env) actions(t *testing.T) []string {
	t.Helper()
	recs, err := audit.Tail(e.log.Path(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		out = append(out, r.Action+" "+r.Resource+" "+string(r.Outcome))
	}
	return out
}

func TestStoreFile(t *testing.T) {
	e := newEnv(t)
	st, err := os.Stat(filepath.Join(e.dir, StateFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("state.db: %v %v", st.Mode(), err)
	}
}

func TestTenants(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a, err := e.d.CreateTenant(ctx, by, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.d.CreateTenant(ctx, by, "acme"); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	for _, bad := range []string{"", "a b", strings.Repeat("x", 65), "ü"} {
		if _, err := e.d.CreateTenant(ctx, by, bad); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if _, err := e.d.CreateTenant(ctx, by, "beta"); err != nil {
		t.Fatal(err)
	}
	ts, err := e.d.Tenants(ctx)
	if err != nil || len(ts) != 2 || ts[0] != a || ts[1].Name != "beta" {
		t.Fatalf("%+v %v", ts, err)
	}
	if got, err := e.d.Tenant(ctx, "acme"); err != nil || got != a {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := e.d.Tenant(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown tenant: %v", err)
	}
	got := e.actions(t)
	if len(got) != 7 || got[0] != "tenant.create tenants/acme ok" || got[1] != "tenant.create tenants/acme error" {
		t.Fatalf("audit: %q", got)
	}
}

func TestKeys(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	acme, _ := e.d.CreateTenant(ctx, by, "acme")
	k, secret, err := e.d.CreateKey(ctx, by, KeySpec{Tenant: "acme", Principal: "alice", Role: RoleUser, Models: []string{"m1"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := ParseKey(secret); !ok || id != k.ID || k.Tenant != acme.ID || !k.Expires.Equal(e.clock.now().Add(time.Hour)) {
		t.Fatalf("key %+v secret %q", k, secret)
	}
	data, _ := os.ReadFile(filepath.Join(e.dir, StateFile))
	if strings.Contains(string(data), secret[len("kvs_")+13:]) {
		t.Fatal("the secret is stored in clear")
	}
	p, err := e.d.VerifyKey(ctx, secret)
	want := Principal{Tenant: acme.ID, Name: "alice", Role: RoleUser, KeyID: k.ID, Models: []string{"m1"}}
	if err != nil || p.Tenant != want.Tenant || p.Name != want.Name || p.Role != want.Role || p.KeyID != want.KeyID || !slices.Equal(p.Models, want.Models) {
		t.Fatalf("%+v %v", p, err)
	}
	// A wrong secret with a real id, and garbage.
	forged := secret[:len(secret)-1] + "0"
	if forged == secret {
		forged = secret[:len(secret)-1] + "1"
	}
	for _, bad := range []string{forged, "sk-nope", ""} {
		if _, err := e.d.VerifyKey(ctx, bad); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("%q: %v", bad, err)
		}
	}
	// Expiry, with the clock moved.
	e.clock.add(time.Hour)
	if p, err := e.d.VerifyKey(ctx, secret); !errors.Is(err, ErrKeyExpired) || p.KeyID != k.ID {
		t.Fatalf("expired: %+v %v", p, err)
	}
	// Revocation.
	_, secret2, err := e.d.CreateKey(ctx, by, KeySpec{Tenant: "acme", Role: RoleViewer})
	if err != nil {
		t.Fatal(err)
	}
	id2, _ := ParseKey(secret2)
	if p, err := e.d.VerifyKey(ctx, secret2); err != nil || p.Name != "key-"+id2 {
		t.Fatalf("default principal: %+v %v", p, err)
	}
	r1, err := e.d.RevokeKey(ctx, by, id2)
	if err != nil || r1.Revoked.IsZero() {
		t.Fatalf("%+v %v", r1, err)
	}
	e.clock.add(time.Minute)
	if r2, err := e.d.RevokeKey(ctx, by, id2); err != nil || !r2.Revoked.Equal(r1.Revoked) {
		t.Fatalf("second revoke changed the time: %+v %v", r2, err)
	}
	if _, err := e.d.VerifyKey(ctx, secret2); !errors.Is(err, ErrKeyRevoked) {
		t.Fatalf("revoked: %v", err)
	}
	if _, err := e.d.RevokeKey(ctx, by, "000000000000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown key: %v", err)
	}
	total, active, err := e.d.KeyCounts(ctx)
	if err != nil || total != 2 || active != 0 {
		t.Fatalf("counts %d %d %v", total, active, err)
	}
	// Bad specs create nothing.
	bad := []KeySpec{
		{Tenant: "nope", Role: RoleUser},
		{Tenant: "acme", Role: "root"},
		{Tenant: "acme", Role: RoleUser, Principal: "a b"},
		{Tenant: "acme", Role: RoleUser, Models: []string{" "}},
		{Tenant: "acme", Role: RoleUser, TTL: -time.Hour},
	}
	for _, s := range bad {
		if _, _, err := e.d.CreateKey(ctx, by, s); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if keys, _ := e.d.Keys(ctx, ""); len(keys) != 2 {
		t.Fatalf("%d keys after bad specs", len(keys))
	}
}

func TestDeleteTenantRevokesKeys(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	acme, _ := e.d.CreateTenant(ctx, by, "acme")
	beta, _ := e.d.CreateTenant(ctx, by, "beta")
	var acmeKeys []string
	for range 2 {
		k, _, err := e.d.CreateKey(ctx, by, KeySpec{Tenant: "acme", Role: RoleDeveloper})
		if err != nil {
			t.Fatal(err)
		}
		acmeKeys = append(acmeKeys, k.ID)
	}
	_, betaSecret, _ := e.d.CreateKey(ctx, by, KeySpec{Tenant: "beta", Role: RoleAdmin})
	if err := e.d.Grant(ctx, by, acme.ID, "cachedContents/c1", "bob"); err != nil {
		t.Fatal(err)
	}
	revoked, err := e.d.DeleteTenant(ctx, by, "acme")
	slices.Sort(revoked)
	slices.Sort(acmeKeys)
	if err != nil || !slices.Equal(revoked, acmeKeys) {
		t.Fatalf("revoked %v, want %v (%v)", revoked, acmeKeys, err)
	}
	keys, _ := e.d.Keys(ctx, acme.ID)
	for _, k := range keys {
		if k.Revoked.IsZero() {
			t.Fatalf("key %s of the deleted tenant still works", k.ID)
		}
	}
	if _, err := e.d.VerifyKey(ctx, betaSecret); err != nil {
		t.Fatalf("another tenant's key: %v", err)
	}
	if g, _ := e.d.Grants(ctx, acme.ID, "cachedContents/c1"); len(g) != 0 {
		t.Fatalf("bindings of a deleted tenant: %v", g)
	}
	var revokes int
	for _, a := range e.actions(t) {
		if strings.HasPrefix(a, "key.revoke keys/") {
			revokes++
		}
	}
	if revokes != 2 {
		t.Fatalf("%d key.revoke records, want one per revoked key: %q", revokes, e.actions(t))
	}
	if _, err := e.d.DeleteTenant(ctx, by, "acme"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// The name can be used again, by a new tenant with a new id.
	again, err := e.d.CreateTenant(ctx, by, "acme")
	if err != nil || again.ID == acme.ID {
		t.Fatalf("%+v %v", again, err)
	}
	if bk, _ := e.d.Keys(ctx, beta.ID); len(bk) != 1 {
		t.Fatalf("beta keys %d", len(bk))
	}
}

// TestReopen: records survive closing and reopening the data directory.
func TestReopen(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	_, _ = e.d.CreateTenant(ctx, by, "acme")
	_, secret, err := e.d.CreateKey(ctx, by, KeySpec{Tenant: "acme", Role: RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	e.d.Close()
	e.log.Close()
	e.open(t)
	if p, err := e.d.VerifyKey(ctx, secret); err != nil || p.Role != RoleAdmin {
		t.Fatalf("after reopen: %+v %v", p, err)
	}
	if _, _, err := e.d.CreateKey(ctx, by, KeySpec{Tenant: "acme", Role: RoleUser}); err != nil {
		t.Fatal(err)
	}
	if s, err := audit.Verify(e.log.Path()); err != nil || s.Records != 3 {
		t.Fatalf("audit %+v %v", s, err)
	}
}

func TestGrants(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	acme, _ := e.d.CreateTenant(ctx, by, "acme")
	const cache = "cachedContents/c1"
	for _, bad := range []string{"models/m1", "cachedContents/", "cachedContents/a/b", ""} {
		if err := e.d.Grant(ctx, by, acme.ID, bad, "bob"); err == nil {
			t.Errorf("binding on %q accepted", bad)
		}
	}
	if err := e.d.Grant(ctx, by, "tn_nope", cache, "bob"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown tenant: %v", err)
	}
	for _, p := range []string{"bob", "amy", "bob"} {
		if err := e.d.Grant(ctx, by, acme.ID, cache, p); err != nil {
			t.Fatal(err)
		}
	}
	if g, err := e.d.Grants(ctx, acme.ID, cache); err != nil || !slices.Equal(g, []string{"amy", "bob"}) {
		t.Fatalf("%v %v", g, err)
	}
	bob := Principal{Tenant: acme.ID, Name: "bob", Role: RoleViewer}
	if err := e.d.Authorize(ctx, bob, CachedContentsUse, acme.ID, cache); err != nil {
		t.Fatalf("granted: %v", err)
	}
	if err := e.d.Authorize(ctx, bob, CachedContentsUse, acme.ID, "cachedContents/c2"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("other cache: %v", err)
	}
	if err := e.d.Ungrant(ctx, by, acme.ID, cache, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Authorize(ctx, bob, CachedContentsUse, acme.ID, cache); !errors.Is(err, ErrForbidden) {
		t.Fatalf("after ungrant: %v", err)
	}
	if got := e.actions(t); got[len(got)-1] != "binding.ungrant "+cache+" to bob ok" {
		t.Fatalf("audit: %q", got)
	}
}
