package sdk_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/tests/sdk"
)

// TestKill9Restart: a server killed with SIGKILL and started again on its
// data directory keeps its tenants, keys and context caches, serves from
// the disk tier the blocks it had written there, and its audit chain
// verifies.
func TestKill9Restart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kvserve twice as a process")
	}
	// The real engine: the simulator's disk tier keeps bookkeeping only.
	args := []string{"--api-key", "admin-key", "--engine", "model", "--kv-cache-memory", "64MiB",
		"--kv-host-memory", "off", "--kv-disk", "256MiB", "--cache-min-tokens", "64"}
	s := sdk.Start(t, sdk.Options{Args: args})
	call := func(s *sdk.Server, key, method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if status, body := call(s, "admin-key", "POST", "/v1/admin/tenants", `{"name":"acme"}`); status != 201 {
		t.Fatalf("create tenant: %d %s", status, body)
	}
	status, body := call(s, "admin-key", "POST", "/v1/admin/keys", `{"tenant":"acme","role":"developer"}`)
	var key struct{ Secret string }
	if status != 201 || json.Unmarshal([]byte(body), &key) != nil {
		t.Fatalf("create key: %d %s", status, body)
	}
	status, body = call(s, key.Secret, "POST", "/v1/cached_contents", `{"model":"`+sdk.ModelID+`","ttl":"3600s","messages":[`+
		`{"role":"system","content":"`+strings.Repeat("A document that outlives a crash. ", 12)+`"},{"role":"user","content":"Read it."}]}`)
	var cache struct{ ID string }
	if status != 200 || json.Unmarshal([]byte(body), &cache) != nil {
		t.Fatalf("create cache: %d %s", status, body)
	}
	chat := func(s *sdk.Server, prompt string) int {
		t.Helper()
		status, body := call(s, key.Secret, "POST", "/v1/chat/completions", `{"model":"`+sdk.ModelID+
			`","max_tokens":1,"messages":[{"role":"user","content":"`+prompt+`"}]}`)
		var out struct {
			Usage struct {
				Details struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if status != 200 || json.Unmarshal([]byte(body), &out) != nil {
			t.Fatalf("chat: %d %s", status, body)
		}
		return out.Usage.Details.CachedTokens
	}
	// A prompt, then enough others to push it out of the pool onto disk.
	first := strings.Repeat("The first prompt, written to disk before the crash. ", 40)
	chat(s, first)
	for i := range 16 {
		chat(s, strings.Repeat(string(rune('a'+i%26))+" other words of another prompt ", 60))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, metrics := call(s, "admin-key", "GET", "/metrics", "")
		if strings.Contains(metrics, "kvserve_kv_disk_blocks ") && !strings.Contains(metrics, "kvserve_kv_disk_blocks 0\n") &&
			strings.Contains(metrics, "kvserve_kv_disk_queue_depth 0\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing reached the disk tier")
		}
		time.Sleep(50 * time.Millisecond)
	}

	s.Kill(t)
	r := sdk.Start(t, sdk.Options{Args: args, DataDir: s.DataDir})
	if status, body := call(r, key.Secret, "GET", "/v1/cached_contents/"+cache.ID, ""); status != 200 {
		t.Fatalf("the context cache after the crash: %d %s", status, body)
	}
	if cached := chat(r, first); cached == 0 {
		t.Error("the prompt on disk before the crash was not served from it after")
	}
	if status, body := call(r, "admin-key", "GET", "/v1/admin/keys?tenant=acme", ""); status != 200 || !strings.Contains(body, `"role":"developer"`) {
		t.Fatalf("keys after the crash: %d %s", status, body)
	}
	out, err := exec.Command(r.Bin, "audit", "verify", "--data-dir", r.DataDir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "chain intact") {
		t.Fatalf("kvserve audit verify after the crash: %v\n%s", err, out)
	}
}
