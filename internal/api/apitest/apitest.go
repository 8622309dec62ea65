// Package apitest builds real servers for the tests of the API dialects: a
// tiny real model (the shared tiny-q8_0.gguf) with a chat template and a
// longer context written into a copy of it, an engine running it, an
// api.Server with the dialects under test, and an httptest server.
//
// Why a copy of a shared model rather than a fake backend: dialect tests
// must see real tokenization, real templates, real KV blocks (cached-token
// counts, blocks freed on disconnect) and real sampling. The tiny model's
// placeholder vocabulary tokenizes any ASCII text (mostly one byte token per
// character), and it runs fast enough that a test generates hundreds of
// tokens in well under a second. Its training context (256) is raised to
// 4096 in the copy: its RoPE has no learned positions, so longer prompts are
// numerically fine.
package apitest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/constrain"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/grammar"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/testshared"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// TemplateFile is the chat template written into the test model: Qwen
// 2.5's (the Hermes tool-call family), from shared/testdata.
const TemplateFile = "Qwen-Qwen2.5-7B-Instruct.jinja"

// ContextLength is the test model's context.
const ContextLength = 4096

// ModelName is the served id of the test model.
const ModelName = "tiny-chat"

var (
	modelOnce sync.Once
	modelPath string
	modelErr  error
)

// ModelFile returns the path of the test model, writing it on first use
// (into the temporary directory, named by a hash of its inputs, so later
// runs reuse it).
func ModelFile(t testing.TB) string {
	t.Helper()
	shared := testshared.Dir(t)
	modelOnce.Do(func() { modelPath, modelErr = writeModel(shared) })
	if modelErr != nil {
		t.Fatalf("apitest: %v", modelErr)
	}
	return modelPath
}

var (
	bpeOnce sync.Once
	bpePath string
	bpeErr  error
)

// BPEModelFile returns a synthetic model with the tiny test model's
// dimensions, a 4096-token context and SmolLM2's byte-level BPE tokenizer
// and chat template, writing it on first use: for tests that need a
// tokenizer reading any text back exactly (the tiny model's placeholder
// vocabulary drops spaces).
func BPEModelFile(t testing.TB) string {
	t.Helper()
	bpeOnce.Do(func() { bpePath, bpeErr = writeBPEModel() })
	if bpeErr != nil {
		t.Fatalf("apitest: %v", bpeErr)
	}
	return bpePath
}

func writeBPEModel() (string, error) {
	tiny, err := synth.LookupShape("tiny", "")
	if err != nil {
		return "", err
	}
	smol, err := synth.LookupShape("smollm2-135m", "")
	if err != nil {
		return "", err
	}
	s := tiny
	s.Name = "tiny-bpe"
	s.Context, s.Vocab, s.Tokenizer = ContextLength, smol.Vocab, smol.Tokenizer
	m, err := synth.New(s, synth.FileQ8_0)
	if err != nil {
		return "", err
	}
	// The generator is deterministic: the file is named by its inputs'
	// version, and later runs reuse it.
	out := filepath.Join(os.TempDir(), "kvserve-apitest-tiny-bpe-v1.gguf")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".kvserve-apitest-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := m.WriteTo(tmp, synth.Options{Seed: 1}); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return out, os.Rename(tmp.Name(), out)
}

func writeModel(shared string) (string, error) {
	src := filepath.Join(shared, "models", "tiny-q8_0.gguf")
	tmpl, err := os.ReadFile(filepath.Join(shared, "testdata", "chat-templates", TemplateFile))
	if err != nil {
		return "", err
	}
	raw, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write(raw)
	h.Write(tmpl)
	fmt.Fprint(h, ContextLength, "v1")
	out := filepath.Join(os.TempDir(), "kvserve-apitest-"+hex.EncodeToString(h.Sum(nil))[:16]+".gguf")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	f, err := gguf.Parse(raw)
	if err != nil {
		return "", err
	}
	var w gguf.Writer
	for _, kv := range f.KVs {
		switch kv.Key {
		case "llama.context_length":
			w.Set(kv.Key, gguf.Uint32(ContextLength))
		case "general.alignment":
			w.Set(kv.Key, kv.Value)
			w.Alignment = f.Alignment
		default:
			w.Set(kv.Key, kv.Value)
		}
	}
	w.Set("tokenizer.chat_template", gguf.String(string(tmpl)))
	for _, t := range f.Tensors {
		if err := w.AddTensor(t.Name, t.Type, slices.Clone(t.Dims), t.Data); err != nil {
			return "", err
		}
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".kvserve-apitest-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := w.WriteTo(tmp); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return out, os.Rename(tmp.Name(), out)
}

// Options configure an Env. The zero value serves the model with default
// engine settings and no API keys.
type Options struct {
	// Dialects to register (the first gets unclaimed 404s).
	Dialects []api.Dialect
	// Config is the server configuration (its Registry is set by New).
	Config api.Config
	// Engine overrides engine settings (the forward pass runs on one
	// thread).
	Engine engine.Config
	// NoModel leaves the server loading (503).
	NoModel bool
	// Wrap, when set, wraps the backend (e.g. with a fake that fails).
	Wrap func(api.Backend) api.Backend
	// Template, when set, is the chat template source used instead of the
	// model's (e.g. a reasoning model's, from the shared testdata).
	Template string
	// ModelFile, when set, is the GGUF file served instead of the tiny
	// test model (e.g. a synthetic one with a byte-level BPE tokenizer).
	ModelFile string
}

// Env is a running test server.
type Env struct {
	Engine    *engine.Engine
	Server    *api.Server
	HTTP      *httptest.Server
	Model     *api.Model
	Tokenizer *tokenizer.Tokenizer
	Template  *chat.Template
	Recorder  *Recorder
	Registry  *prometheus.Registry
}

// New starts an Env; everything is stopped at the end of the test.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	path := o.ModelFile
	if path == "" {
		path = ModelFile(t)
	}
	mf, err := model.Open(path, gguf.Mapped, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mf.Close() })
	tok, err := tokenizer.FromGGUF(mf.GGUF)
	if err != nil {
		t.Fatal(err)
	}
	tok.Prepare()
	src := tok.ChatTemplate()
	if o.Template != "" {
		src = o.Template
	}
	tmpl, err := chat.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	ec := o.Engine
	if ec.KVMemoryBytes == 0 {
		ec.KVMemoryBytes = 32 << 20
	}
	ec.EndOfGeneration = tok.EOGs()
	ec.Registerer = reg
	ec.ModelID = ModelName
	// A random model rarely picks the token that closes a string.
	ec.Constraints = constrain.New(tok, tmpl, grammar.Options{MaxStringLength: 16})
	fwd, err := model.NewForwarder(mf.Model, model.ForwarderOptions{Threads: 1, KVType: tensor.F16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	e, err := engine.New(fwd, ec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	cfg := o.Config
	cfg.Registry = reg
	srv, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range o.Dialects {
		if err := srv.Register(d); err != nil {
			t.Fatal(err)
		}
	}
	rec := &Recorder{Backend: api.LocalBackend(e)}
	var backend api.Backend = rec
	if o.Wrap != nil {
		backend = o.Wrap(rec)
	}
	ecfg := e.Config()
	m := &api.Model{
		ID: ModelName, Description: "tiny random-weight test model",
		ContextLength: min(ecfg.MaxContext, e.KV().NumBlocks()*ecfg.BlockSize),
		Backend:       backend, Tokenizer: tok, Template: tmpl,
	}
	if !o.NoModel {
		srv.SetModel(m)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &Env{Engine: e, Server: srv, HTTP: hs, Model: m, Tokenizer: tok, Template: tmpl, Recorder: rec, Registry: reg}
}

// URL returns the server URL of path.
func (e *Env) URL(path string) string { return e.HTTP.URL + path }

// WaitIdle waits until no KV block is held by a running sequence, failing
// the test after a few seconds: every request has released its blocks.
func (e *Env) WaitIdle(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := e.Engine.Now()
		if st.KV.Active == 0 && st.Waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("blocks still held: %+v", st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Recorder is a Backend that remembers the requests it passes on.
type Recorder struct {
	Backend api.Backend
	mu      sync.Mutex
	reqs    []engine.Request
}

// Submit records r and submits it.
func (r *Recorder) Submit(ctx context.Context, req engine.Request) (api.Stream, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return r.Backend.Submit(ctx, req)
}

// Unpin passes an unpin on to the backend when it can (api.Unpinner), as
// the server's own backend does.
func (r *Recorder) Unpin(scope string, prompt []int32) int {
	if u, ok := r.Backend.(api.Unpinner); ok {
		return u.Unpin(scope, prompt)
	}
	return 0
}

// Requests returns the recorded requests.
func (r *Recorder) Requests() []engine.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

// Last returns the last recorded request.
func (r *Recorder) Last(t testing.TB) engine.Request {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reqs) == 0 {
		t.Fatal("no request reached the backend")
	}
	return r.reqs[len(r.reqs)-1]
}

// Greedy runs prompt on the engine directly, greedily, and returns the
// generated tokens (the end-of-generation token excluded): the reference a
// dialect's output must decode from.
func (e *Env) Greedy(t testing.TB, prompt []int32, maxTokens int) []int32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := e.Engine.Submit(ctx, engine.Request{Prompt: prompt, MaxTokens: maxTokens, Scope: "apitest-reference"})
	if err != nil {
		t.Fatal(err)
	}
	var out []int32
	var buf []engine.Output
	for {
		buf, err = st.Recv(ctx, buf[:0])
		for _, o := range buf {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			if o.Token >= 0 && !e.Tokenizer.IsEOG(o.Token) {
				out = append(out, o.Token)
			}
		}
		if err == engine.ErrDone {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// ChatPrompt renders and tokenizes msgs as the server does for a chat
// request without tools.
func (e *Env) ChatPrompt(t testing.TB, msgs []chat.Message, tools []chat.Tool) []int32 {
	t.Helper()
	text, err := e.Template.Render(msgs, chat.RenderOptions{Tools: tools, AddGenerationPrompt: true,
		BOS: e.Tokenizer.TokenText(e.Tokenizer.BOS()), EOS: e.Tokenizer.TokenText(e.Tokenizer.EOS())})
	if err != nil {
		t.Fatal(err)
	}
	ids := e.Tokenizer.Encode(text, false, true)
	if e.Tokenizer.AddBOS() && (len(ids) == 0 || ids[0] != e.Tokenizer.BOS()) {
		ids = append([]int32{e.Tokenizer.BOS()}, ids...)
	}
	return ids
}

// Post sends body (a string, []byte, or a value marshalled as JSON) to url
// with the given header name/value pairs and returns the response status,
// body and header.
func Post(t testing.TB, url string, body any, header ...string) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest("POST", url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data, resp.Header
}

// PostOK posts body and decodes a 200 response into out, failing the test
// on any other status.
func PostOK(t testing.TB, url string, body any, out any) {
	t.Helper()
	status, data, _ := Post(t, url, body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}
