package openai

import (
	"bytes"
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
// server turns a handler panic into a 500), and release every KV block.
func fuzzEndpoint(f *testing.F, path string) {
	env := fuzzEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		env.Server.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		}
		if rec.Code != 200 {
			checkErrorShape(t, rec.Body.Bytes())
		}
		env.WaitIdle(t)
	})
}

func FuzzChatCompletions(f *testing.F) { fuzzEndpoint(f, "/v1/chat/completions") }

func FuzzCompletions(f *testing.F) { fuzzEndpoint(f, "/v1/completions") }

func FuzzResponses(f *testing.F) { fuzzEndpoint(f, "/v1/responses") }
