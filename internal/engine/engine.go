// Package engine runs generation requests on one model: a scheduler that
// batches many sequences into every forward pass (continuous batching),
// splits long prompts into chunks mixed with decode steps, reuses cached KV
// prefixes, and preempts by recomputation when the KV pool runs dry.
//
// One goroutine, the step loop, owns all scheduling state: it drains new
// submissions, picks the tokens of the next forward pass under a token
// budget, runs the pass, samples, and delivers outputs to each request's
// Stream. Callers interact only through Submit and Stream, which never block
// the loop.
//
// Scheduling order in every step:
//  1. running sequences that decode (one token each), highest priority and
//     oldest first; if the pool cannot give one of them a block, the lowest
//     priority, newest running sequence is preempted (its blocks released,
//     its full blocks staying cached) and re-queued;
//  2. running sequences still prefilling, a chunk each, while budget lasts;
//  3. waiting requests, admitted in priority order (FCFS within a priority)
//     while the pool has blocks for their whole remaining prompt.
//
// Because the model's forward pass is batch-invariant (a sequence's logits
// do not depend on its batch-mates or on chunking), outputs are identical
// whether prefixes come from cache, prompts are chunked, or sequences are
// preempted and recomputed.
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/sample"
)

// Forwarder is the forward pass the engine drives: the real model
// (model.Forwarder) or the simulator (internal/sim). Forward runs one pass:
// it appends every sequence's new tokens to its cache and fills the
// requested logits; Shape tells the engine how to size its KV pool and
// check requests. A Forwarder serves one engine and is called from its
// step loop only.
//
// Optional capabilities, found by type assertion:
//   - Parallel(n int, fn func(lo, hi int)): splits the step's sampling over
//     the forward pass's threads;
//   - Rest(): called when a step's compute is done, before its outputs are
//     delivered (the compute threads park and leave their processors to
//     the handlers the deliveries wake);
//   - LockBackground() error: called once from the step loop's goroutine,
//     so that it runs at the compute threads' priority.
type Forwarder interface {
	Shape() batch.Shape
	Forward(ctx context.Context, seqs []batch.Seq) error
}

type paralleler interface {
	Parallel(n int, fn func(lo, hi int))
}
type rester interface{ Rest() }
type backgroundLocker interface{ LockBackground() error }

// Clock tells the engine the time: the real clock by default. A simulation
// in virtual time passes its own, advanced by its modelled forward passes,
// so that every timing the engine reports (token times, queue times,
// metrics) is in that time.
type Clock interface {
	Now() time.Time
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Config configures an Engine. The zero value of each field means its
// default.
type Config struct {
	// MaxBatchTokens is the token budget of one forward pass (default and
	// upper bound: the forward pass's MaxTokens).
	MaxBatchTokens int
	// MaxRunning bounds the sequences in flight (default 256).
	MaxRunning int
	// MaxWaiting bounds queued requests; more are refused with ErrQueueFull
	// (default 4096).
	MaxWaiting int
	// MaxContext caps a sequence's length (default: the model's training
	// context).
	MaxContext int
	// BlockSize is the KV block size in tokens (default 16).
	BlockSize int
	// KVMemoryBytes sizes the KV pool (default 1 GiB).
	KVMemoryBytes int64
	// KVNoStorage keeps the pool's bookkeeping without its memory
	// (kv.Config.NoStorage), for forward passes that compute nothing.
	KVNoStorage bool
	// KVHostMemoryBytes is the budget of the host-memory tier (G2): blocks
	// evicted from the pool move there and come back on a prefix hit
	// instead of being recomputed (0: none).
	KVHostMemoryBytes int64
	// KVDiskDir and KVDiskBytes configure the disk tier (G3): blocks
	// leaving memory are written there, encrypted per tenant, and a
	// prompt that continues on disk waits for its blocks to be read back
	// (others keep running) instead of recomputing them. Close writes
	// what memory holds, so the next engine on the directory finds it
	// (0 bytes: none).
	KVDiskDir   string
	KVDiskBytes int64
	// LRUEviction evicts cached blocks least recently released first
	// instead of by value (kv's default): the baseline, for comparisons.
	LRUEviction bool
	// DisablePrefixCache turns off prefix sharing.
	DisablePrefixCache bool
	// Contiguous is the baseline allocation mode: every request reserves
	// room for its maximum length when admitted, and nothing is shared.
	Contiguous bool
	// Secret keys the per-scope hash salts (default: a fixed development
	// key; servers must set a random one).
	Secret []byte
	// ModelID is bound into every block hash, so two models never share.
	ModelID string
	// EndOfGeneration lists the tokens that end a sample (the tokenizer's
	// end-of-generation set).
	EndOfGeneration []int32
	// Logger receives the engine's warnings (default: discarded).
	Logger *slog.Logger
	// Registerer receives the engine's Prometheus metrics (optional).
	Registerer prometheus.Registerer
	// Events receives the KV pool's block events (optional).
	Events *kv.EventLog
	// Clock is the engine's time (default: the real clock).
	Clock Clock
	// Constraints compiles requests' output constraints for the model
	// (nil: constrained requests are refused).
	Constraints ConstraintCompiler
	// DefaultPinTTL is how long blocks a request pins (retention pinned)
	// stay unevictable when the request names no TTL (default 5 minutes,
	// the shortest cache lifetime hosted APIs offer).
	DefaultPinTTL time.Duration
	// SessionIdleTimeout is how long an agent session (hints.session_id)
	// may stay idle before its blocks are demoted: moved to the host tier,
	// or made the first to be evicted (default 10 minutes).
	SessionIdleTimeout time.Duration
	// MaxPinnedFraction bounds the share of the KV pool that pins may
	// hold (default 0.5): a request that would pin more is refused with
	// ErrPinQuota, so every request that fits in the rest can always run.
	MaxPinnedFraction float64
	// MaxPinnedPerTenant bounds the share of the pool one tenant's pins may
	// hold (default 0.25), so no tenant takes every pin.
	MaxPinnedPerTenant float64
	// MaxPersistentPerTenant bounds the share of the pool one tenant's
	// persistent blocks (system prompts, tools) may hold (default 0.5);
	// past it a tenant's further ones are kept as session blocks, so one
	// tenant cannot push out every other's.
	MaxPersistentPerTenant float64
}

func (c Config) withDefaults(shape batch.Shape) Config {
	if c.MaxBatchTokens <= 0 {
		c.MaxBatchTokens = shape.MaxTokens
	}
	if c.MaxRunning <= 0 {
		c.MaxRunning = 256
	}
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = 4096
	}
	if c.MaxContext <= 0 || c.MaxContext > shape.Context {
		c.MaxContext = shape.Context
	}
	if c.BlockSize <= 0 {
		c.BlockSize = 16
	}
	if c.KVMemoryBytes <= 0 {
		c.KVMemoryBytes = 1 << 30
	}
	if c.Secret == nil {
		c.Secret = []byte("kvserve-development-secret")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.DefaultPinTTL <= 0 {
		c.DefaultPinTTL = 5 * time.Minute
	}
	if c.SessionIdleTimeout <= 0 {
		c.SessionIdleTimeout = 10 * time.Minute
	}
	if c.MaxPinnedFraction <= 0 || c.MaxPinnedFraction > 1 {
		c.MaxPinnedFraction = 0.5
	}
	if c.MaxPinnedPerTenant <= 0 || c.MaxPinnedPerTenant > c.MaxPinnedFraction {
		c.MaxPinnedPerTenant = min(0.25, c.MaxPinnedFraction)
	}
	if c.MaxPersistentPerTenant <= 0 || c.MaxPersistentPerTenant > 1 {
		c.MaxPersistentPerTenant = 0.5
	}
	return c
}

// Engine serves requests on one model.
type Engine struct {
	cfg   Config
	fwd   Forwarder
	shape batch.Shape
	clock Clock
	kv    *kv.Pool
	eog   map[int32]bool
	salts sync.Map // scope → kv.Hash
	m     *metrics

	inbox inbox
	// constraints caches compiled constraints (Submit, any goroutine).
	constraints constraintCache
	// sessions are the agent sessions between turns, changed by the step
	// loop only, under sessionsMu so that Sessions can read them.
	sessions        map[sessionKey]*session
	sessionsMu      sync.Mutex
	sessionsChecked time.Time
	pauses          []time.Duration // recent pauses before sessions' turns (a ring of enginePauses)
	pauseNext       int             // the oldest in pauses, once full
	wake            chan struct{}   // a submission arrived (capacity 1)
	waiting         atomic.Int64    // requests submitted and not yet finished admission
	waitingBy       waitTally       // the same by priority, from the inbox on
	stop            context.CancelFunc
	done            chan struct{}
	// stepped: no step loop; the caller runs Step (NewStepped).
	stepped   bool
	closeOnce sync.Once

	// Step-loop state.
	order   uint64
	queue   []*seqState // waiting, sorted by compareQueued (priority desc, fair start asc, order asc)
	fair    fairShare   // the fair-share starts between tenants
	running []*seqState
	logits  []float32   // arena: one Vocab-sized slice per sequence needing logits
	scratch []float32   // a processor's private copy of one sequence's logits
	samples []sampleJob // the pass's draws, reused from step to step
	// ended are the streams whose last output this step queued, and
	// handoff bounds the wait for their readers (see handOff).
	ended   []*Stream
	handoff *time.Timer
	batch   []batch.Seq
	entries []entry
	// inflight counts, per block hash, the running sequences whose prefill
	// will produce that block. A waiting request whose next uncached block
	// is in flight waits for it instead of computing it a second time.
	inflight  map[kv.Hash]int
	occupancy occupancy
}

// occupancy accumulates, over steps, how many KV slots running sequences
// use and how many are allocated to them (the waste measure).
type occupancy struct {
	used, allocated atomic.Int64
	peakRunning     atomic.Int64
}

// inbox holds submissions until the step loop takes them. Once closed (the
// loop has ended), Submit refuses: no request can slip in after the final
// drain and wait forever.
type inbox struct {
	mu     sync.Mutex
	reqs   []*request
	closed bool
}

// request is a submitted Request with its stream.
type request struct {
	Request
	stream   *Stream
	procs    []LogitsProcessor // of each sample, when constrained
	order    uint64
	forked   bool
	admitted bool
	// fairStart is the request's start in fairShare (its place among
	// requests of its priority).
	fairStart uint64
}

// seqState is one sample of a request: its KV sequence and tokens.
type seqState struct {
	req       *request
	index     int
	kv        *kv.Sequence
	tokens    []int32 // prompt + generated; the KV of tokens[:kv.Len()] is computed
	generated int
	sampler   *sample.Sampler
	proc      LogitsProcessor
	order     uint64    // arrival order, for FCFS and victim choice
	reserved  int       // contiguous mode: positions reserved at admission
	pending   []kv.Hash // prompt blocks this sequence is computing, announced in Engine.inflight
	// fetching is when the sequence began waiting for its prompt's blocks
	// to come up from disk (zero: not waiting).
	fetching time.Time
	// diskGaveUp: it waited maxDiskWait once and no longer waits.
	diskGaveUp bool
}

// entry is one sequence's part of the current forward pass.
type entry struct {
	s      *seqState
	n      int  // tokens computed this pass
	logits bool // the pass reaches the end of the sequence's tokens
}

// New builds an engine on the forward pass f and starts its step loop;
// Close stops it. f stays its caller's: close it after the engine.
func New(f Forwarder, cfg Config) (*Engine, error) {
	e, err := newEngine(f, cfg)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	e.stop = stop
	go e.loop(ctx)
	return e, nil
}

// NewStepped builds an engine without a step loop: its caller runs the steps
// (Step), one at a time, from one goroutine. Runs are then deterministic —
// what simulations in virtual time and scheduler tests need. Submit and the
// streams work as with New; Close fails what is still in flight.
func NewStepped(f Forwarder, cfg Config) (*Engine, error) {
	e, err := newEngine(f, cfg)
	if err != nil {
		return nil, err
	}
	e.stepped = true
	e.stop = func() {}
	close(e.done)
	return e, nil
}

func newEngine(f Forwarder, cfg Config) (*Engine, error) {
	shape := f.Shape()
	if shape.Vocab <= 0 || shape.Context <= 0 || shape.MaxTokens <= 0 {
		return nil, fmt.Errorf("engine: the forward pass reports an invalid shape %+v", shape)
	}
	cfg = cfg.withDefaults(shape)
	if cfg.MaxBatchTokens > shape.MaxTokens {
		return nil, fmt.Errorf("engine: a pass of %d tokens exceeds the forward pass's maximum of %d", cfg.MaxBatchTokens, shape.MaxTokens)
	}
	kvType, err := kv.ElemTypeOf(shape.KVType)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	pool, err := kv.NewPool(kv.Config{
		LRU:          cfg.LRUEviction,
		MemoryBytes:  cfg.KVMemoryBytes,
		BlockSize:    cfg.BlockSize,
		Layers:       shape.Layers,
		KVDim:        shape.KVDim,
		Type:         kvType,
		Events:       cfg.Events,
		DisableIndex: cfg.DisablePrefixCache || cfg.Contiguous,
		NoStorage:    cfg.KVNoStorage,
		Now:          cfg.Clock.Now,

		HostMemoryBytes:    cfg.KVHostMemoryBytes,
		DiskDir:            cfg.KVDiskDir,
		MaxPersistentShare: cfg.MaxPersistentPerTenant,
		DiskBytes:          cfg.KVDiskBytes,
		Logger:             cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{
		cfg: cfg, fwd: f, shape: shape, clock: cfg.Clock, kv: pool,
		eog:      map[int32]bool{},
		inflight: map[kv.Hash]int{},
		sessions: map[sessionKey]*session{},
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
	}
	for _, t := range cfg.EndOfGeneration {
		e.eog[t] = true
	}
	if e.m, err = newMetrics(cfg.Registerer, pool); err != nil {
		return nil, err
	}
	return e, nil
}

// Close stops the step loop, failing requests still in flight, and with a
// disk tier writes the cached blocks to it (for at most diskFlushTimeout).
// It does not close the forward pass.
func (e *Engine) Close() {
	e.stop()
	<-e.done
	e.closeOnce.Do(func() {
		if e.stepped {
			e.failAll(ErrClosed)
		}
		ctx, cancel := context.WithTimeout(context.Background(), diskFlushTimeout)
		defer cancel()
		if err := e.kv.Close(ctx); err != nil {
			e.cfg.Logger.Warn("engine: KV disk tier not fully written at close", "err", err)
		}
	})
}

// diskFlushTimeout bounds how long Close spends writing memory's blocks to
// the disk tier.
const diskFlushTimeout = 30 * time.Second

// ForgetScope drops every cached block of scope (a deleted tenant) from
// every tier, destroying its disk key. Requests of the scope still running
// keep their blocks until they end, then free them.
func (e *Engine) ForgetScope(scope string) error {
	return e.kv.ForgetScope(e.salt(scope))
}

// chain returns the hashes of the full blocks of tokens, a prefix of r's
// prompt, as r's sequence hashes them (its shared prefix in its shared
// scope).
func (e *Engine) chain(r *Request, tokens []int32) []kv.Hash {
	h := kv.NewHasher([]byte(e.cfg.ModelID))
	salt := e.salt(r.Scope)
	if r.SharedScope == "" {
		return h.Chain(nil, salt, tokens, e.cfg.BlockSize)
	}
	return h.SplitChain(nil, e.salt(r.SharedScope), r.SharedTokens/e.cfg.BlockSize, salt, tokens, e.cfg.BlockSize)
}

// fetch starts moving chain's blocks (r's prompt's) up from disk, each
// part under its own scope's key, and returns how many it is bringing.
// ahead marks a guess: blocks no request asks for yet (kv.Pool.Fetch).
func (e *Engine) fetch(r *Request, chain []kv.Hash, ahead bool) int {
	k := 0
	if r.SharedScope != "" {
		k = min(r.SharedTokens/e.cfg.BlockSize, len(chain))
	}
	n := 0
	if k > 0 {
		n = e.kv.Fetch(e.salt(r.SharedScope), chain[:k], ahead, e.wakeUp)
	}
	return n + e.kv.Fetch(e.salt(r.Scope), chain[k:], ahead, e.wakeUp)
}

// Unpin ends now the pins on prompt's full blocks in scope (a deleted
// context cache's prefix) and returns how many blocks it unpinned.
func (e *Engine) Unpin(scope string, prompt []int32) int {
	bs := e.cfg.BlockSize
	salt := e.salt(scope)
	return e.kv.Unpin(kv.NewHasher([]byte(e.cfg.ModelID)).Chain(nil, salt, prompt, bs))
}

// KV returns the engine's block pool (for metrics and tests).
func (e *Engine) KV() *kv.Pool { return e.kv }

// Shape returns the forward pass's shape.
func (e *Engine) Shape() batch.Shape { return e.shape }

// Config returns the engine's configuration with defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// Submit queues a request. The stream ends when every sample has finished or
// ctx is cancelled.
func (e *Engine) Submit(ctx context.Context, r Request) (*Stream, error) {
	if err := e.validate(&r); err != nil {
		return nil, err
	}
	if e.waiting.Add(1) > int64(e.cfg.MaxWaiting) {
		e.waiting.Add(-1)
		return nil, ErrQueueFull
	}
	if err := ctx.Err(); err != nil {
		e.waiting.Add(-1)
		return nil, err
	}
	procs, err := e.processors(&r)
	if err != nil {
		e.waiting.Add(-1)
		return nil, err
	}
	req := &request{Request: r, procs: procs, stream: newStream(ctx, r.N, e.clock)}
	req.stream.usage.PromptTokens = len(r.Prompt)
	e.inbox.mu.Lock()
	if e.inbox.closed {
		e.inbox.mu.Unlock()
		e.waiting.Add(-1)
		return nil, ErrClosed
	}
	e.inbox.reqs = append(e.inbox.reqs, req)
	// Under the inbox's lock: the loop cannot admit it before it is counted.
	e.waitingBy.add(&req.Request, 1)
	e.inbox.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
	return req.stream, nil
}

// takeSubmissions returns the requests submitted since the last call and,
// with close set, refuses all later ones.
func (e *Engine) takeSubmissions(close bool) []*request {
	e.inbox.mu.Lock()
	defer e.inbox.mu.Unlock()
	reqs := e.inbox.reqs
	e.inbox.reqs = nil
	e.inbox.closed = e.inbox.closed || close
	return reqs
}

func (e *Engine) validate(r *Request) error {
	if r.N == 0 {
		r.N = 1
	}
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("%w: empty prompt", ErrInvalid)
	case r.MaxTokens < 1:
		return fmt.Errorf("%w: max tokens must be at least 1", ErrInvalid)
	case r.N < 1 || r.N > 128:
		return fmt.Errorf("%w: n must be in [1, 128], got %d", ErrInvalid, r.N)
	}
	if err := checkShared(r); err != nil {
		return err
	}
	vocab := e.shape.Vocab
	for _, t := range r.Prompt {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("%w: token id %d outside the vocabulary [0, %d)", ErrInvalid, t, vocab)
		}
	}
	if total := len(r.Prompt) + r.MaxTokens; total > e.cfg.MaxContext {
		return fmt.Errorf("%w: %d prompt tokens + %d output tokens exceed the maximum context of %d", ErrTooLong, len(r.Prompt), r.MaxTokens, e.cfg.MaxContext)
	}
	bs := e.cfg.BlockSize
	need := (len(r.Prompt) + r.MaxTokens + bs - 1) / bs
	if e.cfg.Contiguous {
		need *= r.N
	}
	// A request that fits beside the pins held now is taken; if more pins
	// come before it runs, it waits for them to expire. One that fits
	// beside a full quota of pins never waits for pins.
	// The request's own blocks that are pinned already (a context cache's
	// prefix) are part of the room it needs, not beside it.
	pinned := e.kv.Pinned()
	own := 0
	if pinned > 0 && !e.cfg.Contiguous {
		own = e.kv.CountPinned(e.chain(r, r.Prompt))
	}
	if room := e.kv.NumBlocks() - pinned; need-own > room {
		return fmt.Errorf("%w: %d tokens need %d KV blocks, the pool has %d beside the pinned ones", ErrTooLong, len(r.Prompt)+r.MaxTokens, need-own, room)
	}
	if pins(r) {
		// Up to every full block of the prompt, less those pinned already
		// (a context cache extended, or used again with a pin).
		n := len(r.Prompt)/bs - own
		if pinned+n > e.maxPinned() {
			return fmt.Errorf("%w: %d blocks are pinned and this request would pin up to %d more; the limit is %d (%.0f%% of the KV pool)",
				ErrPinQuota, pinned, n, e.maxPinned(), 100*e.cfg.MaxPinnedFraction)
		}
		limit := int(float64(e.kv.NumBlocks()) * e.cfg.MaxPinnedPerTenant)
		if p := e.kv.PinnedBy(e.salt(r.Scope)); p+n > limit {
			return fmt.Errorf("%w: the tenant has %d blocks pinned and this request would pin up to %d more; a tenant's limit is %d (%.0f%% of the KV pool)",
				ErrPinQuota, p, n, limit, 100*e.cfg.MaxPinnedPerTenant)
		}
	}
	if _, err := sample.New(r.Sampling, vocab); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// checkShared checks r's shared prefix: its scope, and at most the prompt.
func checkShared(r *Request) error {
	if r.SharedTokens < 0 || r.SharedTokens > len(r.Prompt) || (r.SharedTokens > 0) != (r.SharedScope != "") {
		return fmt.Errorf("%w: a shared prefix needs its scope and at most the prompt's %d tokens, got %d", ErrInvalid, len(r.Prompt), r.SharedTokens)
	}
	return nil
}

func (e *Engine) salt(scope string) kv.Hash {
	if v, ok := e.salts.Load(scope); ok {
		return v.(kv.Hash)
	}
	h := kv.ScopeSalt(e.cfg.Secret, scope)
	e.salts.Store(scope, h)
	return h
}

// loop is the step loop.
func (e *Engine) loop(ctx context.Context) {
	defer close(e.done)
	defer e.failAll(ErrClosed)
	// The loop drives the compute pool from this goroutine's thread, so
	// a background pool needs this thread lowered too; it stays locked
	// and exits with the loop.
	if l, ok := e.fwd.(backgroundLocker); ok {
		if err := l.LockBackground(); err != nil {
			e.cfg.Logger.Warn("engine: compute threads keep normal priority", "err", err)
		}
	}
	for {
		if len(e.running) == 0 && len(e.queue) == 0 {
			e.m.running.Set(0)
			e.m.waitingGauge.Set(0)
			// Idle sessions expire while nothing runs too.
			var tick <-chan time.Time
			if len(e.sessions) > 0 {
				tick = time.After(sessionCheckEvery) // an unfired timer is collected (Go 1.23+)
			}
			select {
			case <-tick:
				e.expireSessions()
				continue
			case <-e.wake:
				// Requests often arrive together: let the handlers still
				// parsing and tokenizing theirs submit before the first
				// pass takes the processors.
				runtime.Gosched()
			case <-ctx.Done():
				return
			}
		}
		if ctx.Err() != nil {
			return
		}
		ran := e.step(ctx)
		if ctx.Err() != nil {
			return
		}
		if !ran {
			// Nothing runnable although requests wait: cannot happen while
			// Submit refuses requests larger than the pool; back off briefly
			// rather than spin if it ever does.
			if len(e.queue) > 0 {
				time.Sleep(time.Millisecond)
			}
			continue
		}
		e.handOff()
	}
}

// step runs one step: takes the submissions, drops what was cancelled,
// schedules a pass, runs it and delivers its tokens. It reports whether a
// pass ran.
func (e *Engine) step(ctx context.Context) bool {
	e.drainSubmissions()
	e.reapCancelled()
	e.expireSessions()
	if !e.schedule() {
		// What was reaped (cancelled, finished) shows in the counts now,
		// not at the next pass.
		e.updateGauges()
		return false
	}
	if err := e.forward(ctx); err != nil {
		if ctx.Err() == nil {
			e.failBatch(err)
		}
		return true
	}
	e.afterForward()
	e.updateGauges()
	return true
}

// Step runs one step of an engine made by NewStepped and reports whether it
// ran a forward pass: false means nothing is runnable (no request waits, or
// none fits yet). Each step's outputs are in the streams when it returns.
func (e *Engine) Step(ctx context.Context) bool {
	if !e.stepped {
		panic("engine: Step on an engine with a step loop")
	}
	return e.step(ctx)
}

// Pending reports whether requests are queued or running (a stepped
// engine's caller steps until it is false).
func (e *Engine) Pending() bool {
	e.inbox.mu.Lock()
	n := len(e.inbox.reqs)
	e.inbox.mu.Unlock()
	return n > 0 || len(e.running) > 0 || len(e.queue) > 0
}

// maxHandoff bounds how long the loop waits, after a step, for the readers
// of the streams that step ended (a reader that went away never comes).
const maxHandoff = time.Millisecond

// handOff lets the handlers this step's outputs woke run before the next
// pass. They wait in this goroutine's run queue, and while a pass runs the
// compute pool keeps every P busy, so a stream's last chunk could wait
// milliseconds to be written. Yielding lets most of them run; a stream that
// ended is its client's whole wait, so for those the loop also waits —
// at most maxHandoff — until their readers have taken the last output:
// a reader that runs then writes its final chunk before the pass can take
// its processor. (kvserve bench serve, chat, 64 streams: overhead p99
// ~2.4 → ~1.9-2.0 ms with the yield, the draws split over the pool and
// ending samples woken first; → ~1.5 ms with the wait, p90 1.05 → 0.75.)
func (e *Engine) handOff() {
	runtime.Gosched()
	if len(e.ended) == 0 {
		return
	}
	if e.handoff == nil {
		e.handoff = time.NewTimer(maxHandoff)
	} else {
		e.handoff.Reset(maxHandoff)
	}
wait:
	for _, st := range e.ended {
		select {
		case <-st.drained:
		case <-e.handoff.C:
			break wait
		}
	}
	e.handoff.Stop()
	clear(e.ended)
	e.ended = e.ended[:0]
}

func (e *Engine) drainSubmissions() {
	for _, r := range e.takeSubmissions(false) {
		e.enqueue(r)
	}
}

// enqueue turns a new request into its first sequence and queues it.
func (e *Engine) enqueue(r *request) {
	e.order++
	r.order = e.order
	sampling := r.Sampling
	sampler, err := sample.New(sampling, e.shape.Vocab)
	if err != nil { // validated at Submit; cannot happen
		e.admitted(r)
		r.stream.push(Output{Token: -1, Finish: FinishError, Err: err})
		return
	}
	s := &seqState{req: r, tokens: slices.Clone(r.Prompt), sampler: sampler, order: r.order}
	if r.procs != nil {
		s.proc = r.procs[0]
	}
	r.fairStart = e.fair.start(r.Scope, len(r.Prompt), len(e.queue))
	e.sessionArrived(r)
	e.prefetch(s)
	e.insertWaiting(s)
}

// insertWaiting puts s into the queue in compareQueued order.
func (e *Engine) insertWaiting(s *seqState) {
	i, _ := slices.BinarySearchFunc(e.queue, s, compareQueued)
	e.queue = slices.Insert(e.queue, i, s)
}

// compareSeq orders by priority (higher first), then arrival (older first).
func compareSeq(a, b *seqState) int {
	if a.req.Priority != b.req.Priority {
		return b.req.Priority - a.req.Priority
	}
	if a.order != b.order {
		if a.order < b.order {
			return -1
		}
		return 1
	}
	return a.index - b.index
}

// reapCancelled ends the sequences whose request was cancelled, freeing
// their blocks.
func (e *Engine) reapCancelled() {
	keep := e.running[:0]
	for _, s := range e.running {
		if s.req.stream.ctx.Err() != nil {
			e.finish(s, FinishCancel, nil)
			continue
		}
		keep = append(keep, s)
	}
	clear(e.running[len(keep):])
	e.running = keep
	q := e.queue[:0]
	for _, s := range e.queue {
		if s.req.stream.ctx.Err() != nil {
			e.finish(s, FinishCancel, nil)
			continue
		}
		q = append(q, s)
	}
	clear(e.queue[len(q):])
	e.queue = q
}

// finish ends sample s: releases its blocks and tells the stream.
func (e *Engine) finish(s *seqState, reason FinishReason, err error) {
	e.unannounce(s)
	r := s.req
	if s.kv != nil {
		// The first sample's chain stands for its session's turn.
		inSession := s.index == 0 && r.Hints.SessionID != ""
		var hashes []kv.Hash
		if inSession {
			hashes = slices.Clone(s.kv.BlockHashes())
		}
		s.kv.Release()
		s.kv = nil
		if inSession {
			e.rememberSession(r, hashes)
		}
	}
	if !r.admitted {
		r.admitted = true
		e.admitted(r)
	}
	if !r.forked && reason != FinishNone {
		// Samples that were never forked end with their parent.
		r.forked = true
		for i := 1; i < r.N; i++ {
			r.stream.push(Output{Index: i, Token: -1, Finish: reason, Err: err})
		}
	}
	r.stream.push(Output{Index: s.index, Token: -1, Finish: reason, Err: err})
	e.m.observeFinish(r.stream, reason)
	if r.stream.finishedAll() {
		r.stream.cancel()
	}
}

func (e *Engine) failAll(err error) {
	for _, s := range e.running {
		e.finish(s, FinishError, err)
	}
	for _, s := range e.queue {
		e.finish(s, FinishError, err)
	}
	e.running, e.queue = nil, nil
	for _, r := range e.takeSubmissions(true) {
		e.enqueue(r)
	}
	for _, s := range e.queue {
		e.finish(s, FinishError, err)
	}
	e.queue = nil
}

func (e *Engine) failBatch(err error) {
	for _, en := range e.entries {
		e.finish(en.s, FinishError, err)
		e.removeRunning(en.s)
	}
}

func (e *Engine) removeRunning(s *seqState) {
	if i := slices.Index(e.running, s); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	}
}

// Stats describes the engine's load.
type Stats struct {
	Running, Waiting int
	KV               kv.Stats
	// WaitingByPriority splits the requests waiting in the queue by
	// priority, highest first (those still on their way in are in
	// Waiting only).
	WaitingByPriority []PriorityWaiting
	// PeakRunning is the most sequences ever running at once.
	PeakRunning int
	// UsedSlots and AllocatedSlots sum, over all steps so far, the KV
	// positions running sequences hold and the positions their blocks (or,
	// in contiguous mode, reservations) cover: 1 - used/allocated is the
	// memory wasted by allocation.
	UsedSlots, AllocatedSlots int64
}

// admitted ends r's wait: it was admitted, or it failed before.
func (e *Engine) admitted(r *request) {
	e.waiting.Add(-1)
	e.waitingBy.add(&r.Request, -1)
}

// Now returns a load snapshot. It is approximate (read without stopping the
// loop) and meant for routing and display.
func (e *Engine) Now() Stats {
	return Stats{
		Running: int(e.m.runningCount.Load()),
		Waiting: int(e.waiting.Load()),
		KV:      e.kv.Stats(),

		WaitingByPriority: e.waitingBy.snapshot(),

		PeakRunning:    int(e.occupancy.peakRunning.Load()),
		UsedSlots:      e.occupancy.used.Load(),
		AllocatedSlots: e.occupancy.allocated.Load(),
	}
}
