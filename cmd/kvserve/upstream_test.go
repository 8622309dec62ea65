package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/vllmevents/vllmtest"
)

// startWorkerCmd runs `kvserve worker args...` until the test ends, once
// it says it serves as worker id; stop drains it and returns its error.
// started is what it printed until then.
func startWorkerCmd(t *testing.T, id string, args ...string) (stop func() error, started string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	cmd := newWorkerCmd()
	cmd.SetErr(pw)
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()
	sc := bufio.NewScanner(pr)
	ok := false
	for sc.Scan() {
		started += sc.Text() + "\n"
		if strings.Contains(sc.Text(), "worker "+id+" serving") {
			ok = true
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !ok {
		cancel()
		t.Fatalf("the worker did not start: %v", <-done)
	}
	var err error
	stopped := false
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the worker did not drain")
			}
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop, started
}

// TestUpstreamWorker: a gateway serves chat through a worker in front of a
// second kvserve (`kvserve serve`) used as an external OpenAI-compatible
// engine, and the worker's predicted cache reaches the gateway's router.
func TestUpstreamWorker(t *testing.T) {
	modelFile := apitest.BPEModelFile(t)
	up := startCommand(t, newServeCmd(), "--model", modelFile, "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--kv-cache-memory", "16MiB", "--threads", "1")
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)    // after the worker and gateway have stopped
	dataDir := t.TempDir() // one secret for the worker and the gateway
	_, printed := startWorkerCmd(t, "ext-1", "--nats", ns.URL(), "--id", "ext-1", "--model", modelFile, "--data-dir", dataDir,
		"--upstream", up.base+"/v1", "--upstream-model", up.model, "--upstream-cache-tokens", "65536", "--metrics-addr", "127.0.0.1:0")
	metricsURL := regexp.MustCompile(`worker metrics on (http://\S+)`).FindStringSubmatch(printed)
	if metricsURL == nil {
		t.Fatalf("no metrics address in %q", printed)
	}
	g := startCommand(t, newGatewayCmd(), "--nats", ns.URL(), "--model", modelFile, "--addr", "127.0.0.1:0",
		"--data-dir", dataDir, "--api-key", "sk-test=t1", "--api-key", "sk-admin")
	doc := strings.Repeat("A long shared document, read again and again. ", 20)
	ask := func(q string) (int, []byte) {
		body, _ := json.Marshal(map[string]any{"model": g.model, "max_tokens": 4, "temperature": 0,
			"messages": []map[string]string{{"role": "system", "content": doc}, {"role": "user", "content": q}}})
		return httpDo(t, "POST", g.base+"/v1/chat/completions", "sk-test", string(body))
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		status, data := ask("first?")
		if status == 200 {
			break
		}
		if status != 503 || time.Now().After(deadline) { // 503 until the gateway has heard the worker
			t.Fatalf("status %d: %s", status, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
	status, data := ask("second?")
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if status != 200 || json.Unmarshal(data, &out) != nil || len(out.Choices) != 1 {
		t.Fatalf("status %d: %s", status, data)
	}
	// The upstream saw the document before: it reports it cached, and the
	// gateway passes that on.
	if u := out.Usage; u.PromptTokensDetails.CachedTokens < u.PromptTokens/2 {
		t.Errorf("usage %+v: want the document's tokens cached upstream", u)
	}
	// The worker's predicted blocks reached the gateway's router.
	for deadline := time.Now().Add(5 * time.Second); ; {
		blocks := routerBlocks(t, g.base, "ext-1")
		if blocks*16 >= float64(out.Usage.PromptTokens/2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router knows %v blocks of ext-1, want the document's", blocks)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The worker's own metrics: two requests accepted upstream, each
	// reporting its cached tokens, none short of the prediction.
	status, wm := httpDo(t, "GET", metricsURL[1], "", "")
	for _, want := range []string{"kvserve_upstream_requests_total 2", "kvserve_upstream_cached_reported_total 2", "kvserve_upstream_cached_short_total 0"} {
		if status != 200 || !strings.Contains(string(wm), "\n"+want+"\n") {
			t.Errorf("worker metrics lack %q (status %d)", want, status)
		}
	}
}

// routerBlocks reads how many blocks of worker the gateway's router knows.
func routerBlocks(t *testing.T, gateway, worker string) float64 {
	t.Helper()
	status, metrics := httpDo(t, "GET", gateway+"/metrics", "sk-admin", "")
	if status != 200 {
		t.Fatalf("metrics: %d %s", status, metrics)
	}
	var blocks float64
	for _, line := range strings.Split(string(metrics), "\n") {
		if v, ok := strings.CutPrefix(line, `kvserve_router_index_worker_blocks{worker="`+worker+`"} `); ok {
			blocks, _ = strconv.ParseFloat(v, 64)
		}
	}
	return blocks
}

// TestUpstreamWorkerExact: `kvserve worker --upstream-kv-events` follows
// a vLLM-like server's own KV events, and the blocks it reports reach the
// gateway's router.
func TestUpstreamWorkerExact(t *testing.T) {
	modelFile := apitest.BPEModelFile(t)
	pub := vllmtest.StartPublisher(t, "kv-events")
	srv := vllmtest.NewServer(t, pub, 16)
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	dataDir := t.TempDir()
	_, printed := startWorkerCmd(t, "vllm-1", "--nats", ns.URL(), "--id", "vllm-1", "--model", modelFile, "--data-dir", dataDir,
		"--upstream", srv.URL+"/v1", "--upstream-cache-salt", "--upstream-kv-events", pub.Endpoint(),
		"--upstream-kv-events-replay", pub.Replay(), "--upstream-kv-events-topic", "kv-events", "--metrics-addr", "127.0.0.1:0")
	if !strings.Contains(printed, "KV events from "+pub.Endpoint()) {
		t.Errorf("the start line does not say it follows the events: %q", printed)
	}
	metricsURL := regexp.MustCompile(`worker metrics on (http://\S+)`).FindStringSubmatch(printed)
	if metricsURL == nil {
		t.Fatalf("no metrics address in %q", printed)
	}
	g := startCommand(t, newGatewayCmd(), "--nats", ns.URL(), "--model", modelFile, "--addr", "127.0.0.1:0",
		"--data-dir", dataDir, "--api-key", "sk-test=t1", "--api-key", "sk-admin")
	doc := strings.Repeat("A long shared document, read again and again. ", 20)
	body, _ := json.Marshal(map[string]any{"model": g.model, "max_tokens": 4,
		"messages": []map[string]string{{"role": "system", "content": doc}, {"role": "user", "content": "first?"}}})
	for deadline := time.Now().Add(5 * time.Second); ; {
		status, data := httpDo(t, "POST", g.base+"/v1/chat/completions", "sk-test", string(body))
		if status == 200 {
			break
		}
		if status != 503 || time.Now().After(deadline) {
			t.Fatalf("status %d: %s", status, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The server published the prompt's blocks (the worker's subscription
	// may have missed them: it asks the replay socket), and the router
	// learns them from the worker.
	for deadline := time.Now().Add(10 * time.Second); ; {
		pub.Send(vllmtest.Empty(), false) // a later batch shows any gap
		blocks := routerBlocks(t, g.base, "vllm-1")
		if blocks >= 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router knows %v blocks of vllm-1, want the document's", blocks)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if salts := srv.Salts(); len(salts) != 1 || salts[0] == "" {
		t.Errorf("cache_salt sent: %q", salts)
	}
	status, wm := httpDo(t, "GET", metricsURL[1], "", "")
	if status != 200 || !strings.Contains(string(wm), "kvserve_upstream_events_batches_total") || !strings.Contains(string(wm), "\nkvserve_upstream_events_lost_total 0\n") {
		t.Errorf("worker metrics (status %d) lack the event follower's", status)
	}
}

func TestUpstreamWorkerFlags(t *testing.T) {
	cmd := newWorkerCmd()
	for _, name := range upstreamEngineFlags {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("--%s is listed as an engine flag but the worker has no such flag", name)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats", "nats://127.0.0.1:1", "--upstream", "http://127.0.0.1:1/v1", "--kv-disk", "1GiB"}, "--kv-disk configures kvserve's own engine"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--upstream", "http://127.0.0.1:1/v1", "--engine", "sim"}, "--engine configures"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--upstream-model", "x"}, "--upstream-model needs --upstream"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--upstream", "http://127.0.0.1:1/v1", "--upstream-cache-tokens", "0"}, "must be ≥ 1"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--upstream", "http://127.0.0.1:1/v1", "--upstream-kv-events", "tcp://127.0.0.1:1"}, "needs --upstream-cache-salt"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--upstream", "http://127.0.0.1:1/v1", "--upstream-kv-events-replay", "tcp://127.0.0.1:1"}, "need --upstream-kv-events"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--upstream-kv-events", "tcp://127.0.0.1:1"}, "--upstream-kv-events needs --upstream"},
	} {
		_, _, err := runCommand(newWorkerCmd(), c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// TestGatewayModels: one gateway serves two models, each on its own
// workers, and the model "auto" chooses between them by its rules.
func TestGatewayModels(t *testing.T) {
	files := []string{apitest.ModelFile(t), apitest.BPEModelFile(t)}
	ids := []string{strings.TrimSuffix(filepath.Base(files[0]), ".gguf"), strings.TrimSuffix(filepath.Base(files[1]), ".gguf")}
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	dataDir := t.TempDir()
	for i, f := range files {
		id := fmt.Sprintf("wk-%d", i)
		startWorkerCmd(t, id, "--nats", ns.URL(), "--id", id, "--engine", "sim", "--model", f, "--data-dir", dataDir,
			"--kv-cache-memory", "16MiB")
	}
	g := startCommand(t, newGatewayCmd(), "--nats", ns.URL(), "--model", files[0], "--model", files[1], "--addr", "127.0.0.1:0",
		"--data-dir", dataDir, "--api-key", "sk-admin", "--auto-fast", ids[0], "--auto-strong", ids[1], "--auto-long-prompt", "300")
	if !strings.Contains(g.line, ids[0]) || !strings.Contains(g.line, ids[1]) {
		t.Errorf("startup line %q does not name both models", g.line)
	}
	chat := func(model, content string, tools bool) (int, string) {
		body := map[string]any{"model": model, "max_tokens": 2, "messages": []map[string]string{{"role": "user", "content": content}}}
		if tools {
			body["tools"] = []map[string]any{{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object"}}}}
		}
		data, _ := json.Marshal(body)
		status, out := httpDo(t, "POST", g.base+"/v1/chat/completions", "sk-admin", string(data))
		var resp struct{ Model string }
		_ = json.Unmarshal(out, &resp)
		return status, resp.Model
	}
	for deadline := time.Now().Add(5 * time.Second); ; { // 503 until the gateway has heard both workers
		s0, _ := chat(ids[0], "hi", false)
		s1, _ := chat(ids[1], "hi", false)
		if s0 == 200 && s1 == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("statuses %d and %d", s0, s1)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		name, model, content string
		tools                bool
		want                 string
	}{
		{"named fast", ids[0], "hi", true, ids[0]},
		{"named strong", ids[1], "hi", false, ids[1]},
		{"auto", "auto", "hi", false, ids[0]},
		{"auto with tools", "auto", "hi", true, ids[1]},
		{"auto long", "auto", strings.Repeat("long ", 400), false, ids[1]},
	} {
		if status, got := chat(c.model, c.content, c.tools); status != 200 || got != c.want {
			t.Errorf("%s: %d, answered by %q, want %q", c.name, status, got, c.want)
		}
	}
	status, metrics := httpDo(t, "GET", g.base+"/metrics", "sk-admin", "")
	for _, id := range ids {
		if want := `kvserve_cluster_workers{model="` + id + `"} 1`; status != 200 || !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestGatewayModelFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--nats", "nats://127.0.0.1:1", "--model", "a.gguf", "--model", "b.gguf", "--model-id", "x"}, "--model-id names one model"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--auto-long-prompt", "10"}, "--auto-long-prompt needs --auto-fast and --auto-strong"},
		{[]string{"--nats", "nats://127.0.0.1:1", "--auto-fast", "a"}, "two different models"},
	} {
		_, _, err := runCommand(newGatewayCmd(), c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
