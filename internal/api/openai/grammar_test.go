package openai

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
)

func TestResponseFormatJSONObject(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	var resp chatResp
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "messages": userMsg("Reply in JSON."), "max_tokens": 600, "seed": 3, "n": 2,
		"response_format": map[string]any{"type": "json_object"},
	}, &resp)
	for _, ch := range resp.Choices {
		var v map[string]any
		if err := json.Unmarshal([]byte(*ch.Message.Content), &v); err != nil || ch.FinishReason != "stop" {
			t.Fatalf("choice %d (%s): not a JSON object: %q: %v", ch.Index, ch.FinishReason, *ch.Message.Content, err)
		}
	}
	env.WaitIdle(t)
}

func TestResponseFormatJSONSchema(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"name": map[string]any{"type": "string", "maxLength": 10},
			"age":  map[string]any{"type": "integer", "minimum": 0, "maximum": 150},
			"tags": map[string]any{"type": "array", "items": map[string]any{"type": "string", "enum": []string{"red", "blue"}}, "maxItems": 3},
			"ok":   map[string]any{"type": "boolean"},
		},
		"required":             []string{"name", "age", "tags", "ok"},
		"additionalProperties": false,
	}
	for seed := 1; seed <= 3; seed++ {
		var resp chatResp
		postOK(t, env.URL("/v1/chat/completions"), map[string]any{
			"model": apitest.ModelName, "messages": userMsg("A person, please."), "max_tokens": 300, "seed": seed,
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "person", "schema": schema, "strict": true}},
		}, &resp)
		text := *resp.Choices[0].Message.Content
		var v struct {
			Name *string   `json:"name"`
			Age  *float64  `json:"age"`
			Tags *[]string `json:"tags"`
			OK   *bool     `json:"ok"`
		}
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("seed %d: %q does not parse: %v", seed, text, err)
		}
		if v.Name == nil || v.Age == nil || v.Tags == nil || v.OK == nil {
			t.Fatalf("seed %d: required property missing: %q", seed, text)
		}
		if len([]rune(*v.Name)) > 10 || *v.Age != float64(int(*v.Age)) || *v.Age < 0 || *v.Age > 150 || len(*v.Tags) > 3 {
			t.Fatalf("seed %d: %q violates the schema", seed, text)
		}
		for _, tag := range *v.Tags {
			if tag != "red" && tag != "blue" {
				t.Fatalf("seed %d: tag %q not in the enum", seed, tag)
			}
		}
	}

	status, data, _ := post(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "messages": userMsg("x"),
		"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "bad", "schema": map[string]any{"type": "object", "not": map[string]any{}}}},
	})
	if status != 400 {
		t.Fatalf("unenforceable schema: status %d: %s", status, data)
	}
	checkErrorShape(t, data)
}

var weatherTool = map[string]any{"type": "function", "function": map[string]any{
	"name": "get_weather", "description": "Current weather of a city",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string"},
		"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
	}, "required": []string{"city", "unit"}},
}}

var timeTool = map[string]any{"type": "function", "function": map[string]any{
	"name": "get_time", "parameters": map[string]any{"type": "object", "properties": map[string]any{
		"zone": map[string]any{"type": "string"}}, "required": []string{"zone"}},
}}

// checkWeatherArgs checks the arguments of a forced get_weather call.
func checkWeatherArgs(t *testing.T, args string) {
	t.Helper()
	var v struct {
		City *string `json:"city"`
		Unit string  `json:"unit"`
	}
	if err := json.Unmarshal([]byte(args), &v); err != nil || v.City == nil || (v.Unit != "celsius" && v.Unit != "fahrenheit") {
		t.Fatalf("arguments %q do not fit the schema: %v", args, err)
	}
}

func TestForcedToolCall(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{
		"model": apitest.ModelName, "messages": userMsg("Weather in Paris?"), "max_tokens": 300, "seed": 5,
		"tools": []any{weatherTool, timeTool}, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}},
	}
	var resp chatResp
	postOK(t, env.URL("/v1/chat/completions"), body, &resp)
	ch := resp.Choices[0]
	if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("finish %q, tool calls %+v, content %v", ch.FinishReason, ch.Message.ToolCalls, ch.Message.Content)
	}
	call := ch.Message.ToolCalls[0]
	var args string
	if err := json.Unmarshal(call.Function.Arguments, &args); err != nil {
		t.Fatalf("arguments are not a JSON string: %s", call.Function.Arguments)
	}
	if call.Type != "function" || call.Function.Name != "get_weather" || !strings.HasPrefix(call.ID, "call_") {
		t.Fatalf("bad call %+v", call)
	}
	checkWeatherArgs(t, args)
	if ch.Message.Content != nil && *ch.Message.Content != "" {
		t.Fatalf("forced call left content %q", *ch.Message.Content)
	}

	// Streamed with the same seed: the same call, with OpenAI's delta shape.
	body["stream"] = true
	// Tokens that arrive while a delta is written go out together in the
	// next one, and a handler descheduled for a moment (a loaded CI
	// machine) can find most of a tiny model's answer ready: the arguments
	// are streamed if one of 3 tries has at least 3 deltas.
	var streamedArgs strings.Builder
	deltas, finish := 0, ""
	for try := 0; try < 3 && deltas < 3; try++ {
		status, data, _ := post(t, env.URL("/v1/chat/completions"), body)
		if status != 200 {
			t.Fatalf("status %d: %s", status, data)
		}
		_, events := sseEvents(t, data)
		streamedArgs.Reset()
		deltas, finish = 0, ""
		for _, ev := range events[:len(events)-1] {
			var chunk struct {
				Choices []struct {
					Delta struct {
						ToolCalls []struct {
							Index    *int    `json:"index"`
							ID       *string `json:"id"`
							Type     *string `json:"type"`
							Function struct {
								Name      *string `json:"name"`
								Arguments string  `json:"arguments"`
							} `json:"function"`
						} `json:"tool_calls"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
				t.Fatal(err)
			}
			for _, c := range chunk.Choices {
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
				for _, tc := range c.Delta.ToolCalls {
					if tc.Index == nil || *tc.Index != 0 {
						t.Fatalf("tool call delta without index 0: %s", ev)
					}
					first := deltas == 0
					if (tc.ID != nil) != first || (tc.Type != nil) != first || (tc.Function.Name != nil) != first {
						t.Fatalf("delta %d: id/type/name must be in the first delta only: %s", deltas, ev)
					}
					if first && (*tc.Function.Name != "get_weather" || *tc.Type != "function") {
						t.Fatalf("first delta %s", ev)
					}
					streamedArgs.WriteString(tc.Function.Arguments)
					deltas++
				}
			}
		}
	}
	if deltas < 3 || finish != "tool_calls" {
		t.Fatalf("%d tool call deltas, finish %q", deltas, finish)
	}
	if streamedArgs.String() != args {
		t.Fatalf("streamed arguments %q, non-streamed %q", streamedArgs.String(), args)
	}
	env.WaitIdle(t)
}

func TestRequiredToolChoice(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	var resp chatResp
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "messages": userMsg("Do something."), "max_tokens": 300, "seed": 11, "n": 3,
		"tools": []any{weatherTool, timeTool}, "tool_choice": "required",
	}, &resp)
	for _, ch := range resp.Choices {
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 {
			t.Fatalf("choice %d: finish %q, calls %+v", ch.Index, ch.FinishReason, ch.Message.ToolCalls)
		}
		call := ch.Message.ToolCalls[0]
		var args string
		_ = json.Unmarshal(call.Function.Arguments, &args)
		switch call.Function.Name {
		case "get_weather":
			checkWeatherArgs(t, args)
		case "get_time":
			var v map[string]string
			if err := json.Unmarshal([]byte(args), &v); err != nil || len(v) != 1 {
				t.Fatalf("get_time arguments %q", args)
			}
		default:
			t.Fatalf("called %q", call.Function.Name)
		}
	}

	// tool_choice "none": tools are offered but nothing is parsed as a call.
	var none chatResp
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "messages": userMsg("Chat."), "max_tokens": 8, "tools": []any{weatherTool}, "tool_choice": "none",
	}, &none)
	if len(none.Choices[0].Message.ToolCalls) != 0 || none.Choices[0].FinishReason == "tool_calls" {
		t.Fatalf("tool_choice none produced a call: %+v", none.Choices[0])
	}
	env.WaitIdle(t)
}

// streamText is what a stream says per choice, however it was chunked.
func streamText(t *testing.T, body []byte) string {
	_, data := sseEvents(t, body)
	text := map[int]string{}
	for _, d := range data {
		if d == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Index int `json:"index"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("chunk %s: %v", d, err)
		}
		for _, ch := range c.Choices {
			text[ch.Index] += ch.Delta.Content
			if ch.FinishReason != nil {
				text[ch.Index] += "|" + *ch.FinishReason
			}
		}
	}
	return fmt.Sprint(text)
}

// TestOverTheWire: what crosses from the API to the engine and back is
// plain data. The same constrained requests, streamed and not, give the
// same bytes when every request and output goes through JSON on the way
// (as to a remote worker) as when they do not.
func TestOverTheWire(t *testing.T) {
	direct := newEnv(t, apitest.Options{})
	wired := newEnv(t, apitest.Options{Wrap: apitest.Wire})
	bodies := []map[string]any{
		{"model": apitest.ModelName, "messages": userMsg("Weather in Paris?"), "max_tokens": 200, "seed": 5,
			"tools": []any{weatherTool, timeTool}, "tool_choice": "required", "logprobs": true, "top_logprobs": 2},
		{"model": apitest.ModelName, "messages": userMsg("Reply in JSON."), "max_tokens": 100, "seed": 3, "n": 2,
			"response_format": map[string]any{"type": "json_object"}, "stream": true},
		{"model": apitest.ModelName, "messages": userMsg("Hi."), "max_tokens": 12, "temperature": 0, "stop": []string{"."},
			"presence_penalty": 0.5, "logit_bias": map[string]any{"5": -100}},
	}
	// Response ids and creation times differ between runs.
	volatile := regexp.MustCompile(`"(id|created|system_fingerprint)":("[^"]*"|[0-9]+)|"call_[A-Za-z0-9]+"|"kvserve":\{[^}]*\}`)
	for i, b := range bodies {
		var got [2]string
		for j, env := range []*apitest.Env{direct, wired} {
			status, data, _ := post(t, env.URL("/v1/chat/completions"), b)
			if status != 200 {
				t.Fatalf("request %d, env %d: status %d: %s", i, j, status, data)
			}
			got[j] = volatile.ReplaceAllString(string(data), "")
			if b["stream"] == true {
				got[j] = streamText(t, data)
			}
		}
		if got[0] != got[1] {
			t.Errorf("request %d differs over the wire:\ndirect %s\nwired  %s", i, got[0], got[1])
		}
	}
	if n := len(wired.Recorder.Requests()); n != len(bodies) {
		t.Fatalf("%d requests reached the wired backend, want %d", n, len(bodies))
	}
}
