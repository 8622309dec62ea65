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

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/ui"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"4GiB", 4 << 30, false}, {"512MiB", 512 << 20, false}, {"2G", 2 << 30, false}, {"1.5g", 3 << 29, false},
		{"100MB", 100e6, false}, {"1500000", 1500000, false}, {"auto", 0, false}, {"", 0, false},
		{"12XB", 0, true}, {"-1G", 0, true}, {"G", 0, true},
	}
	for _, tc := range tests {
		got, err := parseBytes(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d (error %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestDefaultKVMemory(t *testing.T) {
	tests := []struct{ avail, want int64 }{
		{0, 1 << 30}, {100 << 20, minKVMemory}, {8 << 30, 2 << 30}, {64 << 30, maxKVMemory},
	}
	for _, tc := range tests {
		if got := defaultKVMemory(tc.avail); got != tc.want {
			t.Errorf("defaultKVMemory(%d) = %d, want %d", tc.avail, got, tc.want)
		}
	}
	if memAvailable() <= 0 {
		t.Errorf("MemAvailable not read from /proc/meminfo")
	}
}

// TestConfigLayers checks flags > environment > file > defaults.
func TestConfigLayers(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "kvserve.yaml")
	err := os.WriteFile(cfg, []byte("addr: 0.0.0.0:9000\nblock-size: 32\nmax-running: 7\nno-prefix-cache: true\napi-key: [k1, k2=team]\nkv-cache-memory: 1GiB\n"), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := newServeCmd()
	fs := cmd.Flags()
	if err := fs.Parse([]string{"--config", cfg, "--block-size", "64"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"KVSERVE_MAX_RUNNING": "9", "KVSERVE_THREADS": "3", "KVSERVE_API_KEY": "e1,e2=ops"}
	if err := applyLayers(fs, "config", func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	get := func(name string) string { return fs.Lookup(name).Value.String() }
	want := map[string]string{
		"block-size":       "64",           // flag
		"max-running":      "9",            // env over file
		"threads":          "3",            // env
		"addr":             "0.0.0.0:9000", // file
		"no-prefix-cache":  "true",         // file
		"kv-cache-memory":  "1GiB",         // file
		"api-key":          "[e1,e2=ops]",  // env over file
		"max-batch-tokens": "512",          // default
	}
	for k, v := range want {
		if got := get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(bad, []byte("kv-cache-memroy: 1GiB\n"), 0o600)
	cmd = newServeCmd()
	_ = cmd.Flags().Parse([]string{"--config", bad})
	if err := applyLayers(cmd.Flags(), "config", func(string) string { return "" }); err == nil || !strings.Contains(err.Error(), "kv-cache-memroy") {
		t.Fatalf("unknown setting accepted: %v", err)
	}
}

func TestSecretFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	a, err := loadSecret(path)
	if err != nil || len(a) != 32 {
		t.Fatalf("secret %x, %v", a, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode %v, %v", st.Mode(), err)
	}
	b, err := loadSecret(path)
	if err != nil || string(a) != string(b) {
		t.Fatalf("secret changed on reload")
	}
	other, _ := loadSecret(filepath.Join(t.TempDir(), "secret"))
	if string(other) == string(a) {
		t.Fatal("two data directories got the same secret")
	}
	_ = os.WriteFile(path, []byte("zz\n"), 0o600)
	if _, err := loadSecret(path); err == nil {
		t.Fatal("malformed secret accepted")
	}
}

func TestParseAPIKeys(t *testing.T) {
	keys, err := parseAPIKeys([]string{"sk-1", "sk-2=team-a"})
	if err != nil || len(keys) != 2 || keys[0].Tenant != "" || keys[1].Key != "sk-2" || keys[1].Tenant != "team-a" {
		t.Fatalf("%+v %v", keys, err)
	}
	if _, err := parseAPIKeys([]string{"=tenant"}); err == nil {
		t.Fatal("empty key accepted")
	}
}

// TestServeEndToEnd runs the command on the tiny test model, with the real
// forward pass and with the simulator: it listens, answers a chat request,
// and shuts down gracefully.
func TestServeEndToEnd(t *testing.T) {
	for _, engine := range []string{"model", "sim"} {
		t.Run(engine, func(t *testing.T) { testServeEndToEnd(t, "--engine", engine) })
	}
	t.Run("host tier", func(t *testing.T) { testServeEndToEnd(t, "--kv-host-memory", "8MiB") })
}

func testServeEndToEnd(t *testing.T, extra ...string) {
	modelFile := apitest.ModelFile(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	cmd := newServeCmd()
	cmd.SetErr(pw)
	cmd.SetArgs(append([]string{"--model", modelFile, "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--kv-cache-memory", "16MiB", "--threads", "1", "--api-key", "sk-test=t1", "--api-key", "sk-admin"}, extra...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()

	addrRe := regexp.MustCompile(`serving "([^"]+)" on (http://[0-9.]+:[0-9]+)`)
	sc := bufio.NewScanner(pr)
	var base, id string
	for sc.Scan() {
		if m := addrRe.FindStringSubmatch(sc.Text()); m != nil {
			id, base = m[1], m[2]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if base == "" {
		t.Fatalf("server did not start: %v", <-done)
	}
	if want := strings.TrimSuffix(filepath.Base(modelFile), ".gguf"); id != want {
		t.Fatalf("model id %q, want %q", id, want)
	}
	body := `{"model":"` + id + `","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`
	req, err := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer sk-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var out struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil || len(out.Choices) != 1 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	r, err := http.Get(base + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Fatalf("/ready: %d", r.StatusCode)
	}
	checkDashboard(t, base)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not shut down")
	}
}

// TestServeRejectsBadSettings: settings that cannot work stop the command
// at once with an error naming them, before anything is loaded.
func TestServeRejectsBadSettings(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--compute-nice", "21"}, "--compute-nice"},
		{[]string{"--model-memory", "huge"}, "--model-memory"},
		{[]string{"--compute-nice", "-1"}, "--compute-nice"},
		{[]string{"--model-alias", "claude-["}, "--model-alias"},
		{[]string{"--model-alias", ""}, "--model-alias"},
		{[]string{"--engine", "gpu"}, "--engine"},
		{[]string{"--kv-eviction", "fifo"}, "--kv-eviction"},
		{[]string{"--kv-max-pinned", "0.2", "--kv-max-pinned-per-tenant", "0.3"}, "--kv-max-pinned"},
		{[]string{"--kv-max-pinned", "1.5"}, "--kv-max-pinned"},
		{[]string{"--kv-max-persistent-per-tenant", "0"}, "--kv-max-persistent-per-tenant"},
		{[]string{"--sim-profile", "p.json"}, "--engine sim"},
	}
	for _, tt := range tests {
		cmd := newServeCmd()
		cmd.SetErr(io.Discard)
		cmd.SetOut(io.Discard)
		cmd.SetArgs(append([]string{"--model", "/nonexistent.gguf", "--data-dir", t.TempDir()}, tt.args...))
		err := cmd.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one naming %s", tt.args, err, tt.want)
		}
	}
}

func TestHostSize(t *testing.T) {
	tests := []struct {
		in   string
		want hostSize
		err  bool
	}{
		{"auto", 0, false}, {"", 0, false}, {"off", -1, false}, {"none", -1, false}, {"0", -1, false},
		{"8GiB", 8 << 30, false}, {"1.5M", 3 << 19, false}, {"lots", 0, true}, {"-1G", 0, true},
	}
	for _, tt := range tests {
		var h hostSize
		err := h.Set(tt.in)
		if (err != nil) != tt.err || (err == nil && h != tt.want) {
			t.Errorf("%q: %d, %v; want %d (error %v)", tt.in, h, err, tt.want, tt.err)
		}
	}
	if got := defaultHostMemory(1<<30, 16<<30); got != 2<<30 {
		t.Errorf("default with room: %d", got)
	}
	if got := defaultHostMemory(1<<30, 4<<30); got != 1<<30 {
		t.Errorf("default on a small machine: %d, want a quarter of available", got)
	}
}

// checkDashboard: serve mounts the dashboard — the page for anyone, its
// data for an admin only, read from the engine that served the request.
func checkDashboard(t *testing.T, base string) {
	t.Helper()
	if status, page := httpDo(t, "GET", base+"/ui", "", ""); status != 200 || !strings.Contains(string(page), "/ui/app.js") {
		t.Fatalf("/ui: %d %.200s", status, page)
	}
	if status, data := httpDo(t, "GET", base+"/v1/admin/dashboard", "sk-test", ""); status != 403 {
		t.Fatalf("the dashboard's data for a developer key: %d %s", status, data)
	}
	status, data := httpDo(t, "GET", base+"/v1/admin/dashboard", "sk-admin", "")
	var snap ui.Snapshot
	if status != 200 || json.Unmarshal(data, &snap) != nil {
		t.Fatalf("the dashboard's data for an admin: %d %s", status, data)
	}
	if snap.Traffic.Requests != 1 || snap.TTFT == nil || snap.TTFT.Count != 1 || snap.Pool == nil || snap.Sessions == nil || snap.Caches == nil {
		t.Fatalf("dashboard after one request: %s", data)
	}
}
