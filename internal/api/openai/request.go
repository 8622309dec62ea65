package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/sample"
)

// samplingFields are the sampling parameters shared by the chat,
// completions and responses endpoints (plus llama.cpp/vLLM's top_k, min_p,
// repetition_penalty and ignore_eos, which many clients send).
type samplingFields struct {
	Temperature       *float64           `json:"temperature"`
	TopP              *float64           `json:"top_p"`
	TopK              *int               `json:"top_k"`
	MinP              *float64           `json:"min_p"`
	RepetitionPenalty *float64           `json:"repetition_penalty"`
	PresencePenalty   *float64           `json:"presence_penalty"`
	FrequencyPenalty  *float64           `json:"frequency_penalty"`
	Seed              *int64             `json:"seed"`
	LogitBias         map[string]float64 `json:"logit_bias"`
	IgnoreEOS         bool               `json:"ignore_eos"`
	Stop              stringOrList       `json:"stop"`
	N                 *int               `json:"n"`
	Kvserve           *api.Extension     `json:"kvserve"`
	// PromptCacheKey is OpenAI's key for requests that share a prefix;
	// here it names the agent session (kvserve.session_id wins).
	PromptCacheKey string `json:"prompt_cache_key"`
	// ServiceTier is OpenAI's processing tier (api.ApplyServiceTier).
	ServiceTier string `json:"service_tier"`
}

// apply sets the sampling fields of r.
func (f *samplingFields) apply(r *api.Request) error {
	p := &r.Sampling
	p.Temperature = 1 // OpenAI's default
	if f.Temperature != nil {
		if !(*f.Temperature >= 0 && *f.Temperature <= 2) {
			return api.InvalidParam("temperature", "temperature must be in [0, 2]")
		}
		p.Temperature = float32(*f.Temperature)
	}
	if f.TopP != nil {
		if !(*f.TopP > 0 && *f.TopP <= 1) {
			return api.InvalidParam("top_p", "top_p must be in (0, 1]")
		}
		p.TopP = float32(*f.TopP)
	}
	if f.TopK != nil {
		if *f.TopK < -1 {
			return api.InvalidParam("top_k", "top_k must be ≥ -1")
		}
		p.TopK = *f.TopK
	}
	if f.MinP != nil {
		if !(*f.MinP >= 0 && *f.MinP <= 1) {
			return api.InvalidParam("min_p", "min_p must be in [0, 1]")
		}
		p.MinP = float32(*f.MinP)
	}
	if f.RepetitionPenalty != nil {
		if !(*f.RepetitionPenalty > 0 && *f.RepetitionPenalty <= 10) {
			return api.InvalidParam("repetition_penalty", "repetition_penalty must be in (0, 10]")
		}
		p.RepeatPenalty = float32(*f.RepetitionPenalty)
	}
	if f.PresencePenalty != nil {
		if !(*f.PresencePenalty >= -2 && *f.PresencePenalty <= 2) {
			return api.InvalidParam("presence_penalty", "presence_penalty must be in [-2, 2]")
		}
		p.PresencePenalty = float32(*f.PresencePenalty)
	}
	if f.FrequencyPenalty != nil {
		if !(*f.FrequencyPenalty >= -2 && *f.FrequencyPenalty <= 2) {
			return api.InvalidParam("frequency_penalty", "frequency_penalty must be in [-2, 2]")
		}
		p.FrequencyPenalty = float32(*f.FrequencyPenalty)
	}
	if f.Seed != nil {
		// 0 means "random" to the sampler; a client's seed 0 is a real seed.
		p.Seed = uint64(*f.Seed)
		if p.Seed == 0 {
			p.Seed = 0x9E3779B97F4A7C15
		}
	}
	if len(f.LogitBias) > 0 {
		if len(f.LogitBias) > 1024 {
			return api.InvalidParam("logit_bias", "logit_bias has more than 1024 entries")
		}
		p.LogitBias = make(map[int32]float32, len(f.LogitBias))
		for k, v := range f.LogitBias {
			id, err := strconv.ParseInt(k, 10, 32)
			if err != nil || id < 0 {
				return api.InvalidParam("logit_bias", "logit_bias keys must be token ids, got %q", k)
			}
			if !(v >= -100 && v <= 100) {
				return api.InvalidParam("logit_bias", "logit_bias values must be in [-100, 100]")
			}
			b := float32(v)
			if v == -100 {
				b = float32(math.Inf(-1)) // -100 bans the token, as at OpenAI
			}
			p.LogitBias[int32(id)] = b
		}
	}
	r.IgnoreEOS = f.IgnoreEOS
	r.Stop = f.Stop
	if f.N != nil {
		if *f.N < 1 || *f.N > 128 {
			return api.InvalidParam("n", "n must be in [1, 128]")
		}
		r.N = *f.N
	}
	if err := f.Kvserve.Apply(r); err != nil {
		return err
	}
	if err := api.ApplyServiceTier(r, "service_tier", f.ServiceTier); err != nil {
		return err
	}
	if k := f.PromptCacheKey; k != "" && r.Hints.SessionID == "" {
		if len(k) > api.MaxSessionIDLen {
			return api.InvalidParam("prompt_cache_key", "prompt_cache_key is longer than %d bytes", api.MaxSessionIDLen)
		}
		r.Hints.SessionID = k
	}
	return nil
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingFields
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Tools               []toolJSON      `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Logprobs            bool            `json:"logprobs"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat  *responseFormat `json:"response_format"`
	ReasoningEffort string          `json:"reasoning_effort"`
	// ChatTemplateKwargs passes enable_thinking as vLLM and llama.cpp do.
	ChatTemplateKwargs struct {
		EnableThinking *bool `json:"enable_thinking"`
	} `json:"chat_template_kwargs"`
}

// chatMessage is one message of a chat request.
type chatMessage struct {
	Role             string         `json:"role"`
	Content          messageContent `json:"content"`
	Name             string         `json:"name"`
	ToolCalls        []toolCallJSON `json:"tool_calls"`
	ToolCallID       string         `json:"tool_call_id"`
	ReasoningContent *string        `json:"reasoning_content"`
	Reasoning        *string        `json:"reasoning"`
}

// messageContent is a message's content: a string, null, or an array of
// parts of which only text parts are supported.
type messageContent struct {
	text string
}

func (c *messageContent) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		c.text = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		return json.Unmarshal(b, &c.text)
	case len(b) > 0 && b[0] == '[':
		var parts []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(b, &parts); err != nil {
			return api.InvalidParam("content", "content must be a string or an array of content parts")
		}
		var sb strings.Builder
		for _, p := range parts {
			switch p.Type {
			case "text", "input_text", "output_text":
				if p.Text == nil {
					return api.InvalidParam("content", "a text content part needs text")
				}
				sb.WriteString(*p.Text)
			default:
				return api.InvalidParam("content", "content parts of type %q are not supported (text only)", p.Type)
			}
		}
		c.text = sb.String()
		return nil
	}
	return api.InvalidParam("content", "content must be a string or an array of content parts")
}

// toolJSON is one entry of tools.
type toolJSON struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// toolCallJSON is a tool call in an assistant message (request) or a
// response message.
type toolCallJSON struct {
	Index    *int   `json:"index,omitempty"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// arguments returns a tool call's arguments as JSON text: clients send a
// string holding JSON; some send the object itself.
func (t *toolCallJSON) arguments() (string, error) {
	a := bytes.TrimSpace(t.Function.Arguments)
	if len(a) == 0 || string(a) == "null" {
		return "{}", nil
	}
	if a[0] == '"' {
		var s string
		if err := json.Unmarshal(a, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	return string(a), nil
}

// responseFormat is response_format.
type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name   string          `json:"name"`
		Schema json.RawMessage `json:"schema"`
		Strict *bool           `json:"strict"`
	} `json:"json_schema"`
}

func (f *responseFormat) apply(r *api.Request) error {
	if f == nil {
		return nil
	}
	switch f.Type {
	case "", "text":
	case "json_object":
		r.ResponseFormat.Type = api.FormatJSONObject
	case "json_schema":
		if f.JSONSchema == nil || len(bytes.TrimSpace(f.JSONSchema.Schema)) == 0 {
			return api.InvalidParam("response_format.json_schema", "json_schema needs a schema")
		}
		r.ResponseFormat = api.ResponseFormat{Type: api.FormatJSONSchema, Name: f.JSONSchema.Name, Schema: f.JSONSchema.Schema}
	default:
		return api.InvalidParam("response_format.type", "unknown response_format type %q (text, json_object, json_schema)", f.Type)
	}
	return nil
}

// parseToolChoice reads "none" | "auto" | "required" | {"type": "function",
// "function": {"name": …}} (and the Responses API's {"type": "function",
// "name": …}).
func parseToolChoice(raw json.RawMessage) (api.ToolChoice, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return api.ToolChoice{}, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return api.ToolChoice{}, api.InvalidParam("tool_choice", "invalid tool_choice")
		}
		switch s {
		case "auto":
			return api.ToolChoice{Mode: api.ToolAuto}, nil
		case "none":
			return api.ToolChoice{Mode: api.ToolNone}, nil
		case "required":
			return api.ToolChoice{Mode: api.ToolRequired}, nil
		}
		return api.ToolChoice{}, api.InvalidParam("tool_choice", "unknown tool_choice %q (none, auto, required, or a function)", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return api.ToolChoice{}, api.InvalidParam("tool_choice", "invalid tool_choice")
	}
	name := obj.Function.Name
	if name == "" {
		name = obj.Name
	}
	if obj.Type != "function" || name == "" {
		return api.ToolChoice{}, api.InvalidParam("tool_choice", "tool_choice must name a function: {\"type\": \"function\", \"function\": {\"name\": …}}")
	}
	return api.ToolChoice{Mode: api.ToolNamed, Name: name}, nil
}

// toRequest maps a chat request onto the internal request.
func (c *chatRequest) toRequest() (*api.Request, error) {
	r := &api.Request{Model: c.Model}
	if c.Messages == nil {
		return nil, api.InvalidParam("messages", "messages is required")
	}
	if c.Model == "" {
		return nil, api.InvalidParam("model", "model is required")
	}
	r.Messages = make([]chat.Message, len(c.Messages))
	for i, m := range c.Messages {
		msg := chat.Message{Role: m.Role, Content: m.Content.text, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.ReasoningContent != nil {
			msg.ReasoningContent = *m.ReasoningContent
		} else if m.Reasoning != nil {
			msg.ReasoningContent = *m.Reasoning
		}
		for j, tc := range m.ToolCalls {
			args, err := tc.arguments()
			if err != nil {
				return nil, api.InvalidParam(fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j), "arguments must be a JSON string")
			}
			if tc.Function.Name == "" {
				return nil, api.InvalidParam(fmt.Sprintf("messages[%d].tool_calls[%d].function.name", i, j), "tool call without a function name")
			}
			msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
		}
		r.Messages[i] = msg
	}
	var err error
	if r.Tools, err = convertTools(c.Tools); err != nil {
		return nil, err
	}
	if r.ToolChoice, err = parseToolChoice(c.ToolChoice); err != nil {
		return nil, err
	}
	if err := c.samplingFields.apply(r); err != nil {
		return nil, err
	}
	switch {
	case c.MaxCompletionTokens != nil:
		r.MaxTokens = *c.MaxCompletionTokens
	case c.MaxTokens != nil:
		r.MaxTokens = *c.MaxTokens
	}
	if (c.MaxCompletionTokens != nil || c.MaxTokens != nil) && r.MaxTokens < 1 {
		return nil, api.InvalidParam("max_tokens", "max_tokens must be at least 1")
	}
	r.Sampling.Logprobs = c.Logprobs
	if c.TopLogprobs != nil {
		if *c.TopLogprobs < 0 || *c.TopLogprobs > sample.MaxTopLogprobs {
			return nil, api.InvalidParam("top_logprobs", "top_logprobs must be in [0, %d]", sample.MaxTopLogprobs)
		}
		if !c.Logprobs && *c.TopLogprobs > 0 {
			return nil, api.InvalidParam("top_logprobs", "top_logprobs needs logprobs: true")
		}
		r.Sampling.TopLogprobs = *c.TopLogprobs
	}
	if err := c.ResponseFormat.apply(r); err != nil {
		return nil, err
	}
	switch {
	case c.ChatTemplateKwargs.EnableThinking != nil:
		r.Reasoning = c.ChatTemplateKwargs.EnableThinking
	case c.ReasoningEffort == "none" || c.ReasoningEffort == "minimal":
		off := false
		r.Reasoning = &off
	case c.ReasoningEffort != "":
		on := true
		r.Reasoning = &on
	}
	return r, nil
}

// convertTools maps OpenAI function tools.
func convertTools(tools []toolJSON) ([]chat.Tool, error) {
	var out []chat.Tool
	for i, t := range tools {
		if t.Type != "function" && t.Type != "" {
			return nil, api.InvalidParam(fmt.Sprintf("tools[%d].type", i), "tools of type %q are not supported (function only)", t.Type)
		}
		if len(t.Function.Parameters) > 0 && string(bytes.TrimSpace(t.Function.Parameters)) == "null" {
			t.Function.Parameters = nil
		}
		out = append(out, chat.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
	}
	return out, nil
}
