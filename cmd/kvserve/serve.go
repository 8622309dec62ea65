package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/anthropic"
	"github.com/kvserve/kvserve/internal/api/gemini"
	"github.com/kvserve/kvserve/internal/api/openai"
	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/constrain"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/grammar"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/kv/diskstore"
	"github.com/kvserve/kvserve/internal/kvevents"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/sim"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// serveOptions are the settings of `kvserve serve`.
type serveOptions struct {
	modelPath       string
	modelMemory     string
	modelID         string
	modelAliases    []string
	addr            string
	dataDir         string
	configPath      string
	kvMemory        byteSize
	kvHostMemory    hostSize
	kvDisk          hostSize
	kvEviction      string
	maxPinned       float64
	maxPinnedTenant float64
	kvType          string
	blockSize       int
	maxBatchTokens  int
	maxRunning      int
	maxWaiting      int
	threads         int
	computeNice     int
	noPrefixCache   bool
	apiKeys         []string
	allowOpen       bool
	bodyLimit       byteSize
	shutdownTimeout time.Duration
	pprofAddr       string
	engine          string
	simProfile      string
	simSeed         uint64
	recordPasses    string
	cacheMinTokens  int
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
	f.StringVarP(&o.modelPath, "model", "m", "", "GGUF model file (default: a synthetic random-weight model, generated into the data directory)")
	modelMemoryFlag(f, &o.modelMemory)
	f.StringVar(&o.modelID, "model-id", "", "model name clients use (default: the file name without .gguf)")
	f.StringArrayVar(&o.modelAliases, "model-alias", nil, "another model name to accept, exact or a pattern like 'claude-*' or 'gpt-*' (repeatable), for clients that send their own model names")
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "listen address")
	f.StringVar(&o.dataDir, "data-dir", "", "data directory: server secret, tenant store, audit log, synthetic model (default $XDG_DATA_HOME/kvserve or ~/.local/share/kvserve)")
	f.StringVar(&o.configPath, "config", "", "YAML file with settings (keys are these flag names)")
	f.Var(&o.kvMemory, "kv-cache-memory", "KV cache size, e.g. 4GiB; auto: 25% of MemAvailable, within [256MiB, 4GiB]")
	f.Float64Var(&o.maxPinned, "kv-max-pinned", 0.5, "share of the KV cache pins may hold (retention pinned, context caches); a request that would pin more gets 429")
	f.Float64Var(&o.maxPinnedTenant, "kv-max-pinned-per-tenant", 0.25, "share of the KV cache one tenant's pins may hold (at most --kv-max-pinned)")
	f.StringVar(&o.kvEviction, "kv-eviction", "value", "which cached KV blocks go first: value (retention class, then recency and reuse; chains cut from the tail) or lru (least recently released: the baseline, for comparisons)")
	f.Var(&o.kvHostMemory, "kv-host-memory", "host-memory KV tier (G2), e.g. 8GiB: blocks evicted from the KV cache move there and come back on a prefix hit instead of being recomputed; auto: twice the KV cache, within 25% of MemAvailable (filled only as blocks are evicted); off: none")
	f.Var(&o.kvDisk, "kv-disk", "disk KV tier (G3) under the data directory, e.g. 20GiB: blocks leaving memory are written there encrypted per tenant, read back ahead of the requests that need them, and kept across restarts; auto: a tenth of the free space there, at most 32GiB (filled only as blocks leave memory); off: none")
	f.StringVar(&o.kvType, "kv-cache-type", "f16", "KV cache element type: f16, f32, q8_0")
	f.IntVar(&o.blockSize, "block-size", 16, "KV block size in tokens")
	f.IntVar(&o.maxBatchTokens, "max-batch-tokens", 512, "tokens per forward pass (prefill chunk budget)")
	f.IntVar(&o.maxRunning, "max-running", 256, "sequences running at once")
	f.IntVar(&o.maxWaiting, "max-waiting", 4096, "queued requests before new ones get 429")
	f.IntVarP(&o.threads, "threads", "t", 0, "compute threads (default: all cores)")
	f.IntVar(&o.computeNice, "compute-nice", 0, "run the compute threads below normal priority so request handling waits less behind forward passes: 1-19 raise their Linux nice value, 20 puts them under SCHED_IDLE (lowest tail latency; for machines not shared with other busy processes); 0: off")
	f.BoolVar(&o.noPrefixCache, "no-prefix-cache", false, "disable prefix caching (every prompt is computed in full)")
	f.StringArrayVar(&o.apiKeys, "api-key", nil, "accepted API key besides the tenant store's, KEY (an admin) or KEY=TENANT (a developer of TENANT) (repeatable)")
	f.BoolVar(&o.allowOpen, "allow-unauthenticated", false, "serve with no API key when none is active, on any address (default: only on a loopback address; elsewhere the first start creates an admin key)")
	o.bodyLimit = api.DefaultBodyLimit
	f.Var(&o.bodyLimit, "body-limit", "largest request body")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long in-flight requests may run on after SIGINT/SIGTERM")
	f.StringVar(&o.engine, "engine", "model", "what computes the tokens: model (the real forward pass) or sim (the simulator: the same scheduler and KV manager, a forward pass that only spends the modelled time of the real one; its output is NOT language)")
	f.StringVar(&o.simProfile, "sim-profile", "", "with --engine sim: the cost profile from kvserve sim calibrate (default: a built-in profile measured on SmolLM2-135M Q8_0, scaled to the model's size)")
	f.Uint64Var(&o.simSeed, "sim-seed", 0, "with --engine sim: varies the simulated output tokens")
	f.StringVar(&o.recordPasses, "record-passes", "", "append every forward pass's shape and duration to this file as JSON lines, to fit the simulator to real traffic (kvserve sim calibrate --passes FILE)")
	f.IntVar(&o.cacheMinTokens, "cache-min-tokens", ctxcache.DefaultMinTokens, "smallest context cache (cachedContents) in tokens: a shorter prefix is refused with 400")
	f.StringVar(&o.pprofAddr, "pprof-addr", "", "serve Go's profiling endpoints (/debug/pprof/: CPU, block, mutex, heap, execution trace) on this separate address, e.g. 127.0.0.1:6060 (default: off)")
	return cmd
}

func runServe(ctx context.Context, o *serveOptions, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	kvType, err := kv.ParseElemType(o.kvType)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	keys, err := parseAPIKeys(o.apiKeys)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if !(o.maxPinned > 0 && o.maxPinned <= 1) || !(o.maxPinnedTenant > 0 && o.maxPinnedTenant <= o.maxPinned) {
		return fmt.Errorf("serve: --kv-max-pinned %v, --kv-max-pinned-per-tenant %v: want 0 < per tenant ≤ overall ≤ 1", o.maxPinned, o.maxPinnedTenant)
	}
	if o.kvEviction != "value" && o.kvEviction != "lru" {
		return fmt.Errorf("serve: --kv-eviction %q: want value or lru", o.kvEviction)
	}
	if o.engine != "model" && o.engine != "sim" {
		return fmt.Errorf("serve: --engine %q: want model or sim", o.engine)
	}
	if o.engine != "sim" && (o.simProfile != "" || o.simSeed != 0) {
		return errors.New("serve: --sim-profile and --sim-seed need --engine sim")
	}
	if o.cacheMinTokens < 1 {
		return fmt.Errorf("serve: --cache-min-tokens %d: want at least 1", o.cacheMinTokens)
	}
	if o.computeNice < 0 || o.computeNice > 20 {
		return fmt.Errorf("serve: --compute-nice %d: want 0 (off), 1-19 (nice) or 20 (SCHED_IDLE)", o.computeNice)
	}
	if o.modelMemory != "auto" {
		if _, err := gguf.ParsePlacement(o.modelMemory); err != nil {
			return fmt.Errorf("serve: --model-memory %q: want auto, mmap or hugepages", o.modelMemory)
		}
	}
	for _, a := range o.modelAliases {
		if err := api.ValidAlias(a); err != nil {
			return fmt.Errorf("serve: --model-alias: %w", err)
		}
	}
	dataDir := o.dataDir
	if dataDir == "" {
		dataDir = defaultDataDir(os.Getenv)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("serve: data directory: %w", err)
	}
	secret, err := loadSecret(filepath.Join(dataDir, "secret"))
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	st, err := openState(dataDir)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer st.Close()
	plan, err := planAuth(ctx, st.dir, o.addr, len(keys), o.allowOpen, stderr)
	if err != nil {
		return fmt.Errorf("serve: --addr %s: %w", o.addr, err)
	}
	var storeVerifier api.KeyVerifier
	if plan.useStore {
		storeVerifier = storeKeys{st.dir}
	}

	if o.pprofAddr != "" {
		dbg, err := startDebugServer(o.pprofAddr, log, stderr)
		if err != nil {
			return err
		}
		defer dbg.Close()
	}

	caches, err := newCacheService(st, o.cacheMinTokens)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	sweepCtx, stopSweep := context.WithCancel(ctx)
	defer stopSweep()
	go sweepCaches(sweepCtx, caches, log)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := api.New(api.Config{BodyLimit: int64(o.bodyLimit), APIKeys: keys, Keys: storeVerifier, Audit: st.audit,
		Caches: caches, Registry: reg, Logger: log})
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := srv.Register(openai.New()); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := srv.Register(anthropic.New(anthropic.Options{Registerer: reg})); err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := srv.Register(gemini.New()); err != nil {
		return fmt.Errorf("serve: %w", err)
	}

	// Listen before loading, so health checks and clients get answers (503
	// while loading) rather than connection errors.
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	fmt.Fprintf(stderr, "kvserve: listening on http://%s (loading the model; /ready is 503 until it is loaded)\n", ln.Addr())

	loaded, err := loadServedModel(ctx, o, dataDir, stderr)
	if err != nil {
		shutdownHTTP(hs, time.Second)
		return err
	}
	defer loaded.file.Close()
	kvMemory := int64(o.kvMemory)
	if kvMemory == 0 {
		kvMemory = defaultKVMemory(memAvailable())
	}
	if o.computeNice > 0 {
		// Background compute threads hold their Ps while they spin, so
		// request goroutines get Ps of their own, one per core: a burst of
		// streams (every running stream gets a token each step) is then
		// written out on all cores at once, the OS giving those threads
		// the CPU the moment they have work because the compute threads
		// run at lower priority.
		threads := o.threads
		if threads <= 0 {
			threads = runtime.NumCPU()
		}
		if runtime.GOMAXPROCS(0) <= threads {
			runtime.GOMAXPROCS(threads + runtime.NumCPU())
		}
	}
	hostMemory := int64(o.kvHostMemory)
	switch hostMemory {
	case 0:
		hostMemory = defaultHostMemory(kvMemory, memAvailable())
	case -1:
		hostMemory = 0
	}
	diskBytes := int64(o.kvDisk)
	switch diskBytes {
	case -1:
		diskBytes = 0
	case 0:
		diskBytes = defaultDiskBytes(diskFree(dataDir))
		// Another server on this data directory holds the disk tier: by
		// default this one runs without, rather than not at all.
		if err := diskstore.Probe(diskTierDir(dataDir)); o.engine != "sim" && errors.Is(err, diskstore.ErrInUse) {
			fmt.Fprintf(stderr, "kvserve: another server uses %s's disk KV tier; this one runs without (--kv-disk off to say so, or give each server its own --data-dir)\n", dataDir)
			diskBytes = 0
		}
	}
	fwd, closeFwd, err := servedForwarder(o, loaded, kvType)
	if err != nil {
		shutdownHTTP(hs, time.Second)
		return fmt.Errorf("serve: %w", err)
	}
	defer closeFwd()
	if o.recordPasses != "" {
		rec, closeRec, err := recordPasses(fwd, o.recordPasses)
		if err != nil {
			shutdownHTTP(hs, time.Second)
			return fmt.Errorf("serve: %w", err)
		}
		defer closeRec()
		fwd = rec
	}
	var grammarOpts grammar.Options
	if loaded.synthetic || o.engine == "sim" {
		// Random weights (and the simulator) almost never pick the token
		// that closes a JSON string: bound free strings so constrained
		// output ends.
		grammarOpts.MaxStringLength = 32
	}
	constraints := constrain.New(loaded.tok, loaded.tmpl, grammarOpts)
	events := kv.NewEventLog(1 << 16)
	e, err := engine.New(fwd, engine.Config{
		Events:             events,
		Constraints:        constraints,
		KVNoStorage:        o.engine == "sim",
		MaxBatchTokens:     o.maxBatchTokens,
		MaxRunning:         o.maxRunning,
		MaxWaiting:         o.maxWaiting,
		BlockSize:          o.blockSize,
		KVMemoryBytes:      kvMemory,
		KVHostMemoryBytes:  hostMemory,
		KVDiskDir:          diskTierDir(dataDir),
		KVDiskBytes:        diskBytes,
		LRUEviction:        o.kvEviction == "lru",
		MaxPinnedFraction:  o.maxPinned,
		MaxPinnedPerTenant: o.maxPinnedTenant,
		DisablePrefixCache: o.noPrefixCache,
		Logger:             log,
		Secret:             secret,
		ModelID:            loaded.id,
		EndOfGeneration:    loaded.tok.EOGs(),
		Registerer:         reg,
	})
	if err != nil {
		shutdownHTTP(hs, time.Second)
		return fmt.Errorf("serve: %w", err)
	}
	ec := e.Config()
	ctxLen := min(ec.MaxContext, e.KV().NumBlocks()*ec.BlockSize)
	served := &api.Model{
		ID: loaded.id, Aliases: o.modelAliases, Description: loaded.description, Synthetic: loaded.synthetic,
		ContextLength: ctxLen, Backend: api.LocalBackend(e), Tokenizer: loaded.tok, Template: loaded.tmpl,
	}
	srv.SetModel(served)
	srv.HandleAdmin("GET /v1/kv/events", kvevents.Handler(kvevents.Source{Log: events, Snapshot: e.KV().Snapshot}))
	// Agents' first requests come together and most carry tools: build the
	// constraint vocabulary now rather than on the first of them.
	constraints.Prepare()
	fmt.Fprintf(stderr, "kvserve: serving %q on http://%s: context %d tokens, KV cache %s (%d blocks of %d tokens, %s), host tier %s, disk tier %s\n",
		loaded.id, ln.Addr(), ctxLen, formatBytes(kvMemory), e.KV().NumBlocks(), ec.BlockSize, kvType, hostTierString(hostMemory), diskTierString(diskBytes, o.engine == "sim", e.KV().Stats().Disk))
	if loaded.synthetic {
		fmt.Fprintln(stderr, "kvserve: NOTE: this is a synthetic random-weight model; its output is not language. Pass --model FILE.gguf for a real one.")
	}
	if sf, ok := fwd.(*sim.Forwarder); ok {
		fmt.Fprintf(stderr, "kvserve: NOTE: --engine sim: no forward pass runs; each one sleeps its modelled time (%s); the output is NOT language\n", sf.Profile().Model)
	}

	select {
	case err := <-serveErr:
		e.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	fmt.Fprintf(stderr, "kvserve: shutting down: finishing in-flight requests (up to %s)\n", o.shutdownTimeout)
	shutdownHTTP(hs, o.shutdownTimeout)
	e.Close()
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

func loadServedModel(ctx context.Context, o *serveOptions, dataDir string, stderr io.Writer) (*servedModel, error) {
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
	if o.engine == "sim" {
		// The simulator reads the model's shape, tokenizer and template,
		// never its weights: map the file and leave it unread.
		mf, err = model.Open(path, gguf.Mapped, nil)
	} else {
		mf, err = openModelWithProgress(path, o.modelMemory, stderr)
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
		keys = append(keys, api.APIKey{Key: key, Tenant: strings.TrimSpace(tenant)})
	}
	return keys, nil
}

// servedForwarder builds the forward pass --engine names, and what closes
// it after the engine.
func servedForwarder(o *serveOptions, loaded *servedModel, kvType kv.ElemType) (engine.Forwarder, func(), error) {
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
