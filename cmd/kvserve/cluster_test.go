package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/billing"
	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/sim"
	"github.com/kvserve/kvserve/internal/ui"
)

// chatThrough sends a chat completion to base and returns the status and
// the body.
func chatThrough(t *testing.T, base, model, key string) (int, []byte) {
	t.Helper()
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`
	return httpDo(t, "POST", base+"/v1/chat/completions", key, body)
}

func wantChoice(t *testing.T, status int, data []byte) {
	t.Helper()
	var out struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if status != 200 || json.Unmarshal(data, &out) != nil || len(out.Choices) != 1 || out.Choices[0].FinishReason != "length" {
		t.Fatalf("status %d: %s", status, data)
	}
}

// TestClusterUp: `kvserve cluster up --workers 2 --engine sim` serves chat
// completions through its gateway's URL, refuses a wrong key as serve
// does, and shuts down cleanly.
func TestClusterUp(t *testing.T) {
	modelFile := apitest.ModelFile(t)
	s := startCommand(t, newClusterCmd(), "up", "--workers", "2", "--engine", "sim", "--model", modelFile,
		"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--kv-cache-memory", "16MiB", "--api-key", "sk-test=t1", "--api-key", "sk-admin")
	for range 4 {
		status, data := chatThrough(t, s.base, s.model, "sk-test")
		wantChoice(t, status, data)
	}
	if status, _ := chatThrough(t, s.base, s.model, "sk-wrong"); status != 401 {
		t.Fatalf("a wrong key got %d", status)
	}
	req, _ := http.NewRequest("GET", s.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer sk-admin")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "\nkvserve_cluster_workers 2\n") {
		t.Fatalf("/metrics does not count 2 workers:\n%s", metrics)
	}
	// The gateway's dashboard lists both workers and where the four
	// requests went.
	status, data := httpDo(t, "GET", s.base+"/v1/admin/dashboard", "sk-admin", "")
	var snap ui.Snapshot
	if status != 200 || json.Unmarshal(data, &snap) != nil {
		t.Fatalf("dashboard: %d %s", status, data)
	}
	routed := int64(0)
	for _, w := range snap.Workers {
		routed += w.Routed
	}
	if len(snap.Workers) != 2 || routed != 4 || snap.Pool != nil {
		t.Fatalf("the gateway's dashboard: workers %+v (%d requests routed), pool %v", snap.Workers, routed, snap.Pool)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("cluster up returned %v", err)
	}
}

// TestWorkerAndGateway: `kvserve worker` and `kvserve gateway` joined by a
// NATS server serve a request; when the only worker drains and leaves, the
// gateway answers 503.
func TestWorkerAndGateway(t *testing.T) {
	modelFile := apitest.ModelFile(t)
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close) // after the worker has stopped

	stopWorker, printed := startWorkerCmd(t, "wk-1", "--nats", ns.URL(), "--id", "wk-1", "--engine", "sim", "--model", modelFile,
		"--data-dir", t.TempDir(), "--kv-cache-memory", "16MiB", "--drain-timeout", "5s", "--metrics-addr", "127.0.0.1:0")
	metricsURL := regexp.MustCompile(`worker metrics on (http://\S+)`).FindStringSubmatch(printed)
	if metricsURL == nil {
		t.Fatalf("no metrics address in %q", printed)
	}

	g := startCommand(t, newGatewayCmd(), "--nats", ns.URL(), "--model", modelFile, "--addr", "127.0.0.1:0",
		"--data-dir", t.TempDir(), "--api-key", "sk-test=t1")
	deadline := time.Now().Add(5 * time.Second)
	for {
		status, data := chatThrough(t, g.base, g.model, "sk-test")
		if status == 200 {
			wantChoice(t, status, data)
			break
		}
		if status != 503 || time.Now().After(deadline) { // 503 until the gateway has heard the worker
			t.Fatalf("status %d: %s", status, data)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The gateway's usage, read back from the cluster's JetStream stream
	// its ledger is copied to.
	for deadline := time.Now().Add(10 * time.Second); ; {
		status, data := httpDo(t, "GET", g.base+"/v1/usage", "sk-test", "")
		var sum billing.Summary
		if status != 200 || json.Unmarshal(data, &sum) != nil {
			t.Fatalf("usage through the gateway: %d %s", status, data)
		}
		// One request completed; a try before the gateway had heard the
		// worker may be booked too, as failed.
		if sum.Total.Requests-sum.Total.Failed == 1 && sum.Total.Tokens.Prompt > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the request never reached the usage stream: %s", data)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The worker's engine metrics, on its own listener.
	if status, m := httpDo(t, "GET", metricsURL[1], "", ""); status != 200 || !strings.Contains(string(m), "\nkvserve_time_to_first_token_seconds_count 1\n") {
		t.Errorf("worker metrics: %d, no first token counted", status)
	}
	if err := stopWorker(); err != nil {
		t.Fatalf("worker returned %v", err)
	}
	if status, data := chatThrough(t, g.base, g.model, "sk-test"); status != 503 {
		t.Fatalf("with no worker: status %d: %s", status, data)
	}
	resp, err := http.Get(g.base + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	ready, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(ready), "no worker") {
		t.Fatalf("/ready with no worker: %d %s", resp.StatusCode, ready)
	}
	if err := g.stop(); err != nil {
		t.Fatalf("gateway returned %v", err)
	}
}

// TestClusterCommandsRejectBadSettings: what cannot work stops the command
// at once, naming the flag.
func TestClusterCommandsRejectBadSettings(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"worker", []string{"--engine", "sim"}, "--nats"},
		{"worker", []string{"--nats", "nats://127.0.0.1:1", "--id", "a.b"}, "--id"},
		{"worker", []string{"--nats", "nats://127.0.0.1:1", "--engine", "gpu"}, "--engine"},
		{"gateway", []string{}, "--nats"},
		{"gateway", []string{"--nats", "nats://127.0.0.1:1", "--model-alias", "claude-["}, "--model-alias"},
		{"cluster", []string{"up", "--workers", "0"}, "--workers"},
		{"cluster", []string{"up", "--kv-eviction", "fifo"}, "--kv-eviction"},
		{"cluster", []string{"up", "--router", "random"}, "--router"},
		{"gateway", []string{"--nats", "nats://127.0.0.1:1", "--router", "nearest"}, "--router"},
		{"gateway", []string{"--nats", "nats://127.0.0.1:1", "--router-hash-cache-blocks", "0"}, "--router-hash-cache-blocks 0"},
		{"gateway", []string{"--nats", "nats://127.0.0.1:1", "--router", "round-robin", "--router-hash-cache-blocks", "100"}, "configures the kv router"},
		{"cluster", []string{"up", "--router", "least-loaded", "--router-hash-cache-blocks", "100"}, "configures the kv router"},
	}
	for _, tt := range tests {
		cmd := map[string]func() *cobra.Command{"worker": newWorkerCmd, "gateway": newGatewayCmd, "cluster": newClusterCmd}[tt.name]()
		_, _, err := runCommand(cmd, append(tt.args, "--data-dir", t.TempDir())...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %v: error %v, want one naming %s", tt.name, tt.args, err, tt.want)
		}
	}
}

// slowProfile writes a simulator profile for modelFile whose every forward
// pass takes pass, so a request runs long enough to be caught mid-way.
func slowProfile(t *testing.T, modelFile string, pass time.Duration) string {
	t.Helper()
	mf, err := model.Open(modelFile, gguf.Mapped, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	c := mf.Model.Config
	p := sim.Profile{Model: "slow", Shape: sim.Shape{Vocab: c.Vocab, Context: c.Context, Layers: c.Layers, KVDim: c.KVDim(),
		KVType: "F16", MaxTokens: 512}, Cost: sim.Cost{Fixed: pass.Seconds()}}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "slow.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWorkerDrainTimeout: a worker stopped while a long request runs
// waits --drain-timeout for it, then cuts it off: the client gets an error
// event, the worker command says why it did not drain cleanly, and both
// ends promptly. The gateway and the worker agree on --model-id.
func TestWorkerDrainTimeout(t *testing.T) {
	modelFile := apitest.ModelFile(t)
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ctx, stopWorker := context.WithCancel(context.Background())
	defer stopWorker()
	pr, pw := io.Pipe()
	wcmd := newWorkerCmd()
	wcmd.SetErr(pw)
	wcmd.SetArgs([]string{"--nats", ns.URL(), "--engine", "sim", "--sim-profile", slowProfile(t, modelFile, 20*time.Millisecond),
		"--model", modelFile, "--model-id", "shared", "--data-dir", t.TempDir(), "--kv-cache-memory", "16MiB", "--drain-timeout", "200ms"})
	workerDone := make(chan error, 1)
	go func() { workerDone <- wcmd.ExecuteContext(ctx); pw.Close() }()
	wcmd.SetOut(io.Discard)
	sc := bufio.NewScanner(pr)
	started := false
	for !started && sc.Scan() {
		started = strings.Contains(sc.Text(), `serving "shared"`)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !started {
		t.Fatalf("the worker did not start: %v", <-workerDone)
	}

	g := startCommand(t, newGatewayCmd(), "--nats", ns.URL(), "--model", modelFile, "--model-id", "shared",
		"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--api-key", "sk-test=t1")
	if g.model != "shared" {
		t.Fatalf("the gateway serves %q", g.model)
	}
	body := `{"model":"shared","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`
	var resp *http.Response
	for deadline := time.Now().Add(5 * time.Second); ; {
		req, _ := http.NewRequest("POST", g.base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-test")
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == 200 {
			break
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || time.Now().After(deadline) { // 503 until the gateway has heard the worker
			t.Fatalf("status %d", resp.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer resp.Body.Close()
	events := bufio.NewScanner(resp.Body)
	var stopped time.Time
	sawError := false
	for events.Scan() {
		line := events.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		if strings.Contains(line, `"error"`) {
			sawError = true
		}
		if stopped.IsZero() {
			stopped = time.Now()
			stopWorker()
		}
	}
	if !sawError {
		t.Fatal("the cut-off stream ended without an error event")
	}
	if d := time.Since(stopped); d > 3*time.Second {
		t.Fatalf("the stream ended %v after the worker was stopped", d)
	}
	select {
	case err := <-workerDone:
		if err == nil || !strings.Contains(err.Error(), "drain") {
			t.Fatalf("worker returned %v, want an error about its drain's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker did not stop")
	}
}

// TestClusterContextCache: a context cache created through a gateway is
// prefilled on one worker, and its uses are hits. With two workers, the
// KV-aware router sends every use to the worker holding the cache's
// blocks; round-robin sends some elsewhere, which computes the prefix
// again (the case the router fixes).
func TestClusterContextCache(t *testing.T) {
	tests := []struct {
		workers, router string
		allHit          bool
	}{
		{"1", "kv", true},
		{"2", "kv", true},
		{"2", "round-robin", false},
	}
	for _, tt := range tests {
		t.Run(tt.workers+"-"+tt.router, func(t *testing.T) {
			testClusterContextCache(t, tt.workers, tt.router, tt.allHit)
		})
	}
}

func testClusterContextCache(t *testing.T, workers, router string, allHit bool) {
	modelFile := apitest.ModelFile(t)
	s := startCommand(t, newClusterCmd(), "up", "--workers", workers, "--router", router, "--engine", "sim", "--model", modelFile,
		"--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--kv-cache-memory", "16MiB", "--api-key", "sk-test=t1",
		"--api-key", "sk-admin", "--cache-min-tokens", "16")
	do := func(method, path, key, body string) (int, string) {
		req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	status, data := do("POST", "/v1/cached_contents", "sk-test", `{"model":"`+s.model+`","ttl":"600s","messages":[`+
		`{"role":"system","content":"`+strings.Repeat("A long shared system prompt. ", 6)+`"}]}`)
	var c struct{ ID string }
	if status != 200 || json.Unmarshal([]byte(data), &c) != nil || c.ID == "" {
		t.Fatalf("create: %d %s", status, data)
	}
	if router == "kv" {
		// The worker's KV events reach the gateway's index a moment after
		// the cache is created.
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, m := do("GET", "/metrics", "sk-admin", "")
			if strings.Contains(m, "\nkvserve_router_index_blocks ") && !strings.Contains(m, "\nkvserve_router_index_blocks 0\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the router's index stayed empty:\n%s", m)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	hits := 0
	const uses = 4
	for i := range uses {
		status, data = do("POST", "/v1/chat/completions", "sk-test", `{"model":"`+s.model+`","max_tokens":1,"messages":[{"role":"user","content":"Q`+strconv.Itoa(i)+`?"}],`+
			`"kvserve":{"cached_content":"`+c.ID+`"}}`)
		if status != 200 || !strings.Contains(data, `"cached_tokens"`) {
			t.Fatalf("chat with the cache: %d %s", status, data)
		}
		if !strings.Contains(data, `"cached_tokens":0`) {
			hits++
		}
	}
	if allHit && hits != uses || !allHit && hits == uses {
		t.Errorf("%d of %d uses hit the cache (router %s, %s workers)", hits, uses, router, workers)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("cluster up returned %v", err)
	}
}

// TestClusterPromptCacheKeyAffinity: OpenAI's prompt_cache_key, through a
// gateway, keeps a session on its worker even where the KV-aware router
// would otherwise follow the prompt's cached prefix to another worker.
//
// Worker local-1 runs a long request L (so a session's first request goes
// to the idle local-2); once both are idle, a request sharing L's prefix
// with no key goes to local-1 and hits L's blocks, and one with the
// session's key goes to local-2, which has never seen that prefix.
func TestClusterPromptCacheKeyAffinity(t *testing.T) {
	for _, copies := range []bool{false, true} {
		t.Run(fmt.Sprintf("kv-copy=%v", copies), func(t *testing.T) { testPromptCacheKeyAffinity(t, copies) })
	}
}

// testPromptCacheKeyAffinity runs the test with copies between the workers
// on or off.
func testPromptCacheKeyAffinity(t *testing.T, copies bool) {
	modelFile := apitest.ModelFile(t)
	s := startCommand(t, newClusterCmd(), "up", "--workers", "2", "--engine", "sim", "--model", modelFile,
		"--sim-profile", slowProfile(t, modelFile, 10*time.Millisecond), "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--kv-cache-memory", "16MiB", "--api-key", "sk-test=t1", "--api-key", "sk-admin", fmt.Sprintf("--kv-copy=%v", copies))
	long := strings.Repeat("Lengthy shared context about rivers and their deltas. ", 8)
	chat := func(content, key string, extra map[string]any) int {
		t.Helper()
		body := map[string]any{"model": s.model, "max_tokens": 1, "messages": []map[string]string{{"role": "user", "content": content}}}
		maps.Copy(body, extra)
		data, _ := json.Marshal(body)
		status, out := httpDo(t, "POST", s.base+"/v1/chat/completions", key, string(data))
		var r struct {
			Usage struct {
				Details struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if status != 200 || json.Unmarshal(out, &r) != nil {
			t.Fatalf("chat: %d %s", status, out)
		}
		return r.Usage.Details.CachedTokens
	}
	indexed := func(worker string) bool {
		_, m := httpDo(t, "GET", s.base+"/metrics", "sk-admin", "")
		blocks := regexp.MustCompile(`kvserve_router_index_worker_blocks\{worker="` + worker + `"\} (\d+)`).FindSubmatch(m)
		return blocks != nil && string(blocks[1]) != "0"
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, m := httpDo(t, "GET", s.base+"/metrics", "sk-admin", "")
		if strings.Contains(string(m), `kvserve_router_index_worker_blocks{worker="local-2"}`) {
			break // the router follows both workers
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router does not follow both workers:\n%s", m)
		}
	}

	// L: streaming, long, on local-1 (both idle: the first in order).
	body, _ := json.Marshal(map[string]any{"model": s.model, "max_tokens": 300, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": long}}})
	req, _ := http.NewRequest("POST", s.base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("long request: %v %v", err, resp)
	}
	first := bufio.NewScanner(resp.Body)
	for first.Scan() && !strings.HasPrefix(first.Text(), "data: ") {
	}
	// The session's first turn, while local-1 is busy: local-2.
	chat("Tell me about mountains instead, please, at some length.", "sk-test", map[string]any{"prompt_cache_key": "agent-1"})
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	for deadline := time.Now().Add(10 * time.Second); !indexed("local-1") || !indexed("local-2"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the router's index did not see both workers' blocks")
		}
	}

	question := long + "Which delta is the largest?"
	plain := chat(question, "sk-test", nil)
	keyed := chat(question, "sk-test", map[string]any{"prompt_cache_key": "agent-1"})
	if plain < 64 {
		t.Fatalf("with no key the request hit %d cached tokens: the router did not follow the prefix to local-1", plain)
	}
	if copies {
		// The session's worker copies what the other computed (the prefix
		// and the question) rather than computing it.
		if keyed <= plain {
			t.Errorf("with copies between workers the session's worker hit %d cached tokens, the prefix's worker %d", keyed, plain)
		}
		return
	}
	if keyed >= plain {
		t.Errorf("with prompt_cache_key the request hit %d cached tokens (without: %d): it followed the prefix, not its session's worker", keyed, plain)
	}
}
