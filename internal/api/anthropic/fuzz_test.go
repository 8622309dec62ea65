package anthropic

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/engine"
)

// fuzzEndpoint posts arbitrary bytes to path: the server must answer
// without a 5xx (client input is never a server error), never panic (the
// server turns a handler panic into a 500), answer in Anthropic's shapes,
// and release every KV block. The model's context is short (yet holds the
// tool-use preamble of the template) so that any request finishes quickly.
func fuzzEndpoint(f *testing.F, path string) {
	env := newEnv(f, apitest.Options{
		Engine: engine.Config{MaxContext: 1280},
		Config: api.Config{BodyLimit: 1 << 20},
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest("POST", path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		env.Server.ServeHTTP(rec, req)
		switch {
		case rec.Code >= 500:
			t.Fatalf("status %d for %q: %s", rec.Code, body, rec.Body.Bytes())
		case rec.Code != 200:
			checkErrorShape(t, rec.Body.Bytes())
		case strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream"):
			readStream(t, rec.Body.Bytes())
		case strings.HasSuffix(path, "/count_tokens"):
			var c struct {
				InputTokens *int `json:"input_tokens"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &c); err != nil || c.InputTokens == nil || *c.InputTokens < 1 {
				t.Fatalf("count_tokens answered %s", rec.Body.Bytes())
			}
		default:
			var m message
			if err := json.Unmarshal(rec.Body.Bytes(), &m); err != nil {
				t.Fatalf("message %s: %v", rec.Body.Bytes(), err)
			}
			checkEnvelope(t, &m, rec.Body.Bytes())
		}
		env.WaitIdle(t)
	})
}

func FuzzMessages(f *testing.F) { fuzzEndpoint(f, "/v1/messages") }

func FuzzCountTokens(f *testing.F) { fuzzEndpoint(f, "/v1/messages/count_tokens") }
