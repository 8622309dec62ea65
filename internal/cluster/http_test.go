package cluster

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/api/openai"
)

// TestHTTPClientSeesWorkerDeath: through the real API, a streaming chat
// completion whose worker dies after its first tokens ends with an error
// event, promptly, rather than hanging the client.
func TestHTTPClientSeesWorkerDeath(t *testing.T) {
	s := startNATS(t)
	var b *Backend
	var reg *Registry
	env := apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New()},
		Wrap: func(api.Backend) api.Backend { reg, b = gateway(t, s, nil); return b }})
	w := startWorkerVocab(t, s, "w1", 5*time.Millisecond, env.Tokenizer.VocabSize())
	waitWorkers(t, reg, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	body := `{"model":"` + apitest.ModelName + `","stream":true,"max_tokens":2000,"ignore_eos":true,
		"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", env.URL("/v1/chat/completions"), strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	chunks, killed := 0, time.Time{}
	var sawError bool
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if strings.Contains(line, `"error"`) {
			sawError = true
			continue
		}
		if chunks++; chunks == 3 {
			killed = time.Now()
			w.kill()
		}
	}
	if killed.IsZero() {
		t.Fatalf("the stream ended after %d chunks, before the worker was killed", chunks)
	}
	if !sawError {
		t.Fatal("the stream ended without an error event")
	}
	if d := time.Since(killed); d > 3*time.Second {
		t.Fatalf("the client waited %v after the worker died", d)
	}
}
