package outparse

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/chat/pyjson"
)

// runParser feeds chunks to a parser with deterministic ids and returns
// all events (copied: Push reuses its slice).
func runParser(tmpl testTemplate, o Options, chunks []string, trace *[]traceItem) ([]Event, error) {
	n := 0
	o.NewID = func() string { n++; return fmt.Sprintf("call_%d", n) }
	p := tmpl.NewParser(o)
	p.trace = trace
	var evs []Event
	for _, c := range chunks {
		evs = append(evs, p.Push(c)...)
	}
	fin, err := p.Finish()
	return append(evs, fin...), err
}

// normalize merges consecutive deltas of one kind and call.
func normalize(evs []Event) []Event {
	var out []Event
	for _, ev := range evs {
		switch ev.Kind {
		case Content, Reasoning, ToolCallArgs:
			if ev.Text == "" {
				continue
			}
			if n := len(out); n > 0 && out[n-1].Kind == ev.Kind && out[n-1].Index == ev.Index {
				out[n-1].Text += ev.Text
				continue
			}
		}
		out = append(out, ev)
	}
	return out
}

// checkWellFormed checks the event grammar: calls numbered 0, 1, … in
// order, arguments only inside a call, nothing else inside one, and the
// arguments of a call not marked broken a JSON object.
func checkWellFormed(t testing.TB, evs []Event) {
	t.Helper()
	open, next := -1, 0
	var args strings.Builder
	for i, ev := range evs {
		switch ev.Kind {
		case Content, Reasoning:
			if open >= 0 {
				t.Fatalf("event %d: %s inside call %d", i, ev.Kind, open)
			}
		case ToolCallBegin:
			if open >= 0 || ev.Index != next || ev.Name == "" || ev.ID == "" {
				t.Fatalf("event %d: bad begin %+v (open %d, next %d)", i, ev, open, next)
			}
			open, next = ev.Index, next+1
			args.Reset()
		case ToolCallArgs:
			if open < 0 || ev.Index != open {
				t.Fatalf("event %d: args outside their call: %+v", i, ev)
			}
			args.WriteString(ev.Text)
		case ToolCallEnd:
			if open < 0 || ev.Index != open {
				t.Fatalf("event %d: bad end %+v", i, ev)
			}
			if !ev.Broken {
				var v map[string]any
				if err := json.Unmarshal([]byte(args.String()), &v); err != nil {
					t.Fatalf("call %d: arguments %q are not a JSON object: %v", open, args.String(), err)
				}
			}
			open = -1
		default:
			t.Fatalf("event %d: invalid kind %d", i, ev.Kind)
		}
	}
	if open >= 0 {
		t.Fatalf("call %d not ended", open)
	}
}

// checkTrace checks that every input byte went to exactly one place and
// that the events say what the trace says.
func checkTrace(t testing.TB, f *toolFormat, input string, trace []traceItem, evs []Event) {
	t.Helper()
	var all, content, reasoning, args strings.Builder
	for _, it := range trace {
		switch it.label {
		case lContent:
			content.WriteString(it.text)
		case lReasoning:
			reasoning.WriteString(it.text)
		case lArgs, lSynth:
			args.WriteString(it.text)
		case lSkip:
			rest := it.text
			for _, m := range skippable(f) {
				rest = strings.ReplaceAll(rest, m, "")
			}
			if strings.TrimSpace(rest) != "" {
				t.Fatalf("skipped %q, which is neither a tag nor whitespace", it.text)
			}
		}
		if it.label != lSynth {
			all.WriteString(it.text)
		}
	}
	if all.String() != input {
		t.Fatalf("trace does not rebuild the input:\n got %q\nwant %q", all.String(), input)
	}
	var ec, er, ea strings.Builder
	for _, ev := range evs {
		switch ev.Kind {
		case Content:
			ec.WriteString(ev.Text)
		case Reasoning:
			er.WriteString(ev.Text)
		case ToolCallArgs:
			ea.WriteString(ev.Text)
		}
	}
	if ec.String() != content.String() || er.String() != reasoning.String() || ea.String() != args.String() {
		t.Fatalf("events and trace disagree")
	}
}

// skippable lists the strings a parser may drop outside calls, longest
// first.
func skippable(f *toolFormat) []string {
	out := []string{f.think[0], f.think[1], ">>>all\n", ">>>", "all\n"}
	for _, tr := range f.triggers {
		if tr.prog == nil {
			out = append(out, tr.lit)
		}
	}
	return out
}

func namedTools(names ...string) []Tool {
	var out []Tool
	for _, n := range names {
		out = append(out, Tool{Name: n})
	}
	return out
}

// want is the message a generation must parse into.
type want struct {
	Content   string `json:"content"`
	Reasoning string `json:"reasoning"`
	ToolCalls []struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"tool_calls"`
	Broken []int `json:"-"`
}

func (w want) String() string {
	b, _ := json.Marshal(w)
	return string(b)
}

func messageWant(m Message) want {
	w := want{Content: m.Content, Reasoning: m.ReasoningContent}
	for _, c := range m.ToolCalls {
		w.ToolCalls = append(w.ToolCalls, struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}{c.Name, c.Arguments})
	}
	return w
}

// checkCase parses output one-shot, split in two at every byte and in
// random chunkings; all must give the same events and the wanted message.
func checkCase(t *testing.T, tmpl testTemplate, o Options, output string, w want, wantErr error) {
	t.Helper()
	var trace []traceItem
	evs, err := runParser(tmpl, o, []string{output}, &trace)
	if !errors.Is(err, wantErr) {
		t.Fatalf("Finish error %v, want %v", err, wantErr)
	}
	checkWellFormed(t, evs)
	checkTrace(t, formatFor(tmpl.Family()), output, trace, evs)
	var b MessageBuilder
	b.Add(evs...)
	wb := w
	wb.Broken = nil
	if got := messageWant(b.Message()); !reflect.DeepEqual(got, wb) && !(len(got.ToolCalls) == 0 && len(w.ToolCalls) == 0 && got.Content == w.Content && got.Reasoning == w.Reasoning) {
		t.Fatalf("output %q\n got %v\nwant %v", output, got, w)
	}
	for i, ev := range evs {
		if ev.Kind == ToolCallEnd {
			broken := false
			for _, j := range w.Broken {
				broken = broken || j == ev.Index
			}
			if ev.Broken != broken {
				t.Fatalf("event %d: Broken %v, want %v", i, ev.Broken, broken)
			}
		}
	}
	one := normalize(evs)
	compare := func(chunks []string) {
		t.Helper()
		trace = trace[:0]
		evs, err2 := runParser(tmpl, o, chunks, &trace)
		if !errors.Is(err2, wantErr) {
			t.Fatalf("chunks %q: error %v", chunks, err2)
		}
		checkWellFormed(t, evs)
		checkTrace(t, formatFor(tmpl.Family()), output, trace, evs)
		if got := normalize(evs); !reflect.DeepEqual(got, one) {
			t.Fatalf("chunks %q:\n got %+v\nwant %+v", chunks, got, one)
		}
	}
	for i := 0; i <= len(output); i++ {
		compare([]string{output[:i], output[i:]})
	}
	r := rand.New(rand.NewPCG(uint64(len(output)), 7))
	for range 30 {
		var chunks []string
		for s := output; s != ""; {
			n := min(len(s), 1+r.IntN(6))
			chunks, s = append(chunks, s[:n]), s[n:]
		}
		compare(chunks)
	}
	// Byte by byte.
	var bytes []string
	for i := range len(output) {
		bytes = append(bytes, output[i:i+1])
	}
	compare(bytes)
}

func TestParseModelOutputs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "model_outputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Tools []string `json:"tools"`
		Cases []struct {
			Name           string `json:"name"`
			Template       string `json:"template"`
			Output         string `json:"output"`
			ReasoningOpen  bool   `json:"reasoning_open"`
			ParseReasoning bool   `json:"parse_reasoning"`
			Want           want   `json:"want"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Cases) < 15 {
		t.Fatalf("only %d cases", len(spec.Cases))
	}
	for _, tc := range spec.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			tmpl := parseShared(t, tc.Template)
			o := Options{Tools: namedTools(spec.Tools...), ReasoningOpen: tc.ReasoningOpen, ParseReasoning: tc.ParseReasoning}
			checkCase(t, tmpl, o, tc.Output, tc.Want, nil)
		})
	}
}

// call builds a wanted tool call.
func call(name, args string) struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
} {
	return struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}{name, args}
}

func wantCalls(content string, calls ...struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}) want {
	return want{Content: content, ToolCalls: calls}
}

func TestParseFamilies(t *testing.T) {
	tools := namedTools("get_weather", "search", "brave_search", "python")
	const (
		hermes  = "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"
		qwen    = "Qwen-Qwen2.5-7B-Instruct"
		llama   = "meta-llama-Llama-3.1-8B-Instruct"
		mistral = "mistralai-Mistral-Nemo-Instruct-2407"
		fv31    = "meetkai-functionary-medium-v3.1"
		fv32    = "meetkai-functionary-medium-v3.2"
		fire    = "fireworks-ai-llama-3-firefunction-v2"
		r1      = "deepseek-ai-DeepSeek-R1-Distill-Llama-8B"
		r7b     = "CohereForAI-c4ai-command-r7b-12-2024-tool_use"
		cmdr    = "CohereForAI-c4ai-command-r-plus-tool_use"
		gemma   = "google-gemma-2-2b-it"
	)
	gw := `{"location": "Paris"}`
	type tcase struct {
		name, stem, output string
		opts               Options
		noTools            bool
		want               want
		err                error
	}
	reasoning := Options{ParseReasoning: true}
	open := Options{ParseReasoning: true, ReasoningOpen: true}
	broken := func(w want, idx ...int) want { w.Broken = idx; return w }
	withReasoning := func(w want, r string) want { w.Reasoning = r; return w }
	cases := []tcase{
		// Hermes / Qwen.
		{name: "plain", stem: hermes, output: "Hello, world!\n", want: wantCalls("Hello, world!\n")},
		{name: "no tools: tags stay", stem: hermes, noTools: true, output: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", want: wantCalls("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>")},
		{name: "content then call", stem: hermes, output: "Let me look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + gw + "}\n</tool_call>", want: wantCalls("Let me look.", call("get_weather", gw))},
		{name: "call then content", stem: qwen, output: "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": [1, 2.5e3, null, true]}}</tool_call>\n\nDone.", want: wantCalls("Done.", call("search", `{"q": [1, 2.5e3, null, true]}`))},
		{name: "unknown name stays content", stem: hermes, output: "<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>", want: wantCalls("<tool_call>\n{\"name\": \"launch\", \"arguments\": {}}\n</tool_call>")},
		{name: "unknown then known", stem: hermes, output: "<tool_call>{\"name\": \"get_weatherx\"}</tool_call> <tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>", want: wantCalls("<tool_call>{\"name\": \"get_weatherx\"}</tool_call>", call("search", "{}"))},
		{name: "not JSON after the tag", stem: hermes, output: "Use <tool_call> tags.", want: wantCalls("Use <tool_call> tags.")},
		{name: "no arguments key", stem: hermes, output: "<tool_call>{\"name\": \"search\"}</tool_call>", want: wantCalls("", call("search", "{}"))},
		{name: "arguments as a string", stem: hermes, output: `<tool_call>{"name": "search", "arguments": "{\"q\": \"caf\u00e9 \\\"x\\\"\"}"}</tool_call>`, want: wantCalls("", call("search", `{"q": "café \"x\""}`))},
		{name: "arguments string first", stem: hermes, output: `<tool_call>{"arguments": "{\"q\": 1}", "name": "search"}</tool_call>`, want: wantCalls("", call("search", `{"q": 1}`))},
		{name: "arguments string not an object", stem: hermes, output: `<tool_call>{"name": "search", "arguments": "oops"}</tool_call>`, want: wantCalls(`<tool_call>{"name": "search", "arguments": "oops"}</tool_call>`)},
		{name: "unknown key before the arguments", stem: hermes, output: `<tool_call>{"name": "search", "why": 1, "arguments": {}}</tool_call>`, want: wantCalls(`<tool_call>{"name": "search", "why": 1, "arguments": {}}</tool_call>`)},
		{name: "missing close tag", stem: hermes, output: "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": 1}}\n", want: wantCalls("", call("search", `{"q": 1}`))},
		{name: "close tag cut off", stem: hermes, output: "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": 1}}\n</tool_", want: wantCalls("", call("search", `{"q": 1}`))},
		{name: "cut off in the arguments", stem: hermes, output: "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"long", want: broken(wantCalls("", call("search", `{"q": "long`)), 0)},
		{name: "cut off before the arguments", stem: hermes, output: "Hi <tool_call>\n{\"name\": \"search\", \"argu", want: wantCalls("Hi <tool_call>\n{\"name\": \"search\", \"argu")},
		{name: "invalid arguments", stem: hermes, output: "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": 1 2}}</tool_call>", want: broken(wantCalls("2}}</tool_call>", call("search", `{"q": 1 `)), 0)},
		{name: "think split", stem: qwen, opts: reasoning, output: "<think>\nI should search.\n</think>\n\nAnswer.", want: withReasoning(wantCalls("Answer."), "I should search.")},
		{name: "think kept", stem: qwen, output: "<think>\nx <tool_call>{\"name\": \"search\"}</tool_call>\n</think>\n\nAnswer.", want: wantCalls("<think>\nx <tool_call>{\"name\": \"search\"}</tool_call>\n</think>\n\nAnswer.")},
		{name: "no call inside reasoning", stem: qwen, opts: reasoning, output: "<think>maybe <tool_call>{\"name\": \"search\"}</tool_call></think><tool_call>{\"name\": \"get_weather\", \"arguments\": {}}</tool_call>", want: withReasoning(wantCalls("", call("get_weather", "{}")), "maybe <tool_call>{\"name\": \"search\"}</tool_call>")},
		{name: "think only at the start", stem: qwen, opts: reasoning, output: "Hi <think>x</think>", want: wantCalls("Hi <think>x</think>")},
		{name: "reasoning cut off", stem: qwen, opts: open, output: "still thinking \n", want: withReasoning(want{}, "still thinking \n")},
		{name: "reasoning open, closed at once", stem: qwen, opts: open, output: "</think>\n\nHi", want: wantCalls("Hi")},
		{name: "partial tag at the end is content", stem: hermes, output: "a <tool_ca", want: wantCalls("a <tool_ca")},
		{name: "gemma uses the hermes syntax", stem: gemma, output: "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>", want: wantCalls("", call("search", "{}"))},
		{name: "forced ok", stem: hermes, opts: Options{Forced: true}, output: "<tool_call>{\"name\": \"search\", \"arguments\": {}}</tool_call>", want: wantCalls("", call("search", "{}"))},
		{name: "forced missing", stem: hermes, opts: Options{Forced: true}, output: "no", want: wantCalls("no"), err: ErrNoToolCall},
		{name: "forced truncated", stem: hermes, opts: Options{Forced: true}, output: "<tool_call>{\"name\": \"search\", \"arguments\": {", want: broken(wantCalls("", call("search", "{")), 0), err: ErrNoToolCall},
		{name: "deep nesting is broken, not a crash", stem: hermes, output: "<tool_call>{\"name\": \"search\", \"arguments\": {\"a\": " + strings.Repeat("[", 300), want: broken(wantCalls(strings.Repeat("[", 300-pyjson.MaxDepth+1), call("search", `{"a": `+strings.Repeat("[", pyjson.MaxDepth-1))), 0)},

		// Llama 3.x.
		{name: "llama arguments key", stem: llama, output: "{\"name\": \"get_weather\", \"arguments\": " + gw + "}", want: wantCalls("", call("get_weather", gw))},
		{name: "llama leading space", stem: llama, output: "\n\n {\"name\": \"get_weather\", \"parameters\": " + gw + "}", want: wantCalls("", call("get_weather", gw))},
		{name: "llama two calls", stem: llama, output: "{\"name\": \"get_weather\", \"parameters\": " + gw + "}\n{\"name\": \"search\", \"parameters\": {}}", want: wantCalls("", call("get_weather", gw), call("search", "{}"))},
		{name: "llama json answer", stem: llama, output: "{\"answer\": 42}", want: wantCalls("{\"answer\": 42}")},
		{name: "llama unknown name", stem: llama, output: "{\"name\": \"Bob\", \"age\": 3}", want: wantCalls("{\"name\": \"Bob\", \"age\": 3}")},
		{name: "llama json later is content", stem: llama, output: "Sure: {\"name\": \"search\", \"parameters\": {}}", want: wantCalls("Sure: {\"name\": \"search\", \"parameters\": {}}")},
		{name: "llama python tag json", stem: llama, output: "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": 1}}", want: wantCalls("", call("search", `{"q": 1}`))},
		{name: "llama builtin", stem: llama, output: "<|python_tag|>brave_search.call(query=\"it's \\\"x\\\"\", count=3, safe=True)", want: wantCalls("", call("brave_search", `{"query": "it's \"x\"", "count": 3, "safe": true}`))},
		{name: "llama builtin undeclared", stem: llama, opts: Options{Tools: namedTools("get_weather")}, output: "<|python_tag|>wolfram_alpha.call(query=\"2+2\")", want: wantCalls("<|python_tag|>wolfram_alpha.call(query=\"2+2\")")},
		{name: "llama code", stem: llama, output: "<|python_tag|>print(\"hi\")\n", want: wantCalls("", call("python", `{"code": "print(\"hi\")\n"}`))},
		{name: "llama no tools: json is content", stem: llama, noTools: true, output: "{\"name\": \"search\", \"parameters\": {}}", want: wantCalls("{\"name\": \"search\", \"parameters\": {}}")},

		// Mistral.
		{name: "mistral content first", stem: mistral, output: "Checking.[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}, \"id\": \"abcdefghi\"}]", want: wantCalls("Checking.", call("search", "{}"))},
		{name: "mistral id first", stem: mistral, output: "[TOOL_CALLS][{\"id\": \"abcdefghi\", \"name\": \"search\", \"arguments\": {}}]", want: wantCalls("", call("search", "{}"))},
		{name: "mistral unknown first", stem: mistral, output: "[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}}]", want: wantCalls("[TOOL_CALLS][{\"name\": \"nope\", \"arguments\": {}}]")},
		{name: "mistral unknown second", stem: mistral, output: "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}}, {\"name\": \"nope\", \"arguments\": {}}]", want: wantCalls("{\"name\": \"nope\", \"arguments\": {}}]", call("search", "{}"))},
		{name: "mistral empty array", stem: mistral, output: "[TOOL_CALLS][]", want: wantCalls("[TOOL_CALLS][]")},

		// Functionary v3.1.
		{name: "fv31 content and two calls", stem: fv31, output: "Checking.<function=get_weather>" + gw + "</function><function=search>{\"q\": 1}</function>", want: wantCalls("Checking.", call("get_weather", gw), call("search", `{"q": 1}`))},
		{name: "fv31 unknown function", stem: fv31, output: "<function=nope>{}</function>", want: wantCalls("<function=nope>{}</function>")},
		{name: "fv31 name cut", stem: fv31, output: "<function=get_wea", want: wantCalls("<function=get_wea")},

		// Functionary v3.2.
		{name: "fv32 call only", stem: fv32, output: "get_weather\n" + gw, want: wantCalls("", call("get_weather", gw))},
		{name: "fv32 no tools", stem: fv32, noTools: true, output: "all\nHello >>> there", want: wantCalls("Hello >>> there")},
		{name: "fv32 explicit >>>", stem: fv32, output: ">>>all\nHi.\n>>>search\n{}", want: wantCalls("Hi.", call("search", "{}"))},
		{name: "fv32 unknown recipient", stem: fv32, output: "weather\n{}", want: wantCalls("weather\n{}")},
		{name: "fv32 text after call", stem: fv32, output: "search\n{}\nand more", want: wantCalls("and more", call("search", "{}"))},

		// Firefunction v2.
		{name: "firefunction content", stem: fire, output: "The answer is 4.", want: wantCalls("The answer is 4.")},
		{name: "firefunction call", stem: fire, output: " functools[{\"name\": \"search\", \"arguments\": {\"q\": 1}}]", want: wantCalls("", call("search", `{"q": 1}`))},

		// DeepSeek R1.
		{name: "r1 two calls", stem: r1, opts: open, output: "Plan.</think>" + dsCallsBegin + dsCallBegin + "function" + dsSep + "get_weather\n```json\n" + gw + "\n```" + dsCallEnd + "\n" + dsCallBegin + "function" + dsSep + "search\n```json\n{}\n```" + dsCallEnd + dsCallsEnd, want: withReasoning(wantCalls("", call("get_weather", gw), call("search", "{}")), "Plan.")},
		{name: "r1 variant opener", stem: r1, output: "<｜tool_calls_begin｜>" + dsCallBegin + "function" + dsSep + "search\n```json\n{}\n```" + dsCallEnd + dsCallsEnd, want: wantCalls("", call("search", "{}"))},
		{name: "r1 unknown function", stem: r1, output: dsCallsBegin + dsCallBegin + "function" + dsSep + "nope\n```json\n{}\n```" + dsCallEnd + dsCallsEnd, want: wantCalls(dsCallsBegin + dsCallBegin + "function" + dsSep + "nope\n```json\n{}\n```" + dsCallEnd + dsCallsEnd)},
		{name: "r1 reasoning kept in content", stem: r1, opts: Options{ReasoningOpen: true}, output: "Hmm.\n</think>\n\n4", want: wantCalls("Hmm.\n</think>\n\n4")},

		// Command R7B and R+.
		{name: "r7b parallel", stem: r7b, opts: reasoning, output: "<|START_THINKING|>Two lookups.<|END_THINKING|><|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": " + gw + "},\n    {\"tool_call_id\": \"1\", \"tool_name\": \"search\", \"parameters\": {}}\n]<|END_ACTION|>", want: withReasoning(wantCalls("", call("get_weather", gw), call("search", "{}")), "Two lookups.")},
		{name: "r7b plain", stem: r7b, output: "Plain text.", want: wantCalls("Plain text.")},
		{name: "command r directly-answer", stem: cmdr, output: "Action: ```json\n[{\"tool_name\": \"directly-answer\", \"parameters\": {}}]\n```", want: wantCalls("Action: ```json\n[{\"tool_name\": \"directly-answer\", \"parameters\": {}}]\n```")},
		{name: "command r mixed", stem: cmdr, output: "Action:\n```json\n[{\"tool_name\": \"search\", \"parameters\": {\"q\": 1}}, {\"tool_name\": \"get_weather\", \"parameters\": " + gw + "}]\n```", want: wantCalls("", call("search", `{"q": 1}`), call("get_weather", gw))},
	}
	for _, tc := range cases {
		t.Run(tc.stem+"/"+tc.name, func(t *testing.T) {
			o := tc.opts
			if o.Tools == nil && !tc.noTools {
				o.Tools = tools
			}
			checkCase(t, parseShared(t, tc.stem), o, tc.output, tc.want, tc.err)
		})
	}
}

// TestHoldBack checks that only what may still become a tag is held back.
func TestHoldBack(t *testing.T) {
	tools := namedTools("search")
	cases := []struct {
		stem   string
		opts   Options
		pushes []string
		want   []string // content emitted after each push
	}{
		{"Qwen-Qwen2.5-7B-Instruct", Options{Tools: tools}, []string{"Hello wor", "ld <tool", "_c", "x"}, []string{"Hello wor", "ld", "", " <tool_cx"}},
		{"Qwen-Qwen2.5-7B-Instruct", Options{}, []string{"Hello <tool", "_call>"}, []string{"Hello <tool", "_call>"}},
		{"Qwen-Qwen2.5-7B-Instruct", Options{ParseReasoning: true}, []string{"<thi", "s is it"}, []string{"", "<this is it"}},
		{"Qwen-Qwen2.5-7B-Instruct", Options{Tools: tools}, []string{"a\n\n", "b"}, []string{"a", "\n\nb"}},
		{"mistralai-Mistral-Nemo-Instruct-2407", Options{Tools: tools}, []string{"x [TOOL", "S]"}, []string{"x", " [TOOLS]"}},
		{"meta-llama-Llama-3.1-8B-Instruct", Options{Tools: tools}, []string{"{\"name\": \"sea", "rch_all\""}, []string{"", "{\"name\": \"search_all\""}},
		{"meta-llama-Llama-3.1-8B-Instruct", Options{Tools: tools}, []string{"{\"name\": \"x"}, []string{"{\"name\": \"x"}},
		{"meta-llama-Llama-3.1-8B-Instruct", Options{Tools: tools}, []string{"Sure {"}, []string{"Sure {"}},
		{"meetkai-functionary-medium-v3.2", Options{Tools: tools}, []string{"al", "l\nHi>>", ">x"}, []string{"", "Hi", ">>>x"}},
	}
	for _, tc := range cases {
		p := parseShared(t, tc.stem).NewParser(tc.opts)
		for i, s := range tc.pushes {
			var got strings.Builder
			for _, ev := range p.Push(s) {
				if ev.Kind == Content {
					got.WriteString(ev.Text)
				}
			}
			if got.String() != tc.want[i] {
				t.Errorf("%s %q: push %d (%q) emitted %q, want %q", tc.stem, tc.pushes, i, s, got.String(), tc.want[i])
			}
		}
	}
}

// TestStreamedArguments checks that arguments are streamed as they come,
// before the call is complete.
func TestStreamedArguments(t *testing.T) {
	p := parseShared(t, "Qwen-Qwen2.5-7B-Instruct").NewParser(Options{Tools: namedTools("get_weather"), NewID: func() string { return "id" }})
	var kinds []string
	for _, s := range []string{"<tool_call>\n{\"name\": \"get_", "weather\", ", "\"arguments\": {\"loc", "ation\": \"Par", "is\"}}\n</tool_call>"} {
		var line []string
		for _, ev := range p.Push(s) {
			line = append(line, fmt.Sprintf("%s:%s%s", ev.Kind, ev.Name, ev.Text))
		}
		kinds = append(kinds, strings.Join(line, " "))
	}
	want := []string{"", "", `tool_call_begin:get_weather tool_call_args:{"loc`, `tool_call_args:ation": "Par`, `tool_call_args:is"} tool_call_end:`}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("got  %q\nwant %q", kinds, want)
	}
	if evs, err := p.Finish(); len(evs) != 0 || err != nil {
		t.Fatalf("Finish: %v %v", evs, err)
	}
	if evs := p.Push("more"); len(evs) != 0 {
		t.Fatalf("Push after Finish: %v", evs)
	}
}

func TestRandomIDs(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range []struct {
		stem string
		re   func(string) bool
	}{
		{"Qwen-Qwen2.5-7B-Instruct", func(id string) bool { return len(id) == 29 && strings.HasPrefix(id, "call_") }},
		{"mistralai-Mistral-Nemo-Instruct-2407", func(id string) bool {
			return len(id) == 9 && !strings.ContainsFunc(id, func(r rune) bool { return !strings.ContainsRune(idChars, r) })
		}},
	} {
		tmpl := parseShared(t, tc.stem)
		prefix, suffix, err := tmpl.ForcedCall(Tool{Name: "f"})
		if err != nil {
			t.Fatal(err)
		}
		for range 20 {
			m, err := tmpl.ParseMessage(prefix+"{}"+suffix+prefix+"{}"+suffix, Options{Tools: namedTools("f")})
			if err != nil || len(m.ToolCalls) == 0 {
				t.Fatalf("%s: %v %+v", tc.stem, err, m)
			}
			for _, c := range m.ToolCalls {
				if !tc.re(c.ID) || seen[c.ID] {
					t.Fatalf("%s: bad or repeated id %q", tc.stem, c.ID)
				}
				seen[c.ID] = true
			}
		}
	}
}

// TestParseAllocs checks that streaming plain content allocates nothing per
// token.
func TestParseAllocs(t *testing.T) {
	p := parseShared(t, "Qwen-Qwen2.5-7B-Instruct").NewParser(Options{Tools: namedTools("search"), ParseReasoning: true})
	p.Push("Warm up. ")
	toks := []string{"The", " quick", " brown", " fox", " jumps", "."}
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		p.Push(toks[i%len(toks)])
		i++
	}); a != 0 {
		t.Fatalf("%v allocations per token", a)
	}
	r := parseShared(t, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B").NewParser(Options{ParseReasoning: true, ReasoningOpen: true, Tools: namedTools("search")})
	r.Push("Hmm")
	if a := testing.AllocsPerRun(1000, func() { r.Push(" wait") }); a != 0 {
		t.Fatalf("%v allocations per reasoning token", a)
	}
}

// TestParseRandomFragments complements FuzzStreamParser: outputs assembled
// from the families' own tags and JSON pieces, which a byte-level fuzzer
// seldom builds, checked like the fuzzer checks them.
func TestParseRandomFragments(t *testing.T) {
	frags := []string{"<tool_call>", "</tool_call>", "{", "}", "[", "]", `"name"`, `"arguments"`, ":", ",", " ", "\n",
		`"get_weather"`, `"search"`, `"`, `\`, "x", "1", "<think>", "</think>", "[TOOL_CALLS]", "<function=", "get_weather",
		">", "</function>", ">>>", "all\n", "search\n", "functools[", dsCallsBegin, dsCallBegin, dsCallEnd, dsCallsEnd, dsSep,
		"function", "```json", "```", "<|START_ACTION|>", "<|END_ACTION|>", `"tool_name"`, `"parameters"`, "Action:",
		"<|python_tag|>", "brave_search.call(", `query="x")`, "python", `"id"`, `"type"`, "<|START_THINKING|>",
		"<|END_THINKING|>", "<|START_RESPONSE|>", `"{`, `}"`, "é"}
	tmpls := make([]testTemplate, len(fuzzStems))
	for i, s := range fuzzStems {
		tmpls[i] = parseShared(t, s)
	}
	tools := namedTools("get_weather", "search", "brave_search", "python")
	r := rand.New(rand.NewPCG(1, 2))
	iters := 20000
	if testing.Short() {
		iters = 2000
	}
	calls := 0
	for range iters {
		var b strings.Builder
		for range r.IntN(6) {
			b.WriteString(frags[r.IntN(len(frags))])
		}
		tmpl := tmpls[r.IntN(len(tmpls))]
		if r.IntN(2) == 0 { // well-formed calls, maybe mutated below
			for range 1 + r.IntN(2) {
				prefix, suffix, _ := tmpl.ForcedCall(tools[r.IntN(len(tools))])
				b.WriteString(prefix + []string{`{}`, `{"a": [1, "x"]}`, "{\n \"b\": null}"}[r.IntN(3)] + suffix)
			}
		}
		for range r.IntN(6) {
			b.WriteString(frags[r.IntN(len(frags))])
		}
		s := b.String()
		if r.IntN(3) == 0 && s != "" {
			i := r.IntN(len(s))
			j := min(len(s), i+r.IntN(4))
			s = s[:i] + frags[r.IntN(len(frags))] + s[j:]
		}
		flags := r.IntN(8)
		o := Options{ParseReasoning: flags&1 != 0, ReasoningOpen: flags&2 != 0}
		if flags&4 == 0 {
			o.Tools = tools
		}
		var chunks []string
		for x := s; x != ""; {
			n := min(len(x), 1+r.IntN(8))
			chunks, x = append(chunks, x[:n]), x[n:]
		}
		var trace []traceItem
		one, _ := runParser(tmpl, o, []string{s}, &trace)
		checkWellFormed(t, one)
		checkTrace(t, formatFor(tmpl.Family()), s, trace, one)
		trace = trace[:0]
		many, _ := runParser(tmpl, o, chunks, &trace)
		checkTrace(t, formatFor(tmpl.Family()), s, trace, many)
		if a, b := normalize(one), normalize(many); !reflect.DeepEqual(a, b) {
			t.Fatalf("%s %+v: chunks %q:\n got %+v\nwant %+v", tmpl.Family(), o, chunks, b, a)
		}
		for _, ev := range one {
			if ev.Kind == ToolCallEnd && !ev.Broken {
				calls++
			}
		}
	}
	if calls < iters/10 {
		t.Fatalf("only %d complete calls in %d outputs: the generator does not exercise the call syntax", calls, iters)
	}
}

// BenchmarkStreamParser streams a reasoning + content + tool-call
// generation token by token.
func BenchmarkStreamParser(b *testing.B) {
	tmpl := parseShared(b, "Qwen-Qwen2.5-7B-Instruct")
	out := "<think>\n" + strings.Repeat("Let me think about the weather in Paris. ", 20) + "\n</think>\n\n" +
		strings.Repeat("Paris is a lovely city. ", 20) +
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, France\", \"unit\": \"celsius\", \"days\": 3}}\n</tool_call>"
	var toks []string // words with their leading space, as BPE tokens are
	for s := out; s != ""; {
		n := strings.IndexByte(s[1:], ' ') + 1
		if n == 0 {
			n = len(s)
		}
		toks, s = append(toks, s[:n]), s[n:]
	}
	o := Options{Tools: namedTools("search", "get_weather"), ParseReasoning: true, NewID: func() string { return "id" }}
	b.ReportAllocs()
	for b.Loop() {
		p := tmpl.NewParser(o)
		for _, tok := range toks {
			p.Push(tok)
		}
		if _, err := p.Finish(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(toks)), "ns/token")
}

// TestForcedAfterReasoning documents how a forced call meets an open
// reasoning block: the call counts only after the close tag.
func TestForcedAfterReasoning(t *testing.T) {
	tmpl := parseShared(t, "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B")
	tool := Tool{Name: "search"}
	prefix, suffix, err := tmpl.ForcedCall(tool)
	if err != nil {
		t.Fatal(err)
	}
	_, closeTag, _ := tmpl.ReasoningTags()
	o := Options{Tools: []Tool{tool}, ReasoningOpen: true, ParseReasoning: true, Forced: true}
	m, err := tmpl.ParseMessage("ok"+closeTag+prefix+`{"q": 1}`+suffix, o)
	if err != nil || len(m.ToolCalls) != 1 || m.ReasoningContent != "ok" || m.ToolCalls[0].Arguments != `{"q": 1}` {
		t.Fatalf("closed reasoning: %+v %v", m, err)
	}
	if _, err := tmpl.ParseMessage(prefix+`{"q": 1}`+suffix, o); !errors.Is(err, ErrNoToolCall) {
		t.Fatalf("call inside reasoning: err %v, want ErrNoToolCall", err)
	}
	var b MessageBuilder
	p := tmpl.NewParser(Options{Tools: []Tool{tool}})
	b.Add(p.Push(prefix + `{"q": `)...)
	evs, err := p.Finish()
	b.Add(evs...)
	if err != nil || !b.Broken(0) || b.Broken(1) || b.Message().ToolCalls[0].Arguments != `{"q": ` {
		t.Fatalf("truncated call: %+v %v", b.Message(), err)
	}
}
