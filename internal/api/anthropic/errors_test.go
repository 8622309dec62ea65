package anthropic

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
	msgURL, countURL := env.URL("/v1/messages"), env.URL("/v1/messages/count_tokens")
	const head = `{"model":"tiny-chat","max_tokens":2,`
	user := `"messages":[{"role":"user","content":"hi"}]`
	ok := head + user + `}`
	long := strings.Repeat("word ", 1000) // about 5000 tokens: more than the context
	cc := func(n int) string {
		var parts []string
		for range n {
			parts = append(parts, `{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}`)
		}
		return `"system":[` + strings.Join(parts, ",") + `],`
	}
	tests := []struct {
		name, url, body string
		status          int
		typ, msgPrefix  string
	}{
		{"bad json", msgURL, `{"model":`, 400, "invalid_request_error", ""},
		{"trailing garbage", msgURL, ok + `{}`, 400, "invalid_request_error", ""},
		{"not an object", msgURL, `[1,2]`, 400, "invalid_request_error", ""},
		{"empty body", msgURL, ``, 400, "invalid_request_error", ""},
		{"deep nesting", msgURL, strings.Repeat("[", 100) + strings.Repeat("]", 100), 400, "invalid_request_error", ""},
		{"no model", msgURL, `{"max_tokens":2,` + user + `}`, 400, "invalid_request_error", "model: "},
		{"no max_tokens", msgURL, `{"model":"tiny-chat",` + user + `}`, 400, "invalid_request_error", "max_tokens: "},
		{"zero max_tokens", msgURL, `{"model":"tiny-chat","max_tokens":0,` + user + `}`, 400, "invalid_request_error", "max_tokens: "},
		{"no messages", msgURL, head + `"system":"x"}`, 400, "invalid_request_error", "messages: "},
		{"empty messages", msgURL, head + `"messages":[]}`, 400, "invalid_request_error", "messages: "},
		{"messages wrong type", msgURL, head + `"messages":"hi"}`, 400, "invalid_request_error", ""},
		{"system role", msgURL, head + `"messages":[{"role":"system","content":"x"}]}`, 400, "invalid_request_error", "messages.0.role: "},
		{"content wrong type", msgURL, head + `"messages":[{"role":"user","content":5}]}`, 400, "invalid_request_error", "messages.0.content: "},
		{"image", msgURL, head + `"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}`, 400, "invalid_request_error", "messages.0.content.0.type: image content blocks are not supported"},
		{"image in tool result", msgURL, head + `"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image","source":{}}]}]}]}`, 400, "invalid_request_error", "messages.0.content.0.content.0.type: image"},
		{"document", msgURL, head + `"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}`, 400, "invalid_request_error", "messages.0.content.0.type: "},
		{"unknown block", msgURL, head + `"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, 400, "invalid_request_error", "messages.0.content.0.type: "},
		{"text without text", msgURL, head + `"messages":[{"role":"user","content":[{"type":"text"}]}]}`, 400, "invalid_request_error", "messages.0.content.0.text: "},
		{"text wrong type", msgURL, head + `"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, 400, "invalid_request_error", "messages.0.content: "},
		{"tool_use in user turn", msgURL, head + `"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, 400, "invalid_request_error", "messages.0.content.0.type: "},
		{"tool_result without id", msgURL, head + `"messages":[{"role":"user","content":[{"type":"tool_result","content":"x"}]}]}`, 400, "invalid_request_error", "messages.0.content.0.tool_use_id: "},
		{"tool_use input not an object", msgURL, head + `"messages":[{"role":"user","content":"a"},{"role":"assistant","content":[{"type":"tool_use","id":"a","name":"f","input":[1]}]},{"role":"user","content":"b"}]}`, 400, "invalid_request_error", "messages.1.content.0.input: "},
		{"prefill", msgURL, head + `"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"The answer is"}]}`, 400, "invalid_request_error", "messages.1.role: a final assistant message"},
		{"tool without name", msgURL, head + user + `,"tools":[{"input_schema":{"type":"object"}}]}`, 400, "invalid_request_error", "tools.0.name: "},
		{"bad tool name", msgURL, head + user + `,"tools":[{"name":"get weather","input_schema":{"type":"object"}}]}`, 400, "invalid_request_error", "tools.0.name: "},
		{"duplicate tool", msgURL, head + user + `,"tools":[{"name":"f"},{"name":"f"}]}`, 400, "invalid_request_error", "tools.1.name: "},
		{"schema not an object", msgURL, head + user + `,"tools":[{"name":"f","input_schema":"x"}]}`, 400, "invalid_request_error", "tools.0.input_schema: "},
		{"server tool", msgURL, head + user + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`, 400, "invalid_request_error", "tools.0.type: "},
		{"unknown tool_choice", msgURL, head + user + `,"tools":[{"name":"f"}],"tool_choice":{"type":"maybe"}}`, 400, "invalid_request_error", "tool_choice.type: "},
		{"tool_choice names a stranger", msgURL, head + user + `,"tools":[{"name":"f"}],"tool_choice":{"type":"tool","name":"g"}}`, 400, "invalid_request_error", "tool_choice.name: "},
		{"any without tools", msgURL, head + user + `,"tool_choice":{"type":"any"}}`, 400, "invalid_request_error", "tool_choice: "},
		{"thinking type", msgURL, head + user + `,"thinking":{"type":"deep"}}`, 400, "invalid_request_error", "thinking.type: "},
		{"thinking without budget", msgURL, head + user + `,"thinking":{"type":"enabled"}}`, 400, "invalid_request_error", "thinking.budget_tokens: "},
		{"cache_control type", msgURL, head + `"system":[{"type":"text","text":"x","cache_control":{"type":"forever"}}],` + user + `}`, 400, "invalid_request_error", "system.0.cache_control.type: "},
		{"cache_control ttl", msgURL, head + `"messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral","ttl":"2h"}}]}]}`, 400, "invalid_request_error", "messages.0.content.0.cache_control.ttl: "},
		{"five breakpoints", msgURL, head + cc(5) + user + `}`, 400, "invalid_request_error", "system.4.cache_control: "},
		{"four breakpoints", msgURL, head + cc(4) + user + `}`, 200, "", ""},
		{"temperature", msgURL, head + user + `,"temperature":1.5}`, 400, "invalid_request_error", "temperature: "},
		{"top_p", msgURL, head + user + `,"top_p":0}`, 400, "invalid_request_error", "top_p: "},
		{"top_k", msgURL, head + user + `,"top_k":-1}`, 400, "invalid_request_error", "top_k: "},
		{"empty stop sequence", msgURL, head + user + `,"stop_sequences":[""]}`, 400, "invalid_request_error", "stop_sequences.0: "},
		{"user_id wrong type", msgURL, head + user + `,"metadata":{"user_id":5}}`, 400, "invalid_request_error", ""},
		{"bad retention", msgURL, head + user + `,"kvserve":{"retention":"forever"}}`, 400, "invalid_request_error", "kvserve.retention: "},
		{"unknown fields ignored", msgURL, head + user + `,"frobnicate":{"x":1},"service_tier":"auto"}`, 200, "", ""},
		{"unknown model", msgURL, `{"model":"claude-opus-4","max_tokens":2,` + user + `}`, 404, "not_found_error", "model: "},
		{"unknown route", env.URL("/v1/messages/batches"), ok, 404, "not_found_error", ""},
		{"wrong method", env.URL("/v1/messages?x=1"), "", 404, "not_found_error", ""},
		{"prompt too long", msgURL, head + `"messages":[{"role":"user","content":"` + long + `"}]}`, 413, "request_too_large", ""},
		{"body too large", msgURL, head + `"messages":[{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}]}`, 413, "request_too_large", ""},
		{"count without model", countURL, `{` + user + `}`, 400, "invalid_request_error", "model: "},
		{"count image", countURL, `{"model":"tiny-chat","messages":[{"role":"user","content":[{"type":"image"}]}]}`, 400, "invalid_request_error", "messages.0.content.0.type: "},
		{"count unknown model", countURL, `{"model":"x",` + user + `}`, 404, "not_found_error", ""},
		{"count needs no max_tokens", countURL, `{"model":"tiny-chat",` + user + `}`, 200, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var status int
			var data []byte
			if tc.name == "wrong method" {
				resp, err := http.Get(tc.url)
				if err != nil {
					t.Fatal(err)
				}
				data, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				status = resp.StatusCode
			} else {
				status, data, _ = post(t, tc.url, tc.body)
			}
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, data)
			}
			if tc.status == 200 {
				return
			}
			e := checkErrorShape(t, data)
			if e.Type != tc.typ {
				t.Fatalf("type %q, want %q: %s", e.Type, tc.typ, data)
			}
			if !strings.HasPrefix(e.Message, tc.msgPrefix) {
				t.Fatalf("message %q, want it to start with %q", e.Message, tc.msgPrefix)
			}
		})
	}
	env.WaitIdle(t)
}

func TestBackendErrorStatuses(t *testing.T) {
	tests := []struct {
		err        error
		status     int
		typ        string
		retryAfter bool
	}{
		{engine.ErrQueueFull, 429, "rate_limit_error", true},
		{engine.ErrTooLong, 413, "request_too_large", false},
		{engine.ErrClosed, 503, "overloaded_error", false},
		{errors.New("disk on fire"), 500, "api_error", false},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			env := newEnv(t, apitest.Options{Wrap: func(api.Backend) api.Backend { return failingBackend{tc.err} }})
			for _, stream := range []bool{false, true} {
				status, data, hdr := post(t, env.URL("/v1/messages"), map[string]any{"model": apitest.ModelName, "max_tokens": 5,
					"messages": userMsg("hi"), "stream": stream})
				if status != tc.status {
					t.Fatalf("status %d, want %d: %s", status, tc.status, data)
				}
				if e := checkErrorShape(t, data); e.Type != tc.typ {
					t.Fatalf("type %q, want %q", e.Type, tc.typ)
				}
				if got := hdr.Get("Retry-After") != ""; got != tc.retryAfter {
					t.Fatalf("Retry-After %q", hdr.Get("Retry-After"))
				}
				if strings.Contains(string(data), "disk on fire") {
					t.Fatalf("internal error details leaked: %s", data)
				}
			}
		})
	}
}

func TestLoading(t *testing.T) {
	env := newEnv(t, apitest.Options{NoModel: true})
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		status, data, hdr := post(t, env.URL(path), `{"model":"tiny-chat","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
		if status != 503 || hdr.Get("Retry-After") == "" {
			t.Fatalf("%s: status %d (Retry-After %q) while loading: %s", path, status, hdr.Get("Retry-After"), data)
		}
		if e := checkErrorShape(t, data); e.Type != "overloaded_error" {
			t.Fatalf("type %q while loading", e.Type)
		}
	}
}

func TestAuth(t *testing.T) {
	env := newEnv(t, apitest.Options{Config: api.Config{APIKeys: []api.APIKey{
		{Key: "sk-ant-alice", Tenant: "alice"},
		{Key: "sk-ant-bob", Tenant: "bob", Models: []string{"other-model"}},
	}}})
	body := `{"model":"tiny-chat","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	tests := []struct {
		name   string
		header []string
		status int
		typ    string
	}{
		{"no key", nil, 401, "authentication_error"},
		{"wrong key", []string{"X-Api-Key", "sk-ant-mallory"}, 401, "authentication_error"},
		{"x-api-key", []string{"X-Api-Key", "sk-ant-alice"}, 200, ""},
		{"bearer", []string{"Authorization", "Bearer sk-ant-alice"}, 200, ""},
		{"model not allowed", []string{"X-Api-Key", "sk-ant-bob"}, 403, "permission_error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
				status, data, _ := post(t, env.URL(path), body, tc.header...)
				if status != tc.status {
					t.Fatalf("%s: status %d, want %d: %s", path, status, tc.status, data)
				}
				if status != 200 {
					if e := checkErrorShape(t, data); e.Type != tc.typ {
						t.Fatalf("type %q, want %q", e.Type, tc.typ)
					}
				}
			}
		})
	}
	if got := env.Recorder.Last(t).Scope; got != "alice" {
		t.Fatalf("engine scope %q, want the key's tenant", got)
	}
}

func TestVersionHeader(t *testing.T) {
	reg := prometheus.NewRegistry()
	d := New(Options{Registerer: reg})
	if again := New(Options{Registerer: reg}); again.versions != d.versions {
		t.Fatal("a second dialect on the same registry does not share the counter")
	}
	env := apitest.New(t, apitest.Options{Dialects: []api.Dialect{d}})
	body := `{"model":"tiny-chat","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	for _, v := range []string{"2023-06-01", "2023-06-01", "latest", ""} {
		req, _ := http.NewRequest("POST", env.URL("/v1/messages"), strings.NewReader(body))
		if v != "" {
			req.Header["Anthropic-Version"] = []string{v}
		}
		req.Header.Set("Anthropic-Beta", "prompt-caching-2024-07-31")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("version %q: status %d", v, resp.StatusCode)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kvserve_anthropic_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"2023-06-01": 2, "none": 1, "other": 1}
	if len(got) != len(want) {
		t.Fatalf("versions counted %v, want %v", got, want)
	}
	for label, n := range want {
		if got[label] != n {
			t.Fatalf("versions counted %v, want %v", got, want)
		}
	}
	env.WaitIdle(t)
}
