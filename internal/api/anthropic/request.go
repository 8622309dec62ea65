package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat"
)

// messagesRequest is the body of POST /v1/messages (and, without
// max_tokens, of /v1/messages/count_tokens).
type messagesRequest struct {
	Model         string          `json:"model"`
	Messages      []messageParam  `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     *int            `json:"max_tokens"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Stream        bool            `json:"stream"`
	Tools         []toolParam     `json:"tools"`
	ToolChoice    *toolChoice     `json:"tool_choice"`
	Thinking      *thinkingParam  `json:"thinking"`
	Metadata      *struct {
		UserID *string `json:"user_id"`
	} `json:"metadata"`
	// IgnoreEOS keeps generating past end-of-generation tokens: not
	// Anthropic's, accepted as the OpenAI dialect accepts it (llama.cpp and
	// vLLM spell it so), for benchmarks.
	IgnoreEOS bool           `json:"ignore_eos"`
	Kvserve   *api.Extension `json:"kvserve"`
}

// messageParam is one entry of messages: content is a string or an array
// of content blocks.
type messageParam struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// contentBlock is a request content block; which fields apply depends on
// Type.
type contentBlock struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
	// tool_use
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
	// tool_result
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	// thinking
	Thinking  *string `json:"thinking"`
	Signature string  `json:"signature"`

	CacheControl *cacheControl `json:"cache_control"`
}

// cacheControl is a cache breakpoint.
type cacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl"`
}

// toolParam is one entry of tools.
type toolParam struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl *cacheControl   `json:"cache_control"`
}

// toolChoice is tool_choice.
type toolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
}

// thinkingParam is thinking.
type thinkingParam struct {
	Type         string `json:"type"`
	BudgetTokens *int   `json:"budget_tokens"`
}

// maxBreakpoints is Anthropic's limit on cache_control blocks per request.
const maxBreakpoints = 4

// maxToolNameLen bounds a tool name, as Anthropic does.
const maxToolNameLen = 128

// converted is a Messages request mapped onto the core's request, with
// what the response needs beyond it.
type converted struct {
	req *api.Request
	// disableParallel keeps only the first tool call of the reply.
	disableParallel bool
}

// toRequest validates the body and maps it onto an api.Request. maxTokens
// says whether max_tokens is required (messages) or ignored (count_tokens).
func (b *messagesRequest) toRequest(maxTokens bool) (*converted, error) {
	if b.Model == "" {
		return nil, api.InvalidParam("model", "field required")
	}
	if b.Messages == nil {
		return nil, api.InvalidParam("messages", "field required")
	}
	if len(b.Messages) == 0 {
		return nil, api.InvalidParam("messages", "at least one message is required")
	}
	r := &api.Request{Model: b.Model}
	out := &converted{req: r}
	bps := 0 // cache_control blocks seen
	var maxTTL time.Duration
	breakpoint := func(cc *cacheControl, param string, msg int) error {
		if cc == nil {
			return nil
		}
		ttl, err := cc.ttl(param)
		if err != nil {
			return err
		}
		bps++
		if bps > maxBreakpoints {
			return api.InvalidParam(param, "a maximum of %d blocks with cache_control may be provided", maxBreakpoints)
		}
		r.Breakpoints = append(r.Breakpoints, api.Breakpoint{Message: msg, TTL: ttl})
		maxTTL = max(maxTTL, ttl)
		return nil
	}

	// Tools come first in the cached prefix, then the system prompt.
	seen := map[string]bool{}
	for i, t := range b.Tools {
		p := fmt.Sprintf("tools[%d]", i)
		if t.Type != "" && t.Type != "custom" {
			return nil, api.InvalidParam(p+".type", "tools of type %q are not supported (custom tools only)", t.Type)
		}
		if err := checkToolName(t.Name, p+".name"); err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, api.InvalidParam(p+".name", "tool names must be unique; %q is repeated", t.Name)
		}
		seen[t.Name] = true
		schema := bytes.TrimSpace(t.InputSchema)
		if string(schema) == "null" {
			schema = nil
		}
		if len(schema) > 0 && schema[0] != '{' {
			return nil, api.InvalidParam(p+".input_schema", "input_schema must be a JSON Schema object")
		}
		r.Tools = append(r.Tools, chat.Tool{Name: t.Name, Description: t.Description, Parameters: schema})
		if err := breakpoint(t.CacheControl, p+".cache_control", -1); err != nil {
			return nil, err
		}
	}

	system, sysBreaks, err := parseSystem(b.System)
	if err != nil {
		return nil, err
	}
	if system != "" {
		r.Messages = append(r.Messages, chat.Message{Role: "system", Content: system})
	}
	for _, cc := range sysBreaks {
		if err := breakpoint(cc.cc, cc.param, -1); err != nil {
			return nil, err
		}
	}

	for i, m := range b.Messages {
		p := fmt.Sprintf("messages[%d]", i)
		switch m.Role {
		case "user", "assistant":
		case "":
			return nil, api.InvalidParam(p+".role", "field required")
		default:
			return nil, api.InvalidParam(p+".role", "unexpected role %q: messages take \"user\" or \"assistant\" (the system prompt is the top-level system field)", m.Role)
		}
		blocks, err := parseContent(m.Content, p+".content")
		if err != nil {
			return nil, err
		}
		if m.Role == "assistant" {
			if i == len(b.Messages)-1 {
				return nil, api.InvalidParam(p+".role", "a final assistant message (prefill) is not supported; end with a user message")
			}
			err = appendAssistant(r, blocks, p, breakpoint)
		} else {
			err = appendUser(r, blocks, p, breakpoint)
		}
		if err != nil {
			return nil, err
		}
	}

	if err := b.applyToolChoice(out); err != nil {
		return nil, err
	}
	if err := b.applySampling(r, maxTokens); err != nil {
		return nil, err
	}
	if b.Thinking != nil {
		switch b.Thinking.Type {
		case "enabled":
			if b.Thinking.BudgetTokens == nil {
				return nil, api.InvalidParam("thinking.budget_tokens", "field required")
			}
			if *b.Thinking.BudgetTokens < 1 {
				return nil, api.InvalidParam("thinking.budget_tokens", "budget_tokens must be at least 1")
			}
			on := true
			r.Reasoning = &on
		case "adaptive":
			on := true
			r.Reasoning = &on
		case "disabled":
			off := false
			r.Reasoning = &off
		default:
			return nil, api.InvalidParam("thinking.type", "unknown thinking type %q (enabled, adaptive, disabled)", b.Thinking.Type)
		}
	}
	if err := b.Kvserve.Apply(r); err != nil {
		return nil, err
	}
	if r.Hints.TTL == 0 {
		r.Hints.TTL = maxTTL
	}
	return out, nil
}

// checkToolName enforces Anthropic's tool names: 1 to 128 letters, digits,
// underscores and hyphens.
func checkToolName(name, param string) error {
	if name == "" {
		return api.InvalidParam(param, "field required")
	}
	if len(name) > maxToolNameLen {
		return api.InvalidParam(param, "tool names are at most %d characters", maxToolNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return api.InvalidParam(param, "tool name %q must match ^[a-zA-Z0-9_-]{1,128}$", name)
		}
	}
	return nil
}

// ttl validates a cache_control and returns its TTL (5 minutes by default).
func (cc *cacheControl) ttl(param string) (time.Duration, error) {
	if cc.Type != "ephemeral" {
		return 0, api.InvalidParam(param+".type", "unknown cache_control type %q (ephemeral)", cc.Type)
	}
	switch cc.TTL {
	case "", "5m":
		return 5 * time.Minute, nil
	case "1h":
		return time.Hour, nil
	}
	return 0, api.InvalidParam(param+".ttl", "unknown cache_control ttl %q (5m, 1h)", cc.TTL)
}

// paramCache is a cache_control found at a parameter path.
type paramCache struct {
	cc    *cacheControl
	param string
}

// parseSystem reads system: a string or an array of text blocks, joined
// with "\n".
func parseSystem(raw json.RawMessage) (string, []paramCache, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, api.InvalidParam("system", "system must be a string or an array of text blocks")
		}
		return s, nil, nil
	}
	blocks, err := parseContent(raw, "system")
	if err != nil {
		return "", nil, err
	}
	var sb strings.Builder
	var ccs []paramCache
	for j, bl := range blocks {
		p := fmt.Sprintf("system[%d]", j)
		if bl.Type != "text" {
			return "", nil, api.InvalidParam(p+".type", "system blocks must be text blocks, got %q", bl.Type)
		}
		if j > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(*bl.Text)
		if bl.CacheControl != nil {
			ccs = append(ccs, paramCache{bl.CacheControl, p + ".cache_control"})
		}
	}
	return sb.String(), ccs, nil
}

// parseContent reads a message's content: a string (one text block) or an
// array of content blocks. Text blocks must have text; unsupported block
// types are refused here.
func parseContent(raw json.RawMessage, param string) ([]contentBlock, error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0:
		return nil, api.InvalidParam(param, "field required")
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, api.InvalidParam(param, "content must be a string or an array of content blocks")
		}
		return []contentBlock{{Type: "text", Text: &s}}, nil
	case raw[0] != '[':
		return nil, api.InvalidParam(param, "content must be a string or an array of content blocks")
	}
	var blocks []contentBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, api.InvalidParam(param, "invalid type for %q: expected %s, got %s", te.Field, te.Type, te.Value)
		}
		return nil, api.InvalidParam(param, "content must be a string or an array of content blocks")
	}
	for j := range blocks {
		bl := &blocks[j]
		p := fmt.Sprintf("%s[%d]", param, j)
		switch bl.Type {
		case "text":
			if bl.Text == nil {
				return nil, api.InvalidParam(p+".text", "field required")
			}
		case "tool_use", "tool_result", "thinking", "redacted_thinking":
		case "image", "document", "search_result", "container_upload":
			return nil, api.InvalidParam(p+".type", "%s content blocks are not supported: the served model reads text only", bl.Type)
		case "":
			return nil, api.InvalidParam(p+".type", "field required")
		default:
			return nil, api.InvalidParam(p+".type", "content blocks of type %q are not supported", bl.Type)
		}
	}
	return blocks, nil
}

// breakpointFunc records a block's cache_control as a breakpoint at the end
// of chat message msg.
type breakpointFunc func(cc *cacheControl, param string, msg int) error

// appendUser maps a user turn: runs of text blocks become user messages,
// each tool_result a tool message.
func appendUser(r *api.Request, blocks []contentBlock, param string, bp breakpointFunc) error {
	text := -1 // index of the user message text blocks are going into
	for j, bl := range blocks {
		p := fmt.Sprintf("%s.content[%d]", param, j)
		switch bl.Type {
		case "text":
			if text < 0 {
				r.Messages = append(r.Messages, chat.Message{Role: "user", Content: *bl.Text})
				text = len(r.Messages) - 1
			} else {
				r.Messages[text].Content += "\n" + *bl.Text
			}
		case "tool_result":
			if bl.ToolUseID == "" {
				return api.InvalidParam(p+".tool_use_id", "field required")
			}
			content, err := toolResultText(bl.Content, p+".content")
			if err != nil {
				return err
			}
			if bl.IsError {
				content = "Error: " + content
			}
			r.Messages = append(r.Messages, chat.Message{Role: "tool", Content: content, ToolCallID: bl.ToolUseID})
			text = -1
		default:
			return api.InvalidParam(p+".type", "%s blocks belong in assistant messages", bl.Type)
		}
		if err := bp(bl.CacheControl, p+".cache_control", len(r.Messages)-1); err != nil {
			return err
		}
	}
	if len(blocks) == 0 {
		r.Messages = append(r.Messages, chat.Message{Role: "user"})
	}
	return nil
}

// toolResultText reads a tool_result's content: a string or text blocks
// (joined with "\n"), or nothing.
func toolResultText(raw json.RawMessage, param string) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	blocks, err := parseContent(raw, param)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for j, bl := range blocks {
		if bl.Type != "text" {
			return "", api.InvalidParam(fmt.Sprintf("%s[%d].type", param, j), "tool results hold text blocks, got %q", bl.Type)
		}
		if j > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(*bl.Text)
	}
	return sb.String(), nil
}

// appendAssistant maps an assistant turn: text blocks become its content,
// tool_use blocks its tool calls, thinking blocks its reasoning.
func appendAssistant(r *api.Request, blocks []contentBlock, param string, bp breakpointFunc) error {
	var msg chat.Message
	msg.Role = "assistant"
	var text, reasoning strings.Builder
	for j, bl := range blocks {
		p := fmt.Sprintf("%s.content[%d]", param, j)
		switch bl.Type {
		case "text":
			if text.Len() > 0 {
				text.WriteByte('\n')
			}
			text.WriteString(*bl.Text)
		case "thinking":
			if bl.Thinking == nil {
				return api.InvalidParam(p+".thinking", "field required")
			}
			if reasoning.Len() > 0 {
				reasoning.WriteByte('\n')
			}
			reasoning.WriteString(*bl.Thinking)
		case "redacted_thinking":
			// Opaque to kvserve: nothing to show the model.
		case "tool_use":
			if bl.ID == "" {
				return api.InvalidParam(p+".id", "field required")
			}
			if err := checkToolName(bl.Name, p+".name"); err != nil {
				return err
			}
			in := bytes.TrimSpace(bl.Input)
			switch {
			case len(in) == 0 || string(in) == "null":
				in = []byte("{}")
			case in[0] != '{':
				return api.InvalidParam(p+".input", "input must be a JSON object")
			}
			msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: bl.ID, Name: bl.Name, Arguments: string(in)})
		default:
			return api.InvalidParam(p+".type", "%s blocks belong in user messages", bl.Type)
		}
		// All of the turn's blocks end with the turn.
		if err := bp(bl.CacheControl, p+".cache_control", len(r.Messages)); err != nil {
			return err
		}
	}
	msg.Content = text.String()
	msg.ReasoningContent = reasoning.String()
	r.Messages = append(r.Messages, msg)
	return nil
}

// applyToolChoice maps tool_choice.
func (b *messagesRequest) applyToolChoice(out *converted) error {
	tc := b.ToolChoice
	if tc == nil {
		return nil
	}
	r := out.req
	out.disableParallel = tc.DisableParallelToolUse
	switch tc.Type {
	case "auto":
		r.ToolChoice = api.ToolChoice{Mode: api.ToolAuto}
	case "none":
		r.ToolChoice = api.ToolChoice{Mode: api.ToolNone}
	case "any":
		if len(r.Tools) == 0 {
			return api.InvalidParam("tool_choice", "tool_choice \"any\" needs at least one tool")
		}
		r.ToolChoice = api.ToolChoice{Mode: api.ToolRequired}
	case "tool":
		if tc.Name == "" {
			return api.InvalidParam("tool_choice.name", "field required")
		}
		found := false
		for _, t := range r.Tools {
			found = found || t.Name == tc.Name
		}
		if !found {
			return api.InvalidParam("tool_choice.name", "tool %q is not among the tools", tc.Name)
		}
		r.ToolChoice = api.ToolChoice{Mode: api.ToolNamed, Name: tc.Name}
	case "":
		return api.InvalidParam("tool_choice.type", "field required")
	default:
		return api.InvalidParam("tool_choice.type", "unknown tool_choice type %q (auto, any, tool, none)", tc.Type)
	}
	return nil
}

// applySampling maps max_tokens, stop_sequences and the sampling fields.
func (b *messagesRequest) applySampling(r *api.Request, maxTokens bool) error {
	if maxTokens {
		if b.MaxTokens == nil {
			return api.InvalidParam("max_tokens", "field required")
		}
		if *b.MaxTokens < 1 {
			return api.InvalidParam("max_tokens", "max_tokens must be at least 1")
		}
		r.MaxTokens = *b.MaxTokens
	}
	if len(b.StopSequences) > api.MaxStops {
		return api.InvalidParam("stop_sequences", "at most %d stop sequences are allowed", api.MaxStops)
	}
	for i, s := range b.StopSequences {
		if s == "" || len(s) > api.MaxStopLen {
			return api.InvalidParam(fmt.Sprintf("stop_sequences[%d]", i), "stop sequences must be 1 to %d bytes", api.MaxStopLen)
		}
	}
	r.Stop = b.StopSequences
	p := &r.Sampling
	p.Temperature = 1 // Anthropic's default
	if b.Temperature != nil {
		if !(*b.Temperature >= 0 && *b.Temperature <= 1) {
			return api.InvalidParam("temperature", "temperature must be in [0, 1]")
		}
		p.Temperature = float32(*b.Temperature)
	}
	if b.TopP != nil {
		if !(*b.TopP > 0 && *b.TopP <= 1) {
			return api.InvalidParam("top_p", "top_p must be in (0, 1]")
		}
		p.TopP = float32(*b.TopP)
	}
	if b.TopK != nil {
		if *b.TopK < 0 {
			return api.InvalidParam("top_k", "top_k must be ≥ 0")
		}
		p.TopK = *b.TopK
	}
	r.IgnoreEOS = b.IgnoreEOS
	return nil
}
