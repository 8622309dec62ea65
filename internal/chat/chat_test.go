package chat

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/testshared"
)

func parseShared(t testing.TB, stem string) *Template {
	t.Helper()
	src, err := os.ReadFile(testshared.Path(t, "testdata", "chat-templates", stem+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

func TestFamilyAndCaps(t *testing.T) {
	all := Caps{SystemRole: true, Tools: true, ToolCalls: true}
	obj := all
	obj.ObjectArguments = true
	none := all
	none.NoneContent = true
	cases := []struct {
		stem   string
		family string
		caps   Caps
	}{
		{"CohereForAI-c4ai-command-r-plus-tool_use", FamilyCommandR, obj},
		{"CohereForAI-c4ai-command-r7b-12-2024-tool_use", FamilyCommandR7B, obj},
		{"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", FamilyHermes, all},
		{"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", FamilyHermes, all},
		{"Qwen-Qwen2.5-7B-Instruct", FamilyHermes, obj},
		{"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", FamilyDeepSeekR1, Caps{SystemRole: true, ToolCalls: true, NoneContent: true}},
		{"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", FamilyDeepSeekR1, Caps{SystemRole: true, ToolCalls: true, NoneContent: true}},
		{"fireworks-ai-llama-3-firefunction-v2", FamilyFirefunctionV2, all},
		{"google-gemma-2-2b-it", FamilyGemma, Caps{}},
		{"llama-cpp-deepseek-r1", FamilyDeepSeekR1, none},
		{"meetkai-functionary-medium-v3.1", FamilyFunctionaryV31, all},
		{"meetkai-functionary-medium-v3.2", FamilyFunctionaryV32, all},
		{"meta-llama-Llama-3.1-8B-Instruct", FamilyLlama3, obj},
		{"meta-llama-Llama-3.2-3B-Instruct", FamilyLlama3, obj},
		{"meta-llama-Llama-3.3-70B-Instruct", FamilyLlama3, obj},
		{"microsoft-Phi-3.5-mini-instruct", FamilyPhi3, Caps{SystemRole: true}},
		{"mistralai-Mistral-Nemo-Instruct-2407", FamilyMistral, obj},
	}
	for _, tc := range cases {
		t.Run(tc.stem, func(t *testing.T) {
			tmpl := parseShared(t, tc.stem)
			if tmpl.Family() != tc.family {
				t.Errorf("Family() = %q, want %q", tmpl.Family(), tc.family)
			}
			if tmpl.Caps() != tc.caps {
				t.Errorf("Caps() = %+v, want %+v", tmpl.Caps(), tc.caps)
			}
		})
	}
	for src, want := range map[string]string{
		"":                                 FamilyChatML,
		"  \n":                             FamilyChatML,
		"{{ messages[0].content }}":        FamilyUnknown,
		"[INST] {{ messages[0].content }}": FamilyMistral,
		"<|im_start|>{{ 1 }}":              FamilyChatML,
		"<|start_header_id|>{{ 1 }}":       FamilyLlama3,
	} {
		tmpl, err := Parse(src)
		if err != nil {
			t.Fatal(err)
		}
		if tmpl.Family() != want {
			t.Errorf("Family of %q = %q, want %q", src, tmpl.Family(), want)
		}
	}
}

func TestChatMLFallback(t *testing.T) {
	tmpl, err := Parse("")
	if err != nil {
		t.Fatal(err)
	}
	if tmpl.Source() != ChatML {
		t.Fatal("empty template must select ChatML")
	}
	got, err := tmpl.Render([]Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "Hi"},
		{Role: "assistant", Content: "", ToolCalls: []ToolCall{{ID: "1", Name: "f", Arguments: "{}"}}},
	}, RenderOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	// ChatML has no tool syntax: the call is written in the Hermes format
	// the parser reads (toolFallback).
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestGemmaRefusesSystemRole(t *testing.T) {
	tmpl := parseShared(t, "google-gemma-2-2b-it")
	_, err := tmpl.Render([]Message{{Role: "system", Content: "x"}, {Role: "user", Content: "y"}}, RenderOptions{})
	if err == nil || !strings.Contains(err.Error(), "System role not supported") || !strings.HasPrefix(err.Error(), "chat: render: ") {
		t.Fatalf("err = %v, want the template's own message", err)
	}
	out, err := tmpl.Render([]Message{{Role: "user", Content: "y"}}, RenderOptions{BOS: "<bos>", AddGenerationPrompt: true})
	if err != nil || out != "<bos><start_of_turn>user\ny<end_of_turn>\n<start_of_turn>model\n" {
		t.Fatalf("user-only render = %q, %v", out, err)
	}
}

func TestExtraOverridesDefaults(t *testing.T) {
	tmpl := parseShared(t, "meta-llama-Llama-3.1-8B-Instruct")
	tools := []Tool{{Name: "f", Description: "d", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}}
	msgs := []Message{{Role: "user", Content: "first question"}}
	now := time.Date(2025, 3, 9, 0, 0, 0, 0, time.UTC)
	sys, err := tmpl.Render(msgs, RenderOptions{Tools: tools, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sys, "Today Date: 09 Mar 2025") {
		t.Fatalf("date_string not from Now:\n%s", sys)
	}
	// By default the tools go in the system turn (before its <|eot_id|>).
	if i, j := strings.Index(sys, `"name": "f"`), strings.Index(sys, "<|eot_id|>"); i < 0 || i > j {
		t.Fatalf("default: tools not in the system turn:\n%s", sys)
	}
	usr, err := tmpl.Render(msgs, RenderOptions{Tools: tools, Now: now, Extra: map[string]any{"tools_in_user_message": true, "date_string": "1 Jan 2030"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(usr, "Given the following functions") || !strings.Contains(usr, "Today Date: 1 Jan 2030") {
		t.Fatalf("Extra did not override:\n%s", usr)
	}
	// Extra values: plain Go values and ordered JSON.
	x, err := Parse(`{{ enable_thinking }} {{ cfg | tojson }} {{ m | tojson }}`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := x.Render(nil, RenderOptions{Extra: map[string]any{
		"enable_thinking": false,
		"cfg":             json.RawMessage(`{"z": 1, "a": [1.5, "x"]}`),
		"m":               map[string]any{"z": 1, "a": 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `False {"z": 1, "a": [1.5, "x"]} {"a": 2, "z": 1}`; out != want {
		t.Fatalf("got %q, want %q", out, want)
	}
	if _, err := x.Render(nil, RenderOptions{Extra: map[string]any{"cfg": json.RawMessage(`{bad`)}}); err == nil {
		t.Fatal("bad JSON in Extra must fail")
	}
}

func TestStrftimeNow(t *testing.T) {
	tmpl, err := Parse(`{{ strftime_now("%d %b %Y|%A %B %j %H:%M:%S %I%p %y %e %Z %% %Q") }}`)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2024, 7, 5, 15, 4, 9, 0, time.UTC)
	out, err := tmpl.Render(nil, RenderOptions{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if want := "05 Jul 2024|Friday July 187 15:04:09 03PM 24  5 UTC % %Q"; out != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

func TestToolCallArguments(t *testing.T) {
	call := []Message{
		{Role: "user", Content: "q"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "a1b2c3d4e", Name: "f", Arguments: `{"b": 1,  "a": "x"}`}}},
	}
	// Qwen needs an object: re-serialized, key order kept.
	out, err := parseShared(t, "Qwen-Qwen2.5-7B-Instruct").Render(call, RenderOptions{})
	if err != nil || !strings.Contains(out, `{"name": "f", "arguments": {"b": 1, "a": "x"}}`) {
		t.Fatalf("Qwen: %v\n%s", err, out)
	}
	// Hermes can print text: the client's bytes are kept.
	out, err = parseShared(t, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use").Render(call, RenderOptions{})
	if err != nil || !strings.Contains(out, `"arguments": {"b": 1,  "a": "x"}}`) {
		t.Fatalf("Hermes: %v\n%s", err, out)
	}
	// Arguments that are not a JSON object still render (as a string) rather
	// than failing the request; empty arguments are {}.
	call[1].ToolCalls[0].Arguments = `not json`
	if _, err := parseShared(t, "Qwen-Qwen2.5-7B-Instruct").Render(call, RenderOptions{}); err != nil {
		t.Fatalf("invalid arguments: %v", err)
	}
	call[1].ToolCalls[0].Arguments = ""
	out, err = parseShared(t, "NousResearch-Hermes-3-Llama-3.1-8B-tool_use").Render(call, RenderOptions{})
	if err != nil || !strings.Contains(out, `"arguments": {}}`) {
		t.Fatalf("empty arguments: %v\n%s", err, out)
	}
}

func TestRenderErrors(t *testing.T) {
	tmpl := parseShared(t, "Qwen-Qwen2.5-7B-Instruct")
	_, err := tmpl.Render([]Message{{Role: "user", Content: "q"}}, RenderOptions{Tools: []Tool{{Name: "f", Parameters: json.RawMessage(`{"type":`)}}})
	if err == nil || !strings.Contains(err.Error(), "chat: tool 0 (f)") {
		t.Fatalf("bad schema: %v", err)
	}
	// A tool without a schema gets an empty object schema.
	out, err := tmpl.Render([]Message{{Role: "user", Content: "q"}}, RenderOptions{Tools: []Tool{{Name: "f"}}})
	if err != nil || !strings.Contains(out, `"parameters": {"type": "object", "properties": {}}`) {
		t.Fatalf("no schema: %v\n%s", err, out)
	}
	if _, err := Parse("{% if %}"); err == nil || !strings.HasPrefix(err.Error(), "chat: compile template") {
		t.Fatalf("bad template: %v", err)
	}
}

func TestConcurrentRender(t *testing.T) {
	tmpl := parseShared(t, "meetkai-functionary-medium-v3.2")
	spec := loadSpec(t)
	var tools []Tool
	for _, tl := range spec.Tools {
		tools = append(tools, Tool{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
	}
	msgs := spec.Cases[len(spec.Cases)-1].Messages
	opts := RenderOptions{Tools: tools, AddGenerationPrompt: true, Now: spec.Now}
	want, err := tmpl.Render(msgs, opts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if got, err := tmpl.Render(msgs, opts); err != nil || got != want {
					errs <- "concurrent render differs"
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func TestRewriteFilters(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{{ x | tojson }}`, `{{ x | kvserve_tojson }}`},
		{`{{ x|tojson(indent=4)|indent(8) }}`, `{{ x|kvserve_tojson(indent=4)|indent(8) }}`},
		{`{%- set a = x|tojson -%}`, `{%- set a = x|kvserve_tojson -%}`},
		{`{{ "a | tojson" ~ 'b|tojson' }}`, `{{ "a | tojson" ~ 'b|tojson' }}`},
		{`text | tojson {# c | tojson #}`, `text | tojson {# c | tojson #}`},
		{`{{ x | tojsonx }} {{ tojson }}`, `{{ x | tojsonx }} {{ tojson }}`},
		{`{% raw %}{{ x | tojson }}{% endraw %}{{ y|tojson }}`, `{% raw %}{{ x | tojson }}{% endraw %}{{ y|kvserve_tojson }}`},
		{`{{ "}}" | tojson }}`, `{{ "}}" | kvserve_tojson }}`},
		{`{{ x | tojson`, `{{ x | tojson`},
		{`{{ "\"" | tojson }}`, `{{ "\"" | kvserve_tojson }}`},
	}
	for _, tc := range cases {
		if got := rewriteFilters(tc.in); got != tc.want {
			t.Errorf("rewriteFilters(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzRewriteFilters checks that the rewrite only ever renames tojson: undo
// the renaming and the input comes back.
func FuzzRewriteFilters(f *testing.F) {
	for _, s := range []string{`{{ x | tojson }}`, `{% raw %}{{ a|tojson }}{% endraw %}`, `{{ "}}|tojson" }}|tojson`, `{# {{ x|tojson }} #}{{`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if strings.Contains(src, tojsonName) {
			return
		}
		out := rewriteFilters(src)
		if back := strings.ReplaceAll(out, tojsonName, "tojson"); back != src {
			t.Fatalf("rewrite changed more than filter names: %q -> %q", src, out)
		}
	})
}

// FuzzParse feeds arbitrary template sources through Parse and Render: they
// may fail, but must not panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{ChatML, `{% for m in messages %}{{ m.content | tojson(indent=2) }}{% endfor %}`, `{{ raise_exception("no") }}`, `{% macro f(x) %}{{ x }}{% endmacro %}{{ f(1) }}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 2000 || strings.Contains(src, "range(") { // keep renders small
			return
		}
		tmpl, err := Parse(src)
		if err != nil {
			return
		}
		_, _ = tmpl.Render([]Message{{Role: "user", Content: "hi"}, {Role: "assistant", ToolCalls: []ToolCall{{ID: "1", Name: "f", Arguments: `{"a": 1}`}}}},
			RenderOptions{Tools: []Tool{{Name: "f"}}, AddGenerationPrompt: true})
	})
}
