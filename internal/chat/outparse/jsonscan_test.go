package outparse

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvserve/kvserve/internal/chat/pyjson"
)

// scanValue runs the scanner over data and reports whether data is one JSON
// value (with spaces around it allowed).
func scanValue(data []byte) bool {
	var s jsonScan
	s.reset()
	i := skipSpace(string(data))
	for ; i < len(data); i++ {
		switch s.step(data[i]) {
		case scanMore:
			continue
		case scanEnd:
			i++
		case scanError:
			return false
		}
		break
	}
	if s.st != scDone && !s.complete() {
		return false
	}
	return skipSpace(string(data[i:])) == len(data)-i
}

func TestJSONScan(t *testing.T) {
	cases := []struct {
		in string
		ok bool
	}{
		{`{}`, true}, {`[]`, true}, {` {"a": [1, -2.5e+3, 0, true, false, null, "x\"\\\u00e9\n"]} `, true},
		{`0`, true}, {`-0.5E-2`, true}, {`"\ud83d\ude00"`, true}, {`{"a":{"b":[{}]}}`, true},
		{`{`, false}, {`{"a"}`, false}, {`{"a":}`, false}, {`[1,]`, false}, {`{,}`, false}, {`01`, false},
		{`1.`, false}, {`.5`, false}, {`-`, false}, {`1e`, false}, {`tru`, false}, {`nul1`, false},
		{"\"a\nb\"", false}, {`"\x"`, false}, {`"\u12g4"`, false}, {`[1 2]`, false}, {`{"a":1}}`, false},
		{`{} {}`, false}, {`]`, false}, {`{"a" 1}`, false}, {`NaN`, false}, {`[1]x`, false},
	}
	for _, tc := range cases {
		if got := scanValue([]byte(tc.in)); got != tc.ok {
			t.Errorf("scan(%q) = %v, want %v", tc.in, got, tc.ok)
		}
		if want := json.Valid([]byte(tc.in)); want != tc.ok {
			t.Errorf("test case %q: json.Valid says %v", tc.in, want)
		}
	}
	// The depth limit.
	deep := strings.Repeat("[", pyjson.MaxDepth) + strings.Repeat("]", pyjson.MaxDepth)
	if !scanValue([]byte(deep)) || scanValue([]byte("["+deep+"]")) {
		t.Error("depth limit not at pyjson.MaxDepth")
	}
}

func TestStrDecoder(t *testing.T) {
	cases := []struct{ in, want string }{
		{`abc"`, "abc"},
		{`a\"b\\c\/d\b\f\n\r\t"`, "a\"b\\c/d\b\f\n\r\t"},
		{`\u00e9\u20ac\ud83d\ude00"`, "é€😀"},
		{`\ud83d"`, "\uFFFD"},
		{`\ude00x"`, "\uFFFDx"},
		{`\ud83d\u0041"`, "\uFFFDA"},
		{`\ud83d\ud83d\ude00"`, "\uFFFD😀"},
		{`été"`, "été"},
	}
	for _, tc := range cases {
		// Whole, and split at every byte.
		for cut := 0; cut <= len(tc.in); cut++ {
			var d strDecoder
			var out []byte
			rest := tc.in[:cut]
			n, out, end, bad := d.decode(rest, out)
			if bad {
				t.Fatalf("%q: bad at cut %d", tc.in, cut)
			}
			if !end {
				n2, out2, end2, bad2 := d.decode(tc.in[n:], out)
				if bad2 || !end2 || n+n2 != len(tc.in) {
					t.Fatalf("%q cut %d: n %d+%d end %v bad %v", tc.in, cut, n, n2, end2, bad2)
				}
				out = out2
			}
			if string(out) != tc.want {
				t.Fatalf("%q cut %d: got %q, want %q", tc.in, cut, out, tc.want)
			}
		}
	}
	for _, bad := range []string{"a\nb\"", `\x"`, `\u12g4"`} {
		var d strDecoder
		if _, _, _, b := d.decode(bad, nil); !b {
			t.Errorf("decode(%q) accepted", bad)
		}
	}
}

// FuzzJSONScan checks the scanner against encoding/json.
func FuzzJSONScan(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5e3, "x"]}`, `"\ud83d\ude00"`, `[1,]`, `-0`, ` null `, `{"a":{"b":{}}}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if bytes.Count(data, []byte("["))+bytes.Count(data, []byte("{")) >= pyjson.MaxDepth {
			return
		}
		if got, want := scanValue(data), json.Valid(data); got != want {
			t.Fatalf("scan(%q) = %v, json.Valid = %v", data, got, want)
		}
	})
}

// FuzzStrDecoder checks string decoding against encoding/json, whole and
// split.
func FuzzStrDecoder(f *testing.F) {
	for _, s := range []string{`"abc"`, `"\u00e9\ud83d\ude00\n"`, `"\ud800"`, `"a\"b"`, ` "ab"`, "\"ab\"\n"} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, lit string, cut uint8) {
		var want string
		if !utf8.ValidString(lit) || json.Unmarshal([]byte(lit), &want) != nil {
			return
		}
		// The decoder starts after the opening quote and is handed only the
		// literal: json.Unmarshal also takes whitespace around it.
		if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
			return
		}
		body := lit[1:]
		c := int(cut) % (len(body) + 1)
		var d strDecoder
		n, out, end, bad := d.decode(body[:c], nil)
		if !end && !bad {
			var n2 int
			n2, out, end, bad = d.decode(body[n:], out)
			n += n2
		}
		if bad || !end || n != len(body) || string(out) != want {
			t.Fatalf("decode(%q) = %q (n %d end %v bad %v), want %q", lit, out, n, end, bad, want)
		}
	})
}

// fuzzStems are one template per family with a tool-call syntax.
var fuzzStems = []string{
	"Qwen-Qwen2.5-7B-Instruct",
	"meta-llama-Llama-3.1-8B-Instruct",
	"mistralai-Mistral-Nemo-Instruct-2407",
	"meetkai-functionary-medium-v3.1",
	"meetkai-functionary-medium-v3.2",
	"fireworks-ai-llama-3-firefunction-v2",
	"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
	"CohereForAI-c4ai-command-r7b-12-2024-tool_use",
	"CohereForAI-c4ai-command-r-plus-tool_use",
}

// FuzzStreamParser pushes arbitrary output through the parser of every
// family, whole and in random chunks: it must never panic; every input byte
// must land in exactly one place (content, reasoning, arguments, or dropped
// as whitespace next to structure, a tag, or a call's syntax); the events
// must be well formed (a call not marked broken has JSON-object arguments);
// and the chunking must not change the events.
func FuzzStreamParser(f *testing.F) {
	tmpls := make([]testTemplate, len(fuzzStems))
	for i, stem := range fuzzStems {
		tmpls[i] = parseShared(f, stem)
	}
	tools := namedTools("get_weather", "search", "brave_search", "python")
	for i, s := range []string{
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>",
		"{\"name\": \"search\", \"parameters\": {\"q\": 1}}",
		"[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}, \"id\": \"abcdefghi\"}]",
		"Sure<function=get_weather>{\"location\": \"Paris\"}</function>",
		"all\nHi>>>search\n{\"q\": \"x\"}",
		" functools[{\"name\": \"search\", \"arguments\": {}}]",
		"hmm</think>\n\n" + dsCallsBegin + dsCallBegin + "function" + dsSep + "search\n```json\n{}\n```" + dsCallEnd + dsCallsEnd,
		"<|START_THINKING|>p<|END_THINKING|><|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"search\", \"parameters\": {}}]<|END_ACTION|>",
		"Action: ```json\n[{\"tool_name\": \"search\", \"parameters\": {}}]\n```",
	} {
		f.Add(s, uint8(i), uint8(3), uint64(i))
	}
	f.Fuzz(func(t *testing.T, output string, family, flags uint8, seed uint64) {
		if len(output) > 4096 {
			return
		}
		tmpl := tmpls[int(family)%len(tmpls)]
		o := Options{ParseReasoning: flags&1 != 0, ReasoningOpen: flags&2 != 0}
		if flags&4 == 0 {
			o.Tools = tools
		}
		var trace []traceItem
		evs, err := runParser(tmpl, o, []string{output}, &trace)
		if err != nil {
			t.Fatal(err)
		}
		checkWellFormed(t, evs)
		checkTrace(t, formatFor(tmpl.Family()), output, trace, evs)
		if o.Tools == nil && !o.ParseReasoning && tmpl.Family() != FamilyFunctionaryV32 && tmpl.Family() != FamilyCommandR7B {
			if len(evs) > 0 && (len(normalize(evs)) != 1 || normalize(evs)[0].Text != output) {
				t.Fatalf("without tools and reasoning, content must be the output: %+v", evs)
			}
		}
		r := rand.New(rand.NewPCG(seed, seed>>7))
		var chunks []string
		for s := output; s != ""; {
			n := min(len(s), 1+r.IntN(8))
			chunks, s = append(chunks, s[:n]), s[n:]
		}
		trace = trace[:0]
		evs2, err := runParser(tmpl, o, chunks, &trace)
		if err != nil {
			t.Fatal(err)
		}
		checkTrace(t, formatFor(tmpl.Family()), output, trace, evs2)
		if a, b := normalize(evs), normalize(evs2); !reflect.DeepEqual(a, b) {
			t.Fatalf("chunks %q:\n got %+v\nwant %+v", chunks, b, a)
		}
	})
}
