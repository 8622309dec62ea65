// Package ui_test opens kvserve's dashboard (/ui) in a real browser —
// headless Chromium, driven by the npm package playwright-core pinned in
// this directory's package-lock.json — against a real `kvserve serve`
// under load, and checks that what a person would see is live and true:
// the numbers move between polls, agree with /metrics, and a key without
// the admin role is refused on the page.
//
// The browser is Debian's (/usr/bin/chromium, or KVSERVE_CHROMIUM);
// playwright never downloads one. scripts/test.sh installs both. Without
// Chromium the test fails, as it does without Node; a developer may skip
// it with KVSERVE_SKIP_NODE=1 (never in CI).
package ui_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvserve/kvserve/tests/sdk"
)

const (
	adminKey = "sk-kvserve-ui-test-admin"
	devKey   = "sk-kvserve-ui-test-dev"
	// scriptTimeout bounds the browser's run.
	scriptTimeout = 3 * time.Minute
)

// chromium returns the browser binary, failing t (never skipping) when it
// is missing.
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("KVSERVE_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the dashboard's browser test needs Chromium at %s (%v): install Debian's chromium package "+
			"(./scripts/test.sh does, as root) or name another binary in KVSERVE_CHROMIUM; "+
			"developers may skip the Node tests with KVSERVE_SKIP_NODE=1 (never in CI)", path, err)
	}
	return path
}

// reading is one look at the page between two scrapes of /metrics.
type reading struct {
	Before, After counters
	Shown         struct {
		Metrics          map[string]float64
		Snapshot         string
		Fragment         string
		TTFTBars         []float64 `json:"ttftBars"`
		ITLBars          []float64 `json:"itlBars"`
		HistoryPaths     int       `json:"historyPaths"`
		Sessions, Caches [][]string
		CostsMessage     string `json:"costsMessage"`
		Costs            [][]string
	}
}

type counters struct{ Requests, Prompt, Cached, Generated float64 }

type result struct {
	First, Second, Third reading
	Errors               []string
	Refused              struct {
		Status, Text string
		BoardHidden  bool `json:"boardHidden"`
		HTTP         int
		Body         string
	}
	Login struct {
		LoginHidden bool `json:"loginHidden"`
		Address     string
	}
}

func TestDashboardInBrowser(t *testing.T) {
	node := sdk.FindNode(t)
	browser := chromium(t)
	dir := filepath.Join(sdk.RepoRoot(t), "tests", "ui")
	sdk.CheckInstalled(t, dir)

	srv := sdk.Start(t, sdk.Options{APIKeys: []string{adminKey, devKey + "=acme"}, Engine: "sim",
		Args: []string{"--cache-min-tokens", "16"}})
	createCache(t, srv.URL)

	ctx, stop := context.WithCancel(context.Background())
	var sent atomic.Int64
	var wg sync.WaitGroup
	loadErr := make(chan error, 4)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				if err := chat(ctx, srv.URL, fmt.Sprintf("agent-%d", w), fmt.Sprintf("worker %d asks question %d", w, i)); err != nil {
					if ctx.Err() == nil {
						loadErr <- err
					}
					return
				}
				sent.Add(1)
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	shots := []string{filepath.Join(t.TempDir(), "dashboard.png")}
	if p := os.Getenv("KVSERVE_UI_SCREENSHOT"); p != "" {
		shots = append(shots, p)
	}
	rctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := sdk.Command(rctx, node, "dashboard.mjs")
	cmd.Dir = dir
	cmd.Env = append(sdk.CleanEnv("UI_", "PLAYWRIGHT_"), "UI_URL="+srv.URL, "UI_ADMIN_KEY="+adminKey, "UI_DEV_KEY="+devKey,
		"UI_CHROMIUM="+browser, "UI_PROFILE="+t.TempDir(), "UI_SCREENSHOTS="+strings.Join(shots, ":"),
		"PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("node dashboard.mjs: %v after %s\nstdout: %s\nstderr: %s", err, time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
	}
	stop()
	wg.Wait()
	select {
	case err := <-loadErr:
		t.Fatalf("load: %v", err)
	default:
	}
	var r result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("decode the script's report %q: %v\nstderr: %s", stdout.String(), err, stderr.String())
	}
	t.Logf("browser run %s, %d requests of load; screenshot %s", time.Since(start).Round(time.Millisecond), sent.Load(), strings.Join(shots, ", "))
	for _, p := range shots {
		if st, err := os.Stat(p); err != nil || st.Size() < 10_000 {
			t.Errorf("screenshot %s: %v (%d bytes)", p, err, sizeOf(st))
		}
	}
	if len(r.Errors) > 0 {
		t.Errorf("the page logged errors: %q", r.Errors)
	}

	for i, rd := range []reading{r.First, r.Second, r.Third} {
		t.Run(fmt.Sprintf("reading %d", i+1), func(t *testing.T) { checkReading(t, rd) })
	}
	// Live: the numbers moved between polls under load.
	a, b := r.First.Shown.Metrics, r.Third.Shown.Metrics
	if !(b["requests"] > a["requests"]) || !(b["generated-tokens"] > a["generated-tokens"]) {
		t.Errorf("the numbers did not change under load: requests %v → %v, generated %v → %v",
			a["requests"], b["requests"], a["generated-tokens"], b["generated-tokens"])
	}
	if r.Third.Shown.HistoryPaths == 0 {
		t.Error("the last-minute chart drew no line")
	}
	if s := r.Third.Shown.Sessions; len(s) != 3 || s[0][1] != "acme" {
		t.Errorf("sessions table %q, want the load's three agent sessions of tenant acme", s)
	}
	if c := r.Third.Shown.Caches; len(c) != 1 || c[0][0] != "ui-test-document" || c[0][1] != "acme" {
		t.Errorf("caches table %q, want the test's cache", c)
	}
	// The usage ledger's costs per tenant: the load's tenant, its requests
	// counted, a price and what the cache saved.
	if m := r.Third.Shown.CostsMessage; m != "" {
		t.Errorf("cost panel says %q", m)
	}
	if c := r.Third.Shown.Costs; len(c) != 1 || c[0][0] != "acme" || c[0][1] == "0" || !strings.HasPrefix(c[0][3], "$") {
		t.Errorf("cost table %q, want one row for tenant acme with its requests and cost", c)
	}

	// Without a key the page asks for one, and shows the board once given
	// an admin key (the waits in the script: it failed otherwise).
	if !r.Login.LoginHidden || strings.Contains(r.Login.Address, adminKey) {
		t.Errorf("after logging in: login form hidden %v, address %q", r.Login.LoginHidden, r.Login.Address)
	}
	// A developer's key: 403 from the endpoint, the refusal on the page.
	if r.Refused.HTTP != http.StatusForbidden || !strings.Contains(r.Refused.Body, "permission_error") {
		t.Errorf("the dashboard's data for a developer key: %d %s, want 403 in OpenAI's shape", r.Refused.HTTP, r.Refused.Body)
	}
	if r.Refused.Status != "403" || !r.Refused.BoardHidden || !strings.Contains(r.Refused.Text, "not an admin key") ||
		!strings.Contains(r.Refused.Text, "admin role") {
		t.Errorf("the page's refusal: status %q, board hidden %v, text %q", r.Refused.Status, r.Refused.BoardHidden, r.Refused.Text)
	}
}

// checkReading checks one look at the page against /metrics read just
// before the poll it shows and just after.
func checkReading(t *testing.T, r reading) {
	m := r.Shown.Metrics
	if r.Shown.Fragment != "" {
		t.Errorf("the key stayed in the address: %q", r.Shown.Fragment)
	}
	for _, c := range []struct {
		name, metric  string
		before, after float64
	}{
		{"requests", "requests", r.Before.Requests, r.After.Requests},
		{"prompt tokens", "prompt-tokens", r.Before.Prompt, r.After.Prompt},
		{"cached tokens", "cached-tokens", r.Before.Cached, r.After.Cached},
		{"generated tokens", "generated-tokens", r.Before.Generated, r.After.Generated},
	} {
		v, ok := m[c.metric]
		if !ok || v < c.before || v > c.after {
			t.Errorf("%s shown %v (present %v), /metrics said %v before the poll and %v after", c.name, v, ok, c.before, c.after)
		}
	}
	if m["requests"] <= 0 {
		t.Errorf("no request counted: %v", m)
	}
	hit, ok := m["hit-rate"]
	if !ok || hit < 0 || hit > 1 || math.Abs(hit-m["cached-tokens"]/m["prompt-tokens"]) > 1e-9 {
		t.Errorf("hit rate %v (present %v), want cached/prompt = %v/%v", hit, ok, m["cached-tokens"], m["prompt-tokens"])
	}
	if hit == 0 {
		t.Errorf("agent sessions repeating a system prompt hit no cached token")
	}
	if lm, ok := m["hit-rate-minute"]; ok && (lm < 0 || lm > 1) {
		t.Errorf("last minute's hit rate %v", lm)
	}
	if m["tier-pool"] <= 0 || m["pool-used"] <= 0 || m["pool-used"] > 1 {
		t.Errorf("occupancy: G1 blocks %v, pool used %v", m["tier-pool"], m["pool-used"])
	}
	if nonZero(r.Shown.TTFTBars) == 0 || nonZero(r.Shown.ITLBars) == 0 {
		t.Errorf("histograms without bars: TTFT %v, ITL %v", r.Shown.TTFTBars, r.Shown.ITLBars)
	}
}

func nonZero(xs []float64) int {
	n := 0
	for _, x := range xs {
		if x > 0 {
			n++
		}
	}
	return n
}

func sizeOf(st os.FileInfo) int64 {
	if st == nil {
		return 0
	}
	return st.Size()
}

// system is the load's shared system prompt: long enough that its blocks
// are cached and hit.
var system = strings.Repeat("You are the assistant of kvserve's dashboard test; answer in one short sentence. ", 8)

func post(ctx context.Context, url, key string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, b.String())
	}
	return nil
}

// chat sends one turn of an agent session of tenant acme.
func chat(ctx context.Context, base, session, user string) error {
	return post(ctx, base+"/v1/chat/completions", devKey, map[string]any{
		"model": sdk.ModelID, "max_tokens": 12,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}},
		"kvserve":  map[string]any{"session_id": session},
	})
}

// createCache creates one context cache of tenant acme.
func createCache(t *testing.T, base string) {
	t.Helper()
	err := post(context.Background(), base+"/v1/cached_contents", devKey, map[string]any{
		"model": sdk.ModelID, "display_name": "ui-test-document", "ttl": "600s",
		"messages": []map[string]string{{"role": "system", "content": system + " The document follows."}},
	})
	if err != nil {
		t.Fatalf("create a context cache: %v", err)
	}
}
