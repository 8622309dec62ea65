// Package admin is the server's administration API: tenants and API keys
// over HTTP, as `kvserve tenant` and `kvserve key` manage them in the data
// directory. Every route needs a key with the admin role (the API server's
// operator guard); every change is audited by the tenant directory.
//
//	GET    /v1/admin/tenants               the tenants
//	POST   /v1/admin/tenants               {"name"} → the tenant (201)
//	DELETE /v1/admin/tenants/{name}        delete it: its keys revoked, its context caches deleted,
//	                                       its KV dropped from every tier and its disk key destroyed
//	GET    /v1/admin/keys[?tenant=NAME]    the keys (never their secrets)
//	POST   /v1/admin/keys                  {"tenant","role","principal","models","expires_in"} →
//	                                       the key with its secret, shown this once (201)
//	DELETE /v1/admin/keys/{id}             revoke it
//
// Errors are in OpenAI's shape, as the server's other operator endpoints.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/tenant"
)

// Forgetter drops a scope's KV from every tier of an engine (and destroys
// its disk key): engine.Engine.ForgetScope.
type Forgetter interface {
	ForgetScope(scope string) error
}

// Server serves the admin routes.
type Server struct {
	dir    *tenant.Directory
	caches *ctxcache.Service // nil: no context caches to delete
	forget atomic.Pointer[Forgetter]
}

// New returns the admin API over a tenant directory and, optionally, the
// context-cache service.
func New(dir *tenant.Directory, caches *ctxcache.Service) *Server {
	return &Server{dir: dir, caches: caches}
}

// SetForgetter names the engine whose KV a deleted tenant's is dropped
// from (set once the engine runs; until then, and on a gateway without
// one, a deleted tenant's KV stays until its blocks are evicted, and no
// key can reach it).
func (s *Server) SetForgetter(f Forgetter) { s.forget.Store(&f) }

// Register mounts the routes with handle (the API server's HandleAdmin).
func (s *Server) Register(handle func(pattern string, h http.Handler)) {
	handle("GET /v1/admin/tenants", http.HandlerFunc(s.listTenants))
	handle("POST /v1/admin/tenants", http.HandlerFunc(s.createTenant))
	handle("DELETE /v1/admin/tenants/{name}", http.HandlerFunc(s.deleteTenant))
	handle("GET /v1/admin/keys", http.HandlerFunc(s.listKeys))
	handle("POST /v1/admin/keys", http.HandlerFunc(s.createKey))
	handle("DELETE /v1/admin/keys/{id}", http.HandlerFunc(s.revokeKey))
}

// actor is who makes a change, for the audit records.
func actor(r *http.Request) tenant.Actor {
	p := api.PrincipalFrom(r.Context())
	name := p.Name
	if p.KeyID != "" {
		name += " (key " + p.KeyID + ")"
	}
	if name == "" {
		name = "admin-api"
	}
	return tenant.Actor{Principal: name, Tenant: p.Tenant}
}

func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	ts, err := s.dir.Tenants(r.Context())
	if err != nil {
		fail(w, err)
		return
	}
	_ = api.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": ts})
}

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if err := decode(r, &body); err != nil {
		fail(w, err)
		return
	}
	t, err := s.dir.CreateTenant(r.Context(), actor(r), body.Name)
	if err != nil {
		fail(w, err)
		return
	}
	_ = api.WriteJSON(w, http.StatusCreated, t)
}

func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	out, err := DeleteTenant(r.Context(), s.dir, s.caches, s.forgetter(), actor(r), name)
	if err != nil {
		fail(w, err)
		return
	}
	_ = api.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) forgetter() Forgetter {
	if f := s.forget.Load(); f != nil {
		return *f
	}
	return nil
}

// Deleted is what deleting a tenant did.
type Deleted struct {
	Tenant        string   `json:"tenant"`
	ID            string   `json:"id"`
	RevokedKeys   []string `json:"revoked_keys"`
	DeletedCaches int      `json:"deleted_caches"`
	// KVForgotten says the tenant's KV was dropped from a running engine's
	// tiers (and its disk key destroyed) now, rather than at the next start;
	// through a cluster's gateway, that every worker was told to (the
	// forget stream: each drops it as it reads it, a worker down now when
	// it starts).
	KVForgotten bool `json:"kv_forgotten"`
}

// DeleteTenant deletes tenant name: revokes its keys (one change in the
// directory), deletes its context caches, and drops its KV from the
// engine's tiers, destroying its disk key (crypto-shredding), when forget
// is given. The steps after the first are attempted even if one fails;
// the error says which.
func DeleteTenant(ctx context.Context, dir *tenant.Directory, caches *ctxcache.Service, forget Forgetter, by tenant.Actor, name string) (Deleted, error) {
	t, lookupErr := dir.Tenant(ctx, name)
	revoked, err := dir.DeleteTenant(ctx, by, name) // an unknown tenant fails here, audited
	if err != nil {
		return Deleted{}, err
	}
	if lookupErr != nil {
		return Deleted{}, lookupErr
	}
	out := Deleted{Tenant: name, ID: t.ID, RevokedKeys: revoked}
	if out.RevokedKeys == nil {
		out.RevokedKeys = []string{}
	}
	var errs []error
	if caches != nil {
		n, err := caches.DeleteTenant(ctx, ctxcache.Caller{Principal: by.Principal, Tenant: by.Tenant}, t.ID)
		out.DeletedCaches = n
		if err != nil {
			errs = append(errs, fmt.Errorf("tenant %s deleted, but its context caches: %w", name, err))
		}
	}
	if forget != nil {
		if err := forget.ForgetScope(t.ID); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s deleted, but its KV: %w", name, err))
		} else {
			out.KVForgotten = true
		}
	}
	return out, errors.Join(errs...)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	tenantID := ""
	if name := r.URL.Query().Get("tenant"); name != "" {
		t, err := s.dir.Tenant(r.Context(), name)
		if err != nil {
			fail(w, err)
			return
		}
		tenantID = t.ID
	}
	keys, err := s.dir.Keys(r.Context(), tenantID)
	if err != nil {
		fail(w, err)
		return
	}
	_ = api.WriteJSON(w, http.StatusOK, map[string]any{"object": "list", "data": keys})
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Tenant    string   `json:"tenant"`
		Role      string   `json:"role"`
		Principal string   `json:"principal"`
		Models    []string `json:"models"`
		ExpiresIn string   `json:"expires_in"` // a Go duration, e.g. "720h"
	}
	if err := decode(r, &body); err != nil {
		fail(w, err)
		return
	}
	var ttl time.Duration
	if body.ExpiresIn != "" {
		d, err := time.ParseDuration(body.ExpiresIn)
		if err != nil || d <= 0 {
			fail(w, api.InvalidParam("expires_in", "expires_in %q: want a positive duration such as 720h", body.ExpiresIn))
			return
		}
		ttl = d
	}
	k, secret, err := s.dir.CreateKey(r.Context(), actor(r), tenant.KeySpec{Tenant: body.Tenant, Principal: body.Principal,
		Role: tenant.Role(body.Role), Models: body.Models, TTL: ttl})
	if err != nil {
		fail(w, err)
		return
	}
	_ = api.WriteJSON(w, http.StatusCreated, struct {
		tenant.Key
		Secret string `json:"secret"`
	}{k, secret})
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	k, err := s.dir.RevokeKey(r.Context(), actor(r), r.PathValue("id"))
	if err != nil {
		fail(w, err)
		return
	}
	_ = api.WriteJSON(w, http.StatusOK, k)
}

// maxBody bounds an admin request body.
const maxBody = 64 << 10

// decode reads a JSON body strictly: unknown fields are refused.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return api.Errorf(api.CodeInvalidRequest, "invalid JSON body: %v", err)
	}
	return nil
}

// fail writes err as an API error: the directory's not-found and
// invalid-input errors as 404 and 400, anything else as 500.
func fail(w http.ResponseWriter, err error) {
	var e *api.Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, tenant.ErrNotFound):
		e = api.Errorf(api.CodeNotFound, "%v", err)
	case errors.Is(err, tenant.ErrExists):
		e = api.Errorf(api.CodeConflict, "%v", err)
	case errors.Is(err, tenant.ErrInvalid):
		e = api.Errorf(api.CodeInvalidRequest, "%v", err)
	default:
		e = &api.Error{Code: api.CodeInternal, Message: "the admin operation failed", Err: err}
	}
	api.WriteOperatorError(w, e)
}
