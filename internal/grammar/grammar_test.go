package grammar

import (
	"encoding/json"
	"strings"
	"testing"
)

// check runs every case through g with the byte vocabulary and compares
// full acceptance (every byte allowed and the grammar Done at the end).
func check(t *testing.T, g *Grammar, cases []struct {
	in string
	ok bool
}) {
	t.Helper()
	v := byteVocab()
	for _, c := range cases {
		n, done := feed(t, g, v, c.in)
		got := n == len(c.in) && done
		if got != c.ok {
			t.Errorf("%q: accepted=%v (stopped at byte %d, done=%v), want %v", c.in, got, n, done, c.ok)
		}
	}
}

type tcase = struct {
	in string
	ok bool
}

func TestJSONValue(t *testing.T) {
	cases := []tcase{
		{`null`, true}, {`true`, true}, {`false`, true},
		{`0`, true}, {`-0`, true}, {`12`, true}, {`-12.5e+10`, true}, {`1E-7`, true}, {`0.5`, true},
		{`01`, false}, {`+1`, false}, {`1.`, false}, {`.5`, false}, {`1e`, false}, {`--1`, false}, {`1e123`, false},
		{`1234567890123456`, true}, {`12345678901234567`, false}, // at most 16 integer digits
		{`""`, true}, {`"abc"`, true}, {`"a\"b\\c\/d\b\f\n\r\t"`, true}, {`"\u00e9\u20AC"`, true},
		{`"\x"`, false}, {`"\u12"`, false}, {`"\ud800"`, false}, {`"\uDC00"`, false}, // no surrogate escapes
		{"\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\xa6\x99\"", true},
		{"\"\xc3\"", false}, {"\"\xc0\xaf\"", false}, {"\"\xed\xa0\x80\"", false}, {"\"\xf4\x90\x80\x80\"", false}, {"\"\xff\"", false},
		{"\"a\nb\"", false}, {"\"\x01\"", false}, {"\"\x7f\"", true},
		{`[]`, true}, {`[1,2,3]`, true}, {`[ 1 , "x" , null ]`, true}, {`[1,]`, false}, {`[,1]`, false}, {`[1 2]`, false},
		{`{}`, true}, {`{"a":1}`, true}, {`{"a": {"b": [true, {"c": null}]}, "d": "e"}`, true},
		{`{"a"}`, false}, {`{a:1}`, false}, {`{"a":1,}`, false}, {`{"a":1 "b":2}`, false}, {`{1:2}`, false},
		{`{` + "\n  " + `"a": 1` + "\n" + `}`, true},
		{` 1`, false}, {`1 `, false}, // no whitespace around the root value
		{`[1]]`, false}, {`"a""`, false}, {`truefalse`, false}, {`nul`, false},
	}
	check(t, JSONValue(), cases)
	for _, c := range cases {
		if c.ok && !json.Valid([]byte(c.in)) {
			t.Errorf("test case %q accepted but not valid JSON", c.in)
		}
	}
}

func TestJSONObject(t *testing.T) {
	check(t, JSONObject(), []tcase{
		{`{}`, true}, {`{"a": [1, {"b": {}}]}`, true},
		{`[]`, false}, {`"x"`, false}, {`1`, false}, {`null`, false},
	})
}

func TestWhitespaceBounded(t *testing.T) {
	indent := func(n int) string { return "[\n" + strings.Repeat(" ", n) + "1]" }
	check(t, JSONValue(), []tcase{
		{indent(0), true}, {indent(20), true}, {indent(21), false},
		{"[ 1]", true}, {"[  1]", false}, {"[\t1]", false}, {"[\n\t\t1]", true}, {"[\n\n1]", false}, {"[\r\n1]", false},
		{"[1 ,2]", true}, {"[1  ,2]", false}, {"{\"a\" : 1}", true},
	})
	check(t, Options{MaxIndent: 2}.JSONValue(), []tcase{{indent(2), true}, {indent(3), false}})
	check(t, Options{MaxIndent: -1}.JSONValue(), []tcase{{"[1,2]", true}, {"[1, 2]", false}, {"{\"a\":[]}", true}, {"{\"a\": []}", false}})
}

func TestMaxDepth(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	check(t, Options{MaxDepth: 3}.JSONValue(), []tcase{
		{nest(3), true}, {nest(4), false}, {`[[{"a":1}]]`, true}, {`[[{"a":[]}]]`, false}, {`[[["deep"]]]`, true},
	})
	check(t, JSONValue(), []tcase{{nest(32), true}, {nest(33), false}})
}

func TestMaxStringLength(t *testing.T) {
	g := Options{MaxStringLength: 3}.JSONValue()
	check(t, g, []tcase{
		{`"abc"`, true}, {`"abcd"`, false}, {`"\u00e9\n\u0041"`, true}, {"\"\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\"", true},
		{`{"abc":"xyz"}`, true}, {`{"abcd":1}`, false},
	})
}

func TestCombinators(t *testing.T) {
	args, err := FromJSONSchema([]byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`))
	if err != nil {
		t.Fatal(err)
	}
	call := func(name string) *Grammar {
		return Sequence(Literal("<tool_call>\n"), Object(Field{"name", JSONString(name)}, Field{"arguments", args}), Literal("\n</tool_call>"))
	}
	g := Choice(call("get_weather"), call("get_time"))
	check(t, g, []tcase{
		{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", true},
		{"<tool_call>\n{\"name\":\"get_time\",\"arguments\":{\"city\":\"Oslo\"}}\n</tool_call>", true},
		{"<tool_call>\n{\"name\": \"get_date\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", false},
		{"<tool_call>\n{\"arguments\": {\"city\": \"Paris\"}, \"name\": \"get_time\"}\n</tool_call>", false},
		{"<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", false},
		{"{\"name\": \"get_time\", \"arguments\": {\"city\": \"x\"}}", false},
	})
	parallel := Sequence(call("f"), Repeat(Sequence(Literal("\n"), call("f")), 0, 1))
	one := "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"city\":\"a\"}}\n</tool_call>"
	check(t, parallel, []tcase{{one, true}, {one + "\n" + one, true}, {one + "\n" + one + "\n" + one, false}, {"", false}})
	check(t, Literal(""), []tcase{{"", true}, {"a", false}})
	check(t, JSONString("a\"b\n<é>"), []tcase{{`"a\"b\n<é>"`, true}, {`"a\"b\n\u003cé>"`, false}})
	check(t, Object(), []tcase{{"{}", true}, {"{ }", true}, {`{"a":1}`, false}})
	if Choice().Check() == nil {
		t.Error("an empty choice matches nothing and should not check")
	}
}

func TestString(t *testing.T) {
	g, err := FromJSONSchema([]byte(`{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":12},"s":{"enum":["a","b"]}},"required":["n"]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := g.String()
	for _, want := range []string{"root ::= object", `object ::= "{" ws "\"n\"" ws ":" ws ([1-9] | "1" [0-2])`, `("\"a\"" | "\"b\"")`, "ws ::= (\" \" | \"\\n\" [\\t ]{0,20})?"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() lacks %q:\n%s", want, s)
		}
	}
	if got := Sequence(Literal("a"), Repeat(Literal("bc"), 1, -1), Choice(Literal("x"), Literal("y"))).String(); got != `root ::= "a" "bc"+ ("x" | "y")` {
		t.Errorf("String() = %q", got)
	}
}
