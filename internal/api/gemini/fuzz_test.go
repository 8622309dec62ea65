package gemini

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/engine"
)

// fuzzEnv is a server whose model context is short, so that any request a
// fuzzer builds finishes quickly.
func fuzzEnv(t testing.TB) *apitest.Env {
	return newEnv(t, apitest.Options{
		Engine: engine.Config{MaxContext: 384},
		Config: api.Config{BodyLimit: 1 << 20},
	})
}

// fuzzEndpoint posts arbitrary bytes to path: the server must answer
// without a 5xx (client input is never a server error), never panic (the
// server turns a handler panic into a 500), answer errors in Gemini's
// shape, and release every KV block.
func fuzzEndpoint(f *testing.F, path string) {
	fuzzEndpointOn(f, fuzzEnv(f), "POST", path)
}

// fuzzEndpointOn is fuzzEndpoint on env, with any method.
func fuzzEndpointOn(f *testing.F, env *apitest.Env, method, path string) {
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		env.Server.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		if rec.Code != 200 {
			data := rec.Body.Bytes()
			if isArrayStream(req) {
				var arr []json.RawMessage
				if err := json.Unmarshal(data, &arr); err != nil || len(arr) != 1 {
					t.Fatalf("array stream error %s: %v", data, err)
				}
				data = arr[0]
			}
			checkErrorShape(t, rec.Code, data)
		}
		env.WaitIdle(t)
	})
}

func FuzzGenerateContent(f *testing.F) {
	fuzzEndpoint(f, "/v1beta/models/tiny-chat:generateContent")
}

func FuzzStreamGenerateContent(f *testing.F) {
	fuzzEndpoint(f, "/v1beta/models/tiny-chat:streamGenerateContent?alt=sse")
}

func FuzzStreamGenerateContentArray(f *testing.F) {
	fuzzEndpoint(f, "/v1beta/models/tiny-chat:streamGenerateContent")
}

func FuzzCountTokens(f *testing.F) {
	fuzzEndpoint(f, "/v1beta/models/tiny-chat:countTokens")
}

// FuzzNormalizeKeys checks the key normalizer on any valid JSON: the
// output is valid JSON, and normalizing it again changes nothing.
func FuzzNormalizeKeys(f *testing.F) {
	for _, s := range []string{
		`{"system_instruction":{"parts":{"text":"x"}}}`,
		`{"tools":[{"function_declarations":[{"name":"f","parameters":{"type":"OBJECT","properties":{"a_b":{"type":"STRING"}}}}]}]}`,
		`{"contents":[{"parts":[{"function_call":{"name":"f","args":{"k_k":[1,2,{"x_y":null}]}}}]}]}`,
		`[1,"a_b",{"c_d":{"e_f":1e5}}]`,
		`"plain"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) || checkDepth(body) != nil {
			return
		}
		out, err := normalizeKeys(body)
		if err != nil {
			t.Fatalf("normalizeKeys(%q): %v", body, err)
		}
		if !json.Valid(out) {
			t.Fatalf("normalizeKeys(%q) = %q: not JSON", body, out)
		}
		again, err := normalizeKeys(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q then %q (%v)", out, again, err)
		}
	})
}

// FuzzConvertSchema checks the Gemini-schema converter on any bytes: no
// panic, a 400 on failure, and valid JSON on success.
func FuzzConvertSchema(f *testing.F) {
	for _, s := range []string{
		`{"type":"OBJECT","properties":{"a":{"type":"STRING","enum":["x"]},"b":{"type":"ARRAY","items":{"type":"INTEGER"},"maxItems":"2"}},"required":["a"],"propertyOrdering":["b","a"]}`,
		`{"anyOf":[{"type":"STRING"},{"type":"NUMBER","minimum":1.5}],"nullable":true}`,
		`{"type":"OBJECT","additionalProperties":{"type":"BOOLEAN"}}`,
		`{"type":"widget"}`,
		`{"type":"STRING","pattern":"[a-z]+","maxLength":"3","default":"ab"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if checkDepth(raw) != nil {
			return
		}
		out, err := convertSchema(raw, "p")
		if err != nil {
			if e := api.AsError(err); e.Code != api.CodeInvalidRequest {
				t.Fatalf("convertSchema(%q): %v is not a 400", raw, err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("convertSchema(%q) = %q: not JSON", raw, out)
		}
	})
}
