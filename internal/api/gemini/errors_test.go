package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/engine"
)

// failingBackend is a fake backend that refuses every request with err.
type failingBackend struct{ err error }

func (f failingBackend) Submit(context.Context, engine.Request) (api.Stream, error) {
	return nil, f.err
}

func TestErrorStatuses(t *testing.T) {
	env := newEnv(t, apitest.Options{Config: api.Config{BodyLimit: 64 << 10}})
	url := gen(env, "generateContent")
	hi := `"contents":[{"role":"user","parts":[{"text":"hi"}]}]`
	long := strings.Repeat("word ", 1000) // about 5000 tokens: more than the context
	tests := []struct {
		name, url, body string
		status          int
		gstatus, field  string
	}{
		{"bad json", url, `{"contents":`, 400, "INVALID_ARGUMENT", ""},
		{"trailing garbage", url, `{` + hi + `}{}`, 400, "INVALID_ARGUMENT", ""},
		{"not an object", url, `[1,2]`, 400, "INVALID_ARGUMENT", ""},
		{"empty body", url, ``, 400, "INVALID_ARGUMENT", ""},
		{"deep nesting", url, strings.Repeat("[", 100) + strings.Repeat("]", 100), 400, "INVALID_ARGUMENT", ""},
		{"no contents", url, `{}`, 400, "INVALID_ARGUMENT", "contents"},
		{"empty parts", url, `{"contents":[{"role":"user","parts":[]}]}`, 400, "INVALID_ARGUMENT", "contents[0].parts"},
		{"empty part", url, `{"contents":[{"role":"user","parts":[{}]}]}`, 400, "INVALID_ARGUMENT", "contents[0].parts[0]"},
		{"bad role", url, `{"contents":[{"role":"wizard","parts":[{"text":"hi"}]}]}`, 400, "INVALID_ARGUMENT", "contents[0].role"},
		{"wrong type", url, `{"contents":[{"role":"user","parts":[{"text":5}]}]}`, 400, "INVALID_ARGUMENT", ""},
		{"inline data", url, `{"contents":[{"role":"user","parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}]}`, 400, "INVALID_ARGUMENT", "contents[0].parts[0].inlineData"},
		{"file data", url, `{"contents":[{"role":"user","parts":[{"file_data":{"file_uri":"gs://x"}}]}]}`, 400, "INVALID_ARGUMENT", "contents[0].parts[0].fileData"},
		{"call in user turn", url, `{"contents":[{"role":"user","parts":[{"functionCall":{"name":"f"}}]}]}`, 400, "INVALID_ARGUMENT", "contents[0].parts[0].functionCall"},
		{"search tool", url, `{` + hi + `,"tools":[{"googleSearch":{}}]}`, 400, "INVALID_ARGUMENT", "tools[0].googleSearch"},
		{"bad function name", url, `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"1 bad"}]}]}`, 400, "INVALID_ARGUMENT", "tools[0].functionDeclarations[0].name"},
		{"unknown schema field", url, `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"OBJECT","const":1}}]}]}`, 400, "INVALID_ARGUMENT", "tools[0].functionDeclarations[0].parameters"},
		{"unknown schema type", url, `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f","parameters":{"type":"WIDGET"}}]}]}`, 400, "INVALID_ARGUMENT", "tools[0].functionDeclarations[0].parameters.type"},
		{"duplicate function", url, `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f"}]},{"functionDeclarations":[{"name":"f"}]}]}`, 400, "INVALID_ARGUMENT", "tools[1].functionDeclarations[0].name"},
		{"ANY with JSON mode", url, `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f"}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY"}},"generationConfig":{"responseMimeType":"application/json"}}`, 400, "INVALID_ARGUMENT", "toolConfig.functionCallingConfig.mode"},
		{"unenforceable schema", url, `{` + hi + `,"generationConfig":{"responseMimeType":"application/json","responseJsonSchema":{"not":{}}}}`, 400, "INVALID_ARGUMENT", "generationConfig.responseSchema"},
		{"ANY without functions", url, `{` + hi + `,"toolConfig":{"functionCallingConfig":{"mode":"ANY"}}}`, 400, "INVALID_ARGUMENT", "toolConfig.functionCallingConfig.mode"},
		{"unknown allowed name", url, `{` + hi + `,"tools":[{"functionDeclarations":[{"name":"f"}]}],"toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["g"]}}}`, 400, "INVALID_ARGUMENT", "toolConfig.functionCallingConfig.allowedFunctionNames[0]"},
		{"bad mode", url, `{` + hi + `,"toolConfig":{"functionCallingConfig":{"mode":"SOMETIMES"}}}`, 400, "INVALID_ARGUMENT", "toolConfig.functionCallingConfig.mode"},
		{"bad temperature", url, `{` + hi + `,"generationConfig":{"temperature":3}}`, 400, "INVALID_ARGUMENT", "generationConfig.temperature"},
		{"bad maxOutputTokens", url, `{` + hi + `,"generationConfig":{"maxOutputTokens":0}}`, 400, "INVALID_ARGUMENT", "generationConfig.maxOutputTokens"},
		{"bad candidateCount", url, `{` + hi + `,"generationConfig":{"candidateCount":0}}`, 400, "INVALID_ARGUMENT", "generationConfig.candidateCount"},
		{"logprobs without responseLogprobs", url, `{` + hi + `,"generationConfig":{"logprobs":2}}`, 400, "INVALID_ARGUMENT", "generationConfig.logprobs"},
		{"schema without JSON mime", url, `{` + hi + `,"generationConfig":{"responseSchema":{"type":"STRING"}}}`, 400, "INVALID_ARGUMENT", "generationConfig.responseMimeType"},
		{"unsupported mime", url, `{` + hi + `,"generationConfig":{"responseMimeType":"text/x.enum"}}`, 400, "INVALID_ARGUMENT", "generationConfig.responseMimeType"},
		{"image modality", url, `{` + hi + `,"generationConfig":{"responseModalities":["IMAGE"]}}`, 400, "INVALID_ARGUMENT", "generationConfig.responseModalities[0]"},
		{"bad retention", url, `{` + hi + `,"kvserve":{"retention":"forever"}}`, 400, "INVALID_ARGUMENT", "kvserve.retention"},
		{"cached content", url, `{` + hi + `,"cachedContent":"cachedContents/abc"}`, 404, "NOT_FOUND", "cachedContent"},
		{"unknown fields ignored", url, `{` + hi + `,"generationConfig":{"maxOutputTokens":1},"frobnicate":{"x":1}}`, 200, "", ""},
		{"unknown model", env.URL("/v1beta/models/gemini-2.5-flash:generateContent"), `{` + hi + `}`, 404, "NOT_FOUND", "model"},
		{"unknown method", env.URL("/v1beta/models/tiny-chat:embedContent"), `{` + hi + `}`, 404, "NOT_FOUND", ""},
		{"no method", env.URL("/v1beta/models/tiny-chat"), `{` + hi + `}`, 404, "NOT_FOUND", ""},
		{"unknown route", env.URL("/v1beta/files"), `{}`, 404, "NOT_FOUND", ""},
		// Google answers a prompt or a body too large with 400 INVALID_ARGUMENT.
		{"prompt too long", url, `{"contents":[{"parts":[{"text":"` + long + `"}]}]}`, 400, "INVALID_ARGUMENT", "contents"},
		{"body too large", url, `{"contents":[{"parts":[{"text":"` + strings.Repeat("x", 70<<10) + `"}]}]}`, 400, "INVALID_ARGUMENT", ""},
		{"countTokens both inputs", gen(env, "countTokens"), `{` + hi + `,"generateContentRequest":{` + hi + `}}`, 400, "INVALID_ARGUMENT", "contents"},
		{"countTokens other model", gen(env, "countTokens"), `{"generateContentRequest":{"model":"models/x",` + hi + `}}`, 400, "INVALID_ARGUMENT", "generateContentRequest.model"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, data, _ := post(t, tc.url, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, data)
			}
			if tc.status == 200 {
				return
			}
			e := checkErrorShape(t, status, data)
			if e.Error.Status != tc.gstatus {
				t.Fatalf("status %q, want %q", e.Error.Status, tc.gstatus)
			}
			if tc.field != "" {
				if len(e.Error.Details) == 0 || len(e.Error.Details[0].FieldViolations) == 0 || e.Error.Details[0].FieldViolations[0].Field != tc.field {
					t.Fatalf("field violation %+v, want %q: %s", e.Error.Details, tc.field, data)
				}
			}
		})
	}

	// streamGenerateContent without alt=sse answers errors inside an array.
	status, data, _ := post(t, gen(env, "streamGenerateContent"), `{"contents":[]}`)
	var arr []geminiError
	if err := json.Unmarshal(data, &arr); status != 400 || err != nil || len(arr) != 1 || arr[0].Error.Status != "INVALID_ARGUMENT" || arr[0].Error.Code != 400 {
		t.Fatalf("array stream error: %d %s", status, data)
	}
	status, data, _ = post(t, gen(env, "streamGenerateContent")+"?alt=sse", `{"contents":[]}`)
	checkErrorShape(t, status, data)
	env.WaitIdle(t)
}

func TestBackendErrorStatuses(t *testing.T) {
	tests := []struct {
		err        error
		status     int
		gstatus    string
		retryAfter bool
	}{
		{engine.ErrQueueFull, 429, "RESOURCE_EXHAUSTED", true},
		{engine.ErrTooLong, 400, "INVALID_ARGUMENT", false},
		{engine.ErrClosed, 503, "UNAVAILABLE", false},
		{errors.New("disk on fire"), 500, "INTERNAL", false},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			env := newEnv(t, apitest.Options{Wrap: func(api.Backend) api.Backend { return failingBackend{tc.err} }})
			for _, path := range []string{":generateContent", ":streamGenerateContent?alt=sse"} {
				status, data, hdr := post(t, env.URL("/v1beta/models/tiny-chat"+path), `{"contents":[{"parts":[{"text":"hi"}]}]}`)
				if status != tc.status {
					t.Fatalf("%s: status %d, want %d: %s", path, status, tc.status, data)
				}
				e := checkErrorShape(t, status, data)
				if e.Error.Status != tc.gstatus {
					t.Fatalf("status %q, want %q", e.Error.Status, tc.gstatus)
				}
				if got := hdr.Get("Retry-After") != ""; got != tc.retryAfter {
					t.Fatalf("Retry-After %q", hdr.Get("Retry-After"))
				}
				if tc.retryAfter && (len(e.Error.Details) == 0 || e.Error.Details[0].RetryDelay != hdr.Get("Retry-After")+"s") {
					t.Fatalf("RetryInfo %+v, Retry-After %q", e.Error.Details, hdr.Get("Retry-After"))
				}
				if strings.Contains(string(data), "disk on fire") {
					t.Fatalf("internal error details leaked: %s", data)
				}
			}
		})
	}
}

func TestLoadingAndAuth(t *testing.T) {
	env := newEnv(t, apitest.Options{NoModel: true, Config: api.Config{APIKeys: []api.APIKey{
		{Key: "k-alice", Tenant: "alice"},
		{Key: "k-bob", Tenant: "bob", Models: []string{"other-model"}},
	}}})
	body := `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":1}}`
	status, data, hdr := post(t, gen(env, "generateContent"), body, "X-Goog-Api-Key", "k-alice")
	if e := checkErrorShape(t, status, data); status != 503 || e.Error.Status != "UNAVAILABLE" || hdr.Get("Retry-After") == "" {
		t.Fatalf("while loading: %d %s", status, data)
	}
	env.Server.SetModel(env.Model)
	tests := []struct {
		name    string
		url     string
		header  []string
		status  int
		gstatus string
	}{
		{"no key", gen(env, "generateContent"), nil, 401, "UNAUTHENTICATED"},
		{"wrong key", gen(env, "generateContent"), []string{"X-Goog-Api-Key", "k-mallory"}, 401, "UNAUTHENTICATED"},
		{"x-goog-api-key", gen(env, "generateContent"), []string{"X-Goog-Api-Key", "k-alice"}, 200, ""},
		{"query key", gen(env, "generateContent") + "?key=k-alice", nil, 200, ""},
		{"model not allowed", gen(env, "generateContent"), []string{"X-Goog-Api-Key", "k-bob"}, 403, "PERMISSION_DENIED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, data, _ := post(t, tc.url, body, tc.header...)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, data)
			}
			if status != 200 {
				if e := checkErrorShape(t, status, data); e.Error.Status != tc.gstatus {
					t.Fatalf("status %q, want %q", e.Error.Status, tc.gstatus)
				}
			}
		})
	}
	if got := env.Recorder.Last(t).Scope; got != "alice" {
		t.Fatalf("engine scope %q, want the key's tenant", got)
	}
	req, _ := http.NewRequest("GET", env.URL("/v1beta/models"), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("model listing without a key: %d", resp.StatusCode)
	}
}

// TestStreamFailure checks how an error after the stream started is
// written: a bare JSON error object after the SSE events (what the SDKs
// look for), or the last element of the array.
func TestStreamFailure(t *testing.T) {
	e := &api.Error{Code: api.CodeInternal, Message: "generation failed"}
	for _, array := range []bool{false, true} {
		rec := httptest.NewRecorder()
		w := &streamWriter{w: rec, rc: http.NewResponseController(rec), array: array}
		w.end(append(w.begin(), `{"candidates":[]}`...))
		if err := w.flush(); err != nil {
			t.Fatal(err)
		}
		w.fail(e)
		body := rec.Body.String()
		if array {
			var arr []json.RawMessage
			if err := json.Unmarshal([]byte(body), &arr); err != nil || len(arr) != 2 {
				t.Fatalf("array %q: %v", body, err)
			}
			checkErrorShape(t, 500, arr[1])
			continue
		}
		first, rest, ok := strings.Cut(body, "\n\n")
		if !ok || first != `data: {"candidates":[]}` {
			t.Fatalf("SSE %q", body)
		}
		checkErrorShape(t, 500, []byte(rest))
		if !strings.HasPrefix(rest, `{"error":`) {
			t.Fatalf("error not bare JSON: %q", rest)
		}
	}
}
