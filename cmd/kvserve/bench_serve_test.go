package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// streamServer answers every chat completion with three content chunks and
// a usage chunk, counting requests, and lists one model.
func streamServer(t *testing.T, requests *atomic.Int64) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models":
			fmt.Fprint(w, `{"object":"list","data":[{"id":"tiny","object":"model"}]}`)
			return
		case "/v1/chat/completions":
		default:
			http.NotFound(w, r)
			return
		}
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Model != "tiny" || !req.Stream ||
			r.Header.Get("Authorization") != "Bearer sk-test" {
			http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
			return
		}
		requests.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, c := range []string{"a", "b", "c"} {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", c)
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":25}}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func runBenchServe(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newBenchServeCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

func TestBenchServe(t *testing.T) {
	var n atomic.Int64
	srv := streamServer(t, &n)
	pngPath := filepath.Join(t.TempDir(), "chart.png")
	out, err := runBenchServe(t, "--url", srv.URL, "--workload", "chat", "-c", "2", "-n", "10", "--api-key", "sk-test",
		"--prompt-scale", "0.05", "--json", "--png", pngPath, "-q")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Model        string  `json:"model"`
		Succeeded    int     `json:"succeeded"`
		OutputTokens int     `json:"output_tokens"`
		CacheHitRate float64 `json:"cache_hit_rate"`
		ITL          struct {
			Count int `json:"count"`
		} `json:"itl_ms"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if rep.Model != "tiny" || rep.Succeeded != 10 || n.Load() != 10 || rep.OutputTokens != 30 || rep.CacheHitRate != 0.25 || rep.ITL.Count != 20 {
		t.Fatalf("%+v (server saw %d)", rep, n.Load())
	}
	f, err := os.Open(pngPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Fatal(err)
	}

	// Without the API key this server rejects every request with 400.
	out, err = runBenchServe(t, "--url", srv.URL, "--workload", "agent", "-n", "3", "--prompt-scale", "0.02", "--time-scale", "0", "-q")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "400 ×3") || !strings.Contains(out, "TTFT") {
		t.Fatalf("table:\n%s", out)
	}
}

func TestBenchServeFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--workload", "chat"},
		{"--url", "http://127.0.0.1:1", "--workload", "nope"},
		{"--url", "http://127.0.0.1:1", "-c", "2", "--rate", "3"},
	} {
		if _, err := runBenchServe(t, args...); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}
