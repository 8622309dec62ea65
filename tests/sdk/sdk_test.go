package sdk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/tests/sdk"
)

// script is one Node test script and how its SDK finds the server.
type script struct {
	name string // tenant name and file stem
	file string
	env  func(url, key string) []string
}

var scripts = []script{
	{name: "openai", file: "openai.mjs", env: func(url, key string) []string {
		return []string{"OPENAI_BASE_URL=" + url + "/v1", "OPENAI_API_KEY=" + key}
	}},
	{name: "anthropic", file: "anthropic.mjs", env: func(url, key string) []string {
		return []string{"ANTHROPIC_BASE_URL=" + url, "ANTHROPIC_API_KEY=" + key}
	}},
	// @google/genai reads its key from the environment but takes the
	// server from httpOptions.baseUrl (the fixture's url).
	{name: "genai", file: "genai.mjs", env: func(_, key string) []string {
		return []string{"GEMINI_API_KEY=" + key}
	}},
}

// scriptTimeout bounds one script's run.
const scriptTimeout = 2 * time.Minute

// TestSDKs runs every script against a kvserve server of each engine,
// each script under its own API key (so its own tenant: cached-token
// counts of one script are not disturbed by another's prompts).
func TestSDKs(t *testing.T) {
	node := sdk.FindNode(t)
	dir := filepath.Join(sdk.RepoRoot(t), "tests", "sdk")
	sdk.CheckInstalled(t, dir)
	latest := latestDir(t, dir)

	var keys []string
	for _, s := range scripts {
		keys = append(keys, apiKey(s.name)+"="+s.name)
	}
	for _, engine := range sdk.Engines() {
		// The pinned SDKs, then their newest releases, each against a
		// fresh server (the scripts expect a cold cache).
		for _, set := range []struct{ name, dir string }{{"pinned", dir}, {"latest", latest}} {
			t.Run(engine+"/"+set.name, func(t *testing.T) {
				srv := sdk.Start(t, sdk.Options{APIKeys: keys, Engine: engine, Args: []string{"--cache-min-tokens", fmt.Sprint(cacheMinTokens)}})
				runScripts(t, node, set.dir, srv)
			})
		}
	}
}

// latestDir prepares tests/sdk/latest, where scripts/test.sh installs the
// newest release of every SDK package.json pins: the scripts are copied
// there (an ES module resolves its imports beside itself), and the
// versions found are logged. It fails when the packages are missing.
func latestDir(t *testing.T, dir string) string {
	t.Helper()
	latest := filepath.Join(dir, "latest")
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err == nil {
		err = json.Unmarshal(raw, &pkg)
	}
	if err != nil {
		t.Fatalf("tests/sdk/package.json: %v", err)
	}
	var found []string
	for name, pinned := range pkg.Dependencies {
		var got struct {
			Version string `json:"version"`
		}
		raw, err := os.ReadFile(filepath.Join(latest, "node_modules", filepath.FromSlash(name), "package.json"))
		if err == nil {
			err = json.Unmarshal(raw, &got)
		}
		if err != nil {
			t.Fatalf("the newest %s is not installed in tests/sdk/latest (%v): ./scripts/test.sh installs it", name, err)
		}
		found = append(found, fmt.Sprintf("%s %s (pinned %s)", name, got.Version, pinned))
	}
	slices.Sort(found)
	t.Logf("newest SDK releases: %s", strings.Join(found, ", "))
	mjs, err := filepath.Glob(filepath.Join(dir, "*.mjs"))
	if err != nil || len(mjs) == 0 {
		t.Fatalf("no scripts in %s: %v", dir, err)
	}
	for _, f := range mjs {
		data, err := os.ReadFile(f)
		if err == nil {
			err = os.WriteFile(filepath.Join(latest, filepath.Base(f)), data, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return latest
}

// runScripts runs every script against srv, one subtest each.
func runScripts(t *testing.T, node, dir string, srv *sdk.Server) {
	for _, s := range scripts {
		t.Run(s.name, func(t *testing.T) {
			fx := fixture(t, srv, s.name)
			raw, err := json.Marshal(fx)
			if err != nil {
				t.Fatal(err)
			}
			env := append(sdk.CleanEnv("OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_", "KVSERVE_", "NODE_OPTIONS="),
				"KVSERVE_SDK_FIXTURE="+string(raw), "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
			env = append(env, s.env(srv.URL, fx.APIKey)...)
			out := runNode(t, node, dir, env, s.file)
			t.Logf("%s: %s", s.file, summaryLine(out))
		})
	}
}

// fixtureJSON is what a script receives in KVSERVE_SDK_FIXTURE: where the
// server is and the exact token counts it must report.
type fixtureJSON struct {
	URL       string `json:"url"`
	Model     string `json:"model"`
	APIKey    string `json:"apiKey"`
	BlockSize int    `json:"blockSize"`
	// Hello is a one-message conversation, its prompt length and its
	// cached tokens when it is sent again.
	Hello struct {
		Messages     []message `json:"messages"`
		PromptTokens int       `json:"promptTokens"`
		CachedTokens int       `json:"cachedTokens"`
	} `json:"hello"`
	// Cache is two conversations with one long system prompt: their
	// prompt lengths, and the cached tokens of the second after the first.
	Cache struct {
		System       string   `json:"system"`
		Users        []string `json:"users"`
		PromptTokens []int    `json:"promptTokens"`
		CachedTokens int      `json:"cachedTokens"`
		// SystemTokens is where the system prompt ends in the prompts:
		// where a cache_control breakpoint on it ends.
		SystemTokens int `json:"systemTokens"`
	} `json:"cache"`
	// ContextCache is a context-cache resource (cachedContents): its system
	// instruction and one user turn, then a question asked with it; the
	// cache's token count, the question's prompt tokens and the tokens it
	// reads from the cache; and the key of another tenant, which must not
	// see the cache.
	ContextCache struct {
		System       string `json:"system"`
		Contents     string `json:"contents"`
		Question     string `json:"question"`
		TokenCount   int    `json:"tokenCount"`
		PromptTokens int    `json:"promptTokens"`
		CachedTokens int    `json:"cachedTokens"`
		OtherAPIKey  string `json:"otherApiKey"`
	} `json:"contextCache"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func apiKey(tenant string) string { return "sk-kvserve-sdk-test-" + tenant }

// cacheMinTokens is the server's smallest context cache in the tests
// (--cache-min-tokens): below the default, so a test cache stays quick.
const cacheMinTokens = 64

// fixture computes the token counts for one script's conversations with
// the server's own prompt builder. Each script gets its own system prompt,
// so even under one tenant no script could reuse another's blocks.
func fixture(t *testing.T, srv *sdk.Server, name string) *fixtureJSON {
	fx := &fixtureJSON{URL: srv.URL, Model: sdk.ModelID, APIKey: apiKey(name), BlockSize: sdk.BlockSize}
	fx.Hello.Messages = []message{{Role: "user", Content: "Hello"}}
	hello := srv.PromptTokens(t, []chat.Message{{Role: "user", Content: "Hello"}})
	fx.Hello.PromptTokens = len(hello)
	fx.Hello.CachedTokens = sdk.SharedBlockTokens(hello, hello)

	system := sdk.LongSystemPrompt(name)
	fx.Cache.System = system
	fx.Cache.Users = []string{"What is the capital of France?", "Name three prime numbers."}
	var prompts [][]int32
	for _, u := range fx.Cache.Users {
		p := srv.PromptTokens(t, []chat.Message{{Role: "system", Content: system}, {Role: "user", Content: u}})
		prompts = append(prompts, p)
		fx.Cache.PromptTokens = append(fx.Cache.PromptTokens, len(p))
	}
	fx.Cache.CachedTokens = sdk.SharedBlockTokens(prompts[0], prompts[1])
	sys := []chat.Message{{Role: "system", Content: system}}
	fx.Cache.SystemTokens = srv.PrefixTokens(t, sys, append(sys, chat.Message{Role: "user", Content: fx.Cache.Users[0]}))
	if fx.Cache.CachedTokens < 8*sdk.BlockSize {
		t.Fatalf("the shared system prompt covers only %d cached tokens; make it longer", fx.Cache.CachedTokens)
	}
	cc := &fx.ContextCache
	cc.System = sdk.LongSystemPrompt(name + "-context-cache")
	cc.Contents, cc.Question = "Here is the document to discuss.", "What does it say?"
	prefix := []chat.Message{{Role: "system", Content: cc.System}, {Role: "user", Content: cc.Contents}}
	full := append(slices.Clone(prefix), chat.Message{Role: "user", Content: cc.Question})
	cc.TokenCount = srv.PrefixTokens(t, prefix, full)
	cc.PromptTokens = len(srv.PromptTokens(t, full))
	cc.CachedTokens = cc.TokenCount / sdk.BlockSize * sdk.BlockSize // the prefilled full blocks
	if cc.TokenCount < cacheMinTokens {
		t.Fatalf("the context cache's %d tokens are below the server's minimum %d", cc.TokenCount, cacheMinTokens)
	}
	for _, other := range scripts {
		if other.name != name {
			cc.OtherAPIKey = apiKey(other.name)
			break
		}
	}
	t.Logf("fixture: hello %d prompt tokens (%d cached when repeated); shared system prompt: %d tokens, %v prompt tokens, %d cached",
		fx.Hello.PromptTokens, fx.Hello.CachedTokens, fx.Cache.SystemTokens, fx.Cache.PromptTokens, fx.Cache.CachedTokens)
	return fx
}

// runNode runs one script with node's test runner and fails t unless every
// test in it ran and passed.
func runNode(t *testing.T, node, dir string, env []string, file string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := sdk.Command(ctx, node, "--test", "--test-reporter=tap", file)
	cmd.Dir = dir
	cmd.Env = env
	start := time.Now()
	outb, err := cmd.CombinedOutput()
	out := string(outb)
	if err != nil {
		t.Fatalf("node --test %s: %v after %s\n%s", file, err, time.Since(start).Round(time.Millisecond), out)
	}
	sum, err := parseSummary(out)
	if err != nil {
		t.Fatalf("node --test %s: %v\n%s", file, err, out)
	}
	if sum["pass"] == 0 || sum["pass"] != sum["tests"] {
		t.Fatalf("node --test %s: %d of %d tests passed (%v)\n%s", file, sum["pass"], sum["tests"], sum, out)
	}
	if testing.Verbose() {
		t.Logf("%s in %s:\n%s", file, time.Since(start).Round(time.Millisecond), out)
	}
	return out
}

var summaryRE = regexp.MustCompile(`(?m)^# (tests|suites|pass|fail|cancelled|skipped|todo) (\d+)$`)

// parseSummary reads the counts at the end of node's TAP output and checks
// that nothing failed, was cancelled, skipped or left to do.
func parseSummary(out string) (map[string]int, error) {
	sum := map[string]int{}
	for _, m := range summaryRE.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		sum[m[1]] = n
	}
	if _, ok := sum["tests"]; !ok {
		return nil, fmt.Errorf("no TAP summary in the output")
	}
	for _, k := range []string{"fail", "cancelled", "skipped", "todo"} {
		if sum[k] != 0 {
			return sum, fmt.Errorf("%d tests %s", sum[k], k)
		}
	}
	return sum, nil
}

func summaryLine(out string) string {
	sum, _ := parseSummary(out)
	return fmt.Sprintf("%d tests, %d passed", sum["tests"], sum["pass"])
}

func TestParseSummary(t *testing.T) {
	tests := []struct {
		name, out string
		pass      int
		err       bool
	}{
		{"ok", "ok 1 - a\n# tests 2\n# suites 0\n# pass 2\n# fail 0\n# cancelled 0\n# skipped 0\n# todo 0\n", 2, false},
		{"failed", "not ok 1 - a\n# tests 2\n# pass 1\n# fail 1\n", 1, true},
		{"skipped", "# tests 2\n# pass 1\n# fail 0\n# skipped 1\n", 1, true},
		{"cancelled", "# tests 1\n# pass 0\n# cancelled 1\n", 0, true},
		{"no summary", "Error: Cannot find module 'openai'\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sum, err := parseSummary(tc.out)
			if (err != nil) != tc.err || sum["pass"] != tc.pass {
				t.Errorf("parseSummary = %v, %v; want pass %d, error %v", sum, err, tc.pass, tc.err)
			}
		})
	}
}
