package anthropic

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
)

// BenchmarkMessagesStream streams 64 tokens per request through the whole
// server (HTTP, decoding, templating, tokenizing, detokenizing, content
// blocks, SSE) on the tiny model, with a cache_control breakpoint (so the
// breakpoint's position is found each time), and reports the server's own
// overhead per request and per token as the kvserve timings measure it.
func BenchmarkMessagesStream(b *testing.B) {
	env := newEnv(b, apitest.Options{})
	body, _ := json.Marshal(map[string]any{"model": apitest.ModelName, "max_tokens": 64, "ignore_eos": true, "stream": true,
		"system":   []map[string]any{{"type": "text", "text": "You are a benchmark.", "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": userMsg("Benchmark me.")})
	var overhead float64
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
			} `json:"kvserve"`
		}
		_ = json.Unmarshal([]byte(evs[len(evs)-2].data), &last)
		overhead += last.Kvserve.OverheadMS
		n++
	}
	b.ReportMetric(overhead/float64(n), "overhead-ms/req")
	b.ReportMetric(overhead/float64(n)/64*1000, "overhead-µs/token")
}
