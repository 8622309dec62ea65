package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/upstream"
	"github.com/kvserve/kvserve/internal/vllmevents"
)

// upstreamOptions are `kvserve worker`'s settings for an external engine.
type upstreamOptions struct {
	url         string
	model       string
	cacheTokens int
	maxRunning  int
	cacheSalt   bool
	kvEvents    string
	kvReplay    string
	kvTopic     string
}

func addUpstreamFlags(f *pflag.FlagSet, o *upstreamOptions) {
	f.StringVar(&o.url, "upstream", "", "serve an external OpenAI-compatible server instead of an engine of this process: its API base URL, e.g. http://10.0.0.5:8000/v1")
	f.StringVar(&o.model, "upstream-model", "", "the model name the --upstream server serves (default: --model-id)")
	f.IntVar(&o.cacheTokens, "upstream-cache-tokens", 1<<18, "the --upstream server's prefix cache size in tokens (vLLM logs it as its KV cache size): the predicted cache's capacity")
	f.IntVar(&o.maxRunning, "upstream-max-running", 256, "requests sent to the --upstream server at once; past it a request gets queue_full and the gateway places it elsewhere")
	f.BoolVar(&o.cacheSalt, "upstream-cache-salt", false, "send each tenant's keyed hash as cache_salt (vLLM), so that the --upstream server's prefix cache is not shared between tenants either")
	f.StringVar(&o.kvEvents, "upstream-kv-events", "", "exact mode: follow the --upstream vLLM server's KV events at this ZMQ endpoint (its kv-events-config endpoint, e.g. tcp://10.0.0.5:5557) instead of predicting its cache; needs --upstream-cache-salt and the server's --block-size as --block-size")
	f.StringVar(&o.kvReplay, "upstream-kv-events-replay", "", "the vLLM server's replay endpoint (kv-events-config replay_endpoint, e.g. tcp://10.0.0.5:5558): missed event batches are asked for there; without it a gap forgets the server's blocks")
	f.StringVar(&o.kvTopic, "upstream-kv-events-topic", "", "the vLLM server's KV event topic (kv-events-config topic)")
}

// upstreamEngineFlags are the engine flags an external engine has no use
// for: given with --upstream they are refused, not ignored.
var upstreamEngineFlags = []string{"model-memory", "widen-memory", "kv-cache-memory", "kv-max-pinned", "kv-max-pinned-per-tenant",
	"kv-max-persistent-per-tenant", "kv-eviction", "kv-host-memory", "kv-disk", "kv-cache-type", "max-batch-tokens",
	"max-running", "max-waiting", "threads", "compute-nice", "no-prefix-cache", "engine", "sim-profile", "sim-seed",
	"record-passes", "kv-copy"}

// validate fails on an engine flag set alongside --upstream, and on
// --upstream-* flags set without it.
func (o *upstreamOptions) validate(f *pflag.FlagSet) error {
	if o.url == "" {
		for _, name := range []string{"upstream-model", "upstream-cache-tokens", "upstream-max-running", "upstream-cache-salt",
			"upstream-kv-events", "upstream-kv-events-replay", "upstream-kv-events-topic"} {
			if f.Changed(name) {
				return fmt.Errorf("--%s needs --upstream", name)
			}
		}
		return nil
	}
	for _, name := range upstreamEngineFlags {
		if fl := f.Lookup(name); fl != nil && fl.Changed {
			return fmt.Errorf("--%s configures kvserve's own engine; with --upstream the external server runs the model", name)
		}
	}
	if o.kvEvents == "" && (f.Changed("upstream-kv-events-replay") || f.Changed("upstream-kv-events-topic")) {
		return errors.New("--upstream-kv-events-replay and --upstream-kv-events-topic need --upstream-kv-events")
	}
	if o.kvEvents != "" && !o.cacheSalt {
		return errors.New("--upstream-kv-events needs --upstream-cache-salt: the server's blocks are told apart by tenant by the cache_salt each request carries")
	}
	if o.cacheTokens < 1 || o.maxRunning < 1 {
		return errors.New("--upstream-cache-tokens and --upstream-max-running must be ≥ 1")
	}
	return nil
}

// runUpstreamWorker is `kvserve worker --upstream URL`.
func runUpstreamWorker(ctx context.Context, o *workerOptions, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	dataDir, secret, err := checkWorker(o)
	if err != nil {
		return err
	}
	loaded, err := loadServedModel(ctx, &o.engineOptions, dataDir, false, stderr)
	if err != nil {
		return err
	}
	defer loaded.file.Close()
	model := o.upstream.model
	if model == "" {
		model = loaded.id
	}
	metrics, err := startWorkerMetrics(o.metricsAddr, stderr)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer metrics.Close()
	events := kv.NewEventLog(1 << 16)
	var mirror *vllmevents.Mirror
	cacheWhat := "predicted cache"
	if o.upstream.kvEvents != "" {
		// Room for the server's pool and as much again offloaded, twice
		// over (blocks of sequences no tenant claimed yet count too).
		mirror = vllmevents.NewMirror(vllmevents.MirrorConfig{Secret: secret, ModelID: loaded.id, BlockSize: o.blockSize,
			MaxBlocks: max(4*o.upstream.cacheTokens/max(o.blockSize, 1), 1<<16), Events: events, Logger: log})
		f, err := vllmevents.NewFollower(vllmevents.FollowConfig{Endpoint: o.upstream.kvEvents, Replay: o.upstream.kvReplay,
			Topic: o.upstream.kvTopic, Logger: log}, mirror)
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		for _, c := range f.Collectors() {
			if err := metrics.registerer().Register(c); err != nil {
				return fmt.Errorf("worker: metrics: %w", err)
			}
		}
		fctx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); _ = f.Run(fctx) }()
		// Followed until the worker has drained: the events of the last
		// requests still count until then.
		defer func() { stop(); <-done }()
		cacheWhat = "KV events from " + o.upstream.kvEvents + ", cache"
	}
	up, err := upstream.New(upstream.Config{Registerer: metrics.registerer(), URL: o.upstream.url, Model: model, APIKey: os.Getenv("KVSERVE_UPSTREAM_API_KEY"),
		Tokenizer: loaded.tok, ContextLength: loaded.file.Model.Config.Context, ModelID: loaded.id, Secret: secret,
		BlockSize: o.blockSize, CacheTokens: o.upstream.cacheTokens, MaxRunning: o.upstream.maxRunning,
		CacheSalt: o.upstream.cacheSalt, Events: events, Mirror: mirror})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	nc, err := connectNATS(o.natsURL, "kvserve worker")
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer nc.Close()
	w, err := cluster.StartWorker(nc, up, cluster.WorkerConfig{ID: o.id, Model: loaded.id, Events: events, Logger: log})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	fmt.Fprintf(stderr, "kvserve: worker %s serving %q over NATS at %s: external engine %s (model %q), %s %d tokens in blocks of %d\n",
		w.ID(), loaded.id, nc.ConnectedUrlRedacted(), o.upstream.url, model, cacheWhat, o.upstream.cacheTokens, up.BlockSize())
	return serveUntilDone(ctx, w, o.drainTimeout, stderr)
}
