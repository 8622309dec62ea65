package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/constrain"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/grammar"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/kv/diskstore"
	"github.com/kvserve/kvserve/internal/sim"
)

// engineOptions are the settings of the model and the engine that runs it:
// shared by serve, worker and cluster up, so a worker is configured exactly
// as a server is.
type engineOptions struct {
	modelPath       string
	weights         weightsMemory
	modelID         string
	kvMemory        byteSize
	kvHostMemory    hostSize
	kvDisk          hostSize
	kvEviction      string
	maxPinned       float64
	maxPinnedTenant float64
	maxPersistent   float64
	kvType          string
	blockSize       int
	maxBatchTokens  int
	maxRunning      int
	maxWaiting      int
	threads         int
	computeNice     int
	noPrefixCache   bool
	engine          string
	simProfile      string
	simSeed         uint64
	recordPasses    string
}

// addEngineFlags defines the model and engine flags on f.
func addEngineFlags(f *pflag.FlagSet, o *engineOptions) {
	f.StringVarP(&o.modelPath, "model", "m", "", "GGUF model file (default: a synthetic random-weight model, generated into the data directory)")
	weightsMemoryFlags(f, &o.weights)
	f.StringVar(&o.modelID, "model-id", "", "model name clients use (default: the file name without .gguf)")
	f.Var(&o.kvMemory, "kv-cache-memory", "KV cache size, e.g. 4GiB; auto: 25% of MemAvailable, within [256MiB, 4GiB]")
	f.Float64Var(&o.maxPinned, "kv-max-pinned", 0.5, "share of the KV cache pins may hold (retention pinned, context caches); a request that would pin more gets 429")
	f.Float64Var(&o.maxPinnedTenant, "kv-max-pinned-per-tenant", 0.25, "share of the KV cache one tenant's pins may hold (at most --kv-max-pinned)")
	f.Float64Var(&o.maxPersistent, "kv-max-persistent-per-tenant", 0.5, "share of the KV cache one tenant's persistent blocks (system prompts, tools) may hold; past it they are kept as session blocks")
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
	f.StringVar(&o.engine, "engine", "model", "what computes the tokens: model (the real forward pass) or sim (the simulator: the same scheduler and KV manager, a forward pass that only spends the modelled time of the real one; its output is NOT language)")
	f.StringVar(&o.simProfile, "sim-profile", "", "with --engine sim: the cost profile from kvserve sim calibrate (default: a built-in profile measured on SmolLM2-135M Q8_0, scaled to the model's size)")
	f.Uint64Var(&o.simSeed, "sim-seed", 0, "with --engine sim: varies the simulated output tokens")
	f.StringVar(&o.recordPasses, "record-passes", "", "append every forward pass's shape and duration to this file as JSON lines, to fit the simulator to real traffic (kvserve sim calibrate --passes FILE)")
}

// validate checks the settings that can be checked before anything is
// loaded.
func (o *engineOptions) validate() error {
	if _, err := kv.ParseElemType(o.kvType); err != nil {
		return err
	}
	if !(o.maxPersistent > 0 && o.maxPersistent <= 1) {
		return fmt.Errorf("--kv-max-persistent-per-tenant %v: want a share in (0, 1]", o.maxPersistent)
	}
	if !(o.maxPinned > 0 && o.maxPinned <= 1) || !(o.maxPinnedTenant > 0 && o.maxPinnedTenant <= o.maxPinned) {
		return fmt.Errorf("--kv-max-pinned %v, --kv-max-pinned-per-tenant %v: want 0 < per tenant ≤ overall ≤ 1", o.maxPinned, o.maxPinnedTenant)
	}
	if o.kvEviction != "value" && o.kvEviction != "lru" {
		return fmt.Errorf("--kv-eviction %q: want value or lru", o.kvEviction)
	}
	if o.engine != "model" && o.engine != "sim" {
		return fmt.Errorf("--engine %q: want model or sim", o.engine)
	}
	if o.engine != "sim" && (o.simProfile != "" || o.simSeed != 0) {
		return errors.New("--sim-profile and --sim-seed need --engine sim")
	}
	if o.computeNice < 0 || o.computeNice > 20 {
		return fmt.Errorf("--compute-nice %d: want 0 (off), 1-19 (nice) or 20 (SCHED_IDLE)", o.computeNice)
	}
	if o.weights.placement != "auto" {
		if _, err := gguf.ParsePlacement(o.weights.placement); err != nil {
			return fmt.Errorf("--model-memory %q: want auto, mmap or hugepages", o.weights.placement)
		}
	}
	return nil
}

// servedEngine is an engine built from engineOptions on a loaded model,
// with what its server or worker needs beside it.
type servedEngine struct {
	e           *engine.Engine
	events      *kv.EventLog
	fwd         engine.Forwarder
	constraints *constrain.Compiler
	kvType      kv.ElemType
	kvMemory    int64
	hostMemory  int64
	diskBytes   int64
	sim         bool     // --engine sim: the tiers keep bookkeeping only
	closers     []func() // after the engine, last first
}

// Close stops the engine, then its forward pass.
func (s *servedEngine) Close() {
	s.e.Close()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// engineEnv is where an engine is built: its disk tier's directory (used
// only with a disk tier), the secret keying its hash salts, its metrics
// registry (nil: none) and its logger.
type engineEnv struct {
	dataDir, kvDir string
	secret         []byte
	reg            prometheus.Registerer
	log            *slog.Logger
	stderr         io.Writer // what the user is told (nil: nothing)
}

// reservedMemory is the memory the engine keeps besides the model, which
// --widen-memory auto leaves to it: the KV cache's (the default's, sized
// before the model takes its share), and the host tier's when it is given
// (by default it takes a share of what the model leaves).
func (o *engineOptions) reservedMemory() int64 {
	kv := int64(o.kvMemory)
	if kv == 0 {
		kv = defaultKVMemory(memAvailable())
	}
	return kv + max(0, int64(o.kvHostMemory))
}

// newServedEngine builds the forward pass --engine names and the engine on
// it. o must have been validated.
func newServedEngine(o *engineOptions, loaded *servedModel, env engineEnv) (*servedEngine, error) {
	kvType, err := kv.ParseElemType(o.kvType)
	if err != nil {
		return nil, err
	}
	s := &servedEngine{kvType: kvType, sim: o.engine == "sim"}
	s.kvMemory = int64(o.kvMemory)
	if s.kvMemory == 0 {
		s.kvMemory = defaultKVMemory(memAvailable())
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
	s.hostMemory = int64(o.kvHostMemory)
	switch s.hostMemory {
	case 0:
		s.hostMemory = defaultHostMemory(s.kvMemory, memAvailable())
	case -1:
		s.hostMemory = 0
	}
	s.diskBytes = int64(o.kvDisk)
	switch s.diskBytes {
	case -1:
		s.diskBytes = 0
	case 0:
		s.diskBytes = defaultDiskBytes(diskFree(env.dataDir))
		// Another process on this data directory holds the disk tier: by
		// default this one runs without, rather than not at all.
		if err := diskstore.Probe(env.kvDir); o.engine != "sim" && errors.Is(err, diskstore.ErrInUse) {
			if env.stderr != nil {
				fmt.Fprintf(env.stderr, "kvserve: another server uses the disk KV tier in %s; this one runs without (--kv-disk off to say so, or give each server its own --data-dir)\n", env.kvDir)
			}
			s.diskBytes = 0
		}
	}
	fwd, closeFwd, err := servedForwarder(o, loaded, kvType)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, closeFwd)
	if o.recordPasses != "" {
		rec, closeRec, err := recordPasses(fwd, o.recordPasses)
		if err != nil {
			s.runClosers()
			return nil, err
		}
		s.closers = append(s.closers, closeRec)
		fwd = rec
	}
	s.fwd = fwd
	var grammarOpts grammar.Options
	if loaded.synthetic || o.engine == "sim" {
		// Random weights (and the simulator) almost never pick the token
		// that closes a JSON string: bound free strings so constrained
		// output ends.
		grammarOpts.MaxStringLength = 32
	}
	s.constraints = constrain.New(loaded.tok, loaded.tmpl, grammarOpts)
	s.events = kv.NewEventLog(1 << 16)
	s.e, err = engine.New(fwd, engine.Config{
		Events:                 s.events,
		Constraints:            s.constraints,
		KVNoStorage:            o.engine == "sim",
		MaxBatchTokens:         o.maxBatchTokens,
		MaxRunning:             o.maxRunning,
		MaxWaiting:             o.maxWaiting,
		BlockSize:              o.blockSize,
		KVMemoryBytes:          s.kvMemory,
		KVHostMemoryBytes:      s.hostMemory,
		KVDiskDir:              env.kvDir,
		KVDiskBytes:            s.diskBytes,
		LRUEviction:            o.kvEviction == "lru",
		MaxPinnedFraction:      o.maxPinned,
		MaxPinnedPerTenant:     o.maxPinnedTenant,
		MaxPersistentPerTenant: o.maxPersistent,
		DisablePrefixCache:     o.noPrefixCache,
		Logger:                 env.log,
		Secret:                 env.secret,
		ModelID:                loaded.id,
		EndOfGeneration:        loaded.tok.EOGs(),
		Registerer:             env.reg,
	})
	if err != nil {
		s.runClosers()
		return nil, err
	}
	return s, nil
}

func (s *servedEngine) runClosers() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// contextLength is the longest sequence the engine takes: the model's
// context, bounded by the KV pool.
func (s *servedEngine) contextLength() int {
	ec := s.e.Config()
	return min(ec.MaxContext, s.e.KV().NumBlocks()*ec.BlockSize)
}

// describe is the one line saying what the engine holds.
func (s *servedEngine) describe() string {
	ec := s.e.Config()
	return fmt.Sprintf("context %d tokens, KV cache %s (%d blocks of %d tokens, %s), host tier %s, disk tier %s",
		s.contextLength(), formatBytes(s.kvMemory), s.e.KV().NumBlocks(), ec.BlockSize, s.kvType,
		hostTierString(s.hostMemory), diskTierString(s.diskBytes, s.sim, s.e.KV().Stats().Disk))
}

// notes prints what a user must know about what runs (a synthetic model,
// the simulator).
func (s *servedEngine) notes(loaded *servedModel, stderr io.Writer) {
	if loaded.synthetic {
		fmt.Fprintln(stderr, "kvserve: NOTE: this is a synthetic random-weight model; its output is not language. Pass --model FILE.gguf for a real one.")
	}
	if sf, ok := s.fwd.(*sim.Forwarder); ok {
		fmt.Fprintf(stderr, "kvserve: NOTE: --engine sim: no forward pass runs; each one sleeps its modelled time (%s); the output is NOT language\n", sf.Profile().Model)
	}
}
