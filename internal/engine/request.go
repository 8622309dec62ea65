package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/sample"
)

// Errors a submission can fail with. The API maps them to status codes.
var (
	// ErrTooLong: the request can never fit (prompt plus output exceeds the
	// model's context or the whole KV pool).
	ErrTooLong = errors.New("engine: request too long")
	// ErrQueueFull: too many requests are waiting; retry later.
	ErrQueueFull = errors.New("engine: queue full")
	// ErrClosed: the engine is shutting down.
	ErrClosed = errors.New("engine: closed")
	// ErrInvalid: the request itself is malformed.
	ErrInvalid = errors.New("engine: invalid request")
	// ErrPinQuota: the request would pin more KV than pins may hold; retry
	// when pins expire, or pin less.
	ErrPinQuota = errors.New("engine: pinned KV quota exceeded")
)

// Retention is the value class of a span of prompt tokens (DESIGN.md): it
// decides what eviction keeps longest. It is the KV pool's block class: the
// engine tags blocks with it as it is.
type Retention = kv.Class

// The retention classes, lowest value first.
const (
	RetentionDefault    = kv.ClassDefault    // unclassified: treated as session
	RetentionEphemeral  = kv.ClassEphemeral  // reasoning, one-shot scratch
	RetentionSession    = kv.ClassSession    // conversation history
	RetentionPersistent = kv.ClassPersistent // system prompt, tool definitions
	RetentionPinned     = kv.ClassPinned     // context-cache resources

	// NumRetention is the number of retention classes.
	NumRetention = int(kv.ClassPinned) + 1
)

// Segment tags prompt tokens [Start, End) with a retention class.
type Segment struct {
	Start     int       `json:"start"`
	End       int       `json:"end"`
	Retention Retention `json:"retention"`
}

// Hints are optional per-request signals from the client.
type Hints struct {
	SessionID            string        `json:"session_id,omitempty"`
	Retention            Retention     `json:"retention,omitempty"`
	TTL                  time.Duration `json:"ttl_ns,omitempty"`
	ExpectedOutputTokens int           `json:"expected_output_tokens,omitempty"`
	// EndSession ends SessionID after this request: its blocks are demoted
	// at once instead of after the idle timeout.
	EndSession bool `json:"end_session,omitempty"`
	// Flex: the client takes a longer wait for a cheaper placement
	// (OpenAI's service_tier "flex"): a router weighs the queue ahead of
	// the request less against the prefill its cached prefix saves.
	Flex bool `json:"flex,omitempty"`
}

// LogitsProcessor constrains or reshapes one sample's next-token
// distribution (grammar-constrained decoding, forced tool calls). The engine
// calls Process on a private copy of the logits before sampling and Accept
// with the token sampled; a processor serves one sample and is used by the
// step loop only.
type LogitsProcessor interface {
	Process(logits []float32)
	Accept(token int32)
}

// Request is one generation request in token space: every API dialect maps
// into it.
type Request struct {
	// Prompt is the full prompt, special tokens included.
	Prompt []int32 `json:"prompt"`
	// Segments classify spans of Prompt (optional). The KV pool records
	// each block's class (kv.Class, see blockClasses) for the tiering
	// work's eviction; tokens outside every segment take Hints.Retention.
	Segments []Segment `json:"segments,omitempty"`
	// MaxTokens bounds the generated tokens of each sample (required, ≥ 1).
	MaxTokens int `json:"max_tokens"`
	// Sampling configures the samplers; sample i of N uses Seed+i.
	Sampling sample.Params `json:"sampling"`
	// StopTokens end a sample in addition to the model's end-of-generation
	// tokens (which IgnoreEOS disables).
	StopTokens []int32 `json:"stop_tokens,omitempty"`
	IgnoreEOS  bool    `json:"ignore_eos,omitempty"`
	// N is the number of samples sharing the prompt (default 1).
	N int `json:"n"`
	// Constraint, when set, restricts what the samples may generate
	// (compiled by Config.Constraints).
	Constraint *Constraint `json:"constraint,omitempty"`
	// Priority orders scheduling: higher first; FCFS within a priority.
	Priority int `json:"priority,omitempty"`
	// Scope is the isolation scope (tenant) whose salt prefixes every block
	// hash: requests of different scopes never share KV.
	Scope string `json:"scope"`
	// SharedScope and SharedTokens say that the prompt's first SharedTokens
	// tokens are a prefix published to the shared scope SharedScope (an
	// administrator's shared context cache): its full blocks are hashed,
	// kept and owned in that scope, so every scope using it finds them,
	// while the blocks after it chain on in Scope and stay Scope's own.
	SharedScope  string `json:"shared_scope,omitempty"`
	SharedTokens int    `json:"shared_tokens,omitempty"`
	Hints        Hints  `json:"hints"`
}

// FinishReason says why a sample ended.
type FinishReason uint8

// The finish reasons.
const (
	FinishNone   FinishReason = iota
	FinishStop                // an end-of-generation or stop token
	FinishLength              // MaxTokens or the context limit
	FinishCancel              // the request was cancelled
	FinishError               // the engine failed
)

func (f FinishReason) String() string {
	return [...]string{"", "stop", "length", "cancelled", "error"}[f]
}

// Output is one event of a request's stream: a generated token of sample
// Index, and/or the end of that sample.
type Output struct {
	Index    int              `json:"index"`
	Token    int32            `json:"token"` // -1 when the event carries no token
	Logprobs *sample.Logprobs `json:"logprobs,omitempty"`
	Finish   FinishReason     `json:"finish,omitempty"`
	// Time is when the engine sampled Token (zero on events without one):
	// exact token timings, whenever the reader gets to them.
	Time time.Time `json:"time,omitzero"`
	// Err says why a sample ended with FinishError. It crosses a process
	// boundary as its message (MarshalJSON).
	Err error `json:"-"`
}

// outputJSON is Output on the wire: the error as its message.
type outputJSON struct {
	outputFields
	Err string `json:"error,omitempty"`
}

type outputFields Output // Output without its methods

// MarshalJSON writes o with its error as a message.
func (o Output) MarshalJSON() ([]byte, error) {
	w := outputJSON{outputFields: outputFields(o)}
	if o.Err != nil {
		w.Err = o.Err.Error()
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (o *Output) UnmarshalJSON(data []byte) error {
	var w outputJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*o = Output(w.outputFields)
	if w.Err != "" {
		o.Err = errors.New(w.Err)
	}
	return nil
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens int `json:"prompt_tokens"`
	// CachedTokens of the prompt were found in the prefix cache (first
	// admission; a preempted request's re-hits are not counted).
	CachedTokens int `json:"cached_tokens"`
	// CachedHostTokens and CachedDiskTokens are the part of CachedTokens
	// brought up from host memory (G2) and from disk (G3); the rest was in
	// the pool.
	CachedHostTokens int `json:"cached_host_tokens,omitempty"`
	CachedDiskTokens int `json:"cached_disk_tokens,omitempty"`
	CompletionTokens int `json:"completion_tokens"`
}

// Stream delivers a request's outputs. The engine never blocks on it: outputs
// queue until read.
type Stream struct {
	mu       sync.Mutex
	queue    []Output
	notify   chan struct{}
	drained  chan struct{} // closed once the reader has taken the last output
	finished int           // samples finished
	n        int
	usage    Usage
	cancel   context.CancelFunc
	ctx      context.Context
	// drainedClosed says drained was closed (guarded by mu).
	drainedClosed bool

	// Timing, for metrics. admitted and ended are guarded by mu (QueueTime
	// and Ended read them); the others are written and read by the step
	// loop only.
	clock                                    Clock
	arrival, admitted, firstToken, lastToken time.Time
	ended                                    time.Time // the last sample's final output was queued
}

func newStream(ctx context.Context, n int, clock Clock) *Stream {
	ctx, cancel := context.WithCancel(ctx)
	return &Stream{notify: make(chan struct{}, 1), drained: make(chan struct{}), n: n, ctx: ctx, cancel: cancel,
		clock: clock, arrival: clock.Now()}
}

func (s *Stream) push(o Output) {
	s.mu.Lock()
	s.queue = append(s.queue, o)
	if o.Finish != FinishNone {
		s.finished++
		if s.finished == s.n {
			s.ended = s.clock.Now()
		}
	}
	if o.Token >= 0 {
		s.usage.CompletionTokens++
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Recv returns the next outputs (at least one), waiting until there are
// some or ctx ends. After every sample has finished and its outputs were
// read, it returns io.EOF-like ErrDone.
func (s *Stream) Recv(ctx context.Context, dst []Output) ([]Output, error) {
	for {
		s.mu.Lock()
		done := s.finished >= s.n
		if done && !s.drainedClosed {
			s.drainedClosed = true
			close(s.drained)
		}
		if len(s.queue) > 0 {
			dst = append(dst, s.queue...)
			s.queue = s.queue[:0]
			s.mu.Unlock()
			return dst, nil
		}
		s.mu.Unlock()
		if done {
			return dst, ErrDone
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return dst, ctx.Err()
		}
	}
}

// Poll is Recv without waiting: it returns the outputs queued now (maybe
// none), and ErrDone once the stream is exhausted. A caller that steps the
// engine itself (NewStepped) reads with it between steps.
func (s *Stream) Poll(dst []Output) ([]Output, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	done := s.finished >= s.n
	if len(s.queue) > 0 {
		dst = append(dst, s.queue...)
		s.queue = s.queue[:0]
		return dst, nil
	}
	if done {
		if !s.drainedClosed {
			s.drainedClosed = true
			close(s.drained)
		}
		return dst, ErrDone
	}
	return dst, nil
}

func (s *Stream) finishedAll() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finished >= s.n
}

// ErrDone is returned by Recv once the stream is exhausted.
var ErrDone = errors.New("engine: stream done")

// Usage returns the token counts so far.
func (s *Stream) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// Ended returns when the engine queued the stream's last output: every
// sample had finished (zero until then). From then on the request waits
// only for its reader.
func (s *Stream) Ended() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// QueueTime is how long the request waited before it was first admitted
// (0 while it still waits).
func (s *Stream) QueueTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.admitted.IsZero() {
		return 0
	}
	return s.admitted.Sub(s.arrival)
}

// Cancel stops the request; its blocks are freed at the next step (full
// blocks stay cached).
func (s *Stream) Cancel() { s.cancel() }
