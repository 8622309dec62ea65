package openai

import (
	"context"
	"errors"
	"net/http"
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
	chatURL := env.URL("/v1/chat/completions")
	ok := `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	long := strings.Repeat("word ", 1000) // about 5000 tokens: more than the context
	tests := []struct {
		name, url, body string
		status          int
		typ, param      string
	}{
		{"bad json", chatURL, `{"model":`, 400, "invalid_request_error", ""},
		{"trailing garbage", chatURL, ok + `{}`, 400, "invalid_request_error", ""},
		{"not an object", chatURL, `[1,2]`, 400, "invalid_request_error", ""},
		{"empty body", chatURL, ``, 400, "invalid_request_error", ""},
		{"deep nesting", chatURL, strings.Repeat("[", 100) + strings.Repeat("]", 100), 400, "invalid_request_error", ""},
		{"wrong type", chatURL, `{"model":"tiny-chat","messages":"hi"}`, 400, "invalid_request_error", "messages"},
		{"no messages", chatURL, `{"model":"tiny-chat"}`, 400, "invalid_request_error", "messages"},
		{"empty messages", chatURL, `{"model":"tiny-chat","messages":[]}`, 400, "invalid_request_error", "messages"},
		{"no model", chatURL, `{"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_request_error", "model"},
		{"bad role", chatURL, `{"model":"tiny-chat","messages":[{"role":"wizard","content":"hi"}]}`, 400, "invalid_request_error", "messages[0].role"},
		{"bad temperature", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"temperature":3}`, 400, "invalid_request_error", "temperature"},
		{"bad n", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"n":0}`, 400, "invalid_request_error", "n"},
		{"bad max_tokens", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "invalid_request_error", "max_tokens"},
		{"bad logit_bias", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"logit_bias":{"99999":5}}`, 400, "invalid_request_error", ""},
		{"image part", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, 400, "invalid_request_error", "content"},
		{"unknown tool choice", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"g"}}}`, 400, "invalid_request_error", "tool_choice"},
		{"bad retention", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"kvserve":{"retention":"forever"}}`, 400, "invalid_request_error", "kvserve.retention"},
		{"unknown fields ignored", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"frobnicate":{"x":1}}`, 200, "", ""},
		{"unknown model", chatURL, `{"model":"gpt-5","messages":[{"role":"user","content":"hi"}]}`, 404, "invalid_request_error", "model"},
		{"unknown route", env.URL("/v1/nothing"), ok, 404, "invalid_request_error", ""},
		{"prompt too long", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"` + long + `"}]}`, 413, "invalid_request_error", ""},
		{"body too large", chatURL, `{"model":"tiny-chat","messages":[{"role":"user","content":"` + strings.Repeat("x", 70<<10) + `"}]}`, 413, "invalid_request_error", ""},
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
			e := checkErrorShape(t, data)
			if e.Type != tc.typ {
				t.Fatalf("type %q, want %q", e.Type, tc.typ)
			}
			if tc.param != "" && (e.Param == nil || *e.Param != tc.param) {
				t.Fatalf("param %v, want %q: %s", e.Param, tc.param, data)
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
		{engine.ErrTooLong, 413, "invalid_request_error", false},
		{engine.ErrClosed, 503, "server_error", false},
		{errors.New("disk on fire"), 500, "server_error", false},
	}
	for _, tc := range tests {
		t.Run(tc.err.Error(), func(t *testing.T) {
			env := newEnv(t, apitest.Options{Wrap: func(api.Backend) api.Backend { return failingBackend{tc.err} }})
			status, data, hdr := post(t, env.URL("/v1/chat/completions"), `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}]}`)
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
		})
	}
}

func TestLoading(t *testing.T) {
	env := newEnv(t, apitest.Options{NoModel: true})
	resp, err := http.Get(env.URL("/ready"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 {
		t.Fatalf("/ready %d while loading", resp.StatusCode)
	}
	resp, err = http.Get(env.URL("/health"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health %d while loading", resp.StatusCode)
	}
	status, data, hdr := post(t, env.URL("/v1/chat/completions"), `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}]}`)
	if status != 503 || hdr.Get("Retry-After") == "" {
		t.Fatalf("status %d (Retry-After %q) while loading: %s", status, hdr.Get("Retry-After"), data)
	}
	checkErrorShape(t, data)

	env.Server.SetModel(env.Model)
	resp, err = http.Get(env.URL("/ready"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/ready %d after loading", resp.StatusCode)
	}
}

func TestAuth(t *testing.T) {
	env := newEnv(t, apitest.Options{Config: api.Config{APIKeys: []api.APIKey{
		{Key: "sk-alice", Tenant: "alice"},
		{Key: "sk-bob", Tenant: "bob", Models: []string{"other-model"}},
	}}})
	body := `{"model":"tiny-chat","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`
	url := env.URL("/v1/chat/completions")
	tests := []struct {
		name   string
		url    string
		header []string
		status int
	}{
		{"no key", url, nil, 401},
		{"wrong key", url, []string{"Authorization", "Bearer sk-mallory"}, 401},
		{"bearer", url, []string{"Authorization", "Bearer sk-alice"}, 200},
		{"x-api-key", url, []string{"X-Api-Key", "sk-alice"}, 200},
		{"x-goog-api-key", url, []string{"X-Goog-Api-Key", "sk-alice"}, 200},
		{"query key", url + "?key=sk-alice", nil, 200},
		{"model not allowed", url, []string{"Authorization", "Bearer sk-bob"}, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, data, _ := post(t, tc.url, body, tc.header...)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, data)
			}
			if status != 200 {
				checkErrorShape(t, data)
			}
		})
	}
	if got := env.Recorder.Last(t).Scope; got != "alice" {
		t.Fatalf("engine scope %q, want the key's tenant", got)
	}
	// Health and readiness stay open.
	resp, err := http.Get(env.URL("/health"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/health needs no key, got %d", resp.StatusCode)
	}
}
