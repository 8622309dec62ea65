// Package upstream serves requests on another OpenAI-compatible server
// (vLLM, SGLang, llama.cpp's server, another kvserve) as a cluster worker's
// engine, and predicts that server's prefix cache from what it sent it
// (approximate mode): the router places requests on it by the same KV
// events it gets from kvserve's own workers.
//
// # Requests
//
// A request goes out as a streamed /completions call whose prompt is the
// token ids the gateway made (its chat template and tokenizer are the
// model's, so the upstream server applies neither again). The upstream's
// text comes back in pieces, each tokenized with the same tokenizer: the
// pieces decode back to exactly the text sent, though a piece boundary can
// split what the upstream generated as one token, so the completion tokens
// counted here may differ slightly from the upstream's own count.
//
// What the OpenAI completions API cannot carry is refused, never dropped:
// constrained decoding (response_format, forced tools), logprobs, stop
// tokens other than the model's own end-of-generation tokens, ignore_eos,
// the repetition penalty. Priorities and retention hints order and keep
// blocks in kvserve's engine; an external engine has its own scheduler and
// cache policy, so they do not reach it (the router still keeps session
// affinity).
//
// # The predicted cache
//
// A KV pool with no storage (kv.Config.NoStorage) of the upstream's cache
// size replays what the upstream would cache: a request's prompt blocks
// from the moment the upstream accepts it (so the next request with the same prefix is
// placed here even before this one has finished), its output's on
// completion; least recently used blocks go first, as in vLLM's prefix
// cache. Its events are the worker's KV events. The prediction knows
// nothing of what the upstream evicts for other reasons (requests sent to
// it by others, a restart), hence "approximate"; where the upstream
// reports cached prompt tokens, the request's usage carries its figure,
// not the prediction's, and the prediction's misses are counted.
//
// # Exact mode
//
// With Config.Mirror the worker publishes what a vLLM server reports it
// holds instead (its KV events over ZMQ, internal/vllmevents): no
// prediction is made. The server's blocks are attributed to tenants by
// the cache_salt each request carries (CacheSalt is required), and hashed
// as the router hashes prompts. One limit: a request continuing a prefix an
// administrator published to every tenant (a shared scope) is hashed by the
// router from the shared scope for that prefix, while vLLM keyed it by the
// tenant's salt, so the router does not credit those blocks to the worker.
package upstream

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/tokenizer"
	"github.com/kvserve/kvserve/internal/vllmevents"
)

// Config configures an Engine. The zero value of each optional field means
// its default.
type Config struct {
	// URL is the upstream's OpenAI API base, e.g. http://10.0.0.5:8000/v1
	// (required): requests go to URL + "/completions".
	URL string
	// Model is the model name the upstream serves (required).
	Model string
	// APIKey, if set, is sent as a bearer token.
	APIKey string
	// Tokenizer is the served model's (required): it reads the upstream's
	// text back into tokens.
	Tokenizer *tokenizer.Tokenizer
	// ContextLength is the longest sequence the upstream takes (required).
	ContextLength int
	// ModelID and Secret hash prompts into blocks as kvserve's workers do
	// (engine.Config.ModelID, the cluster's secret): the router credits
	// this worker with the blocks it predicts (Secret required).
	ModelID string
	Secret  []byte
	// BlockSize is the upstream's KV block size in tokens (default 16,
	// vLLM's default).
	BlockSize int
	// CacheTokens is the upstream's prefix cache size in tokens (default
	// 262,144): the predicted cache's capacity.
	CacheTokens int
	// MaxRunning bounds the requests sent at once (default 256); past it
	// a request is refused with engine.ErrQueueFull.
	MaxRunning int
	// CacheSalt sends each request's scope as vLLM's cache_salt (a keyed
	// hash of it, never the tenant's name), so that the upstream's prefix
	// cache is not shared between tenants either; only for servers that
	// take the field.
	CacheSalt bool
	// Events receives the predicted cache's stored and removed events
	// (optional; in exact mode the Mirror publishes to its own log).
	Events *kv.EventLog
	// Mirror, if set, is the upstream's cache as its own events report it
	// (exact mode): no prediction is made, and each request's cache_salt
	// is registered with it. CacheSalt is required with it.
	Mirror *vllmevents.Mirror
	// Registerer receives the engine's metrics (optional):
	// kvserve_upstream_running, kvserve_upstream_requests_total,
	// kvserve_upstream_cached_reported_total,
	// kvserve_upstream_cached_short_total, and the predicted cache's
	// kvserve_upstream_predicted_blocks.
	Registerer prometheus.Registerer
	// Client sends the requests (default: an http.Client with no overall
	// timeout; each request ends with its stream or its cancellation).
	Client *http.Client
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Engine is an upstream server as a worker's engine (cluster.Engine).
type Engine struct {
	cfg      Config
	endpoint string
	pool     *kv.Pool // the predicted cache (nil in exact mode)
	eog      map[int32]bool

	running  atomic.Int64
	accepted atomic.Int64
	saltMu   sync.Mutex
	salts    map[string]kv.Hash
	mispred  atomic.Int64 // requests whose reported cached tokens fell short of the prediction
	reported atomic.Int64 // requests whose upstream reported cached tokens
}

var _ cluster.Engine = (*Engine)(nil)

// New returns an engine sending requests to cfg.URL.
func New(cfg Config) (*Engine, error) {
	if cfg.URL == "" || cfg.Model == "" {
		return nil, errors.New("upstream: the server's URL and model name are required")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream: URL %q: want http(s)://host[:port]/path", cfg.URL)
	}
	if cfg.Tokenizer == nil || cfg.ContextLength <= 0 || len(cfg.Secret) == 0 {
		return nil, errors.New("upstream: the tokenizer, context length and cluster secret are required")
	}
	if err := readsBack(cfg.Tokenizer); err != nil {
		return nil, err
	}
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.CacheTokens <= 0 {
		cfg.CacheTokens = 1 << 18
	}
	if cfg.Mirror != nil && !cfg.CacheSalt {
		return nil, errors.New("upstream: following the server's KV events needs a cache_salt per tenant (CacheSalt): without it the server's blocks cannot be told apart by tenant")
	}
	if cfg.CacheTokens < cfg.BlockSize {
		return nil, fmt.Errorf("upstream: cache of %d tokens holds no block of %d", cfg.CacheTokens, cfg.BlockSize)
	}
	if cfg.MaxRunning <= 0 {
		cfg.MaxRunning = 256
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Engine{cfg: cfg, endpoint: strings.TrimRight(cfg.URL, "/") + "/completions",
		eog: map[int32]bool{}, salts: map[string]kv.Hash{}}
	if cfg.Mirror == nil { // in exact mode the mirror holds the blocks
		pool, err := kv.NewPool(kv.Config{NumBlocks: cfg.CacheTokens / cfg.BlockSize, BlockSize: cfg.BlockSize,
			Layers: 1, KVDim: 1, NoStorage: true, LRU: true, Events: cfg.Events, Now: cfg.Now})
		if err != nil {
			return nil, fmt.Errorf("upstream: predicted cache: %w", err)
		}
		e.pool = pool
	}
	for _, id := range cfg.Tokenizer.EOGs() {
		e.eog[id] = true
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_upstream_running",
				Help: "Requests sent to the external engine and not ended."}, func() float64 { return float64(e.running.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_upstream_requests_total",
				Help: "Requests the external engine accepted."}, func() float64 { return float64(e.accepted.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_upstream_cached_reported_total",
				Help: "Requests whose external engine reported its cached prompt tokens."}, func() float64 { return float64(e.reported.Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_upstream_cached_short_total",
				Help: "Requests whose external engine reported fewer cached prompt tokens than predicted: the prediction's misses."},
				func() float64 { return float64(e.mispred.Load()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_upstream_predicted_blocks",
				Help: "Blocks the external engine holds: predicted, or as its KV events report them (exact mode)."},
				func() float64 { s := e.Now().KV; return float64(s.Active + s.Cached) }),
		} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("upstream: metrics: %w", err)
			}
		}
	}
	return e, nil
}

// probeText has what text pieces carry: spaces leading and inside, runs
// of them, newlines, tabs, digits, punctuation, accents, CJK and an emoji.
const probeText = " Hello,  world!\n\tx = 42; // ça va? 你好 🙂 end "

// readsBack refuses a tokenizer that cannot turn the upstream's text back
// into tokens decoding to that same text, piece by piece (a placeholder
// vocabulary, or a SentencePiece one that drops a piece's leading space):
// the client would get other text than the upstream generated.
func readsBack(tok *tokenizer.Tokenizer) error {
	pieces := []string{probeText, " ", "  x", "\n\n", "é", "🙂"}
	for _, p := range pieces {
		if got := tok.Decode(tok.Encode(p, false, false)); got != p {
			return fmt.Errorf("upstream: the model's tokenizer reads %q back as %q: an external engine's text can only be passed on exactly with a byte-level BPE tokenizer (the Llama 3, Qwen and SmolLM families)", p, got)
		}
	}
	return nil
}

// BlockSize implements cluster.Engine.
func (e *Engine) BlockSize() int { return e.cfg.BlockSize }

// ContextLength implements cluster.Engine.
func (e *Engine) ContextLength() int { return e.cfg.ContextLength }

// Snapshot implements cluster.Engine: the predicted cache's blocks, or
// the mirrored ones in exact mode.
func (e *Engine) Snapshot() ([]kv.Event, uint64) {
	if e.cfg.Mirror != nil {
		return e.cfg.Mirror.Snapshot()
	}
	return e.pool.Snapshot()
}

// Now implements cluster.Engine: requests sent and not ended run (the
// upstream's own queue is not visible), and the predicted cache (in exact
// mode, the blocks the server reports in its own pool).
func (e *Engine) Now() engine.Stats {
	if e.cfg.Mirror != nil {
		total := e.cfg.CacheTokens / e.cfg.BlockSize
		held := min(e.cfg.Mirror.Held()[kv.TierPool], total)
		return engine.Stats{Running: int(e.running.Load()),
			KV: kv.Stats{Total: total, Free: total - held, Cached: held}}
	}
	return engine.Stats{Running: int(e.running.Load()), KV: e.pool.Stats()}
}

// Predictions returns how many requests' upstream reported its cached
// prompt tokens, and how many of those reported fewer than predicted.
func (e *Engine) Predictions() (reported, short int64) {
	return e.reported.Load(), e.mispred.Load()
}

// salt is scope's block-hash salt, remembered (the scopes are the tenants).
func (e *Engine) salt(scope string) kv.Hash {
	e.saltMu.Lock()
	defer e.saltMu.Unlock()
	h, ok := e.salts[scope]
	if !ok {
		if len(e.salts) >= 1<<16 {
			clear(e.salts)
		}
		h = kv.ScopeSalt(e.cfg.Secret, scope)
		e.salts[scope] = h
	}
	return h
}

// check refuses what the completions API cannot carry.
func (e *Engine) check(r *engine.Request) error {
	refuse := func(what string) error {
		return fmt.Errorf("%w: %s is not available on an external engine", engine.ErrInvalid, what)
	}
	n := max(r.N, 1)
	switch {
	case len(r.Prompt) == 0:
		return fmt.Errorf("%w: empty prompt", engine.ErrInvalid)
	case r.MaxTokens < 1:
		return fmt.Errorf("%w: max_tokens must be ≥ 1", engine.ErrInvalid)
	case len(r.Prompt)+r.MaxTokens > e.cfg.ContextLength:
		return fmt.Errorf("%w: %d prompt tokens + %d max tokens exceed the context of %d", engine.ErrTooLong,
			len(r.Prompt), r.MaxTokens, e.cfg.ContextLength)
	case r.Constraint != nil:
		return refuse("constrained decoding (response_format, forced tool calls)")
	case r.Sampling.Logprobs || r.Sampling.TopLogprobs > 0:
		return refuse("logprobs")
	case r.IgnoreEOS:
		return refuse("ignore_eos")
	case r.Sampling.RepeatPenalty != 0 && r.Sampling.RepeatPenalty != 1:
		return refuse("repeat_penalty")
	case n > 128:
		return fmt.Errorf("%w: n %d: at most 128 samples", engine.ErrInvalid, n)
	}
	for _, t := range r.StopTokens {
		if !e.eog[t] {
			return refuse(fmt.Sprintf("stop token %d (not one of the model's end-of-generation tokens)", t))
		}
	}
	return nil
}

// body is the /completions request.
func (e *Engine) body(r *engine.Request) ([]byte, error) {
	s := r.Sampling
	b := map[string]any{
		"model":          e.cfg.Model,
		"prompt":         r.Prompt,
		"max_tokens":     r.MaxTokens,
		"temperature":    s.Temperature,
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
	}
	if n := max(r.N, 1); n > 1 {
		b["n"] = n
	}
	if s.TopP > 0 && s.TopP < 1 {
		b["top_p"] = s.TopP
	}
	if s.TopK > 0 {
		b["top_k"] = s.TopK
	}
	if s.MinP > 0 {
		b["min_p"] = s.MinP
	}
	if s.Seed != 0 {
		b["seed"] = s.Seed
	}
	if s.PresencePenalty != 0 {
		b["presence_penalty"] = s.PresencePenalty
	}
	if s.FrequencyPenalty != 0 {
		b["frequency_penalty"] = s.FrequencyPenalty
	}
	if len(s.LogitBias) > 0 {
		bias := make(map[string]float64, len(s.LogitBias))
		for id, v := range s.LogitBias {
			if math.IsInf(float64(v), -1) {
				v = -100 // a ban, in the API's range
			}
			bias[strconv.Itoa(int(id))] = float64(v)
		}
		b["logit_bias"] = bias
	}
	if e.cfg.CacheSalt {
		b["cache_salt"] = e.cacheSalt(r.Scope)
	}
	return json.Marshal(b)
}

// cacheSalt is the cache_salt sent for scope: keyed by the cluster's
// secret but not the blocks' salt itself, which never leaves kvserve (KV
// events omit it too).
func (e *Engine) cacheSalt(scope string) string {
	h := kv.ScopeSalt(e.cfg.Secret, "upstream cache_salt\x00"+scope)
	return fmt.Sprintf("%x", h[:16])
}

// Submit implements cluster.Engine: it sends r and returns once the
// upstream has accepted it (its refusal is this call's error).
func (e *Engine) Submit(ctx context.Context, r engine.Request) (cluster.Job, error) {
	if err := e.check(&r); err != nil {
		return nil, err
	}
	body, err := e.body(&r)
	if err != nil {
		return nil, fmt.Errorf("upstream: encode request: %w", err)
	}
	if e.running.Add(1) > int64(e.cfg.MaxRunning) {
		e.running.Add(-1)
		return nil, fmt.Errorf("%w: %d requests already sent to the external engine", engine.ErrQueueFull, e.cfg.MaxRunning)
	}
	if e.cfg.Mirror != nil {
		// Before sending: the server's events for this request name the salt.
		e.cfg.Mirror.Register(e.cacheSalt(r.Scope), r.Scope)
	}
	jctx, cancel := context.WithCancel(context.Background())
	stopSubmit := context.AfterFunc(ctx, cancel) // Submit's caller gave up
	j := &job{e: e, n: max(r.N, 1), cancel: cancel, notify: make(chan struct{}, 1), start: e.cfg.Now()}
	j.finished = make([]bool, j.n)
	j.usage.PromptTokens = len(r.Prompt)
	req, err := http.NewRequestWithContext(jctx, http.MethodPost, e.endpoint, bytes.NewReader(body))
	if err == nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		if e.cfg.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+e.cfg.APIKey)
		}
	}
	var resp *http.Response
	if err == nil {
		resp, err = e.cfg.Client.Do(req)
	}
	stopSubmit()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = refusal(resp)
		resp.Body.Close()
	}
	if err != nil {
		cancel()
		e.running.Add(-1)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("upstream: %w", ctx.Err())
		}
		return nil, err
	}
	e.accepted.Add(1)
	j.queued = e.cfg.Now().Sub(j.start)
	// Predicted once accepted: a refused prompt is cached nowhere.
	if e.cfg.Mirror == nil {
		j.seq, j.predicted = e.predict(&r)
	}
	go j.read(resp.Body, e.cfg.Tokenizer)
	return j, nil
}

// predict records r's prompt in the predicted cache and returns the
// sequence holding it (nil when the prediction has no room for it: every
// block is held by requests in flight) and the tokens it found cached.
func (e *Engine) predict(r *engine.Request) (*kv.Sequence, int) {
	seq := e.pool.NewSequence(e.salt(r.Scope), []byte(e.cfg.ModelID))
	if r.SharedScope != "" {
		seq.SetShared(e.salt(r.SharedScope), r.SharedTokens/e.cfg.BlockSize)
	}
	hit := seq.MatchPrefix(r.Prompt)
	if err := seq.Reserve(len(r.Prompt)); err != nil {
		seq.Release()
		return nil, hit
	}
	seq.Commit(r.Prompt[hit:])
	return seq, hit
}

// refusal maps an upstream's error response to the engine's errors, with
// its message.
func refusal(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	msg := strings.TrimSpace(string(data))
	var env struct {
		Error json.RawMessage `json:"error"`
		Msg   string          `json:"message"`
	}
	if json.Unmarshal(data, &env) == nil {
		var inner struct {
			Message string `json:"message"`
		}
		var s string
		switch {
		case json.Unmarshal(env.Error, &inner) == nil && inner.Message != "":
			msg = inner.Message
		case json.Unmarshal(env.Error, &s) == nil && s != "":
			msg = s
		case env.Msg != "":
			msg = env.Msg
		}
	}
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	kind := engine.ErrInvalid
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
		kind = engine.ErrQueueFull
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		kind = engine.ErrTooLong
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusNotFound:
		// The client did nothing wrong: the upstream is misconfigured or
		// failing.
		return fmt.Errorf("upstream: the external engine answered %d: %s", resp.StatusCode, msg)
	}
	return fmt.Errorf("%w: the external engine refused the request (%d): %s", kind, resp.StatusCode, msg)
}

// job is one request sent upstream (cluster.Job).
type job struct {
	e      *Engine
	n      int
	cancel context.CancelFunc
	start  time.Time
	queued time.Duration

	seq       *kv.Sequence // the prediction's hold on the prompt (nil: none)
	predicted int          // prompt tokens the prediction found cached

	mu        sync.Mutex
	notify    chan struct{}
	queue     []engine.Output
	finished  []bool
	done      bool // the upstream's stream ended and every sample finished
	usage     engine.Usage
	ended     time.Time
	cancelled bool
	out       []int32 // sample 0's tokens, for the prediction
	// ends are the samples' finishes, held until the stream ends: the
	// usage comes after the last finish_reason, and a reader sees the
	// request's usage as final once every sample has finished.
	ends []engine.Output
}

// Recv implements cluster.Job.
func (j *job) Recv(ctx context.Context, dst []engine.Output) ([]engine.Output, error) {
	for {
		j.mu.Lock()
		if len(j.queue) > 0 {
			dst = append(dst, j.queue...)
			j.queue = j.queue[:0]
			j.mu.Unlock()
			return dst, nil
		}
		done := j.done
		j.mu.Unlock()
		if done {
			return dst, engine.ErrDone
		}
		select {
		case <-ctx.Done():
			return dst, ctx.Err()
		case <-j.notify:
		}
	}
}

// Usage implements cluster.Job.
func (j *job) Usage() engine.Usage {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.usage
}

// QueueTime implements cluster.Job: until the upstream accepted the
// request.
func (j *job) QueueTime() time.Duration { return j.queued }

// Ended implements cluster.Job.
func (j *job) Ended() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.ended
}

// Cancel implements cluster.Job: the upstream call is abandoned, which
// the server sees as its client disconnecting.
func (j *job) Cancel() {
	j.mu.Lock()
	j.cancelled = true
	j.mu.Unlock()
	j.cancel()
}

// push queues outputs and wakes the reader. Called with mu held.
func (j *job) push(o ...engine.Output) {
	j.queue = append(j.queue, o...)
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

// chunk is one streamed /completions event.
type chunk struct {
	Choices []struct {
		Index        int     `json:"index"`
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens *int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// maxEventBytes bounds one server-sent event's line.
const maxEventBytes = 4 << 20

// read turns the upstream's event stream into outputs until it ends, then
// finishes every sample still open (with an error if the stream broke
// off) and releases the request.
func (j *job) read(body io.ReadCloser, tok *tokenizer.Tokenizer) {
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	var fail error
	complete := false
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // comments, event names, blank separators
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			complete = true
			break
		}
		var c chunk
		if err := json.Unmarshal(data, &c); err != nil {
			fail = fmt.Errorf("upstream: unreadable event from the external engine: %w", err)
			break
		}
		if len(c.Error) > 0 && string(c.Error) != "null" {
			fail = fmt.Errorf("upstream: the external engine failed: %s", bytes.TrimSpace(c.Error))
			break
		}
		if err := j.apply(&c, tok); err != nil {
			fail = err
			break
		}
	}
	if fail == nil && sc.Err() != nil {
		fail = fmt.Errorf("upstream: stream from the external engine broke off: %w", sc.Err())
	}
	j.finish(fail, complete)
}

// apply queues one event's tokens and finishes.
func (j *job) apply(c *chunk, tok *tokenizer.Tokenizer) error {
	now := j.e.cfg.Now()
	j.mu.Lock()
	defer j.mu.Unlock()
	if u := c.Usage; u != nil {
		if d := u.PromptTokensDetails; d != nil && d.CachedTokens != nil {
			j.usage.CachedTokens = *d.CachedTokens
			j.e.reported.Add(1)
			if *d.CachedTokens < j.predicted {
				j.e.mispred.Add(1)
			}
		}
	}
	for _, ch := range c.Choices {
		if ch.Index < 0 || ch.Index >= j.n {
			return fmt.Errorf("upstream: the external engine sent choice %d of a request for %d", ch.Index, j.n)
		}
		if j.finished[ch.Index] {
			continue
		}
		if ch.Text != "" {
			for _, t := range tok.Encode(ch.Text, false, false) {
				j.push(engine.Output{Index: ch.Index, Token: t, Time: now})
				j.usage.CompletionTokens++
				if ch.Index == 0 {
					j.out = append(j.out, t)
				}
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			f := engine.FinishStop
			if *ch.FinishReason == "length" {
				f = engine.FinishLength
			}
			j.finished[ch.Index] = true
			j.ends = append(j.ends, engine.Output{Index: ch.Index, Token: -1, Finish: f})
		}
	}
	return nil
}

// finish ends every open sample: cancelled if the request was, with
// fail's error (or a stream cut short) otherwise. It runs once, when the
// stream is done.
func (j *job) finish(fail error, complete bool) {
	// Counted out before the last outputs are seen: a caller whose request
	// ended may send the next at once.
	j.e.running.Add(-1)
	j.mu.Lock()
	j.push(j.ends...)
	for i, f := range j.finished {
		if f {
			continue
		}
		j.finished[i] = true
		o := engine.Output{Index: i, Token: -1, Finish: engine.FinishError}
		switch {
		case j.cancelled:
			o.Finish = engine.FinishCancel
		case fail != nil:
			o.Err = fail
		case complete:
			o.Err = errors.New("upstream: the external engine ended the stream without finishing the sample")
		default:
			o.Err = errors.New("upstream: the stream from the external engine ended early")
		}
		j.push(o)
	}
	j.ended = j.e.cfg.Now()
	out := j.out
	j.done = true
	select {
	case j.notify <- struct{}{}:
	default:
	}
	j.mu.Unlock()
	j.cancel()
	j.release(out)
}

// release records sample 0's output in the predicted cache (the upstream
// caches what it generated too) and lets the blocks go: they stay cached,
// least recently used first out.
func (j *job) release(out []int32) {
	if j.seq == nil {
		return
	}
	if len(out) > 0 && j.seq.Reserve(j.seq.Len()+len(out)) == nil {
		j.seq.Commit(out)
	}
	j.seq.Release()
	j.seq = nil
}
