package outparse

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/chat"
)

// assistantHeader is the text each family's templates write before an
// assistant turn: what follows it is what the model generated.
var assistantHeader = map[string]string{
	FamilyHermes:         "<|im_start|>assistant\n",
	FamilyLlama3:         "<|start_header_id|>assistant<|end_header_id|>\n\n",
	FamilyFunctionaryV31: "<|start_header_id|>assistant<|end_header_id|>\n\n",
	FamilyFunctionaryV32: "<|start_header_id|>assistant<|end_header_id|>\n\n>>>",
	FamilyFirefunctionV2: "<|start_header_id|>assistant<|end_header_id|>\n\n",
	FamilyDeepSeekR1:     "<｜Assistant｜>",
	FamilyMistral:        "[/INST]",
	FamilyCommandR7B:     "<|CHATBOT_TOKEN|>",
	FamilyCommandR:       "<|CHATBOT_TOKEN|>",
}

// endOfTurn are the end-of-generation texts: the model stops there.
var endOfTurn = []string{"<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>", "<｜end▁of▁sentence｜>", "<|END_OF_TURN_TOKEN|>", "<|START_OF_TURN_TOKEN|>"}

// generated returns the assistant turn that follows the user's message
// in a rendered conversation, as the model would have generated it.
func generated(t *testing.T, tmpl testTemplate, rendered, user string) string {
	t.Helper()
	h, ok := assistantHeader[tmpl.Family()]
	if !ok {
		t.Fatalf("no assistant header for %s", tmpl.Family())
	}
	u := strings.LastIndex(rendered, user)
	i := strings.Index(rendered[u+1:], h)
	if u < 0 || i < 0 {
		t.Fatalf("no assistant turn in\n%s", rendered)
	}
	gen := rendered[u+1+i+len(h):]
	for _, e := range endOfTurn {
		if j := strings.Index(gen, e); j >= 0 {
			gen = gen[:j]
		}
	}
	return gen
}

func specTools(t *testing.T) ([]Tool, goldenSpec) {
	spec := loadSpec(t)
	var tools []Tool
	for _, tl := range spec.Tools {
		tools = append(tools, Tool{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
	}
	return tools, spec
}

func sameJSON(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// TestRoundTrip renders an assistant turn with tool calls through each
// template, parses the generated part back, and checks that the calls come
// back — and that rendering the parsed message gives the same prompt, so a
// follow-up request reuses the KV blocks of the generation.
func TestRoundTrip(t *testing.T) {
	tools, spec := specTools(t)
	stems := []string{
		"CohereForAI-c4ai-command-r-plus-tool_use",
		"CohereForAI-c4ai-command-r7b-12-2024-tool_use",
		"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
		"NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
		"Qwen-Qwen2.5-7B-Instruct",
		"deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
		"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
		"fireworks-ai-llama-3-firefunction-v2",
		"llama-cpp-deepseek-r1",
		"meetkai-functionary-medium-v3.1",
		"meetkai-functionary-medium-v3.2",
		"meta-llama-Llama-3.1-8B-Instruct",
		"meta-llama-Llama-3.2-3B-Instruct",
		"meta-llama-Llama-3.3-70B-Instruct",
		"mistralai-Mistral-Nemo-Instruct-2407",
	}
	for _, stem := range stems {
		t.Run(stem, func(t *testing.T) {
			tmpl := parseShared(t, stem)
			calls := []ToolCall{
				{ID: "a1b2c3d4e", Name: "get_weather", Arguments: `{"location": "Paris, France", "days": 3}`},
				{ID: "f5g6h7i8j", Name: "search", Arguments: `{"query": "Paris \"news\" — été"}`},
			}
			if tmpl.Family() == FamilyLlama3 { // one call per turn
				calls = calls[:1]
			}
			msgs := []Message{{Role: "user", Content: "Weather in Paris and news about it?"}, {Role: "assistant", ToolCalls: calls}}
			ro := chat.RenderOptions{Tools: tools, Now: spec.Now, BOS: spec.BOS, EOS: spec.EOS}
			full, err := tmpl.Render(msgs, ro)
			if err != nil {
				t.Fatal(err)
			}
			gen := generated(t, tmpl, full, msgs[0].Content)
			ro.AddGenerationPrompt = true
			prompt, err := tmpl.Render(msgs[:1], ro)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			o := Options{Tools: tools, ParseReasoning: true, NewID: func() string { n++; return calls[n-1].ID }}
			// The turn as rendered does not reopen reasoning, even where the
			// generation prompt does.
			if tmpl.PromptOpensReasoning(prompt) != (tmpl.Family() == FamilyDeepSeekR1) {
				t.Errorf("PromptOpensReasoning(prompt) = %v", !(tmpl.Family() == FamilyDeepSeekR1))
			}
			m, err := tmpl.ParseMessage(gen, o)
			if err != nil {
				t.Fatal(err)
			}
			if m.Content != "" || len(m.ToolCalls) != len(calls) {
				t.Fatalf("generated %q\nparsed %+v", gen, m)
			}
			for i, c := range m.ToolCalls {
				if c.Name != calls[i].Name || !sameJSON(c.Arguments, calls[i].Arguments) {
					t.Errorf("call %d: got %+v, want %+v", i, c, calls[i])
				}
				if !tmpl.Caps().ObjectArguments && c.Arguments != calls[i].Arguments {
					t.Errorf("call %d: arguments %q, want the bytes the template printed, %q", i, c.Arguments, calls[i].Arguments)
				}
			}
			again, err := tmpl.Render([]Message{msgs[0], m}, chat.RenderOptions{Tools: tools, Now: spec.Now, BOS: spec.BOS, EOS: spec.EOS})
			if err != nil || again != full {
				t.Fatalf("re-rendering the parsed turn differs (%v):\n%s\n----\n%s", err, again, full)
			}
			// And chunked.
			w := want{}
			for _, c := range m.ToolCalls {
				w.ToolCalls = append(w.ToolCalls, call(c.Name, c.Arguments))
			}
			o.NewID = nil
			checkCase(t, tmpl, o, gen, w, nil)
		})
	}
}

// TestRoundTripBuiltin checks Llama 3.1's built-in tool syntax.
func TestRoundTripBuiltin(t *testing.T) {
	tmpl := parseShared(t, "meta-llama-Llama-3.1-8B-Instruct")
	tools := []Tool{{Name: "brave_search", Parameters: json.RawMessage(`{"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}`)}}
	msgs := []Message{{Role: "user", Content: "Search the news"}, {Role: "assistant", ToolCalls: []ToolCall{{ID: "x", Name: "brave_search", Arguments: `{"query": "Paris news"}`}}}}
	full, err := tmpl.Render(msgs, chat.RenderOptions{Tools: tools, Extra: map[string]any{"builtin_tools": []any{"brave_search", "wolfram_alpha"}}})
	if err != nil {
		t.Fatal(err)
	}
	gen := generated(t, tmpl, full, msgs[0].Content)
	if !strings.HasPrefix(gen, "<|python_tag|>brave_search.call(") {
		t.Fatalf("unexpected render %q", gen)
	}
	checkCase(t, tmpl, Options{Tools: tools}, gen, wantCalls("", call("brave_search", `{"query": "Paris news"}`)), nil)
}

// TestForcedCall checks that prefix + arguments + suffix parses back to
// the call, for every family, with ordinary and awkward names and
// arguments.
func TestForcedCall(t *testing.T) {
	stems := []string{
		"CohereForAI-c4ai-command-r-plus-tool_use", "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
		"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "Qwen-Qwen2.5-7B-Instruct",
		"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "fireworks-ai-llama-3-firefunction-v2",
		"google-gemma-2-2b-it", "meetkai-functionary-medium-v3.1", "meetkai-functionary-medium-v3.2",
		"meta-llama-Llama-3.1-8B-Instruct", "microsoft-Phi-3.5-mini-instruct", "mistralai-Mistral-Nemo-Instruct-2407",
	}
	names := []string{"get_weather", `we"ird.name-2`, "été"}
	argsList := []string{`{}`, `{"location": "Paris", "n": [1, 2.5, {"x": null}]}`, "{\n  \"a\": \"}\\\"</tool_call>\"\n}"}
	for _, stem := range stems {
		tmpl := parseShared(t, stem)
		for _, name := range names {
			tool := Tool{Name: name}
			prefix, suffix, err := tmpl.ForcedCall(tool)
			if err != nil {
				t.Fatalf("%s: %v", stem, err)
			}
			for _, args := range argsList {
				t.Run(fmt.Sprintf("%s/%s/%d", stem, name, len(args)), func(t *testing.T) {
					o := Options{Tools: []Tool{{Name: "other"}, tool}, Forced: true}
					checkCase(t, tmpl, o, prefix+args+suffix, wantCalls("", call(name, args)), nil)
				})
			}
		}
	}
	hermes := parseShared(t, "Qwen-Qwen2.5-7B-Instruct")
	if p, s, err := hermes.ForcedCall(Tool{Name: "get_weather"}); err != nil || p != "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " || s != "}\n</tool_call>" {
		t.Errorf("hermes forced call %q %q %v", p, s, err)
	}
	for _, bad := range []struct{ stem, name string }{
		{"Qwen-Qwen2.5-7B-Instruct", ""},
		{"Qwen-Qwen2.5-7B-Instruct", "a\nb"},
		{"meetkai-functionary-medium-v3.1", "a>b"},
		{"meetkai-functionary-medium-v3.2", "all"},
	} {
		if _, _, err := parseShared(t, bad.stem).ForcedCall(Tool{Name: bad.name}); err == nil || !strings.HasPrefix(err.Error(), "outparse: forced call: ") {
			t.Errorf("%s: ForcedCall(%q) error %v", bad.stem, bad.name, err)
		}
	}
}

func TestReasoningTags(t *testing.T) {
	cases := []struct {
		stem        string
		open, close string
		ok          bool
	}{
		{"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "<think>", "</think>", true},
		{"llama-cpp-deepseek-r1", "<think>", "</think>", true},
		{"CohereForAI-c4ai-command-r7b-12-2024-tool_use", "<|START_THINKING|>", "<|END_THINKING|>", true},
		{"Qwen-Qwen2.5-7B-Instruct", "<think>", "</think>", false},
		{"meta-llama-Llama-3.1-8B-Instruct", "<think>", "</think>", false},
	}
	for _, tc := range cases {
		open, close, ok := parseShared(t, tc.stem).ReasoningTags()
		if open != tc.open || close != tc.close || ok != tc.ok {
			t.Errorf("%s: ReasoningTags() = %q %q %v", tc.stem, open, close, ok)
		}
	}
	// A Qwen 3 style template mentions <think>.
	q3 := newTestTemplate(t, chat.ChatML+`{%- if enable_thinking is defined and not enable_thinking %}{{ '<think>\n\n</think>\n\n' }}{% endif %}{# <tool_call> #}`)
	if _, _, ok := q3.ReasoningTags(); !ok || q3.Family() != FamilyHermes {
		t.Errorf("qwen3-like template: ok %v family %s", ok, q3.Family())
	}
	for prompt, want := range map[string]bool{
		"<|im_start|>assistant\n":                        false,
		"<|im_start|>assistant\n<think>\n":               true,
		"<|im_start|>assistant\n<think>\n\n</think>\n\n": false,
	} {
		if got := q3.PromptOpensReasoning(prompt); got != want {
			t.Errorf("PromptOpensReasoning(%q) = %v", prompt, got)
		}
	}
	r1 := parseShared(t, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
	prompt, err := r1.Render([]Message{{Role: "user", Content: "hi"}}, chat.RenderOptions{AddGenerationPrompt: true})
	if err != nil || !r1.PromptOpensReasoning(prompt) {
		t.Errorf("R1 generation prompt %q does not open reasoning (%v)", prompt, err)
	}
}

func TestOutputMarkers(t *testing.T) {
	for stem, want := range map[string][]string{
		"Qwen-Qwen2.5-7B-Instruct":                      {"<tool_call>", "</tool_call>", "<think>", "</think>"},
		"meta-llama-Llama-3.1-8B-Instruct":              {"<|python_tag|>", "<think>"},
		"mistralai-Mistral-Nemo-Instruct-2407":          {"[TOOL_CALLS]"},
		"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B":      {dsCallsBegin, dsSep, "</think>"},
		"CohereForAI-c4ai-command-r7b-12-2024-tool_use": {"<|START_ACTION|>", "<|END_RESPONSE|>", "<|START_THINKING|>"},
	} {
		got := parseShared(t, stem).OutputMarkers()
		for _, w := range want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("%s: OutputMarkers() = %q lacks %q", stem, got, w)
			}
		}
	}
}
