package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/router"
	"github.com/kvserve/kvserve/internal/ui"
)

// workerOptions are the settings of `kvserve worker`.
type workerOptions struct {
	engineOptions
	natsURL      string
	id           string
	dataDir      string
	configPath   string
	drainTimeout time.Duration
	metricsAddr  string
	upstream     upstreamOptions
	kvCopy       bool
}

func newWorkerCmd() *cobra.Command {
	var o workerOptions
	cmd := &cobra.Command{
		Use:   "worker --nats URL [--model FILE] [--engine model|sim | --upstream URL] [--id ID] [flags]",
		Short: "Serve a model's engine to gateways over NATS",
		Long: `Runs one engine (the same model and engine flags as serve) as a worker of a
cluster: it registers on the NATS server at --nats, heartbeats its load every
second, runs the requests gateways send it and streams their tokens back, and
publishes its KV events. It needs no listening address: everything goes over NATS.

On SIGINT/SIGTERM it drains: gateways stop sending it requests, the ones it runs
finish (up to --drain-timeout), then it leaves. Workers of one cluster should share
the data directory's secret file (it keys the per-tenant block hashes). Two workers on
one machine should have a --data-dir each: a disk tier belongs to one process, and a
second worker on the same directory runs without one.

With --upstream URL it runs no engine of its own: it forwards the requests to
another OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, a kvserve)
serving the same model (--model gives the tokenizer; no weights are read), and
publishes the KV events of that server's cache as predicted from what it was
sent (approximate mode), so the gateways' router places by cache there too.
With --upstream-kv-events (a vLLM server publishing its KV events over ZMQ) it
publishes what the server reports instead (exact mode; needs
--upstream-cache-salt). The upstream's API key, if it needs one, comes from
KVSERVE_UPSTREAM_API_KEY.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyLayers(cmd.Flags(), "config", os.Getenv); err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			if err := o.upstream.validate(cmd.Flags()); err != nil {
				return fmt.Errorf("worker: %w", err)
			}
			if o.upstream.url != "" {
				return runUpstreamWorker(cmd.Context(), &o, cmd.ErrOrStderr())
			}
			return runWorker(cmd.Context(), &o, cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.natsURL, "nats", "", "NATS server URL(s), comma-separated (required), e.g. nats://127.0.0.1:4222")
	f.StringVar(&o.id, "id", "", "worker id on the cluster: letters, digits, - and _ (default: w- and random hex digits)")
	addEngineFlags(f, &o.engineOptions)
	addDataDirFlags(f, &o.dataDir, &o.configPath)
	f.BoolVar(&o.kvCopy, "kv-copy", true, "copy KV blocks from other workers over NATS when a gateway places a request here whose prefix another worker holds in memory (and answer theirs), instead of computing them; false: compute, and copy nothing out")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "how long requests in flight may run on after SIGINT/SIGTERM before they are cut off")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve the worker's Prometheus metrics (its engine's, KV cache and tiers included) on this address at /metrics, e.g. 127.0.0.1:9100; unauthenticated, so keep it on a private network (default: none)")
	addUpstreamFlags(f, &o.upstream)
	return cmd
}

// checkWorker checks the settings every worker needs and opens its data
// directory, returning it and the cluster's secret.
func checkWorker(o *workerOptions) (dataDir string, secret []byte, err error) {
	if o.natsURL == "" {
		return "", nil, errors.New("worker: --nats URL is required")
	}
	if o.id != "" {
		if err := cluster.ValidID(o.id); err != nil {
			return "", nil, fmt.Errorf("worker: --id: %w", err)
		}
	}
	if dataDir, secret, err = openDataDir(o.dataDir); err != nil {
		return "", nil, fmt.Errorf("worker: %w", err)
	}
	return dataDir, secret, nil
}

// serveUntilDone waits for ctx (SIGINT/SIGTERM), then drains w for up to
// the drain timeout.
func serveUntilDone(ctx context.Context, w *cluster.Worker, drain time.Duration, stderr io.Writer) error {
	<-ctx.Done()
	fmt.Fprintf(stderr, "kvserve: worker %s draining: finishing in-flight requests (up to %s)\n", w.ID(), drain)
	dctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	if err := w.Close(dctx); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

func runWorker(ctx context.Context, o *workerOptions, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := o.engineOptions.validate(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	dataDir, secret, err := checkWorker(o)
	if err != nil {
		return err
	}
	nc, err := connectNATS(o.natsURL, "kvserve worker")
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer nc.Close()
	loaded, err := loadServedModel(ctx, &o.engineOptions, dataDir, o.engine != "sim", stderr)
	if err != nil {
		return err
	}
	defer loaded.file.Close()
	metrics, err := startWorkerMetrics(o.metricsAddr, stderr)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer metrics.Close()
	se, err := newServedEngine(&o.engineOptions, loaded, engineEnv{dataDir: dataDir, kvDir: diskTierDir(dataDir), secret: secret,
		reg: metrics.registerer(), log: log, stderr: stderr})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer se.Close()
	se.constraints.Prepare()
	w, err := cluster.StartWorker(nc, cluster.Local(se.e), cluster.WorkerConfig{ID: o.id, Model: loaded.id, ContextLength: se.contextLength(),
		Events: se.events, Logger: log, NoKVCopy: !o.kvCopy})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	fmt.Fprintf(stderr, "kvserve: worker %s serving %q over NATS at %s: %s\n", w.ID(), loaded.id, nc.ConnectedUrlRedacted(), se.describe())
	se.notes(loaded, stderr)
	return serveUntilDone(ctx, w, o.drainTimeout, stderr)
}

// connectNATS connects to url, reconnecting for as long as the process
// runs: a NATS server restart is a pause, not the end of a worker or a
// gateway.
func connectNATS(url, name string) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, nil
}

// gatewayOptions are the settings of `kvserve gateway`.
type gatewayOptions struct {
	apiOptions
	routerOptions
	stateOptions
	natsURL    string
	modelPaths []string
	modelID    string
	auto       autoOptions
}

// autoOptions set the gateway's rule for the model "auto".
type autoOptions struct {
	fast, strong string
	longPrompt   int
	tools        bool
	reasoning    bool
}

func addAutoFlags(f *pflag.FlagSet, o *autoOptions) {
	f.StringVar(&o.fast, "auto-fast", "", `with --auto-strong: clients may ask for the model "auto", served by this model id unless a rule below sends it to --auto-strong`)
	f.StringVar(&o.strong, "auto-strong", "", `the model id "auto" sends requests to when a rule says so (a request continuing a context cache keeps the cache's model)`)
	f.IntVar(&o.longPrompt, "auto-long-prompt", 0, `"auto" sends prompts of at least this many tokens to --auto-strong (0: never by length)`)
	f.BoolVar(&o.tools, "auto-tools", true, `"auto" sends requests offering tools to --auto-strong`)
	f.BoolVar(&o.reasoning, "auto-reasoning", true, `"auto" sends requests turning reasoning on to --auto-strong`)
}

// rule is the auto rule the flags set (nil: none), checked against the
// served model ids.
func (o *autoOptions) rule(f *pflag.FlagSet, ids []string) (*api.AutoRule, error) {
	if o.fast == "" && o.strong == "" {
		for _, name := range []string{"auto-long-prompt", "auto-tools", "auto-reasoning"} {
			if f.Changed(name) {
				return nil, fmt.Errorf("--%s needs --auto-fast and --auto-strong", name)
			}
		}
		return nil, nil
	}
	if o.fast == "" || o.strong == "" || o.fast == o.strong {
		return nil, errors.New("--auto-fast and --auto-strong name two different models")
	}
	for _, id := range []string{o.fast, o.strong} {
		if !slices.Contains(ids, id) {
			return nil, fmt.Errorf("--auto-fast/--auto-strong %q: not a served model (serving %s)", id, strings.Join(ids, ", "))
		}
	}
	if o.longPrompt < 0 {
		return nil, errors.New("--auto-long-prompt must be ≥ 0")
	}
	return &api.AutoRule{Fast: o.fast, Strong: o.strong, LongPrompt: o.longPrompt, Tools: o.tools, Reasoning: o.reasoning}, nil
}

func newGatewayCmd() *cobra.Command {
	var o gatewayOptions
	cmd := &cobra.Command{
		Use:   "gateway --nats URL [--model FILE] [--addr 127.0.0.1:8080] [--data-dir DIR] [flags]",
		Short: "Serve the HTTP APIs, running every request on the cluster's workers",
		Long: `The same HTTP server as serve (OpenAI, Anthropic and Gemini dialects, API keys from
the data directory's tenant store and --api-key, the audit log, /metrics), with no
engine of its own: each request goes to a worker of the model on the NATS server at
--nats, and its tokens stream back from there. The KV-aware router (--router kv, the
default) picks the worker holding most of the prompt's blocks unless its load outweighs
them; it hashes prompts as the workers do, so the gateway's data directory needs the
workers' secret.

Tenants, API keys, bindings and context-cache records live in the cluster's
JetStream KV bucket, and the audit trail in its stream (--state nats, the
default), so every gateway serves every tenant and a key revoked through one is
refused by all within about a second; --state data-dir keeps them in this
gateway's own state.db and audit.log instead.

--model names the model file the workers serve (default: the synthetic model, as
serve): the gateway reads only its tokenizer and chat template, never its weights,
and sends requests only to workers serving a model of the same id. With no worker,
requests get 503. A worker that dies before the first token is replaced by another;
after it, the client gets an error rather than a hang.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyLayers(cmd.Flags(), "config", os.Getenv); err != nil {
				return fmt.Errorf("gateway: %w", err)
			}
			return runGateway(cmd.Context(), &o, cmd.Flags(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.natsURL, "nats", "", "NATS server URL(s), comma-separated (required), e.g. nats://127.0.0.1:4222")
	f.StringArrayVarP(&o.modelPaths, "model", "m", nil, "GGUF model file the workers serve, for its tokenizer and chat template (default: the synthetic model in the data directory); repeat it to serve several models, each on its own workers, the first taking --model-alias")
	f.StringVar(&o.modelID, "model-id", "", "model name clients use, as the workers' --model-id (default: the file name without .gguf; one --model only)")
	addAPIFlags(f, &o.apiOptions)
	addRouterFlags(f, &o.routerOptions)
	addStateFlags(f, &o.stateOptions)
	addAutoFlags(f, &o.auto)
	return cmd
}

func runGateway(ctx context.Context, o *gatewayOptions, flags *pflag.FlagSet, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if o.natsURL == "" {
		return errors.New("gateway: --nats URL is required")
	}
	if err := o.apiOptions.validate(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if err := o.stateOptions.validate(); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	if o.modelID != "" && len(o.modelPaths) > 1 {
		return errors.New("gateway: --model-id names one model: with several, each takes its file's name")
	}
	if _, err := o.auto.rule(flags, nil); err != nil && (o.auto.fast == "" || o.auto.strong == "") {
		return fmt.Errorf("gateway: %w", err) // a flag without its pair: say so before loading anything
	}
	policy, err := o.routerOptions.policy(flags)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	dataDir, secret, err := openDataDir(o.dataDir)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	nc, err := connectNATS(o.natsURL, "kvserve gateway")
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer nc.Close()
	a, err := startAPI(ctx, &o.apiOptions, dataDir, o.stateOptions.opener(ctx, dataDir, nc), log, stderr)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer a.shutdown(time.Second)
	paths := o.modelPaths
	if len(paths) == 0 {
		paths = []string{""} // the synthetic model
	}
	var loaded []*servedModel
	var ids []string
	for _, path := range paths {
		eo := engineOptions{modelPath: path, modelID: o.modelID}
		lm, err := loadServedModel(ctx, &eo, dataDir, false, stderr)
		if err != nil {
			return err
		}
		defer lm.file.Close()
		if slices.Contains(ids, lm.id) {
			return fmt.Errorf("gateway: two --model files are both %q", lm.id)
		}
		loaded, ids = append(loaded, lm), append(ids, lm.id)
	}
	auto, err := o.auto.rule(flags, ids)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	g, err := startGateway(nc, a, loaded, o.modelAliases, auto, routing{policy: policy, secret: secret, hashCacheBlocks: o.hashCacheBlocks}, log)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	defer g.Close()
	also := ""
	if len(ids) > 1 {
		quoted := make([]string, len(ids)-1)
		for i, id := range ids[1:] {
			quoted[i] = strconv.Quote(id)
		}
		also = " (and " + strings.Join(quoted, ", ") + ")"
	}
	fmt.Fprintf(stderr, "kvserve: gateway serving %q on http://%s%s: workers over NATS at %s\n", ids[0], a.ln.Addr(), also, nc.ConnectedUrlRedacted())
	if auto != nil {
		fmt.Fprintf(stderr, "kvserve: model \"auto\": %s, or %s for %s\n", auto.Fast, auto.Strong, autoReasons(auto))
	}
	select {
	case err := <-a.serveErr:
		return fmt.Errorf("gateway: %w", err)
	case <-ctx.Done():
	}
	fmt.Fprintf(stderr, "kvserve: shutting down: finishing in-flight requests (up to %s)\n", o.shutdownTimeout)
	a.shutdown(o.shutdownTimeout)
	return nil
}

// routerOptions choose how a gateway places requests.
type routerOptions struct {
	router          string
	hashCacheBlocks int
}

func addRouterFlags(f *pflag.FlagSet, o *routerOptions) {
	f.StringVar(&o.router, "router", string(router.PolicyKV), "how requests are placed on workers: kv (KV-aware: cached prefix per tier against load), least-loaded, round-robin")
	f.IntVar(&o.hashCacheBlocks, "router-hash-cache-blocks", 1<<22, "kv router: block hashes remembered (computed, or learnt from the workers' KV events), up to about 250 bytes each once filled; to place long prompts without hashing them again it should hold the blocks of every worker of a model")
}

// policy reads --router and checks --router-hash-cache-blocks, which only
// the kv policy has a use for.
func (o *routerOptions) policy(f *pflag.FlagSet) (router.Policy, error) {
	p, err := router.ParsePolicy(o.router)
	if err != nil {
		return "", fmt.Errorf("--router: %w", err)
	}
	if o.hashCacheBlocks < 1 {
		return "", fmt.Errorf("--router-hash-cache-blocks %d: want ≥ 1", o.hashCacheBlocks)
	}
	if p != router.PolicyKV && f.Changed("router-hash-cache-blocks") {
		return "", fmt.Errorf("--router-hash-cache-blocks configures the kv router, not %s", p)
	}
	return p, nil
}

// routing is a gateway's placement policy and what it needs.
type routing struct {
	policy router.Policy
	// secret is the workers' (the kv policy hashes prompts as they do).
	secret []byte
	// hashCacheBlocks is router.Config.HashCacheBlocks.
	hashCacheBlocks int
}

// gateway is the cluster side of a gateway: the registry of workers and,
// per model served, the router's feed of its workers' KV events (kv
// policy) and the backend dispatching to them.
type gateway struct {
	reg    *cluster.Registry
	models []*modelRoute
}

// modelRoute is one served model's placement.
type modelRoute struct {
	model  string
	feed   *router.Feed // nil unless the kv policy
	router *router.Router
	b      *cluster.Backend
	routes *routeCounter
}

// routeCounter is a cluster.Picker counting the placements of the one it
// wraps, per worker, for the dashboard.
type routeCounter struct {
	next   cluster.Picker
	mu     sync.Mutex
	routed map[string]int64 // by worker id
}

// Pick implements cluster.Picker.
func (c *routeCounter) Pick(r *engine.Request, cands []cluster.Candidate) int {
	i, _ := c.PickCopy(r, cands)
	return i
}

// PickCopy implements cluster.CopyPicker, passing on the peer the wrapped
// picker names, if it names any.
func (c *routeCounter) PickCopy(r *engine.Request, cands []cluster.Candidate) (int, int) {
	i, peer := cluster.PickWithCopy(c.next, r, cands)
	if i >= 0 && i < len(cands) {
		c.mu.Lock()
		c.routed[cands[i].Worker]++
		c.mu.Unlock()
	}
	return i, peer
}

// Workers lists the gateway's workers, of every model it serves, with the
// placements it made on each (ui.WorkerLister).
func (g *gateway) Workers() []ui.Worker {
	var out []ui.Worker
	for _, m := range g.models {
		ws := g.reg.Workers(m.model)
		m.routes.mu.Lock()
		for _, w := range ws {
			out = append(out, ui.Worker{ID: w.Worker, Draining: w.Draining, Running: w.Running, Waiting: w.Waiting,
				KVTotal: w.KVTotal, KVActive: w.KVActive, KVCached: w.KVCached, Routed: m.routes.routed[w.Worker]})
		}
		m.routes.mu.Unlock()
	}
	return out
}

// Close stops them all; call it after the API has shut down.
func (g *gateway) Close() {
	for _, m := range g.models {
		m.close()
	}
	g.reg.Close()
}

func (m *modelRoute) close() {
	if m.b != nil {
		m.b.Close()
	}
	if m.feed != nil {
		m.feed.Close()
	}
}

// startGateway follows the workers over nc and serves the loaded models
// on a's API through them (the first takes aliases; auto, if set, chooses
// between two of them for requests naming "auto").
func startGateway(nc *nats.Conn, a *apiServer, loaded []*servedModel, aliases []string, auto *api.AutoRule, rt routing, log *slog.Logger) (*gateway, error) {
	reg, err := cluster.NewRegistry(nc, cluster.RegistryConfig{Logger: log})
	if err != nil {
		return nil, err
	}
	// A tenant deleted through this gateway's admin API leaves every
	// worker's tiers (now, or when a worker down now starts again).
	fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	forget, err := cluster.NewForgetter(fctx, nc, 0)
	cancel()
	if err != nil {
		log.Warn("gateway: a deleted tenant's KV will stay on the workers until evicted", "err", err)
	} else {
		a.admin.SetForgetter(forget)
	}
	g := &gateway{reg: reg}
	var served []*api.Model
	for i, lm := range loaded {
		// Several models' metrics share one registry: each carries its
		// model as a label.
		var metrics prometheus.Registerer
		switch {
		case a.reg == nil:
		case len(loaded) > 1:
			metrics = prometheus.WrapRegistererWith(prometheus.Labels{"model": lm.id}, a.reg)
		default:
			metrics = a.reg
		}
		m, err := startModelRoute(nc, reg, lm.id, metrics, rt, log)
		if err != nil {
			g.Close()
			return nil, err
		}
		g.models = append(g.models, m)
		am := &api.Model{ID: lm.id, Description: lm.description, Synthetic: lm.synthetic,
			// The model's context: a worker whose KV pool holds less refuses
			// longer requests itself (413).
			ContextLength: lm.file.Model.Config.Context,
			Backend:       m.b, Tokenizer: lm.tok, Template: lm.tmpl,
		}
		if i == 0 {
			am.Aliases = aliases
		}
		served = append(served, am)
	}
	if err := a.srv.SetModels(served, auto); err != nil {
		g.Close()
		return nil, err
	}
	// Before the dashboard: its costs read the cluster's usage.
	if err := a.replicateUsage(nc, log); err != nil {
		g.Close()
		return nil, err
	}
	if err := a.startDashboard(ui.Config{Workers: g}); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// startModelRoute starts the placement of one model's requests on its
// workers.
func startModelRoute(nc *nats.Conn, reg *cluster.Registry, model string, metrics prometheus.Registerer, rt routing, log *slog.Logger) (*modelRoute, error) {
	m := &modelRoute{model: model}
	var picker cluster.Picker
	switch rt.policy {
	case router.PolicyKV, "":
		r, err := router.New(router.NewIndex(nil), router.Config{Secret: rt.secret, ModelID: model, HashCacheBlocks: rt.hashCacheBlocks})
		if err != nil {
			return nil, err
		}
		if m.feed, err = router.NewFeed(nc, reg, r, router.FeedConfig{Model: model, Logger: log,
			Follow: cluster.FollowConfig{Logger: log}}); err != nil {
			return nil, err
		}
		m.router, picker = r, router.NewPicker(r)
		if metrics != nil {
			blocks := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_router_index_blocks",
				Help: "Blocks the KV-aware router knows the workers hold (a block held in two tiers or by two workers counts twice)."},
				func() float64 { return float64(r.Index().Len()) })
			for _, c := range []prometheus.Collector{blocks, indexWorkers{r.Index()}} {
				if err := metrics.Register(c); err != nil {
					m.close()
					return nil, fmt.Errorf("router metrics: %w", err)
				}
			}
		}
	case router.PolicyRoundRobin:
		picker = &router.RoundRobin{}
	case router.PolicyLeastLoaded:
		picker = cluster.LeastLoaded{}
	}
	m.routes = &routeCounter{next: picker, routed: map[string]int64{}}
	b, err := cluster.NewBackend(nc, reg, cluster.BackendConfig{Model: model, Picker: m.routes, Logger: log, Registerer: metrics})
	if err != nil {
		m.close()
		return nil, err
	}
	m.b = b
	return m, nil
}

// indexWorkerBlocks describes kvserve_router_index_worker_blocks.
var indexWorkerBlocks = prometheus.NewDesc("kvserve_router_index_worker_blocks",
	"Blocks the KV-aware router knows a worker holds (a block held in two tiers counts twice), for every worker the index follows: a worker that left or died has no series.",
	[]string{"worker"}, nil)

// indexWorkers reports the router index's blocks per worker, read at
// scrape time, so that an operator (and the multi-process test) can see
// the index forget a worker.
type indexWorkers struct{ idx *router.Index }

func (c indexWorkers) Describe(ch chan<- *prometheus.Desc) { ch <- indexWorkerBlocks }

func (c indexWorkers) Collect(ch chan<- prometheus.Metric) {
	for _, id := range c.idx.Workers() {
		ch <- prometheus.MustNewConstMetric(indexWorkerBlocks, prometheus.GaugeValue, float64(c.idx.Blocks(id)), id)
	}
}

func newClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Run a cluster of workers and a gateway",
	}
	cmd.AddCommand(newClusterUpCmd())
	return cmd
}

// clusterUpOptions are the settings of `kvserve cluster up`.
type clusterUpOptions struct {
	engineOptions
	apiOptions
	routerOptions
	workers int
	kvCopy  bool
}

func newClusterUpCmd() *cobra.Command {
	var o clusterUpOptions
	cmd := &cobra.Command{
		Use:   "up [--workers N] [--engine model|sim] [--addr 127.0.0.1:8080] [flags]",
		Short: "Run an embedded NATS server, N workers and a gateway in this process, for development",
		Long: `Starts, in one process, what a scaled-out deployment runs as separate ones: a NATS
server (embedded, on a random loopback port, JetStream in a temporary directory), N
workers (each its own engine with the model and engine flags, as serve's) and one
gateway (the API flags, as serve's), all talking over NATS exactly as separate
processes would. It prints the gateway's URL and the NATS URL (further workers and
gateways can join it with --nats). Tenants, keys, context caches and the audit trail live
in the embedded server's JetStream (as a gateway's --state nats), so they last
only as long as the command; the usage ledger is the data directory's. Each worker's disk tier, if any, lives under
<data-dir>/cluster/<worker>/kv.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyLayers(cmd.Flags(), "config", os.Getenv); err != nil {
				return fmt.Errorf("cluster up: %w", err)
			}
			return runClusterUp(cmd.Context(), &o, cmd.Flags(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.workers, "workers", 2, "number of workers")
	f.BoolVar(&o.kvCopy, "kv-copy", true, "workers copy KV blocks from each other when the gateway places a request on one whose prefix another holds in memory, instead of computing them")
	addEngineFlags(f, &o.engineOptions)
	addAPIFlags(f, &o.apiOptions)
	addRouterFlags(f, &o.routerOptions)
	return cmd
}

func runClusterUp(ctx context.Context, o *clusterUpOptions, flags *pflag.FlagSet, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if o.workers < 1 || o.workers > 64 {
		return fmt.Errorf("cluster up: --workers %d: want 1 to 64", o.workers)
	}
	if err := o.engineOptions.validate(); err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	if err := o.apiOptions.validate(); err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	policy, err := o.routerOptions.policy(flags)
	if err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	dataDir, secret, err := openDataDir(o.dataDir)
	if err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	store, err := os.MkdirTemp("", "kvserve-nats-")
	if err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	defer os.RemoveAll(store)
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: store})
	if err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	defer ns.Close()
	fmt.Fprintf(stderr, "kvserve: NATS at %s\n", ns.URL())

	loaded, err := loadServedModel(ctx, &o.engineOptions, dataDir, o.engine != "sim", stderr)
	if err != nil {
		return err
	}
	defer loaded.file.Close()
	// The workers: each its own connection and engine, as if a process.
	type member struct {
		nc *nats.Conn
		se *servedEngine
		w  *cluster.Worker
	}
	var members []*member
	defer func() {
		// Drain the workers together, then stop their engines.
		dctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
		defer cancel()
		var wg sync.WaitGroup
		for _, m := range members {
			if m.w != nil {
				wg.Go(func() {
					if err := m.w.Close(dctx); err != nil {
						log.Warn("cluster up: drain", "err", err)
					}
				})
			}
		}
		wg.Wait()
		for _, m := range members {
			if m.se != nil {
				m.se.Close()
			}
			m.nc.Close()
		}
	}()
	for i := range o.workers {
		id := fmt.Sprintf("local-%d", i+1)
		m := &member{}
		if m.nc, err = connectNATS(ns.URL(), "kvserve worker "+id); err != nil {
			return fmt.Errorf("cluster up: %w", err)
		}
		members = append(members, m)
		env := engineEnv{dataDir: dataDir, kvDir: filepath.Join(dataDir, "cluster", id, "kv"), secret: secret, log: log.With("worker", id), stderr: stderr}
		if m.se, err = newServedEngine(&o.engineOptions, loaded, env); err != nil {
			return fmt.Errorf("cluster up: worker %s: %w", id, err)
		}
		m.se.constraints.Prepare()
		if m.w, err = cluster.StartWorker(m.nc, cluster.Local(m.se.e), cluster.WorkerConfig{ID: id, Model: loaded.id,
			ContextLength: m.se.contextLength(), Events: m.se.events, Logger: env.log, NoKVCopy: !o.kvCopy}); err != nil {
			return fmt.Errorf("cluster up: %w", err)
		}
		fmt.Fprintf(stderr, "kvserve: worker %s: %s\n", id, m.se.describe())
	}

	gnc, err := connectNATS(ns.URL(), "kvserve gateway")
	if err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	defer gnc.Close()
	// The cluster's store, as a separate gateway's: gateways joining with
	// --nats serve the same tenants.
	a, err := startAPI(ctx, &o.apiOptions, dataDir, func() (*state, error) { return openClusterState(ctx, gnc, 0) }, log, stderr)
	if err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	defer a.shutdown(time.Second)
	g, err := startGateway(gnc, a, []*servedModel{loaded}, o.modelAliases, nil, routing{policy: policy, secret: secret, hashCacheBlocks: o.hashCacheBlocks}, log)
	if err != nil {
		return fmt.Errorf("cluster up: %w", err)
	}
	defer g.Close()
	reg := g.reg
	// Announce the URL once the gateway knows every worker, so the first
	// request can use them all.
	deadline := time.Now().Add(10 * time.Second)
	for len(reg.Workers(loaded.id)) < o.workers {
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster up: the gateway saw %d of %d workers within 10s", len(reg.Workers(loaded.id)), o.workers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	members[0].se.notes(loaded, stderr)
	fmt.Fprintf(stderr, "kvserve: cluster up: %d workers; gateway serving %q on http://%s\n", o.workers, loaded.id, a.ln.Addr())
	select {
	case err := <-a.serveErr:
		return fmt.Errorf("cluster up: %w", err)
	case <-ctx.Done():
	}
	fmt.Fprintf(stderr, "kvserve: shutting down: finishing in-flight requests (up to %s)\n", o.shutdownTimeout)
	a.shutdown(o.shutdownTimeout)
	return nil
}

// autoReasons says what sends "auto" to the strong model.
func autoReasons(r *api.AutoRule) string {
	var why []string
	if r.Tools {
		why = append(why, "requests offering tools")
	}
	if r.Reasoning {
		why = append(why, "requests turning reasoning on")
	}
	if r.LongPrompt > 0 {
		why = append(why, fmt.Sprintf("prompts of %d tokens or more", r.LongPrompt))
	}
	if len(why) == 0 {
		return "nothing (no rule set)"
	}
	return strings.Join(why, ", ")
}
