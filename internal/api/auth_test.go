package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/kvserve/kvserve/internal/audit"
)

// fakeKeys is a KeyVerifier over a map: a key maps to a principal or to
// the error Verify returns.
type fakeKeys map[string]struct {
	p   Principal
	err error
}

func (f fakeKeys) Verify(_ context.Context, key string) (Principal, error) {
	v, ok := f[key]
	if !ok {
		return Principal{}, Errorf(CodeUnauthorized, "invalid API key")
	}
	return v.p, v.err
}

// auditTrail collects audit entries.
type auditTrail struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (a *auditTrail) Append(_ context.Context, e audit.Entry) (audit.Record, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries = append(a.entries, e)
	return audit.Record{Entry: e}, nil
}

// TestMetricsAuth: /metrics is public on an open server; with keys it
// needs an admin key (configured without a tenant, or a stored admin),
// and refusals are 401/403 in OpenAI's shape, audited.
func TestMetricsAuth(t *testing.T) {
	open, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	get := func(s *Server, url, key string) (int, string) {
		req := httptest.NewRequest("GET", url, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := get(open, "/metrics", ""); code != 200 || !strings.Contains(body, "kvserve_http_requests_in_flight") {
		t.Fatalf("open server /metrics: %d %.200s", code, body)
	}

	trail := &auditTrail{}
	s, err := New(Config{
		APIKeys: []APIKey{{Key: "sk-operator"}, {Key: "sk-team", Tenant: "t1"}},
		Keys: fakeKeys{
			"kvs-admin":   {p: Principal{Tenant: "tn_a", Name: "ann", Role: "admin", Permissions: []string{PermissionAdmin}}},
			"kvs-user":    {p: Principal{Tenant: "tn_a", Name: "uma", Role: "user", KeyID: "u1"}},
			"kvs-revoked": {p: Principal{Tenant: "tn_a", KeyID: "r1"}, err: Errorf(CodeUnauthorized, "API key revoked")},
			"kvs-broken":  {err: errors.New("disk on fire")},
		},
		Audit: trail,
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key     string
		url     string
		status  int
		errType string
		msg     string
	}{
		{"", "/metrics", 401, "invalid_request_error", "missing API key"},
		{"sk-wrong", "/metrics", 401, "invalid_request_error", "invalid API key"},
		{"sk-team", "/metrics", 403, "permission_error", `role is \"developer\"`},
		{"kvs-user", "/metrics", 403, "permission_error", `role is \"user\"`},
		{"kvs-revoked", "/metrics", 401, "invalid_request_error", "API key revoked"},
		{"kvs-broken", "/metrics", 500, "server_error", "could not be checked"},
		{"sk-operator", "/metrics", 200, "", ""},
		{"kvs-admin", "/metrics", 200, "", ""},
		{"", "/metrics?key=kvs-user", 403, "permission_error", "admin"},
	}
	for _, tt := range tests {
		code, body := get(s, tt.url, tt.key)
		if code != tt.status {
			t.Errorf("%s %q: %d, want %d: %.200s", tt.url, tt.key, code, tt.status, body)
			continue
		}
		if code == 200 {
			continue
		}
		var e struct {
			Error struct {
				Message, Type string
				Param         *string
			}
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Type != tt.errType || !strings.Contains(body, tt.msg) {
			t.Errorf("%s %q: body %s, want type %s with %q", tt.url, tt.key, body, tt.errType, tt.msg)
		}
	}
	trail.mu.Lock()
	defer trail.mu.Unlock()
	if len(trail.entries) != 7 {
		t.Fatalf("%d audit entries, want 7: %+v", len(trail.entries), trail.entries)
	}
	for _, e := range trail.entries {
		line := e.Principal + e.Tenant + e.Action + e.Resource + e.Reason
		if strings.Contains(line, "kvs-") || strings.Contains(line, "sk-") || strings.Contains(line, "?key") {
			t.Errorf("audit entry holds a key: %+v", e)
		}
	}
	if e := trail.entries[4]; e.Action != "auth" || e.Resource != "keys/r1" || e.Outcome != audit.Denied {
		t.Errorf("revoked key entry: %+v", e)
	}
	if e := trail.entries[5]; e.Outcome != audit.Failed {
		t.Errorf("store failure entry: %+v", e)
	}
	if e := trail.entries[2]; e.Action != "admin" || e.Principal == "" || e.Tenant != "t1" {
		t.Errorf("non-admin entry: %+v", e)
	}
}

// TestConfiguredKeyRoles: a configured key without a tenant is an admin
// of the default tenant, one with a tenant a developer of it.
func TestConfiguredKeyRoles(t *testing.T) {
	kr, err := newKeyring([]APIKey{{Key: "a"}, {Key: "b", Tenant: "t1", Models: []string{"m"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key, tenant, role string
		admin, allowsX    bool
	}{
		{"a", "", "admin", true, true},
		{"b", "t1", "developer", false, false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Api-Key", tt.key)
		id, _, e := kr.authenticate(r)
		if e != nil || id.Tenant != tt.tenant || id.Role != tt.role || id.Has(PermissionAdmin) != tt.admin ||
			!id.Has(PermissionModelsUse) || id.Allows("x") != tt.allowsX ||
			!strings.HasPrefix(id.Principal, "config-key-") {
			t.Errorf("%s: %+v %v", tt.key, id, e)
		}
	}
}

func TestOpenIdentity(t *testing.T) {
	kr, _ := newKeyring(nil, nil)
	id, _, e := kr.authenticate(httptest.NewRequest("GET", "/", nil))
	if e != nil || !id.Has(PermissionAdmin) || !id.Has(PermissionModelsUse) || !id.Allows("any") {
		t.Fatalf("open server identity %+v %v", id, e)
	}
}
