package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/kvevents"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/sim"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/tokenizer"
	"github.com/kvserve/kvserve/internal/ui"
)

// serveOptions are the settings of `kvserve serve`.
type serveOptions struct {
	engineOptions
	apiOptions
}

// syntheticShape is the shape of the model generated when no --model is
// given: small enough to generate in seconds and serve on any machine.
const syntheticShape = "smollm2-135m"

func newServeCmd() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve [--model FILE] [--addr 127.0.0.1:8080] [--data-dir DIR] [--config FILE] [flags]",
		Short: "Serve a model over OpenAI-, Anthropic- and Gemini-compatible HTTP APIs",
		Long: `Loads a GGUF model and serves it over HTTP:
  OpenAI     /v1/chat/completions, /v1/completions, /v1/responses, /v1/models
  Anthropic  /v1/messages, /v1/messages/count_tokens
  Gemini     /v1beta/models/{model}:generateContent, :streamGenerateContent, :countTokens,
             /v1beta/models, /v1beta/cachedContents[/{id}] (also under /v1)
  operations /health, /ready, /metrics

With no --model, a synthetic model with SmolLM2-135M's shape and random weights is
generated once into the data directory and served. Its output is NOT language: it is
for trying the server and measuring it without downloading anything.

The server listens at once; /ready answers 503 until the model is loaded.

Every flag can also be set by an environment variable KVSERVE_<FLAG> (upper case,
dashes as underscores: KVSERVE_KV_CACHE_MEMORY=4GiB; lists comma-separated) or by a
key of the YAML file given by --config (kv-cache-memory: 4GiB; api-key: [k1, k2=team]).
Flags win over the environment, which wins over the file, which wins over defaults.

API keys come from the data directory's tenant store (kvserve tenant, kvserve key)
and from --api-key KEY or KEY=TENANT (repeatable; a KEY without a tenant acts as
an admin of the default tenant, KEY=TENANT as a developer of TENANT). With no key
at all, the server is open on a loopback address; on any other address the first
start creates an admin key and prints it once, unless --allow-unauthenticated.
When keys exist, /metrics needs an admin key. Denied requests and every key or
tenant change are recorded in the data directory's audit.log (kvserve audit).
Each tenant's KV cache is isolated from every other's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyLayers(cmd.Flags(), "config", os.Getenv); err != nil {
				return fmt.Errorf("serve: %w", err)
			}
			return runServe(cmd.Context(), &o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	addEngineFlags(f, &o.engineOptions)
	addAPIFlags(f, &o.apiOptions)
	return cmd
}

func runServe(ctx context.Context, o *serveOptions, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := o.engineOptions.validate(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := o.apiOptions.validate(); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	dataDir, secret, err := openDataDir(o.dataDir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	a, err := startAPI(ctx, &o.apiOptions, dataDir, func() (*state, error) { return openState(dataDir) }, log, stderr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintf(stderr, "kvserve: listening on http://%s (loading the model; /ready is 503 until it is loaded)\n", a.ln.Addr())

	loaded, err := loadServedModel(ctx, &o.engineOptions, dataDir, o.engine != "sim", stderr)
	if err != nil {
		a.shutdown(time.Second)
		return err
	}
	defer loaded.file.Close()
	se, err := newServedEngine(&o.engineOptions, loaded, engineEnv{dataDir: dataDir, kvDir: diskTierDir(dataDir),
		secret: secret, reg: a.reg, log: log, stderr: stderr})
	if err != nil {
		a.shutdown(time.Second)
		return fmt.Errorf("serve: %w", err)
	}
	served := &api.Model{
		ID: loaded.id, Aliases: o.modelAliases, Description: loaded.description, Synthetic: loaded.synthetic,
		ContextLength: se.contextLength(), Backend: api.LocalBackend(se.e), Tokenizer: loaded.tok, Template: loaded.tmpl,
	}
	if err := a.srv.SetModels([]*api.Model{served}, nil); err != nil { // e.g. --model-id auto
		a.shutdown(time.Second)
		se.Close()
		return fmt.Errorf("serve: %w", err)
	}
	a.admin.SetForgetter(se.e) // a tenant deleted through the admin API leaves this engine's tiers at once
	a.srv.HandleAdmin("GET /v1/kv/events", kvevents.Handler(kvevents.Source{Log: se.events, Snapshot: se.e.KV().Snapshot}))
	if err := a.startDashboard(ui.Config{Sessions: se.e}); err != nil {
		a.shutdown(time.Second)
		se.Close()
		return fmt.Errorf("serve: %w", err)
	}
	// Agents' first requests come together and most carry tools: build the
	// constraint vocabulary now rather than on the first of them.
	se.constraints.Prepare()
	fmt.Fprintf(stderr, "kvserve: serving %q on http://%s: %s\n", loaded.id, a.ln.Addr(), se.describe())
	se.notes(loaded, stderr)

	select {
	case err := <-a.serveErr:
		a.shutdown(time.Second)
		se.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	fmt.Fprintf(stderr, "kvserve: shutting down: finishing in-flight requests (up to %s)\n", o.shutdownTimeout)
	a.shutdown(o.shutdownTimeout)
	se.Close()
	return nil
}

// shutdownHTTP stops accepting connections and waits up to timeout for
// in-flight requests, then closes the rest.
func shutdownHTTP(hs *http.Server, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		hs.Close()
	}
}

// servedModel is a loaded model with what the API needs beside it.
type servedModel struct {
	file        *model.File
	tok         *tokenizer.Tokenizer
	tmpl        *chat.Template
	id          string
	description string
	synthetic   bool
}

// loadServedModel opens the model --model names (or the synthetic one) with
// its tokenizer and chat template. Without weights (the simulator, a
// gateway) the file is mapped and its weights never read.
func loadServedModel(ctx context.Context, o *engineOptions, dataDir string, weights bool, stderr io.Writer) (*servedModel, error) {
	path := o.modelPath
	sm := &servedModel{}
	if path == "" {
		var err error
		path, err = ensureSyntheticModel(ctx, filepath.Join(dataDir, "models"), stderr)
		if err != nil {
			return nil, err
		}
		sm.synthetic = true
		sm.id = "kvserve-synthetic-" + syntheticShape
		sm.description = "synthetic model with SmolLM2-135M's shape and random weights: its output is not language"
		fmt.Fprintf(stderr, "kvserve: no --model given: serving a SYNTHETIC random-weight model (%s); its output is not language\n", path)
	}
	var mf *model.File
	var err error
	if !weights {
		// The simulator reads the model's shape, tokenizer and template,
		// a gateway only the last two, never the weights: map the file and
		// leave it unread.
		mf, err = model.Open(path, gguf.Mapped, nil)
	} else {
		mf, err = openModelWithProgress(path, o.weights, o.reservedMemory(), o.threads, stderr)
	}
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	sm.file = mf
	sm.tok, err = tokenizer.FromGGUF(mf.GGUF)
	if err != nil {
		mf.Close()
		return nil, fmt.Errorf("serve: tokenizer of %s: %w", path, err)
	}
	sm.tok.Prepare()
	sm.tmpl, err = chat.Parse(sm.tok.ChatTemplate())
	if err != nil {
		mf.Close()
		return nil, fmt.Errorf("serve: chat template of %s: %w", path, err)
	}
	if sm.id == "" {
		sm.id = strings.TrimSuffix(filepath.Base(path), ".gguf")
		if name := mf.Model.Config.Name; name != "" {
			sm.description = name
		}
	}
	if o.modelID != "" {
		sm.id = o.modelID
	}
	return sm, nil
}

// ensureSyntheticModel returns the path of the synthetic model in dir,
// generating it first if needed (into a temporary file renamed into place,
// so an interrupted run leaves nothing half-written).
func ensureSyntheticModel(ctx context.Context, dir string, stderr io.Writer) (string, error) {
	shape, err := synth.LookupShape(syntheticShape, "")
	if err != nil {
		return "", fmt.Errorf("serve: %w", err)
	}
	path := filepath.Join(dir, synth.Name(&shape)+"-q8_0.gguf")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("serve: %w", err)
	}
	fmt.Fprintf(stderr, "kvserve: generating the synthetic %s model once into %s\n", syntheticShape, path)
	if err := runSynth(stderr, shape, synth.FileQ8_0, path, synth.Options{Context: ctx}, false); err != nil {
		return "", fmt.Errorf("serve: %w", err)
	}
	return path, nil
}

// loadSecret reads the server secret (32 random bytes, hex) from path,
// creating it with 0600 permissions on first use. It keys the per-tenant
// hash salts, so it must stay private and stable across restarts (cached
// and offloaded blocks are found by those hashes).
func loadSecret(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err == nil {
		b, err := hex.DecodeString(strings.TrimSpace(string(data)))
		if err != nil || len(b) < 16 {
			return nil, fmt.Errorf("secret %s is malformed (want 32 bytes in hex); delete it to make a new one", path)
		}
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			if err := os.Chmod(path, 0o600); err != nil {
				return nil, fmt.Errorf("secret %s is readable by others and cannot be fixed: %w", path, err)
			}
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("secret: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("secret: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) { // another process made it first
			return loadSecret(path)
		}
		return nil, fmt.Errorf("secret: %w", err)
	}
	_, err = f.WriteString(hex.EncodeToString(b) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("secret: %w", err)
	}
	return b, nil
}

// parseAPIKeys reads "KEY" and "KEY=TENANT" entries.
func parseAPIKeys(entries []string) ([]api.APIKey, error) {
	var keys []api.APIKey
	for _, e := range entries {
		key, tenant, _ := strings.Cut(e, "=")
		key = strings.TrimSpace(key)
		if key == "" {
			return nil, fmt.Errorf("--api-key %q: empty key", e)
		}
		if strings.HasPrefix(strings.TrimSpace(tenant), "@") {
			return nil, fmt.Errorf("--api-key %q: tenant names beginning with @ are reserved (%s owns the shared context caches)", e, ctxcache.SharedTenant)
		}
		keys = append(keys, api.APIKey{Key: key, Tenant: strings.TrimSpace(tenant)})
	}
	return keys, nil
}

// servedForwarder builds the forward pass --engine names, and what closes
// it after the engine.
func servedForwarder(o *engineOptions, loaded *servedModel, kvType kv.ElemType) (engine.Forwarder, func(), error) {
	m := loaded.file.Model
	if o.engine != "sim" {
		fwd, err := model.NewForwarder(m, model.ForwarderOptions{
			Threads: o.threads, Nice: o.computeNice, MaxTokens: o.maxBatchTokens, KVType: kvType.DType(),
		})
		if err != nil {
			return nil, nil, err
		}
		return fwd, fwd.Close, nil
	}
	shape := batch.Shape{Vocab: m.Config.Vocab, Context: m.Config.Context, Layers: m.Config.Layers,
		KVDim: m.Config.KVDim(), KVType: kvType.DType(), MaxTokens: o.maxBatchTokens}
	var p *sim.Profile
	if o.simProfile != "" {
		var err error
		if p, err = sim.ReadProfile(o.simProfile); err != nil {
			return nil, nil, err
		}
		if got, want := p.Shape, sim.ShapeOf(shape); got != want {
			return nil, nil, fmt.Errorf("--sim-profile %s was measured on a model of shape %+v, not this one's %+v (calibrate on this model, with the same --max-batch-tokens and --kv-cache-type)", o.simProfile, got, want)
		}
	} else {
		scaled := sim.DefaultProfile().Scale(shape, m.WeightBytes, loaded.id+" (built-in profile scaled)")
		p = &scaled
	}
	eog := int32(-1)
	if e := loaded.tok.EOGs(); len(e) > 0 {
		eog = e[0]
	}
	f, err := sim.NewForwarder(p, sim.Options{Seed: o.simSeed, EndOfGeneration: eog, Candidates: wordTokens(loaded.tok)})
	if err != nil {
		return nil, nil, err
	}
	return f, func() {}, nil
}

// wordTokens are the tokens that decode to a space and a short lower-case
// word: what the simulator generates, so that its output reads as text.
func wordTokens(tok *tokenizer.Tokenizer) []int32 {
	var out []int32
	for id := range int32(tok.VocabSize()) {
		s := tok.Decode([]int32{id})
		if len(s) < 3 || len(s) > 9 || s[0] != ' ' {
			continue
		}
		word := true
		for _, c := range s[1:] {
			if c < 'a' || c > 'z' {
				word = false
				break
			}
		}
		if word {
			out = append(out, id)
		}
	}
	return out
}
