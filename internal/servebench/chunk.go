package servebench

import (
	"encoding/json"
	"fmt"
)

// Chunk is the part of an OpenAI chat.completion.chunk this tool reads.
type Chunk struct {
	Choices []ChunkChoice `json:"choices"`
	// Usage is sent on the final chunk when the request asked for
	// stream_options.include_usage (some servers send null before it).
	Usage *Usage `json:"usage"`
	// KVServe carries kvserve's own server-side timings. It may sit at the
	// top level of the final chunk or inside its usage object; either is
	// read. Other servers omit it.
	KVServe *ServerTiming `json:"kvserve"`
	// Error is set when the server reports a failure inside the stream.
	Error *StreamError `json:"error"`
}

// ChunkChoice is one entry of a chunk's choices.
type ChunkChoice struct {
	Index        int     `json:"index"`
	Delta        Delta   `json:"delta"`
	FinishReason *string `json:"finish_reason"`
}

// Delta is the incremental message of one choice.
type Delta struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// ReasoningContent (DeepSeek, vLLM, llama.cpp) and Reasoning (some
	// OpenRouter-style servers) carry thinking tokens.
	ReasoningContent string          `json:"reasoning_content"`
	Reasoning        string          `json:"reasoning"`
	ToolCalls        []ToolCallDelta `json:"tool_calls"`
}

// ToolCallDelta is a fragment of a streamed tool call: the first fragment
// of each index carries the id and function name, later ones append to the
// arguments.
type ToolCallDelta struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Usage is the token accounting of a response.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	KVServe *ServerTiming `json:"kvserve"`
}

// CachedTokens returns usage.prompt_tokens_details.cached_tokens, 0 when
// absent.
func (u *Usage) CachedTokens() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// ServerTiming is kvserve's per-request timing extension, in milliseconds:
// the latency the server added outside the engine (arrival to submission,
// plus the engine's last output to the response's end), time queued before
// the engine admitted the request, server time to the first token, the
// engine's span (submission to its last output; overhead + engine = the
// server's wall time), and the handler's busy time (mostly overlapping the
// engine's). Each field is optional.
type ServerTiming struct {
	OverheadMS *float64 `json:"overhead_ms"`
	QueueMS    *float64 `json:"queue_ms"`
	TTFTMS     *float64 `json:"ttft_ms"`
	EngineMS   *float64 `json:"engine_ms"`
	HandlerMS  *float64 `json:"handler_ms"`
}

// StreamError is an error object sent inside an event stream.
type StreamError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// ParseChunk decodes one event's data into c, which is reset first.
func ParseChunk(data []byte, c *Chunk) error {
	// Reuse the choices array, zeroed: encoding/json decodes into existing
	// elements, so stale fields would survive otherwise.
	ch := c.Choices[:cap(c.Choices)]
	clear(ch)
	*c = Chunk{Choices: ch[:0]}
	if err := json.Unmarshal(data, c); err != nil {
		return fmt.Errorf("servebench: chunk: %w", err)
	}
	return nil
}

// HasOutput reports whether the delta carries generated output: content,
// reasoning or a tool-call fragment. A role-only or empty delta does not
// count: it is neither the first token nor an inter-token gap.
func (d *Delta) HasOutput() bool {
	return d.Content != "" || d.ReasoningContent != "" || d.Reasoning != "" || len(d.ToolCalls) > 0
}
