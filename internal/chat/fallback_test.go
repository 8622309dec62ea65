package chat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/chat/outparse"
)

// A ChatML template with no tool support, like SmolLM2's.
const plainChatML = `{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

func TestToolFallbackDescribesTools(t *testing.T) {
	tmpl, err := Parse(plainChatML)
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Caps().Tools {
		t.Fatal("plain ChatML probed as rendering tools")
	}
	tools := []Tool{{Name: "get_weather", Description: "Weather for a city.",
		Parameters: json.RawMessage(`{"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}`)}}
	msgs := []Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
		{Role: "tool", ToolCallID: "call_1", Content: `{"temp": 21}`},
	}
	out, err := tmpl.Render(msgs, RenderOptions{Tools: tools, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"<|im_start|>system\nBe brief.\n\n# Tools",
		`{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}}`,
		"<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>",
		"<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rendered prompt lacks %q:\n%s", want, out)
		}
	}
	// The calls it describes are the ones the parser reads back.
	p := outparse.ForTemplate(tmpl).NewParser(outparse.Options{Tools: tools})
	evs := append([]outparse.Event(nil), p.Push("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>")...)
	fin, err := p.Finish()
	if err != nil {
		t.Fatal(err)
	}
	evs = append(evs, fin...)
	var name, args string
	for _, e := range evs {
		switch e.Kind {
		case outparse.ToolCallBegin:
			name = e.Name
		case outparse.ToolCallArgs:
			args += e.Text
		}
	}
	if name != "get_weather" || args != `{"city": "Oslo"}` {
		t.Fatalf("parsed call %q %q from the described format", name, args)
	}
}

func TestToolFallbackLeavesCapableTemplatesAlone(t *testing.T) {
	tmpl := parseShared(t, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use")
	msgs := []Message{{Role: "user", Content: "hi"}}
	tools := []Tool{{Name: "f", Parameters: json.RawMessage(`{"type": "object"}`)}}
	got, opts, err := tmpl.toolFallback(msgs, RenderOptions{Tools: tools})
	if err != nil || len(got) != 1 || len(opts.Tools) != 1 || got[0].Content != "hi" {
		t.Fatalf("capable template rewritten: %+v %+v %v", got, opts, err)
	}
}
