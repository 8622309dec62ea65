package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/kvevents"
)

// servingServer is a `kvserve serve` running in the test.
type servingServer struct {
	base, model string
	line        string       // the "serving" line it printed
	stop        func() error // shuts it down gracefully and returns serve's error
}

// startServe runs `kvserve serve` with args and waits until it serves.
func startServe(t *testing.T, args ...string) *servingServer {
	t.Helper()
	return startCommand(t, newServeCmd(), args...)
}

// startCommand runs a serving command (serve, gateway, cluster up) with
// args and waits until it prints that it serves.
func startCommand(t *testing.T, cmd *cobra.Command, args ...string) *servingServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	cmd.SetErr(pw)
	cmd.SetArgs(args)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()
	addrRe := regexp.MustCompile(`serving "([^"]+)" on (http://[0-9.]+:[0-9]+)`)
	sc := bufio.NewScanner(pr)
	s := &servingServer{}
	for sc.Scan() {
		if m := addrRe.FindStringSubmatch(sc.Text()); m != nil {
			s.model, s.base, s.line = m[1], m[2], sc.Text()
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if s.base == "" {
		cancel()
		t.Fatalf("server did not start: %v", <-done)
	}
	stopped := false
	s.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not shut down")
			return nil
		}
	}
	t.Cleanup(func() { s.stop() })
	return s
}

// TestServeWarmRestart: a prompt served before a restart is served from
// the disk tier after it, its cached tokens reported.
func TestServeWarmRestart(t *testing.T) {
	modelFile := apitest.ModelFile(t)
	dataDir := t.TempDir()
	args := []string{"--model", modelFile, "--addr", "127.0.0.1:0", "--data-dir", dataDir,
		"--kv-cache-memory", "16MiB", "--threads", "1", "--kv-disk", "64MiB"}
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog near the river bank. ", 12)
	chat := func(s *servingServer) int {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"model": s.model, "max_tokens": 2,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		resp, err := http.Post(s.base+"/v1/chat/completions", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
				Details      struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil {
			t.Fatalf("status %d: %s", resp.StatusCode, data)
		}
		if out.Usage.PromptTokens < 64 {
			t.Fatalf("prompt of %d tokens is too short for this test", out.Usage.PromptTokens)
		}
		return out.Usage.Details.CachedTokens
	}
	s := startServe(t, args...)
	if c := chat(s); c != 0 {
		t.Fatalf("cold request: %d cached tokens", c)
	}
	// The KV event stream's snapshot lists the prompt's blocks.
	resp, err := http.Get(s.base + "/v1/kv/events?snapshot=1")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<24)
	var snapshot kvevents.Batch
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			if err := json.Unmarshal([]byte(line), &snapshot); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	resp.Body.Close()
	if len(snapshot.Events) < 3 || snapshot.Events[0].Type != "BlockStored" || snapshot.Events[0].Medium != "GPU" {
		t.Fatalf("KV event snapshot: %+v", snapshot)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	s = startServe(t, args...)
	if c := chat(s); c < 48 {
		t.Fatalf("after the restart: %d cached tokens, want the prompt's full blocks", c)
	}
	// --kv-disk off forgets nothing on disk but reads nothing from it.
	if err := s.stop(); err != nil {
		t.Fatalf("serve: %v", err)
	}
	s = startServe(t, append(args, "--kv-disk", "off")...)
	if c := chat(s); c != 0 {
		t.Fatalf("with the disk tier off: %d cached tokens", c)
	}
}

// TestTenantDeleteShredsDiskKV: a deleted tenant's blocks on disk lose their
// key with it, and the next start deletes them; another tenant's stay.
func TestTenantDeleteShredsDiskKV(t *testing.T) {
	dir := t.TempDir()
	secrets := map[string]string{}
	for _, name := range []string{"acme", "beta"} {
		run(t, dir, "tenant", "create", name)
		out, _ := run(t, dir, "key", "create", "--tenant", name, "--role", "developer")
		secrets[name] = strings.TrimSpace(out)
	}
	args := []string{"--model", apitest.ModelFile(t), "--addr", "127.0.0.1:0", "--data-dir", dir,
		"--kv-cache-memory", "16MiB", "--threads", "1", "--kv-disk", "64MiB"}
	s := startServe(t, args...)
	prompt := strings.Repeat("Every tenant's cache is its own, on disk as in memory. ", 12)
	for _, name := range []string{"acme", "beta"} {
		body, _ := json.Marshal(map[string]any{"model": s.model, "max_tokens": 1,
			"messages": []map[string]string{{"role": "user", "content": prompt}}})
		req, _ := http.NewRequest("POST", s.base+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+secrets[name])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", name, resp.StatusCode)
		}
	}
	if err := s.stop(); err != nil { // writes both tenants' blocks to disk
		t.Fatal(err)
	}
	before := countFiles(t, filepath.Join(dir, "kv", "blocks"))
	if before == 0 {
		t.Fatal("nothing was written to the disk tier")
	}
	run(t, dir, "tenant", "delete", "acme")
	s = startServe(t, args...)
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	after := countFiles(t, filepath.Join(dir, "kv", "blocks"))
	if after == 0 || after >= before {
		t.Fatalf("%d block files before deleting a tenant, %d after: want beta's only", before, after)
	}
}

func countFiles(t *testing.T, root string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTwoServersOneDataDir: a second server on a data directory whose disk
// tier another holds runs without one, by default; asked for one, it fails
// saying why.
func TestTwoServersOneDataDir(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--model", apitest.ModelFile(t), "--addr", "127.0.0.1:0", "--data-dir", dir,
		"--kv-cache-memory", "16MiB", "--threads", "1"}
	first := startServe(t, args...)
	if strings.Contains(first.line, "disk tier off") {
		t.Fatalf("the first server has no disk tier: %s", first.line)
	}
	second := startServe(t, args...)
	if !strings.Contains(second.line, "disk tier off") {
		t.Fatalf("the second server: %s", second.line)
	}
	cmd := newServeCmd()
	cmd.SetErr(io.Discard)
	cmd.SetArgs(append(args, "--kv-disk", "64MiB"))
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("an explicit disk tier on a held directory: %v", err)
	}
}

// TestV1ModelsByClient: /v1/models answers a Gemini client (the newest
// @google/genai calls apiVersion v1) in Gemini's shape, known by its
// headers, and everyone else in OpenAI's; the v1 generateContent works.
func TestV1ModelsByClient(t *testing.T) {
	s := startServe(t, "--model", apitest.ModelFile(t), "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--kv-cache-memory", "16MiB", "--threads", "1")
	get := func(method, path string, header map[string]string, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	gemini := map[string]string{"X-Goog-Api-Client": "google-genai-sdk/3.0.0 gl-node/v20"}
	for _, c := range []struct {
		path   string
		header map[string]string
		want   string
	}{
		{"/v1/models", nil, `"object":"list"`},
		{"/v1/models", gemini, `"models":[{"name":"models/` + s.model + `"`},
		{"/v1/models?key=k", nil, `"models":[`},
		{"/v1/models/" + s.model, nil, `"object":"model"`},
		{"/v1/models/" + s.model, gemini, `"name":"models/` + s.model + `"`},
		{"/v1/models/models/" + s.model, gemini, `"name":"models/` + s.model + `"`},
	} {
		if status, data := get("GET", c.path, c.header, ""); status != 200 || !strings.Contains(data, c.want) {
			t.Errorf("GET %s %v: %d %s; want %s", c.path, c.header, status, data, c.want)
		}
	}
	if status, data := get("GET", "/v1/models/gemini-9", gemini, ""); status != 404 || !strings.Contains(data, "API version v1") || !strings.Contains(data, "NOT_FOUND") {
		t.Errorf("an unknown model to a Gemini client: %d %s", status, data)
	}
	status, data := get("POST", "/v1/models/"+s.model+":generateContent", gemini,
		`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":2}}`)
	if status != 200 || !strings.Contains(data, `"candidates"`) {
		t.Errorf("v1 generateContent: %d %s", status, data)
	}
}

// TestCachePinnedAgainAfterRestart: a context cache's pins do not survive a
// restart (its blocks do, on disk); its first use pins its prefix again to
// its expiry.
func TestCachePinnedAgainAfterRestart(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--model", apitest.ModelFile(t), "--addr", "127.0.0.1:0", "--data-dir", dir,
		"--kv-cache-memory", "16MiB", "--threads", "1", "--cache-min-tokens", "64"}
	pinned := func(s *servingServer) string {
		t.Helper()
		resp, err := http.Get(s.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "kvserve_kv_pinned_blocks "); ok {
				return v
			}
		}
		t.Fatalf("no kvserve_kv_pinned_blocks in /metrics")
		return ""
	}
	post := func(s *servingServer, path, body string) string {
		t.Helper()
		resp, err := http.Post(s.base+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, data)
		}
		return string(data)
	}
	s := startServe(t, args...)
	var c struct{ ID string }
	created := post(s, "/v1/cached_contents", `{"model":"`+s.model+`","ttl":"3600s","messages":[{"role":"system","content":"`+
		strings.Repeat("A pinned document survives restarts. ", 10)+`"},{"role":"user","content":"Read it."}]}`)
	if err := json.Unmarshal([]byte(created), &c); err != nil || c.ID == "" {
		t.Fatalf("create: %s", created)
	}
	if p := pinned(s); p == "0" {
		t.Fatal("the new cache pinned nothing")
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, args...)
	if p := pinned(s); p != "0" {
		t.Fatalf("%s blocks pinned right after the restart", p)
	}
	used := post(s, "/v1/chat/completions", `{"model":"`+s.model+`","max_tokens":1,"messages":[{"role":"user","content":"Q?"}],"kvserve":{"cached_content":"`+c.ID+`"}}`)
	if strings.Contains(used, `"cached_tokens":0`) {
		t.Errorf("the use after the restart found nothing cached (the disk tier holds the prefix): %s", used)
	}
	if p := pinned(s); p == "0" {
		t.Fatal("the cache's first use after the restart pinned nothing")
	}
	// Deleting it ends its pins at once.
	req, _ := http.NewRequest("DELETE", s.base+"/v1/cached_contents/"+c.ID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("delete: %d", resp.StatusCode)
	}
	if p := pinned(s); p != "0" {
		t.Fatalf("%s blocks still pinned after the cache was deleted", p)
	}
}
