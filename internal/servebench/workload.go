package servebench

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Message is an OpenAI chat message as this tool sends it.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is an assistant message's call of a function tool.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Request is the workload's part of one chat completion request; the runner
// adds the model, streaming options and the output cap.
type Request struct {
	Messages []Message
	// Tools is the OpenAI "tools" array, or nil.
	Tools json.RawMessage
	// SessionID, when set, is sent as "kvserve": {"session_id": ...}.
	SessionID string
}

// Turn is the next step of a session: wait Pause (a tool running, already
// scaled by the time scale), then send Request.
type Turn struct {
	// Label classifies the request in reports ("agent-first",
	// "agent-turn", "subagent", "prefix-cold", "prefix-warm", "chat").
	Label   string
	Pause   time.Duration
	Request Request
}

// Reply is what the runner hands back to a session after a request: whether
// it succeeded and the assistant's text.
type Reply struct {
	OK      bool
	Content string
}

// Session is one conversation: a sequence of turns, each possibly depending
// on the reply to the one before. A session is used by one goroutine.
type Session interface {
	// Next returns the next turn given the reply to the previous one (nil
	// before the first); ok is false when the session is over.
	Next(prev *Reply) (t Turn, ok bool)
}

// Workload generates sessions. Session(i) depends only on the workload's
// options and i, never on timing, so runs are reproducible from the seed;
// it is safe for concurrent use.
type Workload interface {
	Name() string
	Session(i int) Session
}

// WorkloadOptions shape a workload. The zero value of each field means its
// default.
type WorkloadOptions struct {
	// Seed makes the texts, tools arguments, pauses and turn counts.
	Seed uint64
	// TimeScale multiplies the agent's tool pauses of 2–30 s. Default
	// 0.05 (0.1–1.5 s); negative disables pauses.
	TimeScale float64
	// PromptScale multiplies every prompt size (system prompts, questions,
	// tool results). Default 1.
	PromptScale float64
	// Groups is the number of shared-prefix groups. Default 8.
	Groups int
	// PrefixTokens is the size of the shared system prompt: each
	// shared-prefix group's (default 2,048 tokens) or the agent's, tool
	// definitions included (default 10,000; PromptScale scales the part
	// that is not tool definitions, at least 256 tokens of it).
	PrefixTokens int
	// QuestionTokens is the size of a shared-prefix user question. Default
	// 128.
	QuestionTokens int
}

func (o WorkloadOptions) timeScale() float64 {
	switch {
	case o.TimeScale == 0:
		return 0.05
	case o.TimeScale < 0:
		return 0
	}
	return o.TimeScale
}

// tokens scales a default token count by PromptScale.
func (o WorkloadOptions) tokens(n int) int {
	s := o.PromptScale
	if s <= 0 {
		s = 1
	}
	return max(1, int(float64(n)*s+0.5))
}

// pick returns v, or def when v is zero or negative.
func pick(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

var workloads = map[string]func(WorkloadOptions) (Workload, error){
	"shared-prefix": newSharedPrefix,
	"agent":         newAgent,
	"chat":          newChat,
}

// WorkloadNames lists the workloads NewWorkload knows, sorted.
func WorkloadNames() []string {
	names := make([]string, 0, len(workloads))
	for n := range workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// NewWorkload returns the named workload.
func NewWorkload(name string, o WorkloadOptions) (Workload, error) {
	f, ok := workloads[name]
	if !ok {
		return nil, fmt.Errorf("servebench: unknown workload %q (have %s)", name, strings.Join(WorkloadNames(), ", "))
	}
	return f(o)
}

// rngFor returns the random source of one named stream of the run: the
// same seed, stream and index always give the same numbers.
func rngFor(seed uint64, stream string, i int) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(stream))
	return rand.New(rand.NewPCG(seed^h.Sum64(), uint64(i)))
}

// oneShot is a session of a single turn.
type oneShot struct {
	turn Turn
	done bool
}

func (s *oneShot) Next(*Reply) (Turn, bool) {
	if s.done {
		return Turn{}, false
	}
	s.done = true
	return s.turn, true
}
