package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/sample"
)

// Request is the one internal request every dialect maps into. A dialect
// fills it from its JSON; Call.Start renders, tokenizes and submits it.
//
// Exactly one of Messages (chat), Prompt or PromptTokens (raw completion)
// is the input.
type Request struct {
	// Model is the model name the client asked for.
	Model string

	// Messages is the conversation, for chat requests.
	Messages []chat.Message
	// Tools are the functions offered to the model.
	Tools []chat.Tool
	// ToolChoice says whether and which tool the model must call.
	ToolChoice ToolChoice
	// Reasoning turns a reasoning model's thinking on or off (nil: the
	// template's default). It sets the template variable enable_thinking.
	Reasoning *bool

	// Prompt is a raw completion prompt: tokenized with the model's BOS
	// (when the vocabulary adds one) and special tokens parsed.
	Prompt string
	// PromptTokens is a raw completion prompt as token ids, used as given.
	PromptTokens []int32

	// MaxTokens bounds the generated tokens of each sample; 0 means as
	// many as the context allows.
	MaxTokens int
	// Sampling configures the sampler (temperature, top_p, penalties, bias,
	// seed, logprobs). Sampling.Seed+i seeds sample i.
	Sampling sample.Params
	// Stop strings end a sample; the text returned stops before them.
	Stop []string
	// N is the number of samples (0 means 1).
	N int
	// ResponseFormat constrains the output to JSON.
	ResponseFormat ResponseFormat
	// IgnoreEOS keeps generating past end-of-generation tokens.
	IgnoreEOS bool

	// Priority orders scheduling (higher first).
	Priority int
	// ServiceTier is the OpenAI service tier served ("flex" or "default"),
	// when the client named one (ApplyServiceTier); "" otherwise.
	ServiceTier string
	// Hints are the client's cache hints (kvserve extension, Anthropic
	// cache_control).
	Hints engine.Hints
	// Breakpoints are cache breakpoints: the prompt up to the end of a
	// message is worth keeping for a while (Anthropic cache_control).
	Breakpoints []Breakpoint

	// CachedContent names a context cache (cachedContents/ID) whose prefix
	// the request continues: Call.Start puts the cache's system prompt,
	// tools and turns before Messages (see Call.applyCache).
	CachedContent string
	// CachedContentParam names CachedContent's field in the dialect, for
	// errors (default: kvserve.cached_content).
	CachedContentParam string

	// cacheMessages, for a request that continues a context cache, is how
	// many of Messages are the cache's: their prefix is pinned again to
	// the cache's expiry (its pins lost in a restart come back on use).
	cacheMessages int

	// prefixOnly renders the conversation without the generation prompt:
	// a context cache's prefix, which later requests extend.
	prefixOnly bool

	// toRun marks a prompt built to run (not only to count): one whose
	// text alone shows it cannot fit the model's context is refused
	// before it is tokenized (promptTooLarge).
	toRun bool

	// sharedPrefix, for a request that continues a shared context cache,
	// is the cache's prefix tokens: the part of the prompt that agrees
	// with them is kept in the shared scope (engine.Request.SharedTokens).
	sharedPrefix []int32
}

// ToolChoiceMode says whether the model may, must or must not call tools.
type ToolChoiceMode uint8

// The tool choice modes.
const (
	// ToolAuto: the model decides (the default).
	ToolAuto ToolChoiceMode = iota
	// ToolNone: the model must answer in text; tool calls are not parsed.
	ToolNone
	// ToolRequired: the model must call one of the tools.
	ToolRequired
	// ToolNamed: the model must call the tool named in ToolChoice.Name.
	ToolNamed
)

// ToolChoice is a request's tool_choice.
type ToolChoice struct {
	Mode ToolChoiceMode
	Name string
}

// ResponseFormatType is the kind of output a request asks for.
type ResponseFormatType uint8

// The response formats.
const (
	FormatText ResponseFormatType = iota
	// FormatJSONObject: any JSON object.
	FormatJSONObject
	// FormatJSONSchema: JSON valid against ResponseFormat.Schema.
	FormatJSONSchema
)

// ResponseFormat is a request's response_format.
type ResponseFormat struct {
	Type ResponseFormatType
	// Name and Schema describe a json_schema format.
	Name   string
	Schema json.RawMessage
}

// Breakpoint marks the prompt up to the end of message Message (an index
// into Request.Messages; -1 means the tools and system prompt) as worth
// caching for TTL.
type Breakpoint struct {
	Message int
	TTL     time.Duration
}

// Extension is the "kvserve" object accepted in the JSON body of every
// dialect:
//
//	{"kvserve": {"session_id": "…", "end_session": true,
//	             "retention": "ephemeral|session|persistent|pinned",
//	             "ttl": "5m" | 300, "priority": 1, "expected_output_tokens": 200,
//	             "ignore_eos": true, "cached_content": "cachedContents/ID"}}
//
// ignore_eos keeps generating past end-of-generation tokens up to the token
// limit (as vLLM's sampling parameter; OpenAI and Anthropic bodies may also
// carry it at the top level, Gemini bodies only here): for benchmarks and
// tests that need replies of a known length.
type Extension struct {
	SessionID            string   `json:"session_id"`
	Retention            string   `json:"retention"`
	TTL                  Duration `json:"ttl"`
	Priority             *int     `json:"priority"`
	ExpectedOutputTokens int      `json:"expected_output_tokens"`
	IgnoreEOS            bool     `json:"ignore_eos"`
	// EndSession ends session_id after this request: its KV moves down a
	// tier at once instead of after the idle timeout.
	EndSession bool `json:"end_session"`
	// CachedContent names a context cache the request continues
	// (Request.CachedContent).
	CachedContent string `json:"cached_content"`
	// ServiceTier is OpenAI's service_tier for every dialect (ApplyServiceTier).
	ServiceTier string `json:"service_tier"`
}

// ApplyServiceTier reads OpenAI's service_tier: "flex" sets Hints.Flex
// (the router places the request for its cache over a shorter queue);
// "auto", "default", "priority" and "scale" are served as the default tier
// (no tier outranks another here: priority is kvserve.priority, under the
// key's control). Request.ServiceTier becomes the tier served, which
// OpenAI's responses echo.
func ApplyServiceTier(r *Request, field, tier string) error {
	switch tier {
	case "":
		return nil
	case "flex":
		r.Hints.Flex = true
		r.ServiceTier = "flex"
	case "auto", "default", "priority", "scale":
		r.ServiceTier = "default"
	default:
		return InvalidParam(field, "service_tier must be auto, default, flex, priority or scale, got %q", tier)
	}
	return nil
}

// MaxSessionIDLen bounds the kvserve session_id.
const MaxSessionIDLen = 256

// Apply validates e and sets the hints and priority of r.
func (e *Extension) Apply(r *Request) error {
	if e == nil {
		return nil
	}
	if len(e.SessionID) > MaxSessionIDLen {
		return InvalidParam("kvserve.session_id", "session_id is longer than %d bytes", MaxSessionIDLen)
	}
	r.Hints.SessionID = e.SessionID
	if e.EndSession {
		if e.SessionID == "" {
			return InvalidParam("kvserve.end_session", "end_session needs a session_id")
		}
		r.Hints.EndSession = true
	}
	if e.Retention != "" {
		ret, err := ParseRetention(e.Retention)
		if err != nil {
			return InvalidParam("kvserve.retention", "%v", err)
		}
		r.Hints.Retention = ret
	}
	if e.TTL > 0 {
		r.Hints.TTL = time.Duration(e.TTL)
	}
	if err := ApplyServiceTier(r, "kvserve.service_tier", e.ServiceTier); err != nil {
		return err
	}
	if e.Priority != nil {
		if *e.Priority < -1000 || *e.Priority > 1000 {
			return InvalidParam("kvserve.priority", "priority must be in [-1000, 1000], got %d", *e.Priority)
		}
		r.Priority = *e.Priority
	}
	if e.ExpectedOutputTokens < 0 {
		return InvalidParam("kvserve.expected_output_tokens", "expected_output_tokens must be ≥ 0")
	}
	r.Hints.ExpectedOutputTokens = e.ExpectedOutputTokens
	if e.IgnoreEOS {
		r.IgnoreEOS = true
	}
	r.CachedContent = e.CachedContent
	return nil
}

// ParseRetention maps a retention class name to its engine value.
func ParseRetention(s string) (engine.Retention, error) {
	switch strings.ToLower(s) {
	case "ephemeral":
		return engine.RetentionEphemeral, nil
	case "session":
		return engine.RetentionSession, nil
	case "persistent":
		return engine.RetentionPersistent, nil
	case "pinned":
		return engine.RetentionPinned, nil
	case "default", "":
		return engine.RetentionDefault, nil
	}
	return 0, fmt.Errorf("unknown retention %q (ephemeral, session, persistent, pinned)", s)
}

// MaxStops bounds the stop strings of a request, and MaxStopLen each one.
const (
	MaxStops   = 16
	MaxStopLen = 1024
)

// validate checks the fields every dialect shares.
func (r *Request) validate() error {
	inputs := 0
	if r.Messages != nil {
		inputs++
	}
	if r.Prompt != "" {
		inputs++
	}
	if r.PromptTokens != nil {
		inputs++
	}
	switch {
	case inputs == 0:
		return Errorf(CodeInvalidRequest, "the request has no input (messages or prompt)")
	case inputs > 1:
		return Errorf(CodeInvalidRequest, "give one of messages, prompt text or prompt tokens")
	case r.Messages != nil && len(r.Messages) == 0:
		return InvalidParam("messages", "messages must not be empty")
	case r.MaxTokens < 0:
		return InvalidParam("max_tokens", "max_tokens must be ≥ 1")
	case r.N < 0 || r.N > 128:
		return InvalidParam("n", "n must be in [1, 128], got %d", r.N)
	case len(r.Stop) > MaxStops:
		return InvalidParam("stop", "at most %d stop strings are allowed", MaxStops)
	}
	for _, s := range r.Stop {
		if len(s) > MaxStopLen {
			return InvalidParam("stop", "stop strings must be at most %d bytes", MaxStopLen)
		}
	}
	seen := map[string]bool{}
	for i, t := range r.Tools {
		if t.Name == "" {
			return InvalidParam(fmt.Sprintf("tools[%d].function.name", i), "tool name is required")
		}
		if seen[t.Name] {
			return InvalidParam(fmt.Sprintf("tools[%d].function.name", i), "duplicate tool name %q", t.Name)
		}
		seen[t.Name] = true
		if len(t.Parameters) > 0 && !json.Valid(t.Parameters) {
			return InvalidParam(fmt.Sprintf("tools[%d].function.parameters", i), "parameters is not valid JSON")
		}
	}
	switch r.ToolChoice.Mode {
	case ToolRequired:
		if len(r.Tools) == 0 {
			return InvalidParam("tool_choice", "tool_choice \"required\" needs at least one tool")
		}
	case ToolNamed:
		if !seen[r.ToolChoice.Name] {
			return InvalidParam("tool_choice", "tool_choice names %q, which is not among the tools", r.ToolChoice.Name)
		}
	}
	if r.ResponseFormat.Type != FormatText && r.ToolChoice.Mode >= ToolRequired {
		return InvalidParam("response_format", "response_format cannot be combined with a forced tool_choice")
	}
	if r.ResponseFormat.Type == FormatJSONSchema && len(r.ResponseFormat.Schema) == 0 {
		return InvalidParam("response_format.json_schema.schema", "json_schema response format needs a schema")
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool", "developer":
		default:
			return InvalidParam(fmt.Sprintf("messages[%d].role", i), "unknown role %q", m.Role)
		}
	}
	return nil
}
