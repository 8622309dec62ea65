package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/anthropic"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/api/gemini"
	"github.com/kvserve/kvserve/internal/api/openai"
	"github.com/kvserve/kvserve/internal/audit"
	"github.com/kvserve/kvserve/internal/tenant"
)

var keyRe = regexp.MustCompile(`kvs_[0-9a-f]{12}_[0-9a-f]{64}`)

// run runs a kvserve command line against dataDir and fails the test on
// an error.
func run(t *testing.T, dataDir string, args ...string) (string, string) {
	t.Helper()
	out, errOut, err := runCommand(newRootCmd(), append(args, "--data-dir", dataDir)...)
	if err != nil {
		t.Fatalf("kvserve %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out, errOut
}

// TestTenantKeyAuditCommands walks the CLI: tenants, keys, revocation,
// tenant deletion, and the audit trail of all of it.
func TestTenantKeyAuditCommands(t *testing.T) {
	dir := t.TempDir()
	run(t, dir, "tenant", "create", "acme")
	run(t, dir, "tenant", "create", "beta")
	if out, _ := run(t, dir, "tenant", "list"); !strings.Contains(out, "acme") || !strings.Contains(out, "beta") {
		t.Fatalf("tenant list:\n%s", out)
	}
	out, errOut := run(t, dir, "key", "create", "--tenant", "acme", "--role", "user", "--principal", "alice",
		"--model", "m1", "--model", "m2", "--expires", "720h")
	secret := strings.TrimSpace(out)
	if !keyRe.MatchString(secret) || !strings.Contains(errOut, "not shown again") {
		t.Fatalf("key create printed %q, %q", out, errOut)
	}
	id, _ := tenant.ParseKey(secret)
	out, _ = run(t, dir, "key", "create", "--tenant", "beta", "--role", "viewer")
	betaID, _ := tenant.ParseKey(strings.TrimSpace(out))

	out, _ = run(t, dir, "key", "list")
	if keyRe.MatchString(out) || strings.Contains(out, secret[20:]) {
		t.Fatalf("key list shows a secret:\n%s", out)
	}
	for _, want := range []string{id, betaID, "alice", "m1,m2", "active"} {
		if !strings.Contains(out, want) {
			t.Fatalf("key list lacks %q:\n%s", want, out)
		}
	}
	if out, _ = run(t, dir, "key", "list", "--tenant", "beta"); strings.Contains(out, id) || !strings.Contains(out, betaID) {
		t.Fatalf("key list --tenant beta:\n%s", out)
	}
	if out, _ = run(t, dir, "key", "revoke", betaID); !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: %s", out)
	}
	if out, _ = run(t, dir, "tenant", "delete", "acme"); !strings.Contains(out, "1 keys revoked: "+id) {
		t.Fatalf("tenant delete: %s", out)
	}
	out, _ = run(t, dir, "key", "list")
	if strings.Contains(out, "active") || !strings.Contains(out, "(deleted)") {
		t.Fatalf("after deleting acme:\n%s", out)
	}

	// Refusals: each an error, and a failed change is audited too.
	bad := [][]string{
		{"tenant", "create", "beta"},
		{"tenant", "delete", "nope"},
		{"key", "create", "--tenant", "nope", "--role", "user"},
		{"key", "create", "--tenant", "beta", "--role", "root"},
		{"key", "create", "--tenant", "beta"},
		{"key", "create", "--tenant", "beta", "--role", "user", "--expires", "-1h"},
		{"key", "revoke", "000000000000"},
		{"audit", "tail", "-n", "0"},
	}
	for _, args := range bad {
		if _, _, err := runCommand(newRootCmd(), append(args, "--data-dir", dir)...); err == nil {
			t.Errorf("kvserve %s succeeded", strings.Join(args, " "))
		}
	}

	out, _ = run(t, dir, "audit", "verify")
	if !strings.Contains(out, "12 records, chain intact") {
		t.Fatalf("audit verify: %s", out)
	}
	out, _ = run(t, dir, "audit", "tail", "-n", "4")
	if strings.Count(out, "\n") != 5 || !strings.Contains(out, "tenant.delete") || !strings.Contains(out, "key.revoke") {
		t.Fatalf("audit tail:\n%s", out)
	}
	data, _ := os.ReadFile(filepath.Join(dir, auditFile))
	if bytes.Contains(data, []byte(secret)) || bytes.Contains(data, []byte(secret[20:])) {
		t.Fatal("the audit log holds a key")
	}
	// Tampering shows.
	path := filepath.Join(dir, auditFile)
	_ = os.WriteFile(path, bytes.Replace(data, []byte("key.revoke"), []byte("key.create"), 1), 0o600)
	if _, _, err := runCommand(newRootCmd(), "audit", "verify", "--data-dir", dir); err == nil || !strings.Contains(err.Error(), "record 5 ") {
		t.Fatalf("tampered log: %v", err)
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:80": true, "[::1]:8080": true, "localhost:8080": true, "LOCALHOST:1": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "example.com:80": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v", addr, got)
		}
	}
}

// TestPlanAuth covers each way the server decides to authenticate.
func TestPlanAuth(t *testing.T) {
	ctx := context.Background()
	type store int
	const (
		empty store = iota
		active
		revokedOnly
	)
	tests := []struct {
		name       string
		store      store
		addr       string
		configured int
		allowOpen  bool
		want       authPlan
		bootstrap  bool
		err        string
	}{
		{"loopback, empty store", empty, "127.0.0.1:8080", 0, false, authPlan{open: true}, false, ""},
		{"elsewhere, empty store: first admin key", empty, "0.0.0.0:8080", 0, false, authPlan{useStore: true}, true, ""},
		{"elsewhere, empty store, allowed open", empty, ":8080", 0, true, authPlan{open: true}, false, ""},
		{"configured keys only", empty, "0.0.0.0:8080", 1, false, authPlan{useStore: true}, false, ""},
		{"stored keys", active, "127.0.0.1:8080", 0, false, authPlan{useStore: true}, false, ""},
		{"stored and configured keys", active, "0.0.0.0:8080", 2, false, authPlan{useStore: true}, false, ""},
		{"every stored key revoked", revokedOnly, "0.0.0.0:8080", 0, false, authPlan{}, false, "--allow-unauthenticated"},
		{"every stored key revoked, loopback", revokedOnly, "127.0.0.1:8080", 0, false, authPlan{}, false, "--allow-unauthenticated"},
		{"every stored key revoked, allowed open", revokedOnly, "0.0.0.0:8080", 0, true, authPlan{open: true}, false, ""},
		{"revoked stored keys, configured keys", revokedOnly, "0.0.0.0:8080", 1, false, authPlan{useStore: true}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := openState(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if tt.store != empty {
				_, _ = st.dir.CreateTenant(ctx, localActor(), "acme")
				k, _, err := st.dir.CreateKey(ctx, localActor(), tenant.KeySpec{Tenant: "acme", Role: tenant.RoleUser})
				if err != nil {
					t.Fatal(err)
				}
				if tt.store == revokedOnly {
					_, _ = st.dir.RevokeKey(ctx, localActor(), k.ID)
				}
			}
			var stderr bytes.Buffer
			got, err := planAuth(ctx, st.dir, tt.addr, tt.configured, tt.allowOpen, &stderr)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one naming %s", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("%+v %v, want %+v", got, err, tt.want)
			}
			secrets := keyRe.FindAllString(stderr.String(), -1)
			if tt.bootstrap != (len(secrets) == 1) {
				t.Fatalf("printed keys %q:\n%s", secrets, stderr.String())
			}
			if tt.bootstrap {
				p, err := st.dir.VerifyKey(ctx, secrets[0])
				if err != nil || p.Role != tenant.RoleAdmin || p.Name != "admin" {
					t.Fatalf("first key: %+v %v", p, err)
				}
				// The next start finds a key and creates none.
				stderr.Reset()
				if again, err := planAuth(ctx, st.dir, tt.addr, 0, false, &stderr); err != nil || !again.useStore || keyRe.MatchString(stderr.String()) {
					t.Fatalf("second start: %+v %v %s", again, err, stderr.String())
				}
			}
		})
	}
}

// TestServeAuthGate: serve refuses to start when every stored key is
// revoked, before loading anything; --allow-unauthenticated lets it go on
// (here to the missing model).
func TestServeAuthGate(t *testing.T) {
	dir := t.TempDir()
	run(t, dir, "tenant", "create", "acme")
	out, _ := run(t, dir, "key", "create", "--tenant", "acme", "--role", "admin")
	id, _ := tenant.ParseKey(strings.TrimSpace(out))
	run(t, dir, "key", "revoke", id)
	for _, tt := range []struct {
		extra []string
		want  string
	}{
		{nil, "--allow-unauthenticated"},
		{[]string{"--allow-unauthenticated"}, "nonexistent.gguf"},
	} {
		cmd := newServeCmd()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(append([]string{"--model", "/nonexistent.gguf", "--addr", "127.0.0.1:0", "--data-dir", dir}, tt.extra...))
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: %v, want an error naming %s", tt.extra, err, tt.want)
		}
	}
}

// TestStoreKeysAPI serves the three dialects with keys from the tenant
// store: a key works in each dialect's header, a revoked or expired key is
// a 401 in each dialect's shape, the model allow-list holds, /metrics
// wants an admin, and every denial is audited without the key.
func TestStoreKeysAPI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	log, err := audit.Open(filepath.Join(dir, auditFile), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	d, err := tenant.Open(dir, tenant.Options{Audit: log, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	by := localActor()
	acme, _ := d.CreateTenant(ctx, by, "acme")
	newKey := func(role tenant.Role, ttl time.Duration, models ...string) (string, string) {
		k, secret, err := d.CreateKey(ctx, by, tenant.KeySpec{Tenant: "acme", Role: role, TTL: ttl, Models: models})
		if err != nil {
			t.Fatal(err)
		}
		return secret, k.ID
	}
	dev, _ := newKey(tenant.RoleDeveloper, 0)
	admin, _ := newKey(tenant.RoleAdmin, 0)
	revoked, revokedID := newKey(tenant.RoleUser, 0)
	expiring, expiringID := newKey(tenant.RoleUser, time.Hour)
	otherModel, _ := newKey(tenant.RoleUser, 0, "other-model")
	viewer, _ := newKey(tenant.RoleViewer, 0)
	if _, err := d.RevokeKey(ctx, by, revokedID); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()

	env := apitest.New(t, apitest.Options{
		Dialects: []api.Dialect{openai.New(), anthropic.New(anthropic.Options{}), gemini.New()},
		Config:   api.Config{Keys: storeKeys{d}, Audit: log},
	})
	type dialect struct {
		name, path, body, header, prefix string
		// errType extracts the dialect's error type from a body.
		errType func(data []byte) string
	}
	dialects := []dialect{
		{"openai", "/v1/chat/completions", `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`,
			"Authorization", "Bearer ", func(b []byte) string {
				var e struct{ Error struct{ Code string } }
				_ = json.Unmarshal(b, &e)
				return e.Error.Code
			}},
		{"anthropic", "/v1/messages", `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`,
			"X-Api-Key", "", func(b []byte) string {
				var e struct{ Error struct{ Type string } }
				_ = json.Unmarshal(b, &e)
				return e.Error.Type
			}},
		{"gemini", "/v1beta/models/tiny-chat:generateContent", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":1}}`,
			"X-Goog-Api-Key", "", func(b []byte) string {
				var e struct{ Error struct{ Status string } }
				_ = json.Unmarshal(b, &e)
				return e.Error.Status
			}},
	}
	errTypes := map[string]map[int]string{
		"openai":    {401: "invalid_api_key", 403: "permission_denied"},
		"anthropic": {401: "authentication_error", 403: "permission_error"},
		"gemini":    {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED"},
	}
	for _, dl := range dialects {
		tests := []struct {
			name   string
			key    string
			status int
			msg    string
		}{
			{"store key", dev, 200, ""},
			{"revoked", revoked, 401, "API key revoked"},
			{"expired", expiring, 401, "API key expired"},
			{"unknown", "kvs_000000000000_" + strings.Repeat("0", 64), 401, "invalid API key"},
			{"model not allowed", otherModel, 403, "may not use the model"},
			{"viewer", viewer, 403, "may not generate"},
		}
		for _, tt := range tests {
			t.Run(dl.name+"/"+tt.name, func(t *testing.T) {
				status, data, _ := apitest.Post(t, env.URL(dl.path), dl.body, dl.header, dl.prefix+tt.key)
				if status != tt.status || !strings.Contains(string(data), tt.msg) {
					t.Fatalf("status %d, want %d with %q: %s", status, tt.status, tt.msg, data)
				}
				if status != 200 {
					if got, want := dl.errType(data), errTypes[dl.name][status]; got != want {
						t.Fatalf("error type %q, want %q: %s", got, want, data)
					}
				}
			})
		}
	}
	if got := env.Recorder.Last(t).Scope; got != acme.ID {
		t.Fatalf("engine scope %q, want the tenant's id %q", got, acme.ID)
	}

	metrics := func(key string) (int, string) {
		req, _ := http.NewRequest("GET", env.URL("/metrics"), nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	for _, tt := range []struct {
		key    string
		status int
		want   string
	}{
		{"", 401, `"code":"invalid_api_key"`},
		{dev, 403, `"type":"permission_error"`},
		{revoked, 401, "API key revoked"},
		{admin, 200, "kvserve_http_requests_total"},
	} {
		if status, body := metrics(tt.key); status != tt.status || !strings.Contains(body, tt.want) {
			t.Errorf("/metrics with %.20q: %d, want %d with %q: %.300s", tt.key, status, tt.status, tt.want, body)
		}
	}

	// The denials are in the audit trail, by key id, never by key.
	recs, err := audit.Tail(log.Path(), 100)
	if err != nil {
		t.Fatal(err)
	}
	var denials []string
	for _, r := range recs {
		if r.Outcome == audit.Denied {
			denials = append(denials, r.Action+" "+r.Resource+" "+r.Reason)
		}
	}
	all := strings.Join(denials, "\n")
	for _, want := range []string{
		"auth keys/" + revokedID + " API key revoked",
		"auth keys/" + expiringID + " API key expired",
		"auth keys/000000000000 invalid API key",
		"models.use models/tiny-chat this API key may not use",
		"models.use models/tiny-chat this API key's role \"viewer\" may not generate",
		"admin GET /metrics",
		"auth GET /metrics missing API key",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no denial %q in:\n%s", want, all)
		}
	}
	data, _ := os.ReadFile(log.Path())
	for _, k := range []string{dev, revoked, expiring, otherModel} {
		if bytes.Contains(data, []byte(k[20:])) {
			t.Fatal("a key's secret is in the audit log")
		}
	}
	if _, err := audit.Verify(log.Path()); err != nil {
		t.Fatal(err)
	}
}

// TestServeStoreKeys runs `kvserve serve` on a data directory holding a
// tenant's keys: a stored key is accepted, /metrics is refused to a
// developer, and a key revoked with `kvserve key revoke` while the server
// runs is refused from its next use. The audit chain the two wrote into
// verifies afterwards.
func TestServeStoreKeys(t *testing.T) {
	dir := t.TempDir()
	run(t, dir, "tenant", "create", "acme")
	out, _ := run(t, dir, "key", "create", "--tenant", "acme", "--role", "developer")
	secret := strings.TrimSpace(out)
	id, _ := tenant.ParseKey(secret)
	s := startServe(t, "--model", apitest.ModelFile(t), "--addr", "127.0.0.1:0", "--data-dir", dir,
		"--kv-cache-memory", "16MiB", "--threads", "1")
	base, model := s.base, s.model

	call := func(method, path, body string) (int, string) {
		t.Helper()
		status, data := httpDo(t, method, base+path, secret, body)
		return status, string(data)
	}
	chat := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	if status, body := call("POST", "/v1/chat/completions", chat); status != 200 {
		t.Fatalf("stored key: %d %s", status, body)
	}
	for _, path := range []string{"/metrics", "/v1/kv/events"} {
		if status, body := call("GET", path, ""); status != 403 {
			t.Fatalf("%s for a developer: %d %.200s", path, status, body)
		}
	}
	run(t, dir, "key", "revoke", id)
	if status, body := call("POST", "/v1/chat/completions", chat); status != 401 || !strings.Contains(body, "API key revoked") {
		t.Fatalf("revoked key: %d %s", status, body)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	out, _ = run(t, dir, "audit", "verify")
	if !strings.Contains(out, "6 records, chain intact") {
		t.Fatalf("audit verify: %s", out)
	}
	out, _ = run(t, dir, "audit", "tail", "-n", "1")
	if !strings.Contains(out, "API key revoked") || !strings.Contains(out, "keys/"+id) {
		t.Fatalf("last audit record:\n%s", out)
	}
}

// TestPermissionNames: the permissions the API server checks are named as
// in the tenant store's table.
func TestPermissionNames(t *testing.T) {
	if api.PermissionModelsUse != string(tenant.ModelsUse) || api.PermissionAdmin != string(tenant.Admin) {
		t.Fatalf("api checks %q and %q; the store names %q and %q", api.PermissionModelsUse, api.PermissionAdmin, tenant.ModelsUse, tenant.Admin)
	}
}
