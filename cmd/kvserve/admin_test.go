package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/kvevents"
)

// TestAdminAPI manages tenants and keys over HTTP with an admin key: a
// tenant and a key created, used, listed without secrets, refused to a
// non-admin, and the tenant deleted — its key revoked and its KV gone from
// the running engine at once.
func TestAdminAPI(t *testing.T) {
	dir := t.TempDir()
	run(t, dir, "tenant", "create", "ops")
	out, _ := run(t, dir, "key", "create", "--tenant", "ops", "--role", "admin")
	adminKey := strings.TrimSpace(out)
	s := startServe(t, "--model", apitest.ModelFile(t), "--addr", "127.0.0.1:0", "--data-dir", dir,
		"--kv-cache-memory", "16MiB", "--threads", "1")
	call := func(key, method, path, body string) (int, string) {
		t.Helper()
		status, data := httpDo(t, method, s.base+path, key, body)
		return status, string(data)
	}
	blocks := func() int {
		t.Helper()
		req, _ := http.NewRequest("GET", s.base+"/v1/kv/events?snapshot=1", nil)
		req.Header.Set("Authorization", "Bearer "+adminKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var b kvevents.Batch
				if err := json.Unmarshal([]byte(line), &b); err != nil {
					t.Fatal(err)
				}
				return len(b.Events)
			}
		}
		t.Fatal("no snapshot")
		return 0
	}

	if status, body := call(adminKey, "POST", "/v1/admin/tenants", `{"name":"acme"}`); status != 201 || !strings.Contains(body, `"name":"acme"`) {
		t.Fatalf("create tenant: %d %s", status, body)
	}
	status, body := call(adminKey, "POST", "/v1/admin/keys", `{"tenant":"acme","role":"developer","principal":"alice","expires_in":"24h"}`)
	var key struct{ ID, Secret string }
	if status != 201 || json.Unmarshal([]byte(body), &key) != nil || !strings.HasPrefix(key.Secret, "kvs_") {
		t.Fatalf("create key: %d %s", status, body)
	}
	prompt := strings.Repeat("Administration reaches every tier of the cache. ", 10)
	chat, _ := json.Marshal(map[string]any{"model": s.model, "max_tokens": 1,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	if status, body := call(key.Secret, "POST", "/v1/chat/completions", string(chat)); status != 200 {
		t.Fatalf("the new key: %d %s", status, body)
	}
	if status, body := call(adminKey, "GET", "/v1/admin/keys?tenant=acme", ""); status != 200 || !strings.Contains(body, key.ID) || strings.Contains(body, "kvs_") {
		t.Fatalf("list keys: %d %s", status, body)
	}
	for _, c := range []struct {
		key, method, path, body string
		want                    int
	}{
		{key.Secret, "GET", "/v1/admin/tenants", "", 403},
		{key.Secret, "DELETE", "/v1/admin/tenants/acme", "", 403},
		{adminKey, "POST", "/v1/admin/tenants", `{"name":"acme"}`, 409},
		{adminKey, "POST", "/v1/admin/tenants", `{"name":"acme","extra":1}`, 400},
		{adminKey, "POST", "/v1/admin/tenants", `{"name":"has space"}`, 400},
		{adminKey, "POST", "/v1/admin/keys", `{"tenant":"acme","role":"root"}`, 400},
		{adminKey, "POST", "/v1/admin/keys", `{"tenant":"acme","role":"user","expires_in":"soon"}`, 400},
		{adminKey, "POST", "/v1/admin/keys", `{"tenant":"nope","role":"user"}`, 404},
		{adminKey, "DELETE", "/v1/admin/tenants/nope", "", 404},
		{adminKey, "DELETE", "/v1/admin/keys/000000000000", "", 404},
	} {
		status, body := call(c.key, c.method, c.path, c.body)
		var e struct {
			Error struct{ Message, Type string }
		}
		if status != c.want || json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" {
			t.Errorf("%s %s %s: %d %s, want %d in OpenAI's error shape", c.method, c.path, c.body, status, body, c.want)
		}
	}

	before := blocks()
	status, body = call(adminKey, "DELETE", "/v1/admin/tenants/acme", "")
	var d struct {
		RevokedKeys []string `json:"revoked_keys"`
		KVForgotten bool     `json:"kv_forgotten"`
	}
	if status != 200 || json.Unmarshal([]byte(body), &d) != nil || len(d.RevokedKeys) != 1 || !d.KVForgotten {
		t.Fatalf("delete tenant: %d %s", status, body)
	}
	if after := blocks(); before < 3 || after != 0 {
		t.Fatalf("KV blocks before deleting the tenant %d, after %d: want its blocks gone", before, after)
	}
	if status, body := call(key.Secret, "POST", "/v1/chat/completions", string(chat)); status != 401 || !strings.Contains(body, "revoked") {
		t.Fatalf("the deleted tenant's key: %d %s", status, body)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, dir, "audit", "verify"); !strings.Contains(out, "chain intact") {
		t.Fatalf("audit: %s", out)
	}
	if out, _ := run(t, dir, "audit", "tail", "-n", "50"); !strings.Contains(out, "tenant.delete") || !strings.Contains(out, "alice") {
		t.Fatalf("the admin API's changes are not in the audit trail:\n%s", out)
	}
}
