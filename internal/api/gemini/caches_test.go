package gemini

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
)

// ownTenant authorizes every operation on the caller's own tenant's
// caches (the tests here run an open server; the permission matrix over
// roles and bindings is in cmd/kvserve, over the real tenant store).
type ownTenant struct{}

func (ownTenant) Authorize(_ context.Context, c ctxcache.Caller, _, owner, name string) error {
	if owner != c.Tenant {
		return fmt.Errorf("%w: %s", ctxcache.ErrNotFound, name)
	}
	return nil
}

func newCacheEnv(t *testing.T, minTokens int) *apitest.Env {
	t.Helper()
	svc, err := ctxcache.New(ctxcache.Options{Store: &ctxcache.MemStore{}, Authorizer: ownTenant{}, MinTokens: minTokens})
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, apitest.Options{Config: api.Config{Caches: svc}})
}

// send sends a request with a JSON body (nil for none).
func send(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		s, ok := body.(string)
		if !ok {
			b, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			s = string(b)
		}
		rd = strings.NewReader(s)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
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

type cacheResp struct {
	Name          string `json:"name"`
	DisplayName   string `json:"displayName"`
	Model         string `json:"model"`
	CreateTime    string `json:"createTime"`
	UpdateTime    string `json:"updateTime"`
	ExpireTime    string `json:"expireTime"`
	UsageMetadata struct {
		TotalTokenCount int `json:"totalTokenCount"`
	} `json:"usageMetadata"`
}

// document is a long system instruction: the cached prefix.
var document = strings.Repeat("The contract says the supplier delivers on time. ", 8)

func cacheCreateBody(extra string) string {
	return `{"model":"models/` + apitest.ModelName + `","displayName":"contract","systemInstruction":{"parts":[{"text":` +
		strconvQuote(document) + `}]},"contents":[{"role":"user","parts":[{"text":"Read the contract."}]}],"ttl":"300s"` + extra + `}`
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestCachedContentsLifecycle(t *testing.T) {
	env := newCacheEnv(t, 64)
	for _, prefix := range []string{"/v1beta", "/v1"} {
		t.Run(prefix, func(t *testing.T) {
			base := env.URL(prefix + "/cachedContents")
			status, data := send(t, "POST", base, cacheCreateBody(""))
			if status != 200 {
				t.Fatalf("create: %d %s", status, data)
			}
			var c cacheResp
			if err := json.Unmarshal(data, &c); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(c.Name, "cachedContents/") || c.Model != "models/"+apitest.ModelName || c.DisplayName != "contract" ||
				c.UsageMetadata.TotalTokenCount < 64 {
				t.Fatalf("created %s", data)
			}
			if strings.Contains(string(data), "supplier") {
				t.Fatalf("the response returns the cached contents: %s", data)
			}
			exp, err := time.Parse(time.RFC3339Nano, c.ExpireTime)
			if err != nil || time.Until(exp) < 290*time.Second || time.Until(exp) > 300*time.Second {
				t.Fatalf("expireTime %q", c.ExpireTime)
			}

			// Generating with the cache reads its prefix from the KV cache.
			var g gResp
			postOK(t, env.URL(prefix+"/models/"+apitest.ModelName+":generateContent"), `{"cachedContent":"`+c.Name+
				`","contents":[{"role":"user","parts":[{"text":"Who delivers?"}]}],"generationConfig":{"maxOutputTokens":2}}`, &g)
			bs := env.Engine.Config().BlockSize
			if got := g.UsageMetadata.CachedContentTokenCount; got < c.UsageMetadata.TotalTokenCount/bs*bs-bs || got == 0 {
				t.Fatalf("cachedContentTokenCount %d for a cache of %d tokens", got, c.UsageMetadata.TotalTokenCount)
			}
			if g.UsageMetadata.PromptTokenCount <= c.UsageMetadata.TotalTokenCount {
				t.Fatalf("promptTokenCount %d does not extend the cache's %d", g.UsageMetadata.PromptTokenCount, c.UsageMetadata.TotalTokenCount)
			}

			status, data = send(t, "GET", env.URL(prefix+"/"+c.Name), nil)
			if status != 200 || !strings.Contains(string(data), c.Name) {
				t.Fatalf("get: %d %s", status, data)
			}
			status, data = send(t, "GET", base+"?pageSize=10", nil)
			if status != 200 || !strings.Contains(string(data), c.Name) {
				t.Fatalf("list: %d %s", status, data)
			}
			status, data = send(t, "PATCH", env.URL(prefix+"/"+c.Name), `{"ttl":"7200s"}`)
			var u cacheResp
			if status != 200 || json.Unmarshal(data, &u) != nil || u.ExpireTime <= c.ExpireTime || u.UpdateTime == c.UpdateTime {
				t.Fatalf("update: %d %s", status, data)
			}
			status, data = send(t, "PATCH", env.URL(prefix+"/"+c.Name+"?updateMask=expireTime"),
				`{"expireTime":"`+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+`"}`)
			if status != 200 {
				t.Fatalf("update expireTime: %d %s", status, data)
			}
			status, data = send(t, "DELETE", env.URL(prefix+"/"+c.Name), nil)
			if status != 200 || strings.TrimSpace(string(data)) != "{}" {
				t.Fatalf("delete: %d %s", status, data)
			}
			for _, m := range []string{"GET", "DELETE"} {
				if status, data = send(t, m, env.URL(prefix+"/"+c.Name), nil); status != 404 || !strings.Contains(string(data), `"NOT_FOUND"`) {
					t.Fatalf("%s after delete: %d %s", m, status, data)
				}
			}
			status, data = send(t, "POST", env.URL(prefix+"/models/"+apitest.ModelName+":generateContent"), `{"cachedContent":"`+c.Name+`","contents":{"parts":[{"text":"hi"}]}}`)
			if status != 404 {
				t.Fatalf("generate with a deleted cache: %d %s", status, data)
			}
		})
	}
	env.WaitIdle(t)
}

// TestCacheWithOwnSystemAndTools: a request may add system text and tools
// to a context cache's (Vertex refuses them): its system instruction comes
// after the cached contents, where this template renders it, so the whole
// cached prefix is still a hit; its tools follow the cache's.
func TestCacheWithOwnSystemAndTools(t *testing.T) {
	env := newCacheEnv(t, 64)
	var c cacheResp
	withTool := cacheCreateBody(`,"tools":[{"functionDeclarations":[{"name":"lookup","description":"Look up a clause"}]}]`)
	if status, data := send(t, "POST", env.URL("/v1beta/cachedContents"), withTool); status != 200 || json.Unmarshal(data, &c) != nil {
		t.Fatalf("create: %d %s", status, data)
	}
	type generateResp struct {
		UsageMetadata struct {
			PromptTokenCount        int `json:"promptTokenCount"`
			CachedContentTokenCount int `json:"cachedContentTokenCount"`
		} `json:"usageMetadata"`
	}
	gen := env.URL("/v1beta/models/" + apitest.ModelName + ":generateContent")
	plain := `{"cachedContent":"` + c.Name + `","contents":{"parts":[{"text":"Summarize it."}]},"generationConfig":{"maxOutputTokens":2}}`
	var want generateResp
	if status, data := send(t, "POST", gen, plain); status != 200 || json.Unmarshal(data, &want) != nil {
		t.Fatalf("plain use: %d %s", status, data)
	}
	for _, extra := range []string{
		`"systemInstruction":{"parts":[{"text":"Answer in one word."}]},`,
		`"tools":[{"functionDeclarations":[{"name":"search","description":"Search the web"}]}],`,
	} {
		var got generateResp
		body := strings.Replace(plain, `"contents"`, extra+`"contents"`, 1)
		if status, data := send(t, "POST", gen, body); status != 200 || json.Unmarshal(data, &got) != nil {
			t.Fatalf("%s: %d %s", extra, status, data)
		}
		if got.UsageMetadata.CachedContentTokenCount == 0 || got.UsageMetadata.PromptTokenCount <= want.UsageMetadata.PromptTokenCount {
			t.Errorf("%s: usage %+v (plain use: %+v)", extra, got.UsageMetadata, want.UsageMetadata)
		}
	}
	// The system instruction after the cached contents keeps the whole
	// cached prefix a hit.
	var sys generateResp
	body := strings.Replace(plain, `"contents"`, `"systemInstruction":{"parts":[{"text":"Be brief."}]},"contents"`, 1)
	if status, data := send(t, "POST", gen, body); status != 200 || json.Unmarshal(data, &sys) != nil ||
		sys.UsageMetadata.CachedContentTokenCount < want.UsageMetadata.CachedContentTokenCount {
		t.Errorf("with a system instruction: %d cached tokens, the plain use %d", sys.UsageMetadata.CachedContentTokenCount, want.UsageMetadata.CachedContentTokenCount)
	}
	// A tool the cache has already is refused.
	dup := strings.Replace(plain, `"contents"`, `"tools":[{"functionDeclarations":[{"name":"lookup"}]}],"contents"`, 1)
	if status, data := send(t, "POST", gen, dup); status != 400 || !strings.Contains(string(data), "lookup") {
		t.Errorf("a tool the cache has: %d %s", status, data)
	}
	env.WaitIdle(t)
}

func TestCachedContentsBadInput(t *testing.T) {
	// The template's default system prompt alone is about 150 tokens.
	env := newCacheEnv(t, 200)
	base := env.URL("/v1beta/cachedContents")
	good := cacheCreateBody("")
	var c cacheResp
	if status, data := send(t, "POST", base, good); status != 200 || json.Unmarshal(data, &c) != nil {
		t.Fatalf("create: %d %s", status, data)
	}
	gen := env.URL("/v1beta/models/" + apitest.ModelName + ":generateContent")
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name, method, url, body string
		status                  int
		field                   string
	}{
		{"ttl without s", "POST", base, strings.Replace(good, `"300s"`, `"10"`, 1), 400, "ttl"},
		{"negative ttl", "POST", base, strings.Replace(good, `"300s"`, `"-10s"`, 1), 400, "ttl"},
		{"huge ttl", "POST", base, strings.Replace(good, `"300s"`, `"99999999999s"`, 1), 400, "ttl"},
		{"bad expireTime", "POST", base, strings.Replace(good, `"ttl":"300s"`, `"expireTime":"tomorrow"`, 1), 400, "expireTime"},
		{"past expireTime", "POST", base, strings.Replace(good, `"ttl":"300s"`, `"expireTime":"2020-01-01T00:00:00Z"`, 1), 400, "expireTime"},
		{"both", "POST", base, cacheCreateBody(`,"expireTime":"` + future + `"`), 400, "ttl"},
		{"unknown field", "POST", base, cacheCreateBody(`,"temperature":1`), 400, "temperature"},
		{"other model", "POST", base, strings.Replace(good, "models/"+apitest.ModelName, "models/gemini-2.5-pro", 1), 404, "model"},
		{"no model", "POST", base, strings.Replace(good, `"model":"models/`+apitest.ModelName+`",`, "", 1), 400, "model"},
		{"below minimum", "POST", base, `{"model":"models/` + apitest.ModelName + `","contents":{"parts":[{"text":"hi"}]}}`, 400, "contents"},
		{"media part", "POST", base, `{"model":"models/` + apitest.ModelName + `","contents":{"parts":[{"inlineData":{"data":"AA=="}}]}}`, 400, "contents[0].parts[0].inlineData"},
		{"long displayName", "POST", base, strings.Replace(good, `"contract"`, `"`+strings.Repeat("x", 129)+`"`, 1), 400, "displayName"},
		{"unknown id", "GET", base + "/0123456789abcdef01234567", "", 404, ""},
		{"malformed id", "GET", base + "/nope", "", 404, ""},
		{"update nothing", "PATCH", env.URL("/v1beta/" + c.Name), `{}`, 400, "ttl"},
		{"update contents", "PATCH", env.URL("/v1beta/" + c.Name), `{"contents":[]}`, 400, "contents"},
		{"update mask", "PATCH", env.URL("/v1beta/" + c.Name + "?updateMask=displayName"), `{"ttl":"60s"}`, 400, "updateMask"},
		{"update bad ttl", "PATCH", env.URL("/v1beta/" + c.Name), `{"ttl":"60"}`, 400, "ttl"},
		{"page size", "GET", base + "?pageSize=x", "", 400, "pageSize"},
		{"page token", "GET", base + "?pageToken=garbage", "", 400, "pageToken"},
		{"generate unknown cache", "POST", gen, `{"cachedContent":"cachedContents/0123456789abcdef01234567","contents":{"parts":[{"text":"hi"}]}}`, 404, "cachedContent"},
	} {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		status, data := send(t, tc.method, tc.url, body)
		if status != tc.status {
			t.Errorf("%s: status %d, want %d: %s", tc.name, status, tc.status, data)
			continue
		}
		var e errorBody
		if err := json.Unmarshal(data, &e); err != nil || e.Error.Code != tc.status || e.Error.Message == "" {
			t.Errorf("%s: not a Gemini error: %s", tc.name, data)
			continue
		}
		if tc.field != "" && (len(e.Error.Details) == 0 || len(e.Error.Details[0].FieldViolations) == 0 ||
			e.Error.Details[0].FieldViolations[0].Field != tc.field) {
			t.Errorf("%s: want field %s: %s", tc.name, tc.field, data)
		}
	}
	// Nothing was half-created: the one good cache is the only one.
	status, data := send(t, "GET", base, nil)
	var list struct {
		CachedContents []cacheResp `json:"cachedContents"`
	}
	if status != 200 || json.Unmarshal(data, &list) != nil || len(list.CachedContents) != 1 {
		t.Fatalf("list after bad input: %d %s", status, data)
	}
	env.WaitIdle(t)
}

func TestCachedContentsPinQuota(t *testing.T) {
	// A tiny per-tenant pin quota: the cache cannot be pinned.
	svc, err := ctxcache.New(ctxcache.Options{Store: &ctxcache.MemStore{}, Authorizer: ownTenant{}, MinTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	o := apitest.Options{Config: api.Config{Caches: svc}}
	o.Engine.MaxPinnedFraction, o.Engine.MaxPinnedPerTenant = 0.001, 0.001
	env := newEnv(t, o)
	status, data := send(t, "POST", env.URL("/v1beta/cachedContents"), cacheCreateBody(""))
	if status != 429 || !strings.Contains(string(data), "RESOURCE_EXHAUSTED") {
		t.Fatalf("create over the pin quota: %d %s", status, data)
	}
	if list, _, err := svc.List(context.Background(), ctxcache.Caller{Open: true}, 0, ""); err != nil || len(list) != 0 {
		t.Fatalf("a refused create left %d caches (%v)", len(list), err)
	}
}

// fuzzCacheEnv is a short-context server with context caches, for fuzzing
// their endpoints.
func fuzzCacheEnv(f *testing.F) *apitest.Env {
	svc, err := ctxcache.New(ctxcache.Options{Store: &ctxcache.MemStore{}, Authorizer: ownTenant{}, MinTokens: 16})
	if err != nil {
		f.Fatal(err)
	}
	return newEnv(f, apitest.Options{Engine: engine.Config{MaxContext: 384},
		Config: api.Config{BodyLimit: 1 << 20, Caches: svc}})
}

// FuzzCreateCachedContent: any body sent to caches.create gets a Gemini
// answer below 500, and every KV block is released.
func FuzzCreateCachedContent(f *testing.F) {
	for _, s := range []string{
		`{"model":"models/tiny-chat","systemInstruction":"` + strings.Repeat("abc ", 30) + `","ttl":"60s"}`,
		`{"model":"tiny-chat","contents":[{"parts":[{"text":"x"}]}],"expireTime":"2030-01-01T00:00:00Z"}`,
		`{"model":"models/tiny-chat","contents":"x","ttl":"10","kvserve":{"reuse_by_display_name":true}}`,
		`{"model":"models/tiny-chat","tools":[{"functionDeclarations":[{"name":"f"}]}],"systemInstruction":"` + strings.Repeat("abc ", 30) + `"}`,
		`{"model":1}`,
	} {
		f.Add([]byte(s))
	}
	fuzzEndpointOn(f, fuzzCacheEnv(f), "POST", "/v1beta/cachedContents")
}

// FuzzUpdateCachedContent: any body sent to caches.update of a live cache.
func FuzzUpdateCachedContent(f *testing.F) {
	env := fuzzCacheEnv(f)
	status, data, _ := apitest.Post(f, env.URL("/v1beta/cachedContents"), `{"model":"models/tiny-chat","systemInstruction":"`+strings.Repeat("abc ", 30)+`","ttl":"3600s"}`)
	var c cacheResp
	if status != 200 || json.Unmarshal(data, &c) != nil {
		f.Fatalf("create: %d %s", status, data)
	}
	for _, s := range []string{`{"ttl":"120s"}`, `{"expireTime":"2030-01-01T00:00:00Z"}`, `{"ttl":"1"}`, `{}`, `{"ttl":"5s","expireTime":"x"}`} {
		f.Add([]byte(s))
	}
	fuzzEndpointOn(f, env, "PATCH", "/v1beta/"+c.Name)
}

func TestCachedContentsReuseByDisplayName(t *testing.T) {
	env := newCacheEnv(t, 64)
	base := env.URL("/v1beta/cachedContents")
	body := cacheCreateBody(`,"kvserve":{"reuse_by_display_name":true}`)
	var a, b cacheResp
	if status, data := send(t, "POST", base, body); status != 200 || json.Unmarshal(data, &a) != nil {
		t.Fatalf("create: %d %s", status, data)
	}
	if status, data := send(t, "POST", base, body); status != 200 || json.Unmarshal(data, &b) != nil || b.Name != a.Name || b.ExpireTime != a.ExpireTime {
		t.Fatalf("second create: %d %s (first %s)", status, data, a.Name)
	}
	other := strings.Replace(body, "Read the contract.", "Read it again.", 1)
	if status, data := send(t, "POST", base, other); status != 409 || !strings.Contains(string(data), "ALREADY_EXISTS") {
		t.Fatalf("same name, other contents: %d %s", status, data)
	}
	if status, data := send(t, "POST", base, cacheCreateBody(`,"kvserve":{"reuse":true}`)); status != 400 {
		t.Fatalf("unknown kvserve option: %d %s", status, data)
	}
	env.WaitIdle(t)
}

// TestCachedContentsPinsFollowUpdates: the KV blocks stay pinned to the
// cache's expiry, an extension re-pins them past the first one, and a
// cache left alone releases its pins when it expires.
func TestCachedContentsPinsFollowUpdates(t *testing.T) {
	env := newCacheEnv(t, 64)
	base := env.URL("/v1beta/cachedContents")
	kv := env.Engine.KV()
	create := func(body string) cacheResp {
		t.Helper()
		var c cacheResp
		if status, data := send(t, "POST", base, body); status != 200 || json.Unmarshal(data, &c) != nil {
			t.Fatalf("create: %d %s", status, data)
		}
		return c
	}
	extended := create(strings.Replace(cacheCreateBody(""), `"300s"`, `"2s"`, 1))
	pinned := kv.Pinned()
	if pinned < extended.UsageMetadata.TotalTokenCount/env.Engine.Config().BlockSize {
		t.Fatalf("%d blocks pinned for a cache of %d tokens", pinned, extended.UsageMetadata.TotalTokenCount)
	}
	control := create(strings.Replace(strings.Replace(cacheCreateBody(""), `"300s"`, `"2s"`, 1), "The contract", "Another contract", 1))
	if kv.Pinned() <= pinned {
		t.Fatalf("the second cache pinned nothing: %d then %d", pinned, kv.Pinned())
	}
	if status, data := send(t, "PATCH", env.URL("/v1beta/"+extended.Name), `{"ttl":"60s"}`); status != 200 {
		t.Fatalf("update: %d %s", status, data)
	}
	exp, err := time.Parse(time.RFC3339Nano, control.ExpireTime)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(exp) + 300*time.Millisecond)
	if got := kv.Pinned(); got != pinned {
		t.Fatalf("after the first expiry %d blocks are pinned; want the extended cache's %d", got, pinned)
	}
	if status, _ := send(t, "GET", env.URL("/v1beta/"+control.Name), nil); status != 404 {
		t.Fatalf("the expired cache: %d", status)
	}
	env.WaitIdle(t)
}

// TestCachedContentsShortenedPins: shortening a cache's expiry ends its
// pins with it (pins only ever rise, so they are ended and set again), and
// a cache sharing its prefix keeps its own.
func TestCachedContentsShortenedPins(t *testing.T) {
	env := newCacheEnv(t, 64)
	base := env.URL("/v1beta/cachedContents")
	kv := env.Engine.KV()
	create := func(body string) cacheResp {
		t.Helper()
		var c cacheResp
		if status, data := send(t, "POST", base, body); status != 200 || json.Unmarshal(data, &c) != nil {
			t.Fatalf("create: %d %s", status, data)
		}
		return c
	}
	shorten := func(c cacheResp) time.Time {
		t.Helper()
		status, data := send(t, "PATCH", env.URL("/v1beta/"+c.Name), `{"ttl":"1s"}`)
		var u cacheResp
		if status != 200 || json.Unmarshal(data, &u) != nil {
			t.Fatalf("update: %d %s", status, data)
		}
		exp, err := time.Parse(time.RFC3339Nano, u.ExpireTime)
		if err != nil {
			t.Fatal(err)
		}
		return exp
	}
	parent := create(cacheCreateBody(""))
	alone := kv.Pinned()
	// The same prefix and one more turn: it shares every block of parent's.
	child := create(strings.Replace(cacheCreateBody(""), `"parts":[{"text":"Read the contract."}]}]`,
		`"parts":[{"text":"Read the contract."}]},{"role":"model","parts":[{"text":"Done. It has ten clauses."}]},`+
			`{"role":"user","parts":[{"text":"Summarise clause three."}]}]`, 1))
	both := kv.Pinned()
	if both <= alone {
		t.Fatalf("the child pinned nothing of its own: %d then %d", alone, both)
	}
	// The parent shortened: the blocks it shares with the child stay pinned.
	time.Sleep(time.Until(shorten(parent)) + 300*time.Millisecond)
	if got := kv.Pinned(); got != both {
		t.Fatalf("after the parent's shortened expiry %d blocks are pinned; the child's %d should stay", got, both)
	}
	// The child shortened too: nothing is left pinned.
	time.Sleep(time.Until(shorten(child)) + 300*time.Millisecond)
	if got := kv.Pinned(); got != 0 {
		t.Fatalf("%d blocks pinned after both caches' shortened expiries", got)
	}
	env.WaitIdle(t)
}
