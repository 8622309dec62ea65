package openai

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
)

// BenchmarkChatStream streams 64 tokens per request through the whole
// server (HTTP, decoding, templating, tokenizing, detokenizing, SSE) on the
// tiny model, and reports the server's own overhead per request (latency
// added outside the engine) and the handler's busy time per token, as the
// kvserve timings measure them.
func BenchmarkChatStream(b *testing.B) {
	env := newEnv(b, apitest.Options{})
	body, _ := json.Marshal(map[string]any{"model": apitest.ModelName, "messages": userMsg("Benchmark me."),
		"max_tokens": 64, "ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}})
	var overhead, handler float64
	n := 0
	for b.Loop() {
		resp, err := http.Post(env.URL("/v1/chat/completions"), "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_, events := sseEvents(b, data)
		var last struct {
			Kvserve struct {
				OverheadMS float64 `json:"overhead_ms"`
				HandlerMS  float64 `json:"handler_ms"`
			} `json:"kvserve"`
		}
		_ = json.Unmarshal([]byte(events[len(events)-2]), &last)
		overhead += last.Kvserve.OverheadMS
		handler += last.Kvserve.HandlerMS
		n++
	}
	b.ReportMetric(overhead/float64(n), "overhead-ms/req")
	b.ReportMetric(handler/float64(n)/64*1000, "handler-µs/token")
}
