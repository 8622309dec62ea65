package openai

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
)

type chatResp struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Role             string         `json:"role"`
			Content          *string        `json:"content"`
			ReasoningContent string         `json:"reasoning_content"`
			ToolCalls        []toolCallJSON `json:"tool_calls"`
		} `json:"message"`
		Logprobs     *chatLogprobs `json:"logprobs"`
		FinishReason string        `json:"finish_reason"`
	} `json:"choices"`
	Usage   usageJSON `json:"usage"`
	Kvserve *struct {
		OverheadMS float64 `json:"overhead_ms"`
		TTFTMS     float64 `json:"ttft_ms"`
		EngineMS   float64 `json:"engine_ms"`
		HandlerMS  float64 `json:"handler_ms"`
	} `json:"kvserve"`
}

func userMsg(text string) []map[string]any {
	return []map[string]any{{"role": "user", "content": text}}
}

func TestChatNonStreamedMatchesEngine(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	msgs := []chat.Message{{Role: "user", Content: "Say something about caches."}}
	prompt := env.ChatPrompt(t, msgs, nil)
	want := env.Tokenizer.Decode(env.Greedy(t, prompt, 24))

	var resp chatResp
	start := time.Now()
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "messages": userMsg(msgs[0].Content), "temperature": 0, "max_tokens": 24,
	}, &resp)
	wall := time.Since(start)
	if resp.Object != "chat.completion" || !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Model != apitest.ModelName {
		t.Fatalf("bad envelope: %+v", resp)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("%d choices", len(resp.Choices))
	}
	ch := resp.Choices[0]
	if ch.Message.Role != "assistant" || ch.Message.Content == nil {
		t.Fatalf("bad message: %+v", ch.Message)
	}
	if got := *ch.Message.Content; got != want {
		t.Fatalf("content %q, want the engine's greedy output %q", got, want)
	}
	if resp.Usage.PromptTokens != len(prompt) {
		t.Fatalf("prompt_tokens %d, want %d", resp.Usage.PromptTokens, len(prompt))
	}
	if resp.Usage.CompletionTokens < 1 || resp.Usage.CompletionTokens > 24 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
		t.Fatalf("bad usage %+v", resp.Usage)
	}
	switch ch.FinishReason {
	case "length":
		if resp.Usage.CompletionTokens != 24 {
			t.Fatalf("finish length after %d tokens", resp.Usage.CompletionTokens)
		}
	case "stop":
	default:
		t.Fatalf("finish_reason %q", ch.FinishReason)
	}
	k := resp.Kvserve
	if k == nil || k.OverheadMS <= 0 || k.TTFTMS <= 0 || k.EngineMS <= 0 || k.HandlerMS <= 0 {
		t.Fatalf("missing kvserve timings: %+v", k)
	}
	// Overhead and engine span split the server's wall time, which the
	// client's contains; the first token comes within the engine's span.
	if float64(wall)/1e6 < k.OverheadMS+k.EngineMS || k.TTFTMS > k.OverheadMS+k.EngineMS {
		t.Fatalf("timings %+v do not fit the client's wall time %v", k, wall)
	}
	env.WaitIdle(t)
}

func TestChatStreamedEqualsNonStreamed(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{"model": apitest.ModelName, "messages": userMsg("Stream me a story."), "temperature": 0, "max_tokens": 40}
	var full chatResp
	postOK(t, env.URL("/v1/chat/completions"), body, &full)

	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	status, data, hdr := post(t, env.URL("/v1/chat/completions"), body)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, content type %q: %s", status, hdr.Get("Content-Type"), data)
	}
	_, events := sseEvents(t, data)
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", events)
	}
	var text strings.Builder
	finish := ""
	var usage *usageJSON
	var timings map[string]any
	for i, ev := range events[:len(events)-1] {
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Role    string  `json:"role"`
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage   *usageJSON     `json:"usage"`
			Kvserve map[string]any `json:"kvserve"`
		}
		if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
			t.Fatalf("chunk %d %s: %v", i, ev, err)
		}
		if chunk.Object != "chat.completion.chunk" {
			t.Fatalf("chunk object %q", chunk.Object)
		}
		if i == 0 && (len(chunk.Choices) != 1 || chunk.Choices[0].Delta.Role != "assistant") {
			t.Fatalf("first chunk does not carry the role: %s", ev)
		}
		if chunk.Usage != nil {
			if len(chunk.Choices) != 0 || i != len(events)-2 {
				t.Fatalf("usage chunk must be last with no choices: %s", ev)
			}
			usage = chunk.Usage
			timings = chunk.Kvserve
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil {
				text.WriteString(*c.Delta.Content)
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
	}
	if got, want := text.String(), *full.Choices[0].Message.Content; got != want {
		t.Fatalf("streamed text %q, non-streamed %q", got, want)
	}
	if finish != full.Choices[0].FinishReason {
		t.Fatalf("streamed finish %q, non-streamed %q", finish, full.Choices[0].FinishReason)
	}
	if usage == nil || usage.CompletionTokens != full.Usage.CompletionTokens || usage.PromptTokens != full.Usage.PromptTokens {
		t.Fatalf("stream usage %+v, want %+v", usage, full.Usage)
	}
	if timings == nil || timings["overhead_ms"] == nil {
		t.Fatalf("usage chunk lacks kvserve timings: %v", timings)
	}
	env.WaitIdle(t)
}
