package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
)

// BenchmarkMessagesStream streams 64 tokens per request through the whole
// server (HTTP, decoding, templating, tokenizing, detokenizing, content
// blocks, SSE) on the tiny model, with a cache_control breakpoint (so the
// breakpoint's position is found each time), and reports the server's own
// overhead per request (latency added outside the engine) and the handler's
// busy time per token, as the kvserve timings measure them.
func BenchmarkMessagesStream(b *testing.B) {
	env := newEnv(b, apitest.Options{})
	body, _ := json.Marshal(map[string]any{"model": apitest.ModelName, "max_tokens": 64, "ignore_eos": true, "stream": true,
		"system":   []map[string]any{{"type": "text", "text": "You are a benchmark.", "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": userMsg("Benchmark me.")})
	var overhead, handler float64
	n := 0
	for b.Loop() {
		resp, err := http.Post(env.URL("/v1/messages"), "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		evs := sseEvents(b, data)
		var last struct {
			Kvserve struct {
				OverheadMS float64 `json:"overhead_ms"`
				HandlerMS  float64 `json:"handler_ms"`
			} `json:"kvserve"`
		}
		_ = json.Unmarshal([]byte(evs[len(evs)-2].data), &last)
		overhead += last.Kvserve.OverheadMS
		handler += last.Kvserve.HandlerMS
		n++
	}
	b.ReportMetric(overhead/float64(n), "overhead-ms/req")
	b.ReportMetric(handler/float64(n)/64*1000, "handler-µs/token")
}

// BenchmarkCacheMarks measures finding the breakpoint positions of an
// agent-like request: a long system prompt, tools and 40 turns of history,
// with breakpoints on the tools (1h) and the last message (5m).
func BenchmarkCacheMarks(b *testing.B) {
	env := newEnv(b, apitest.Options{})
	req := &api.Request{Model: apitest.ModelName, Tools: []chat.Tool{{Name: "read_file", Description: "Reads a file.",
		Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`)}}}
	req.Messages = append(req.Messages, chat.Message{Role: "system", Content: strings.Repeat("Follow the repository's conventions. ", 80)})
	for i := range 20 {
		req.Messages = append(req.Messages, chat.Message{Role: "user", Content: fmt.Sprintf("Step %d: look at the file list and continue.", i)},
			chat.Message{Role: "assistant", Content: "Looking at the files now; the next step follows."})
	}
	req.Messages = append(req.Messages, chat.Message{Role: "user", Content: "Go on."})
	req.Breakpoints = []api.Breakpoint{{Message: -1, TTL: time.Hour}, {Message: len(req.Messages) - 1, TTL: 5 * time.Minute}}
	p, err := env.Model.BuildPrompt(req)
	if err != nil {
		b.Fatal(err)
	}
	var f markFinder
	var m cacheMarks
	for b.Loop() {
		m = f.find(env.Model, req, p)
	}
	if m.end1h == 0 || m.end <= m.end1h || m.end >= len(p.Tokens) {
		b.Fatalf("marks %+v of %d tokens", m, len(p.Tokens))
	}
	b.ReportMetric(float64(len(p.Tokens)), "prompt-tokens")
}
