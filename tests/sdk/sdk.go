// Package sdk runs a real kvserve server for the integration tests that
// drive it with the official client SDKs: the npm packages openai,
// @anthropic-ai/sdk and @google/genai (the Node project in this directory,
// run by this package's tests) and github.com/openai/openai-go (tests/sdkgo).
//
// # Why a real binary and a real model
//
// The point of these tests is what a user of the SDKs sees, so nothing is
// faked: Start builds cmd/kvserve with the go command, runs `kvserve serve`
// on a free loopback port with a fresh data directory, and the server
// generates its default synthetic model (SmolLM2-135M's shape, Q8_0, its
// byte-level BPE vocabulary and ChatML template) there, exactly as on a
// user's first start. The dialects, authentication, flags and shutdown are
// the ones the binary ships with; a dialect registered in serve is reached
// by the SDKs without any change here. The synthetic model's weights are
// random, so tests assert shapes, types, usage arithmetic and the outputs
// the server constrains (tool arguments that parse and follow the schema),
// never text.
//
// # Both engines
//
// Every test runs twice (Engines): against the real forward pass and
// against `kvserve serve --engine sim`, the simulator that a router or a
// capacity study puts in its place. Nothing the tests assert needs a real
// model: random weights already rule out checking text, and the simulator
// keeps what the assertions rest on (the real tokenizer and template, the
// real scheduler and KV manager behind the cached-token counts, and the
// real grammar constraints, whose free strings it bounds so that
// constrained output ends).
//
// # Expected token counts
//
// Usage numbers are checked exactly. The server's own prompt builder
// (api.Model.BuildPrompt: the model's chat template and tokenizer, loaded
// from the same file the server serves) gives the prompt tokens of a
// conversation, and the cached tokens of a request that shares a prefix
// with an earlier one are the full blocks of their common token prefix.
// Fixture computes those numbers for the conversations a script sends and
// hands them to it as JSON.
package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// ModelID is the id under which `kvserve serve` serves its synthetic model.
const ModelID = "kvserve-synthetic-smollm2-135m"

// BlockSize is the KV block size the server is started with: cached-token
// counts are multiples of it.
const BlockSize = 16

// listenRE finds the address in serve's "listening on" line.
var listenRE = regexp.MustCompile(`listening on (http://[0-9.:]+)`)

// startTimeout bounds building the binary, generating the model and
// loading it.
const startTimeout = 3 * time.Minute

// Options configure Start. The zero value starts an open server (no API
// keys).
type Options struct {
	// APIKeys are passed as --api-key flags: "KEY" or "KEY=TENANT". Each
	// tenant's KV cache is isolated, so tests that count cached tokens can
	// run side by side under different keys.
	APIKeys []string
	// Engine is what computes the tokens (serve's --engine): "model" for
	// the real forward pass, "sim" for the simulator; empty means serve's
	// default.
	Engine string
	// Args are more `kvserve serve` flags.
	Args []string
	// DataDir, when set, is the data directory (a restarted server's);
	// by default each server gets a fresh one.
	DataDir string
}

// Engines returns the engines every SDK test runs against. The simulator
// (the same scheduler, KV manager, constraints and API, with a forward
// pass that only spends modelled time) must look to a client exactly like
// the real engine, so it passes the same tests.
func Engines() []string { return []string{"model", "sim"} }

// Server is a running `kvserve serve` process.
type Server struct {
	// URL is the server's base URL, http://127.0.0.1:PORT (no trailing
	// slash).
	URL string
	// ModelPath is the GGUF file the server generated and serves.
	ModelPath string
	// Bin is the kvserve binary it runs, and DataDir its data directory.
	Bin, DataDir string

	model  *api.Model
	log    *syncBuffer
	kill   func() error
	exited <-chan struct{}
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	if err := s.kill(); err != nil {
		t.Fatalf("sdk: kill kvserve: %v", err)
	}
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("sdk: kvserve did not exit after SIGKILL")
	}
}

// RepoRoot returns the module root (the directory of go.mod), found from
// this file's location so that tests work from any clone.
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("sdk: cannot locate the source directory")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("sdk: module root not found: %v", err)
	}
	return root
}

// Start builds cmd/kvserve, starts `kvserve serve` with a fresh data
// directory under t.TempDir, waits until it is ready and stops it (SIGINT,
// then SIGKILL after ten seconds) when t ends. The server's log is
// attached to t's output if t fails.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	root := RepoRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "kvserve")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("sdk: the go command is needed to build kvserve: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	build := exec.CommandContext(ctx, goCmd, "build", "-o", bin, "./cmd/kvserve")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("sdk: go build ./cmd/kvserve: %v\n%s", err, out)
	}

	dataDir := filepath.Join(dir, "data")
	if o.DataDir != "" {
		dataDir = o.DataDir
	}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir,
		"--block-size", fmt.Sprint(BlockSize), "--kv-cache-memory", "512MiB", "--shutdown-timeout", "5s"}
	if o.Engine != "" {
		args = append(args, "--engine", o.Engine)
	}
	for _, k := range o.APIKeys {
		args = append(args, "--api-key", k)
	}
	args = append(args, o.Args...)

	s := &Server{log: &syncBuffer{}, Bin: bin, DataDir: dataDir}
	listening := make(chan string, 1)
	s.log.onLine = func(line string) {
		if m := listenRE.FindStringSubmatch(line); m != nil {
			select {
			case listening <- m[1]:
			default: // only the first address counts
			}
		}
	}
	// The process lives until t's cleanup, not just for this function.
	runCtx, stop := context.WithCancel(context.Background())
	cmd := Command(runCtx, bin, args...)
	cmd.Env = CleanEnv("KVSERVE_")
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		stop()
		t.Fatalf("sdk: start kvserve serve: %v", err)
	}
	exited := make(chan struct{}) // closed when the process has exited
	s.exited, s.kill = exited, cmd.Process.Kill
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			t.Errorf("sdk: kvserve did not exit after SIGINT and SIGKILL")
		}
		if t.Failed() {
			t.Logf("kvserve serve log:\n%s", s.log.String())
		}
	})

	select {
	case s.URL = <-listening:
	case <-exited:
		t.Fatalf("sdk: kvserve serve exited before listening: %v", waitErr)
	case <-ctx.Done():
		t.Fatalf("sdk: kvserve serve did not listen within %s", startTimeout)
	}
	if err := waitReady(ctx, s.URL, exited); err != nil {
		t.Fatalf("sdk: %v", err)
	}

	paths, _ := filepath.Glob(filepath.Join(dataDir, "models", "*.gguf"))
	if len(paths) != 1 {
		t.Fatalf("sdk: want one generated model in %s, found %v", dataDir, paths)
	}
	s.ModelPath = paths[0]
	s.model = loadPromptModel(t, s.ModelPath)
	return s
}

// Log returns what the server wrote so far.
func (s *Server) Log() string { return s.log.String() }

// waitReady polls /ready until it answers 200 or the server exits.
func waitReady(ctx context.Context, url string, exited <-chan struct{}) error {
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", url+"/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("kvserve serve exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("kvserve serve not ready: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// loadPromptModel loads what api.Model.BuildPrompt needs (tokenizer and
// chat template) from the served file, without weights or an engine.
func loadPromptModel(t testing.TB, path string) *api.Model {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatalf("sdk: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatalf("sdk: tokenizer of %s: %v", path, err)
	}
	tmpl, err := chat.Parse(tok.ChatTemplate())
	if err != nil {
		t.Fatalf("sdk: chat template of %s: %v", path, err)
	}
	return &api.Model{ID: ModelID, Tokenizer: tok, Template: tmpl}
}

// PromptTokens returns the prompt the server builds for a chat request
// with msgs (and no tools).
func (s *Server) PromptTokens(t testing.TB, msgs []chat.Message) []int32 {
	t.Helper()
	p, err := s.model.BuildPrompt(&api.Request{Model: ModelID, Messages: msgs})
	if err != nil {
		t.Fatalf("sdk: build prompt: %v", err)
	}
	return p.Tokens
}

// PrefixTokens returns how many leading tokens of the prompt for full are
// the tokens of the conversation prefix rendered on its own (no generation
// prompt): where a cache_control breakpoint after prefix ends. It fails t
// if the prefix's tokens are not a prefix of the prompt's (the boundary
// would fall inside a token).
func (s *Server) PrefixTokens(t testing.TB, prefix, full []chat.Message) int {
	t.Helper()
	tok := s.model.Tokenizer
	var opts chat.RenderOptions
	if tok.BOS() >= 0 {
		opts.BOS = tok.TokenText(tok.BOS())
	}
	if tok.EOS() >= 0 {
		opts.EOS = tok.TokenText(tok.EOS())
	}
	text, err := s.model.Template.Render(prefix, opts)
	if err != nil {
		t.Fatalf("sdk: render: %v", err)
	}
	ids := tok.Encode(text, false, true)
	if tok.AddBOS() && (len(ids) == 0 || ids[0] != tok.BOS()) {
		ids = append([]int32{tok.BOS()}, ids...)
	}
	prompt := s.PromptTokens(t, full)
	n := 0
	for n < len(ids) && n < len(prompt) && ids[n] == prompt[n] {
		n++
	}
	if n != len(ids) {
		t.Fatalf("sdk: the prefix's %d tokens share only %d with the prompt", len(ids), n)
	}
	return n
}

// SharedBlockTokens returns the cached tokens that a request with prompt b
// reports after a request with prompt a (in one tenant, with nothing
// evicted): the full blocks of their common token prefix, except that b's
// last token is always computed (its logits start the output), so a block
// that ends with it is not reused.
func SharedBlockTokens(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	n = min(n, len(b)-1)
	if n <= 0 {
		return 0
	}
	return n / BlockSize * BlockSize
}

// LongSystemPrompt returns a system prompt of a few hundred tokens (over
// twenty blocks), different for every name from its first words, for tests
// of cached-token counts.
func LongSystemPrompt(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are %s-bot, the assistant that the kvserve %s SDK test talks to.", name, name)
	rules := []string{
		"Answer in one short paragraph.", "Never invent facts; say when you do not know.",
		"Prefer metric units and ISO dates.", "When a tool fits the question, call it instead of guessing.",
		"Keep code samples under twenty lines.", "Quote numbers with their units.",
		"Do not repeat the question back.", "Ask one clarifying question when the request is ambiguous.",
	}
	for i := 0; i < 2; i++ {
		for j, r := range rules {
			fmt.Fprintf(&b, " Rule %d: %s", i*len(rules)+j+1, r)
		}
	}
	return b.String()
}

// Command is exec.CommandContext for a child process of a test: cancelling
// ctx interrupts it (SIGINT, so a server shuts down gracefully) and kills
// it ten seconds later, and on Linux the kernel kills it if the test
// process dies first.
func Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Cancel = func() error { return interrupt(cmd.Process) }
	cmd.WaitDelay = 10 * time.Second
	setParentDeathSignal(cmd)
	return cmd
}

// CleanEnv returns the environment without variables whose names start
// with one of prefixes (so a developer's settings do not leak into a
// test).
func CleanEnv(prefixes ...string) []string {
	var env []string
outer:
	for _, kv := range os.Environ() {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue outer
			}
		}
		env = append(env, kv)
	}
	return env
}

// syncBuffer is a bytes.Buffer safe for concurrent writers and readers
// that calls onLine (when set) with each complete line written.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	partial []byte
	onLine  func(string)
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Write(p)
	if b.onLine != nil {
		b.partial = append(b.partial, p...)
		for {
			i := bytes.IndexByte(b.partial, '\n')
			if i < 0 {
				break
			}
			b.onLine(string(b.partial[:i]))
			b.partial = b.partial[i+1:]
		}
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// interrupt asks p to shut down gracefully (os.Interrupt), or kills it
// where interrupts cannot be sent.
func interrupt(p *os.Process) error {
	if err := p.Signal(os.Interrupt); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return err
		}
		return p.Kill()
	}
	return nil
}
