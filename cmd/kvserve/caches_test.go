package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/anthropic"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/api/gemini"
	"github.com/kvserve/kvserve/internal/api/openai"
	"github.com/kvserve/kvserve/internal/audit"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/tenant"
)

// cacheMatrixEnv is a test server over the tenant store of a temporary
// data directory, as serve wires it: stored keys, the audit log, and the
// context caches in the store.
type cacheMatrixEnv struct {
	env   *apitest.Env
	st    *state
	dir   string
	keys  map[string]string // principal → key
	alpha tenant.Tenant
}

func newCacheMatrixEnv(t *testing.T) *cacheMatrixEnv {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := openState(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m := &cacheMatrixEnv{st: st, dir: dir, keys: map[string]string{}}
	if m.alpha, err = st.dir.CreateTenant(ctx, localActor(), "alpha"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.dir.CreateTenant(ctx, localActor(), "beta"); err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		tenant, principal string
		role              tenant.Role
	}{{"alpha", "admin", tenant.RoleAdmin}, {"alpha", "developer", tenant.RoleDeveloper}, {"alpha", "user", tenant.RoleUser},
		{"alpha", "viewer", tenant.RoleViewer}, {"beta", "beta-dev", tenant.RoleDeveloper}} {
		_, secret, err := st.dir.CreateKey(ctx, localActor(), tenant.KeySpec{Tenant: k.tenant, Principal: k.principal, Role: k.role})
		if err != nil {
			t.Fatal(err)
		}
		m.keys[k.principal] = secret
	}
	caches, err := newCacheService(st, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The operator's configured key (--api-key KEY): an admin of the
	// default tenant, whose id is "".
	m.keys["operator"] = "operator-key"
	m.env = apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New(), anthropic.New(anthropic.Options{}), gemini.New()},
		Config: api.Config{APIKeys: []api.APIKey{{Key: "operator-key"}}, Keys: storeKeys{st.dir}, Audit: st.audit, Caches: caches}})
	return m
}

// TestDefaultTenantCacheIsolated: the default tenant's caches (a
// configured key without a tenant) are as hidden from other tenants as
// any tenant's, and the other way round.
func TestDefaultTenantCacheIsolated(t *testing.T) {
	m := newCacheMatrixEnv(t)
	op := m.create(t, "operator")
	alpha := m.create(t, "admin")
	for _, tc := range []struct{ who, cache string }{{"admin", op}, {"viewer", op}, {"operator", alpha}} {
		if status, data := m.do(t, tc.who, "GET", "/v1beta/"+tc.cache, ""); status != 404 {
			t.Errorf("%s reads %s: %d %s", tc.who, tc.cache, status, data)
		}
	}
	if status, data := m.do(t, "operator", "GET", "/v1beta/"+op, ""); status != 200 {
		t.Errorf("the operator's own cache: %d %s", status, data)
	}
	m.env.WaitIdle(t)
}

// do sends a request as principal and returns the status and body.
func (m *cacheMatrixEnv) do(t *testing.T, principal, method, path, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, m.env.URL(path), rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-goog-api-key", m.keys[principal])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}

var matrixCacheBody = `{"model":"models/` + apitest.ModelName + `","systemInstruction":{"parts":[{"text":"` +
	strings.Repeat("A long shared system prompt. ", 6) + `"}]},"contents":[{"parts":[{"text":"Context."}]}],"ttl":"600s"}`

// create makes a cache as principal and returns its name.
func (m *cacheMatrixEnv) create(t *testing.T, principal string) string {
	t.Helper()
	return m.createBody(t, principal, matrixCacheBody)
}

// createShared publishes a shared cache as principal (an administrator).
func (m *cacheMatrixEnv) createShared(t *testing.T, principal string) string {
	t.Helper()
	return m.createBody(t, principal, strings.Replace(matrixCacheBody, `"ttl":"600s"`, `"ttl":"600s","kvserve":{"shared":true}`, 1))
}

func (m *cacheMatrixEnv) createBody(t *testing.T, principal, body string) string {
	t.Helper()
	status, data := m.do(t, principal, "POST", "/v1beta/cachedContents", body)
	var c struct{ Name string }
	if status != 200 || json.Unmarshal(data, &c) != nil {
		t.Fatalf("create as %s: %d %s", principal, status, data)
	}
	return c.Name
}

// lastAudit returns the newest audit record.
func (m *cacheMatrixEnv) lastAudit(t *testing.T) audit.Record {
	t.Helper()
	recs, err := audit.Tail(filepath.Join(m.dir, auditFile), 1)
	if err != nil || len(recs) != 1 {
		t.Fatalf("audit tail: %v %v", recs, err)
	}
	return recs[0]
}

// TestCachePermissionMatrix asserts every cell of endpoint × role × the
// cache's relation to the caller: its own tenant's, another tenant's, or
// its own tenant's with a binding that grants the caller cachedContents.use,
// or one an administrator published to every tenant (shared).
// Each cell's expected status comes from the role table (docs/tenants.md);
// another tenant's cache is 404 whatever the role, never 403. Every cell is
// audited: refusals as denied, the rest as ok.
func TestCachePermissionMatrix(t *testing.T) {
	m := newCacheMatrixEnv(t)
	ctx := context.Background()
	roles := []string{"admin", "developer", "user", "viewer"}
	type relation string
	const (
		own    relation = "own"
		other  relation = "other"
		bound  relation = "bound"
		shared relation = "shared"
	)
	// what each role may do on its own tenant's caches (the role table).
	may := map[string]map[string]bool{
		"create": {"admin": true, "developer": true},
		"get":    {"admin": true, "developer": true, "user": true, "viewer": true},
		"list":   {"admin": true, "developer": true, "user": true, "viewer": true},
		"update": {"admin": true, "developer": true},
		"delete": {"admin": true, "developer": true},
		"use":    {"admin": true, "developer": true, "user": true},
		// Reading a cache's contents back, and extending it (which reads
		// them), are its owner's and administrators': the matrix's caches
		// are created by the admin.
		"content": {"admin": true},
		"extend":  {"admin": true},
	}
	gen := "/v1beta/models/" + apitest.ModelName + ":generateContent"
	endpoints := []struct {
		name      string
		relations []relation // create and list act on the caller's own tenant only
		request   func(cache string) (method, path, body string)
	}{
		{"create", []relation{own}, func(string) (string, string, string) { return "POST", "/v1beta/cachedContents", matrixCacheBody }},
		{"list", []relation{own}, func(string) (string, string, string) { return "GET", "/v1beta/cachedContents", "" }},
		{"get", []relation{own, other, bound, shared}, func(c string) (string, string, string) { return "GET", "/v1beta/" + c, "" }},
		{"update", []relation{own, other, bound, shared}, func(c string) (string, string, string) {
			return "PATCH", "/v1beta/" + c, `{"ttl":"900s"}`
		}},
		{"delete", []relation{own, other, bound, shared}, func(c string) (string, string, string) { return "DELETE", "/v1beta/" + c, "" }},
		{"use", []relation{own, other, bound, shared}, func(c string) (string, string, string) {
			return "POST", gen, `{"cachedContent":"` + c + `","contents":[{"parts":[{"text":"Q?"}]}],"generationConfig":{"maxOutputTokens":1}}`
		}},
		{"content", []relation{own, other, bound, shared}, func(c string) (string, string, string) {
			return "GET", "/v1/cached_contents/" + strings.TrimPrefix(c, "cachedContents/") + "/content", ""
		}},
		{"extend", []relation{own, other, bound, shared}, func(c string) (string, string, string) {
			return "POST", "/v1/cached_contents/" + strings.TrimPrefix(c, "cachedContents/") + "/extend",
				`{"messages":[{"role":"user","content":"And one more thing."}],"ttl":"300s"}`
		}},
	}
	type cell struct {
		endpoint, role string
		rel            relation
		want           int
	}
	var cells []cell
	for _, ep := range endpoints {
		for _, role := range roles {
			for _, rel := range ep.relations {
				want := 403
				switch {
				case rel == other:
					want = 404 // existence never leaks
				case rel == shared && (ep.name == "update" || ep.name == "delete") && role != "admin":
					// Every tenant reads and uses a shared cache; only
					// an administrator changes it.
					want = 403
				case may[ep.name][role]:
					want = 200
				case rel == bound && ep.name == "use" && role == "viewer":
					// The binding grants cachedContents.use; generating
					// still needs models.use, which a viewer lacks.
					want = 403
				}
				cells = append(cells, cell{ep.name, role, rel, want})
			}
		}
	}
	if len(cells) != 2*4+6*4*4 {
		t.Fatalf("%d cells", len(cells))
	}
	for _, c := range cells {
		t.Run(fmt.Sprintf("%s/%s/%s", c.endpoint, c.role, c.rel), func(t *testing.T) {
			// A fresh cache per cell: cells that delete must not affect others.
			var cache string
			switch c.rel {
			case own:
				cache = m.create(t, "admin")
			case bound:
				cache = m.create(t, "admin")
				if err := m.st.dir.Grant(ctx, localActor(), m.alpha.ID, cache, c.role); err != nil {
					t.Fatal(err)
				}
			case other:
				cache = m.create(t, "beta-dev")
			case shared:
				cache = m.createShared(t, "operator")
			}
			var method, path, body string
			for _, ep := range endpoints {
				if ep.name == c.endpoint {
					method, path, body = ep.request(cache)
				}
			}
			status, data := m.do(t, c.role, method, path, body)
			if status != c.want {
				t.Fatalf("status %d, want %d: %s", status, c.want, data)
			}
			if c.want == 404 && (!strings.Contains(string(data), "not found") || strings.Contains(string(data), "tenant")) {
				t.Fatalf("another tenant's cache answered %s", data)
			}
			rec := m.lastAudit(t)
			wantOutcome := audit.OK
			if c.want != 200 {
				wantOutcome = audit.Denied
			}
			if rec.Outcome != wantOutcome || rec.Principal != c.role {
				t.Fatalf("last audit record %+v, want outcome %s by %s", rec.Entry, wantOutcome, c.role)
			}
			if c.endpoint == "list" && strings.Contains(string(data), "beta") {
				t.Fatalf("list shows another tenant's cache: %s", data)
			}
		})
	}
	// Another tenant's list never shows alpha's caches.
	status, data := m.do(t, "beta-dev", "GET", "/v1beta/cachedContents?pageSize=1000", "")
	var list struct {
		CachedContents []struct{ Name string } `json:"cachedContents"`
	}
	if status != 200 || json.Unmarshal(data, &list) != nil {
		t.Fatalf("beta list: %d %s", status, data)
	}
	for _, c := range list.CachedContents {
		if status, _ := m.do(t, "admin", "GET", "/v1beta/"+c.Name, ""); status != 404 {
			t.Fatalf("beta lists %s, which alpha's admin can read (%d)", c.Name, status)
		}
	}
	m.env.WaitIdle(t)
}

// TestCachesSurviveRestart: the records live in the tenant store, so a
// new service over the same data directory finds them.
func TestCachesSurviveRestart(t *testing.T) {
	m := newCacheMatrixEnv(t)
	name := m.create(t, "developer")
	svc, err := newCacheService(m.st, 64, nil)
	if err != nil {
		t.Fatal(err)
	}
	env2 := apitest.New(t, apitest.Options{Dialects: []api.Dialect{gemini.New()},
		Config: api.Config{Keys: storeKeys{m.st.dir}, Audit: m.st.audit, Caches: svc}})
	m.env = env2
	status, data := m.do(t, "user", "POST", "/v1beta/models/"+apitest.ModelName+":generateContent",
		`{"cachedContent":"`+name+`","contents":[{"parts":[{"text":"Q?"}]}],"generationConfig":{"maxOutputTokens":1}}`)
	if status != 200 {
		t.Fatalf("use after restart: %d %s", status, data)
	}
	// The new engine had none of its KV: the first use recomputed it and
	// says so; the next use hits it.
	var r struct {
		UsageMetadata struct{ CachedContentTokenCount int } `json:"usageMetadata"`
	}
	if json.Unmarshal(data, &r) != nil || r.UsageMetadata.CachedContentTokenCount != 0 {
		t.Fatalf("first use after restart reports cached tokens: %s", data)
	}
	_, data = m.do(t, "user", "POST", "/v1beta/models/"+apitest.ModelName+":generateContent",
		`{"cachedContent":"`+name+`","contents":[{"parts":[{"text":"Q2?"}]}],"generationConfig":{"maxOutputTokens":1}}`)
	if json.Unmarshal(data, &r) != nil || r.UsageMetadata.CachedContentTokenCount == 0 {
		t.Fatalf("second use after restart: %s", data)
	}
	env2.WaitIdle(t)
}

// TestCacheFromOtherDialects: a cache created through Gemini's API is used
// from OpenAI chat completions and responses and from Anthropic messages
// through the kvserve extension, each reporting the cache's blocks as
// cached, and the refusals come in each dialect's own shape.
func TestCacheFromOtherDialects(t *testing.T) {
	m := newCacheMatrixEnv(t)
	name := m.create(t, "developer")
	var c struct {
		UsageMetadata struct{ TotalTokenCount int } `json:"usageMetadata"`
	}
	_, data := m.do(t, "developer", "GET", "/v1beta/"+name, "")
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	bs := m.env.Engine.Config().BlockSize
	wantCached := c.UsageMetadata.TotalTokenCount / bs * bs
	ext := `"kvserve":{"cached_content":"` + name + `"}`
	for _, tc := range []struct {
		name, path, body, cached string
	}{
		{"openai chat", "/v1/chat/completions", `{"model":"` + apitest.ModelName + `","max_tokens":1,"messages":[{"role":"user","content":"Q?"}],` + ext + `}`,
			"usage.prompt_tokens_details.cached_tokens"},
		{"openai responses", "/v1/responses", `{"model":"` + apitest.ModelName + `","max_output_tokens":16,"input":"Q?",` + ext + `}`,
			"usage.input_tokens_details.cached_tokens"},
		{"anthropic", "/v1/messages", `{"model":"` + apitest.ModelName + `","max_tokens":1,"messages":[{"role":"user","content":"Q?"}],` + ext + `}`,
			"usage.cache_read_input_tokens"},
		// Their own system text too (after the cache's turns: the whole
		// cache is still a hit).
		{"openai chat with a system message", "/v1/chat/completions", `{"model":"` + apitest.ModelName + `","max_tokens":1,"messages":[{"role":"system","content":"S"},{"role":"user","content":"Q?"}],` + ext + `}`,
			"usage.prompt_tokens_details.cached_tokens"},
		{"anthropic with system", "/v1/messages", `{"model":"` + apitest.ModelName + `","max_tokens":1,"system":"S","messages":[{"role":"user","content":"Q?"}],` + ext + `}`,
			"usage.cache_read_input_tokens"},
	} {
		status, data := m.do(t, "user", "POST", tc.path, tc.body)
		if status != 200 {
			t.Fatalf("%s: %d %s", tc.name, status, data)
		}
		var v any
		if err := json.Unmarshal(data, &v); err != nil {
			t.Fatal(err)
		}
		for _, k := range strings.Split(tc.cached, ".") {
			v, _ = v.(map[string]any)[k]
		}
		if got, _ := v.(float64); int(got) < wantCached {
			t.Errorf("%s: %s = %v, want at least the cache's %d tokens: %s", tc.name, tc.cached, v, wantCached, data)
		}
		if rec := m.lastAudit(t); rec.Action != "cachedContents.use" || rec.Outcome != audit.OK {
			t.Errorf("%s: last audit record %+v", tc.name, rec.Entry)
		}
	}
	// Refusals, in each dialect's shape.
	other := m.create(t, "beta-dev")
	for _, tc := range []struct {
		name, path, body, shape string
		status                  int
	}{
		{"another tenant's cache", "/v1/chat/completions", `{"model":"` + apitest.ModelName + `","messages":[{"role":"user","content":"Q?"}],"kvserve":{"cached_content":"` + other + `"}}`, `"type":"invalid_request_error"`, 404},
		{"a raw prompt", "/v1/completions", `{"model":"` + apitest.ModelName + `","prompt":"Q?",` + ext + `}`, `"param":"kvserve.cached_content"`, 400},
		{"gemini kvserve extension", "/v1beta/models/" + apitest.ModelName + ":generateContent", `{"contents":[{"parts":[{"text":"Q?"}]}],` + ext + `}`, `"INVALID_ARGUMENT"`, 400},
	} {
		status, data := m.do(t, "developer", "POST", tc.path, tc.body)
		if status != tc.status || !strings.Contains(string(data), tc.shape) {
			t.Errorf("%s: %d %s; want %d with %s", tc.name, status, data, tc.status, tc.shape)
		}
	}
	m.env.WaitIdle(t)
}

// TestOpenAICachedContents walks /v1/cached_contents: the same resource as
// Gemini's cachedContents, in OpenAI's style.
func TestOpenAICachedContents(t *testing.T) {
	m := newCacheMatrixEnv(t)
	body := `{"model":"` + apitest.ModelName + `","display_name":"doc","ttl":"600s","messages":[` +
		`{"role":"system","content":"` + strings.Repeat("A long shared system prompt. ", 6) + `"},` +
		`{"role":"user","content":"Context."}],` +
		`"tools":[{"type":"function","function":{"name":"lookup","description":"Look up","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}]}`
	status, data := m.do(t, "developer", "POST", "/v1/cached_contents", body)
	var c struct {
		ID, Object, Name, Model string
		ExpiresAt               int64 `json:"expires_at"`
		Usage                   struct {
			TotalTokens int `json:"total_tokens"`
		}
	}
	if status != 200 || json.Unmarshal(data, &c) != nil || c.Object != "cached_content" || c.Name != "cachedContents/"+c.ID ||
		c.Usage.TotalTokens < 64 || c.ExpiresAt == 0 {
		t.Fatalf("create: %d %s", status, data)
	}
	if status, data := m.do(t, "user", "GET", "/v1beta/"+c.Name, ""); status != 200 {
		t.Fatalf("the same resource through Gemini: %d %s", status, data)
	}
	status, data = m.do(t, "user", "POST", "/v1/chat/completions", `{"model":"`+apitest.ModelName+
		`","max_tokens":1,"messages":[{"role":"user","content":"Q?"}],"kvserve":{"cached_content":"`+c.ID+`"}}`)
	if status != 200 || strings.Contains(string(data), `"cached_tokens":0`) {
		t.Fatalf("chat with the cache: %d %s", status, data)
	}
	status, data = m.do(t, "viewer", "GET", "/v1/cached_contents?limit=1", "")
	if status != 200 || !strings.Contains(string(data), `"object":"list"`) || !strings.Contains(string(data), c.ID) {
		t.Fatalf("list: %d %s", status, data)
	}
	status, data = m.do(t, "developer", "POST", "/v1/cached_contents/"+c.ID, `{"ttl":"1200s"}`)
	var u struct {
		ExpiresAt int64 `json:"expires_at"`
	}
	if status != 200 || json.Unmarshal(data, &u) != nil || u.ExpiresAt <= c.ExpiresAt {
		t.Fatalf("update: %d %s", status, data)
	}
	for _, tc := range []struct {
		name, who, method, path, body, shape string
		status                               int
	}{
		{"unknown field", "developer", "POST", "/v1/cached_contents", strings.Replace(body, `"ttl"`, `"temperature":1,"ttl"`, 1), `"param":"temperature"`, 400},
		{"bad ttl", "developer", "POST", "/v1/cached_contents", strings.Replace(body, `"600s"`, `"600"`, 1), `"param":"ttl"`, 400},
		{"bad expire_time", "developer", "POST", "/v1/cached_contents", strings.Replace(body, `"ttl":"600s"`, `"expire_time":"soon"`, 1), `"param":"expire_time"`, 400},
		{"viewer creates", "viewer", "POST", "/v1/cached_contents", body, `"type":"permission_error"`, 403},
		{"other tenant", "beta-dev", "GET", "/v1/cached_contents/" + c.ID, "", `"code":"not_found"`, 404},
		{"other tenant deletes", "beta-dev", "DELETE", "/v1/cached_contents/" + c.ID, "", `"code":"not_found"`, 404},
		{"bad after", "developer", "GET", "/v1/cached_contents?after=x", "", `"param":"after"`, 400},
		{"tool message", "developer", "POST", "/v1/cached_contents", strings.Replace(body, `"role":"user"`, `"role":"tool"`, 1), `"param":"messages[1].role"`, 400},
	} {
		status, data := m.do(t, tc.who, tc.method, tc.path, tc.body)
		if status != tc.status || !strings.Contains(string(data), tc.shape) {
			t.Errorf("%s: %d %s; want %d with %s", tc.name, status, data, tc.status, tc.shape)
		}
	}
	// Its contents read back, by its owner (or an admin) only.
	status, data = m.do(t, "developer", "GET", "/v1/cached_contents/"+c.ID+"/content", "")
	if status != 200 || !strings.Contains(string(data), "A long shared system prompt.") || !strings.Contains(string(data), "lookup") {
		t.Fatalf("contents for the owner: %d %s", status, data)
	}
	if status, data := m.do(t, "admin", "GET", "/v1/cached_contents/"+c.ID+"/content", ""); status != 200 {
		t.Fatalf("contents for an admin: %d %s", status, data)
	}
	if status, data := m.do(t, "user", "GET", "/v1/cached_contents/"+c.ID+"/content", ""); status != 403 || strings.Contains(string(data), "long shared") {
		t.Fatalf("contents for another user of the tenant: %d %s", status, data)
	}
	if status, _ := m.do(t, "beta-dev", "GET", "/v1/cached_contents/"+c.ID+"/content", ""); status != 404 {
		t.Fatalf("contents for another tenant: %d", status)
	}
	// Extended: a new cache, the old one's contents and more; its prefill
	// is a prefix hit on the old cache's blocks.
	kv := m.env.Engine.KV()
	hitsBefore := kv.Stats().HitTokens
	status, data = m.do(t, "developer", "POST", "/v1/cached_contents/"+c.ID+"/extend",
		`{"messages":[{"role":"assistant","content":"Noted."},{"role":"user","content":"`+strings.Repeat("More context follows. ", 8)+`"}],"ttl":"300s"}`)
	var x struct {
		ID, Name, Extends string
		Usage             struct {
			TotalTokens int `json:"total_tokens"`
		}
	}
	if status != 200 || json.Unmarshal(data, &x) != nil || x.Extends != c.Name || x.ID == c.ID || x.Usage.TotalTokens <= c.Usage.TotalTokens {
		t.Fatalf("extend: %d %s", status, data)
	}
	bs := m.env.Engine.Config().BlockSize
	if hit := kv.Stats().HitTokens - hitsBefore; hit < int64(c.Usage.TotalTokens/bs*bs)-int64(bs) {
		t.Fatalf("the extension's prefill hit %d tokens; the old cache holds %d", hit, c.Usage.TotalTokens)
	}
	status, data = m.do(t, "developer", "GET", "/v1/cached_contents/"+x.ID+"/content", "")
	if status != 200 || !strings.Contains(string(data), "Context.") || !strings.Contains(string(data), "More context follows.") {
		t.Fatalf("the extension's contents: %d %s", status, data)
	}
	for _, tc := range []struct {
		who, body string
		status    int
	}{
		{"developer", `{"messages":[{"role":"system","content":"S"}]}`, 400},
		{"developer", `{"messages":[]}`, 400},
		{"user", `{"messages":[{"role":"user","content":"Q"}]}`, 403},
		{"beta-dev", `{"messages":[{"role":"user","content":"Q"}]}`, 404},
	} {
		if status, data := m.do(t, tc.who, "POST", "/v1/cached_contents/"+c.ID+"/extend", tc.body); status != tc.status {
			t.Errorf("extend by %s with %s: %d %s, want %d", tc.who, tc.body, status, data, tc.status)
		}
	}
	status, data = m.do(t, "developer", "DELETE", "/v1/cached_contents/"+c.ID, "")
	if status != 200 || !strings.Contains(string(data), `"deleted":true`) {
		t.Fatalf("delete: %d %s", status, data)
	}
	if status, _ := m.do(t, "developer", "GET", "/v1/cached_contents/"+c.ID, ""); status != 404 {
		t.Fatalf("get after delete: %d", status)
	}
	m.env.WaitIdle(t)
}

// TestCacheCommands: `kvserve cache list|grant|ungrant` on the data
// directory a server uses.
func TestCacheCommands(t *testing.T) {
	m := newCacheMatrixEnv(t)
	name := m.create(t, "developer")
	out, _ := run(t, m.dir, "cache", "list", "--tenant", "alpha")
	if !strings.Contains(out, name) || !strings.Contains(out, "developer") || strings.Contains(out, "shared system prompt") {
		t.Fatalf("cache list:\n%s", out)
	}
	if out, _ := run(t, m.dir, "cache", "list", "--tenant", "beta"); strings.Contains(out, name) {
		t.Fatalf("beta's list shows alpha's cache:\n%s", out)
	}
	run(t, m.dir, "cache", "grant", "--tenant", "alpha", name, "viewer")
	if grants, err := m.st.dir.Grants(context.Background(), m.alpha.ID, name); err != nil || len(grants) != 1 || grants[0] != "viewer" {
		t.Fatalf("grants %v, %v", grants, err)
	}
	if out, _ := run(t, m.dir, "cache", "list", "--tenant", "alpha"); !strings.Contains(out, "viewer") {
		t.Fatalf("cache list does not show the grant:\n%s", out)
	}
	if _, _, err := runCommand(newRootCmd(), "cache", "grant", "--tenant", "beta", name, "bob", "--data-dir", m.dir); err == nil {
		t.Fatal("granted another tenant's cache")
	}
	run(t, m.dir, "cache", "ungrant", "--tenant", "alpha", name, "viewer")
	if grants, _ := m.st.dir.Grants(context.Background(), m.alpha.ID, name); len(grants) != 0 {
		t.Fatalf("grants after ungrant: %v", grants)
	}
	rec := m.lastAudit(t)
	if rec.Action != "binding.ungrant" || rec.Outcome != audit.OK {
		t.Fatalf("last audit record %+v", rec.Entry)
	}
	// Deleting a tenant deletes its caches.
	betaCache := m.create(t, "beta-dev")
	out, _ = run(t, m.dir, "tenant", "delete", "beta")
	if !strings.Contains(out, "1 context caches deleted") {
		t.Fatalf("tenant delete:\n%s", out)
	}
	id, _ := ctxcache.ParseName(betaCache)
	err := cacheRecords{m.st.dir.Store()}.View(context.Background(), func(tx ctxcache.Tx) error {
		_, err := tx.Get(id)
		return err
	})
	if !errors.Is(err, ctxcache.ErrNotFound) {
		t.Fatalf("the deleted tenant's cache: %v", err)
	}
	if rec := m.lastAudit(t); rec.Action != "cachedContents.delete" || rec.Resource != betaCache {
		t.Fatalf("last audit record %+v", rec.Entry)
	}
	m.env.WaitIdle(t)
}

// TestSharedCacheScope: a cache an administrator publishes is found in
// every tenant's prompts over it — the one sharing between tenants — while
// what each tenant appends stays its own: another tenant sending the very
// same continuation gets only the shared blocks from the cache.
func TestSharedCacheScope(t *testing.T) {
	m := newCacheMatrixEnv(t)
	body := `{"model":"models/` + apitest.ModelName + `","systemInstruction":{"parts":[{"text":"` +
		strings.Repeat("The house rules every tenant's assistant follows. ", 12) + `"}]},"contents":[{"parts":[{"text":"Context."}]}],` +
		`"ttl":"600s","kvserve":{"shared":true}}`
	if status, data := m.do(t, "developer", "POST", "/v1beta/cachedContents", body); status != 403 {
		t.Fatalf("a developer published a shared cache: %d %s", status, data)
	}
	cache := m.createBody(t, "operator", body)
	gen := "/v1beta/models/" + apitest.ModelName + ":generateContent"
	ask := `{"cachedContent":"` + cache + `","contents":[{"parts":[{"text":"` + strings.Repeat("What do the rules say about weekends? ", 6) +
		`"}]}],"generationConfig":{"maxOutputTokens":1}}`
	cached := func(who string) int {
		t.Helper()
		status, data := m.do(t, who, "POST", gen, ask)
		var out struct {
			UsageMetadata struct {
				PromptTokenCount, CachedContentTokenCount int
			}
		}
		if status != 200 || json.Unmarshal(data, &out) != nil {
			t.Fatalf("%s: %d %s", who, status, data)
		}
		return out.UsageMetadata.CachedContentTokenCount
	}
	firstA := cached("developer")
	againA := cached("developer")
	firstB := cached("beta-dev")
	againB := cached("beta-dev")
	t.Logf("cached tokens: alpha %d then %d, beta %d then %d", firstA, againA, firstB, againB)
	if firstA < 64 {
		t.Fatalf("alpha's first use found %d tokens of the shared cache", firstA)
	}
	if againA <= firstA {
		t.Fatalf("alpha's second identical request found %d tokens, its first %d: its own continuation was not kept", againA, firstA)
	}
	if firstB != firstA {
		t.Fatalf("beta's first request found %d tokens; the shared prefix is %d: it reached alpha's continuation", firstB, firstA)
	}
	if againB != againA {
		t.Fatalf("beta's second request found %d tokens, alpha's %d", againB, againA)
	}
	m.env.WaitIdle(t)
}
