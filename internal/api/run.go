package api

import (
	"crypto/rand"
	"errors"
	"io"
	"math"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/chat/outparse"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// EventKind is the kind of a generation Event.
type EventKind uint8

// The event kinds.
const (
	// EventText: Text is the next piece of the sample's answer.
	EventText EventKind = iota + 1
	// EventReasoning: Text is the next piece of the sample's reasoning.
	EventReasoning
	// EventToolCallBegin: tool call ToolCall starts; ToolCallID and
	// ToolName are set.
	EventToolCallBegin
	// EventToolCallArgs: Text is the next piece of tool call ToolCall's
	// JSON arguments.
	EventToolCallArgs
	// EventToolCallEnd: tool call ToolCall is complete.
	EventToolCallEnd
	// EventLogprobs: Logprob describes the sample's next generated token.
	EventLogprobs
	// EventFinish: the sample ended, for Finish (StopSequence and Err as
	// applicable). It is the sample's last event.
	EventFinish
)

// FinishReason says why a sample ended.
type FinishReason uint8

// The finish reasons.
const (
	FinishNone FinishReason = iota
	// FinishStop: an end-of-generation token or a stop string.
	FinishStop
	// FinishLength: max tokens or the context limit.
	FinishLength
	// FinishToolCalls: the model ended after calling tools.
	FinishToolCalls
	// FinishCancelled: the request was cancelled.
	FinishCancelled
	// FinishError: the engine failed; Event.Err says why.
	FinishError
)

func (f FinishReason) String() string {
	return [...]string{"", "stop", "length", "tool_calls", "cancelled", "error"}[min(int(f), 5)]
}

// Event is one step of a sample's output.
type Event struct {
	Kind EventKind
	// Index is the sample (choice) index.
	Index int
	// Text is the text, reasoning or arguments delta.
	Text string
	// ToolCall is the index of the tool call among the sample's calls.
	ToolCall int
	// ToolCallID and ToolName identify a tool call (begin and end events).
	ToolCallID, ToolName string
	// Logprob is set on EventLogprobs.
	Logprob *TokenLogprob
	// Finish, StopSequence and Err are set on EventFinish.
	Finish       FinishReason
	StopSequence string
	Err          error
}

// TokenLogprob is a generated token with its log-probability and the most
// likely alternatives.
type TokenLogprob struct {
	Token int32
	// Text is the token's piece as text (invalid UTF-8 replaced); Bytes
	// are its raw bytes (a piece may be part of a character).
	Text    string
	Bytes   []byte
	Logprob float64
	Top     []TopLogprob
}

// TopLogprob is one alternative at a sampling step.
type TopLogprob struct {
	Token   int32
	Text    string
	Bytes   []byte
	Logprob float64
}

// Usage counts a request's tokens.
type Usage struct {
	PromptTokens int
	// CachedTokens of the prompt came from the prefix cache.
	CachedTokens int
	// CompletionTokens are the generated tokens of all samples, up to and
	// including each sample's end.
	CompletionTokens int
	// ReasoningTokens are the completion tokens that went into reasoning.
	ReasoningTokens int
	// CachedHostTokens and CachedDiskTokens are the part of CachedTokens
	// brought up from host memory (G2) and disk (G3).
	CachedHostTokens, CachedDiskTokens int
	// CacheWriteTokens are the prompt tokens the request asked to keep
	// (up to its last cache breakpoint, see SetCacheWriteEnd) that were
	// not read from the cache: what Anthropic calls cache creation.
	CacheWriteTokens int
}

// Run is a submitted request whose output is being read. It belongs to one
// goroutine, the handler's.
type Run struct {
	c       *Call
	model   *Model
	req     *Request
	prompt  *Prompt
	stream  Stream
	samples []sampleState
	outs    []engine.Output
	events  []Event
	left    int // samples not finished
	done    bool
	created time.Time
	markers map[int32]string // control tokens rendered for the parser
	// writeEnd is where the prompt span the request asked to cache ends
	// (SetCacheWriteEnd).
	writeEnd int
	// failure is a sample's error, cancelled whether a sample was
	// cancelled: the outcome the usage ledger books.
	failure   error
	cancelled bool
}

// sampleState is the text pipeline of one sample: detokenizer, stop
// strings, then the reasoning/tool-call parser.
type sampleState struct {
	dec       *tokenizer.StreamDecoder
	stop      *sample.StopMatcher
	parser    outputParser
	buf       []byte
	finished  bool
	tokens    int
	reasoning int
	lastKind  EventKind
	toolCalls int
	stopSeq   string
}

// fragmentScope is the tokenizer fragment-cache scope of the call's tenant.
func (c *Call) fragmentScope() *string {
	s := "tenant:" + c.Identity.Tenant
	return &s
}

// Start renders, tokenizes and submits req, returning the Run to read its
// events from. Errors (unknown model, a prompt too long, a full queue) come
// back before anything is written, so the caller can still send a status.
func (c *Call) Start(req *Request) (*Run, error) {
	if err := c.resolveCache(req); err != nil {
		return nil, err
	}
	if err := req.validate(); err != nil {
		return nil, err
	}
	if !c.Identity.Has(PermissionModelsUse) {
		m, err := c.Model(c.server.plainName(req.Model))
		if err != nil {
			return nil, err
		}
		return nil, c.forbidModel(m, "this API key's role \""+c.Identity.Role+"\" may not generate (it lacks "+PermissionModelsUse+")")
	}
	req.toRun = true
	m, p, err := c.modelFor(req)
	if err != nil {
		return nil, err
	}
	if len(p.Tokens) >= m.ContextLength {
		return nil, promptTooLarge(req, m, itoa(len(p.Tokens)))
	}
	maxTokens := m.ContextLength - len(p.Tokens)
	if req.MaxTokens > 0 {
		// Clamped rather than refused: agents send generous max_tokens, and
		// a sample that reaches the context ends with "length" anyway.
		maxTokens = min(req.MaxTokens, maxTokens)
	}
	n := max(req.N, 1)
	constraint, param := constraintFor(m, req, p)
	er := engine.Request{
		Prompt:     p.Tokens,
		Segments:   p.Segments,
		MaxTokens:  maxTokens,
		Sampling:   req.Sampling,
		IgnoreEOS:  req.IgnoreEOS,
		N:          n,
		Constraint: constraint,
		Priority:   req.Priority,
		Scope:      c.Identity.Tenant,
		Hints:      req.Hints,
	}
	if n := sharedTokens(req.sharedPrefix, p.Tokens); n > 0 {
		er.SharedScope, er.SharedTokens = ctxcache.SharedTenant, n
	}
	if err := c.beginUsage(m, ledger.KindRequest, req.Priority, req.ServiceTier); err != nil {
		return nil, err
	}
	c.submitted = time.Now()
	st, err := m.Backend.Submit(c.Context(), er)
	if ce := (*engine.ConstraintError)(nil); errors.As(err, &ce) {
		return nil, c.failed(InvalidParam(param, "cannot constrain the output: %v", ce.Err))
	}
	if err != nil {
		return nil, c.failed(AsError(err))
	}
	r := &Run{c: c, model: m, req: req, prompt: p, stream: st, left: n, created: time.Now(), markers: markerTokens(m)}
	r.samples = make([]sampleState, n)
	for i := range r.samples {
		s := &r.samples[i]
		s.dec = m.Tokenizer.NewStreamDecoder()
		s.stop = sample.NewStopMatcher(req.Stop)
		s.parser = newOutputParser(m, req, p)
	}
	c.run = r
	return r, nil
}

// sharedTokens is how many leading tokens a and b share.
func sharedTokens(a, b []int32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	neg := n < 0
	if neg {
		n = -n
	}
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// Model returns the model the run is on.
func (r *Run) Model() *Model { return r.model }

// Prompt returns the run's prompt.
func (r *Run) Prompt() *Prompt { return r.prompt }

// N returns the number of samples.
func (r *Run) N() int { return len(r.samples) }

// Created is when the run started.
func (r *Run) Created() time.Time { return r.created }

// ServiceTier is the OpenAI service tier the request is served in, when
// it named one ("" otherwise).
func (r *Run) ServiceTier() string { return r.req.ServiceTier }

// Next returns the next events, at least one, waiting for the engine as
// needed. The slice is reused by the next call. After the last sample's
// EventFinish it returns io.EOF; if the client goes away it cancels the
// request and returns the context's error.
func (r *Run) Next() ([]Event, error) {
	r.events = r.events[:0]
	for len(r.events) == 0 {
		if r.done {
			r.c.settleUsage()
			return nil, io.EOF
		}
		t0 := time.Now()
		outs, err := r.stream.Recv(r.c.Context(), r.outs[:0])
		now := time.Now()
		r.c.blocked += now.Sub(t0)
		r.outs = outs
		for i := range outs {
			r.handle(&outs[i], now)
		}
		switch {
		case errors.Is(err, engine.ErrDone):
			for i := range r.samples {
				if !r.samples[i].finished { // cannot happen: the engine finishes every sample
					r.finish(i, engine.FinishError, errors.New("api: the stream ended early"))
				}
			}
			r.done = true
		case err != nil:
			r.stream.Cancel()
			r.done = true
			return r.events, err
		}
	}
	return r.events, nil
}

// Cancel stops the request (its blocks are freed by the engine).
func (r *Run) Cancel() { r.stream.Cancel() }

// SetCacheWriteEnd says the request asked for its prompt's first end tokens
// to be cached (Anthropic's cache_control breakpoints): those not read from
// the cache count as written to it (Usage.CacheWriteTokens), in the
// response and in the usage ledger alike.
func (r *Run) SetCacheWriteEnd(end int) { r.writeEnd = max(0, end) }

// CacheWriteTokens is how many of a prompt's tokens count as written to the
// cache when its first end tokens were asked to be cached and its first
// cached tokens were read from it.
func CacheWriteTokens(prompt, cached, end int) int {
	return max(0, min(end, prompt)-min(cached, prompt))
}

// Usage returns the token counts so far.
func (r *Run) Usage() Usage {
	u := r.stream.Usage()
	out := Usage{PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens,
		CachedHostTokens: u.CachedHostTokens, CachedDiskTokens: u.CachedDiskTokens}
	out.CacheWriteTokens = CacheWriteTokens(u.PromptTokens, u.CachedTokens, r.writeEnd)
	for i := range r.samples {
		out.CompletionTokens += r.samples[i].tokens
		out.ReasoningTokens += r.samples[i].reasoning
	}
	return out
}

// handle turns one engine output into events.
func (r *Run) handle(o *engine.Output, now time.Time) {
	if o.Index < 0 || o.Index >= len(r.samples) {
		return
	}
	s := &r.samples[o.Index]
	if s.finished {
		return
	}
	if o.Token >= 0 {
		if r.c.first.IsZero() {
			r.c.first = now
		}
		s.tokens++
		mark := len(r.events)
		if o.Logprobs != nil {
			r.events = append(r.events, Event{Kind: EventLogprobs, Index: o.Index, Logprob: r.logprob(o.Logprobs)})
		}
		tok := r.model.Tokenizer
		if marker, ok := r.markers[o.Token]; ok {
			// A control token the parser must see: rendered as its text.
			r.text(o.Index, s.dec.Flush()+marker)
		} else if r.req.IgnoreEOS || !tok.IsEOG(o.Token) {
			s.buf = s.dec.AppendAdd(s.buf[:0], o.Token)
			if len(s.buf) > 0 {
				r.text(o.Index, string(s.buf))
			}
		}
		r.countReasoning(s, mark)
		if s.finished {
			return
		}
	}
	if o.Finish != engine.FinishNone {
		r.finish(o.Index, o.Finish, o.Err)
	}
}

// countReasoning counts the token just handled as reasoning when the events
// it produced (or, if none, the last ones before it) were reasoning.
func (r *Run) countReasoning(s *sampleState, mark int) {
	for _, e := range r.events[mark:] {
		switch e.Kind {
		case EventText, EventReasoning, EventToolCallBegin, EventToolCallArgs:
			s.lastKind = e.Kind
		}
	}
	if s.lastKind == EventReasoning {
		s.reasoning++
	}
}

// text passes decoded text of sample i through its stop matcher and parser.
func (r *Run) text(i int, text string) {
	s := &r.samples[i]
	emit, stopped := s.stop.Push(text)
	if emit != "" {
		r.parse(i, s.parser.Push(emit))
	}
	if stopped {
		s.stopSeq = s.stop.Match()
		r.finish(i, engine.FinishStop, nil)
	}
}

// parse appends parser output as events of sample i.
func (r *Run) parse(i int, ps []outparse.Event) {
	s := &r.samples[i]
	for _, p := range ps {
		e := Event{Index: i, Text: p.Text, ToolCall: p.Index}
		switch p.Kind {
		case outparse.Content:
			e.Kind = EventText
		case outparse.Reasoning:
			e.Kind = EventReasoning
		case outparse.ToolCallBegin:
			e.Kind = EventToolCallBegin
			e.ToolName, e.ToolCallID = p.Name, p.ID
			if e.ToolCallID == "" {
				e.ToolCallID = newToolCallID()
			}
			s.toolCalls++
		case outparse.ToolCallArgs:
			e.Kind = EventToolCallArgs
		case outparse.ToolCallEnd:
			e.Kind = EventToolCallEnd
		default:
			continue
		}
		r.events = append(r.events, e)
	}
}

// finish ends sample i: flushes its decoder, stop matcher and parser and
// emits its EventFinish. When every sample has finished the engine request
// is cancelled (a sample stopped by a stop string may still be running).
func (r *Run) finish(i int, reason engine.FinishReason, err error) {
	s := &r.samples[i]
	if s.finished {
		return
	}
	s.finished = true
	if s.stopSeq == "" {
		if tail := s.dec.Flush(); tail != "" {
			emit, stopped := s.stop.Push(tail)
			if emit != "" {
				r.parse(i, s.parser.Push(emit))
			}
			if stopped {
				s.stopSeq = s.stop.Match()
				reason = engine.FinishStop
			}
		}
		if rest := s.stop.Flush(); rest != "" {
			r.parse(i, s.parser.Push(rest))
		}
	}
	tail, perr := s.parser.Finish()
	r.parse(i, tail)
	e := Event{Kind: EventFinish, Index: i, StopSequence: s.stopSeq, Err: err}
	switch reason {
	case engine.FinishStop:
		e.Finish = FinishStop
		if s.toolCalls > 0 && s.stopSeq == "" {
			e.Finish = FinishToolCalls
		}
	case engine.FinishLength:
		e.Finish = FinishLength
	case engine.FinishCancel:
		e.Finish = FinishCancelled
	default:
		e.Finish = FinishError
		if e.Err == nil {
			e.Err = errors.New("api: generation failed")
		}
	}
	if perr != nil && e.Finish == FinishToolCalls {
		e.Err = perr
	}
	switch e.Finish {
	case FinishError:
		r.failure = e.Err
	case FinishCancelled:
		r.cancelled = true
	}
	r.events = append(r.events, e)
	r.left--
	if r.left == 0 {
		r.stream.Cancel()
		r.done = true
	}
}

// logprob converts the engine's logprobs of one step.
func (r *Run) logprob(lp *sample.Logprobs) *TokenLogprob {
	tok := r.model.Tokenizer
	out := &TokenLogprob{Token: lp.Token, Logprob: finite(lp.Logprob)}
	out.Bytes = tok.AppendPiece(nil, lp.Token, true)
	out.Text = strings.ToValidUTF8(string(out.Bytes), "\ufffd")
	if len(lp.Top) > 0 {
		out.Top = make([]TopLogprob, len(lp.Top))
		for j, t := range lp.Top {
			b := tok.AppendPiece(nil, t.Token, true)
			out.Top[j] = TopLogprob{Token: t.Token, Text: strings.ToValidUTF8(string(b), "\ufffd"), Bytes: b, Logprob: finite(t.Logprob)}
		}
	}
	return out
}

// finite maps -Inf and NaN log-probabilities (banned tokens) to a large
// negative number, as JSON has no infinities.
func finite(x float32) float64 {
	v := float64(x)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return -9999
	}
	return v
}

// newToolCallID returns an OpenAI-style tool call id: "call_" and 24
// random letters and digits.
func newToolCallID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	var b [24]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "call_" + string(b[:])
}

// Choice is the complete output of one sample, for non-streamed responses.
type Choice struct {
	Index        int
	Text         string
	Reasoning    string
	ToolCalls    []chat.ToolCall
	Logprobs     []TokenLogprob
	Finish       FinishReason
	StopSequence string
	Err          error
}

// Collect reads the run to its end and returns every sample's output.
func (r *Run) Collect() ([]Choice, error) {
	out := make([]Choice, len(r.samples))
	text := make([]strings.Builder, len(r.samples))
	reasoning := make([]strings.Builder, len(r.samples))
	args := make([][]strings.Builder, len(r.samples))
	for i := range out {
		out[i].Index = i
	}
	for {
		evs, err := r.Next()
		for _, e := range evs {
			c := &out[e.Index]
			switch e.Kind {
			case EventText:
				text[e.Index].WriteString(e.Text)
			case EventReasoning:
				reasoning[e.Index].WriteString(e.Text)
			case EventToolCallBegin:
				c.ToolCalls = append(c.ToolCalls, chat.ToolCall{ID: e.ToolCallID, Name: e.ToolName})
				args[e.Index] = append(args[e.Index], strings.Builder{})
			case EventToolCallArgs:
				args[e.Index][e.ToolCall].WriteString(e.Text)
			case EventLogprobs:
				c.Logprobs = append(c.Logprobs, *e.Logprob)
			case EventFinish:
				c.Finish, c.StopSequence, c.Err = e.Finish, e.StopSequence, e.Err
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	for i := range out {
		out[i].Text = text[i].String()
		out[i].Reasoning = reasoning[i].String()
		for j := range out[i].ToolCalls {
			out[i].ToolCalls[j].Arguments = args[i][j].String()
		}
	}
	return out, nil
}
