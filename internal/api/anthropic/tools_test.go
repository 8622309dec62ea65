package anthropic

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
)

var weatherTool = map[string]any{
	"name": "get_weather", "description": "Current weather of a city",
	"input_schema": map[string]any{"type": "object", "properties": map[string]any{
		"city": map[string]any{"type": "string"},
		"unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}},
	}, "required": []string{"city", "unit"}},
}

var timeTool = map[string]any{
	"name": "get_time", "input_schema": map[string]any{"type": "object", "properties": map[string]any{
		"zone": map[string]any{"type": "string"}}, "required": []string{"zone"}},
}

// checkWeatherInput checks the input of a forced get_weather call.
func checkWeatherInput(t *testing.T, input json.RawMessage) {
	t.Helper()
	var v struct {
		City *string `json:"city"`
		Unit string  `json:"unit"`
	}
	if err := json.Unmarshal(input, &v); err != nil || v.City == nil || (v.Unit != "celsius" && v.Unit != "fahrenheit") {
		t.Fatalf("input %s does not fit the schema: %v", input, err)
	}
}

func TestForcedToolUse(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{
		"model": apitest.ModelName, "messages": userMsg("Weather in Paris?"), "max_tokens": 300, "temperature": 0,
		"tools": []any{weatherTool, timeTool}, "tool_choice": map[string]any{"type": "tool", "name": "get_weather"},
	}
	full := postMessage(t, env, body)
	if *full.StopReason != "tool_use" || len(full.Content) != 1 {
		t.Fatalf("stop %q, content %+v", *full.StopReason, full.Content)
	}
	call := full.Content[0]
	if call.Type != "tool_use" || call.Name != "get_weather" || !strings.HasPrefix(call.ID, "toolu_") || len(call.ID) != len("toolu_")+24 {
		t.Fatalf("bad call %+v", call)
	}
	checkWeatherInput(t, call.Input)

	// Tokens that arrive while a delta is written go out together in the
	// next one, and a handler descheduled for a moment (a loaded CI
	// machine) can find most of a tiny model's answer ready: the input is
	// streamed if one of 3 tries has at least 3 input_json_delta events.
	body["stream"] = true
	deltas := 0
	for try := 0; try < 3 && deltas < 3; try++ {
		_, data, _ := post(t, env.URL("/v1/messages"), body)
		s := readStream(t, data)
		compareMessages(t, full, s.msg)
		deltas = s.deltas
	}
	if deltas < 3 {
		t.Fatalf("%d input_json_delta events in the best of 3 tries", deltas)
	}
	env.WaitIdle(t)
}

func TestAnyToolChoice(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	for _, temp := range []float64{0, 1} {
		m := postMessage(t, env, map[string]any{
			"model": apitest.ModelName, "messages": userMsg("Do something."), "max_tokens": 300, "temperature": temp,
			"tools":       []any{weatherTool, timeTool},
			"tool_choice": map[string]any{"type": "any", "disable_parallel_tool_use": true},
		})
		if *m.StopReason != "tool_use" || len(m.Content) != 1 || m.Content[0].Type != "tool_use" {
			t.Fatalf("stop %q, content %+v", *m.StopReason, m.Content)
		}
		switch c := m.Content[0]; c.Name {
		case "get_weather":
			checkWeatherInput(t, c.Input)
		case "get_time":
			var v map[string]string
			if err := json.Unmarshal(c.Input, &v); err != nil || len(v) != 1 {
				t.Fatalf("get_time input %s", c.Input)
			}
		default:
			t.Fatalf("called %q", c.Name)
		}
	}

	// tool_choice none: the tools are offered, no call comes back.
	m := postMessage(t, env, map[string]any{
		"model": apitest.ModelName, "messages": userMsg("Chat."), "max_tokens": 8,
		"tools": []any{weatherTool}, "tool_choice": map[string]any{"type": "none"},
	})
	for _, c := range m.Content {
		if c.Type != "text" || *m.StopReason == "tool_use" {
			t.Fatalf("tool_choice none: %+v (%s)", m.Content, *m.StopReason)
		}
	}
	if p := env.Tokenizer.Decode(env.Recorder.Last(t).Prompt); !strings.Contains(p, "get_weather") {
		t.Fatalf("tools not in the prompt: %q", p)
	}
	env.WaitIdle(t)
}

// TestToolRoundTrip sends a conversation with tool_use and tool_result
// blocks (string and block content, is_error) and checks the prompt
// against the template's rendering of the equivalent chat.
func TestToolRoundTrip(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	m := postMessage(t, env, map[string]any{
		"model": apitest.ModelName, "max_tokens": 1, "system": "Use tools.",
		"tools": []any{weatherTool, timeTool},
		"messages": []any{
			map[string]any{"role": "user", "content": "Weather in Paris and the time in Tokyo?"},
			map[string]any{"role": "assistant", "content": []any{
				map[string]any{"type": "text", "text": "Let me check."},
				map[string]any{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": map[string]any{"city": "Paris", "unit": "celsius"}},
				map[string]any{"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": map[string]any{"zone": "Asia/Tokyo"}},
			}},
			map[string]any{"role": "user", "content": []any{
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 degrees"},
				map[string]any{"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true,
					"content": []any{map[string]any{"type": "text", "text": "clock"}, map[string]any{"type": "text", "text": "broken"}}},
				map[string]any{"type": "text", "text": "Thanks."},
			}},
		},
	})
	_ = m
	tools := []chat.Tool{
		{Name: "get_weather", Description: "Current weather of a city", Parameters: mustJSON(weatherTool["input_schema"])},
		{Name: "get_time", Parameters: mustJSON(timeTool["input_schema"])},
	}
	want := env.ChatPrompt(t, []chat.Message{
		{Role: "system", Content: "Use tools."},
		{Role: "user", Content: "Weather in Paris and the time in Tokyo?"},
		{Role: "assistant", Content: "Let me check.", ToolCalls: []chat.ToolCall{
			{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius"}`},
			{ID: "toolu_2", Name: "get_time", Arguments: `{"zone":"Asia/Tokyo"}`},
		}},
		{Role: "tool", Content: "18 degrees", ToolCallID: "toolu_1"},
		{Role: "tool", Content: "Error: clock\nbroken", ToolCallID: "toolu_2"},
		{Role: "user", Content: "Thanks."},
	}, tools)
	got := env.Recorder.Last(t).Prompt
	if !equalTokens(got, want) {
		t.Fatalf("prompt\n%s\nwant\n%s", env.Tokenizer.Decode(got), env.Tokenizer.Decode(want))
	}
	// The tiny vocabulary cannot spell spaces: compare without them.
	p := env.Tokenizer.Decode(got)
	for _, s := range []string{"<tool_response>\n18degrees\n</tool_response>", "Error:clock\nbroken", `"name":"get_time"`} {
		if !strings.Contains(p, s) {
			t.Fatalf("prompt lacks %q:\n%s", s, p)
		}
	}
	env.WaitIdle(t)
}
