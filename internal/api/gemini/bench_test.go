package gemini

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
)

// BenchmarkStreamGenerateContent streams 64 tokens per request (greedy, on
// a prompt whose greedy output runs far longer) through the whole server
// (HTTP, decoding, templating, tokenizing, detokenizing, SSE chunks) on the
// tiny model, and reports the server's own overhead per request (latency
// added outside the engine) and the handler's busy time per token, as the
// kvserve timings measure them.
func BenchmarkStreamGenerateContent(b *testing.B) {
	env := newEnv(b, apitest.Options{})
	body, _ := json.Marshal(map[string]any{"contents": userContents("Never stop talking."),
		"generationConfig": map[string]any{"maxOutputTokens": 64, "temperature": 0}})
	var overhead, handler float64
	n := 0
	for b.Loop() {
		resp, err := http.Post(gen(env, "streamGenerateContent")+"?alt=sse", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		chunks := sseChunks(b, data)
		last := chunks[len(chunks)-1]
		if last.UsageMetadata == nil || last.UsageMetadata.CandidatesTokenCount != 64 || last.Kvserve == nil {
			b.Fatalf("last chunk %+v", last)
		}
		overhead += last.Kvserve.OverheadMS
		handler += last.Kvserve.HandlerMS
		n++
	}
	b.ReportMetric(overhead/float64(n), "overhead-ms/req")
	b.ReportMetric(handler/float64(n)/64*1000, "handler-µs/token")
}
