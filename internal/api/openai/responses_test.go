package openai

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
)

func TestResponsesText(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	msgs := []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Hello!"}}
	want := env.Tokenizer.Decode(env.Greedy(t, env.ChatPrompt(t, msgs, nil), 16))

	body := map[string]any{"model": apitest.ModelName, "instructions": "Be brief.", "input": "Hello!", "max_output_tokens": 16, "temperature": 0}
	var resp struct {
		ID     string `json:"id"`
		Object string `json:"object"`
		Status string `json:"status"`
		Output []struct {
			Type    string `json:"type"`
			Role    string `json:"role"`
			Content []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			} `json:"content"`
		} `json:"output"`
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
			TotalTokens  int `json:"total_tokens"`
		} `json:"usage"`
	}
	postOK(t, env.URL("/v1/responses"), body, &resp)
	if resp.Object != "response" || !strings.HasPrefix(resp.ID, "resp_") || len(resp.Output) != 1 || resp.Output[0].Type != "message" {
		t.Fatalf("bad response %+v", resp)
	}
	if got := resp.Output[0].Content[0].Text; got != want || resp.Output[0].Content[0].Type != "output_text" {
		t.Fatalf("text %q, want %q", got, want)
	}
	if resp.Status != "completed" && resp.Status != "incomplete" || resp.Usage.InputTokens == 0 || resp.Usage.TotalTokens != resp.Usage.InputTokens+resp.Usage.OutputTokens {
		t.Fatalf("status %q usage %+v", resp.Status, resp.Usage)
	}

	body["stream"] = true
	status, data, _ := post(t, env.URL("/v1/responses"), body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	names, events := sseEvents(t, data)
	wantOrder := []string{"response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"}
	for i, w := range wantOrder {
		if names[i] != w {
			t.Fatalf("event %d is %q, want %q (events %q)", i, names[i], w, names)
		}
	}
	tail := []string{"response.output_text.done", "response.content_part.done", "response.output_item.done"}
	last := names[len(names)-1]
	if last != "response.completed" && last != "response.incomplete" {
		t.Fatalf("last event %q", last)
	}
	for i, w := range tail {
		if got := names[len(names)-1-len(tail)+i]; got != w {
			t.Fatalf("closing events %q, want %q", names[len(names)-4:], tail)
		}
	}
	var text strings.Builder
	seq := -1
	for i, ev := range events {
		var e struct {
			Type     string `json:"type"`
			Seq      int    `json:"sequence_number"`
			Delta    string `json:"delta"`
			Text     string `json:"text"`
			Response *struct {
				Status string `json:"status"`
				Output []any  `json:"output"`
			} `json:"response"`
		}
		if err := json.Unmarshal([]byte(ev), &e); err != nil {
			t.Fatalf("event %s: %v", ev, err)
		}
		if e.Type != names[i] || e.Seq != seq+1 {
			t.Fatalf("event %d: type %q (named %q), sequence %d after %d", i, e.Type, names[i], e.Seq, seq)
		}
		seq = e.Seq
		switch e.Type {
		case "response.output_text.delta":
			text.WriteString(e.Delta)
		case "response.output_text.done":
			if e.Text != text.String() {
				t.Fatalf("done text %q, deltas %q", e.Text, text.String())
			}
		case "response.completed", "response.incomplete":
			if len(e.Response.Output) != 1 {
				t.Fatalf("final response output %v", e.Response.Output)
			}
		}
	}
	if text.String() != want {
		t.Fatalf("streamed %q, want %q", text.String(), want)
	}
	env.WaitIdle(t)
}

func TestResponsesItems(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{
		"model": apitest.ModelName, "max_output_tokens": 1,
		"input": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "Weather in Paris?"}}},
			map[string]any{"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": `{"city":"Paris"}`},
			map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
		},
		"tools": []any{map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}},
	}
	var resp map[string]any
	postOK(t, env.URL("/v1/responses"), body, &resp)
	prompt := env.Tokenizer.Decode(env.Recorder.Last(t).Prompt)
	for _, want := range []string{`"get_weather"`, `<tool_call>`, `Paris`, `<tool_response>`, `sunny`} {
		if !strings.Contains(prompt, want) {
			t.Fatalf("prompt lacks %q:\n%s", want, prompt)
		}
	}

	status, data, _ := post(t, env.URL("/v1/responses"), map[string]any{"model": apitest.ModelName, "input": "x", "previous_response_id": "resp_123"})
	if status != 400 {
		t.Fatalf("previous_response_id: status %d: %s", status, data)
	}
	checkErrorShape(t, data)
}

func TestResponsesFunctionCall(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	tool := map[string]any{"type": "function", "name": "get_weather", "parameters": weatherTool["function"].(map[string]any)["parameters"]}
	body := map[string]any{"model": apitest.ModelName, "input": "Weather?", "max_output_tokens": 300, "seed": 2,
		"tools": []any{tool}, "tool_choice": "required"}
	var resp struct {
		Status string `json:"status"`
		Output []struct {
			Type      string `json:"type"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"output"`
	}
	postOK(t, env.URL("/v1/responses"), body, &resp)
	if resp.Status != "completed" || len(resp.Output) != 1 || resp.Output[0].Type != "function_call" || resp.Output[0].Name != "get_weather" || resp.Output[0].CallID == "" {
		t.Fatalf("response %+v", resp)
	}
	checkWeatherArgs(t, resp.Output[0].Arguments)

	body["stream"] = true
	_, data, _ := post(t, env.URL("/v1/responses"), body)
	names, events := sseEvents(t, data)
	var args strings.Builder
	sawAdded := false
	for i, name := range names {
		var e struct {
			Item struct {
				Type string `json:"type"`
				Name string `json:"name"`
			} `json:"item"`
			Delta     string `json:"delta"`
			Arguments string `json:"arguments"`
		}
		_ = json.Unmarshal([]byte(events[i]), &e)
		switch name {
		case "response.output_item.added":
			sawAdded = e.Item.Type == "function_call" && e.Item.Name == "get_weather"
		case "response.function_call_arguments.delta":
			args.WriteString(e.Delta)
		case "response.function_call_arguments.done":
			if e.Arguments != args.String() {
				t.Fatalf("done arguments %q, deltas %q", e.Arguments, args.String())
			}
		}
	}
	if !sawAdded || args.String() != resp.Output[0].Arguments || names[len(names)-1] != "response.completed" {
		t.Fatalf("streamed call: added %v, arguments %q (want %q), events %q", sawAdded, args.String(), resp.Output[0].Arguments, names)
	}
	env.WaitIdle(t)
}
