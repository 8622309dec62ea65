package chat

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
)

// The expected strings below are Python 3.11's json.dumps output for the
// same values and arguments (pasted from python3; HF's tojson is json.dumps
// with ensure_ascii=False unless the template says otherwise).
func TestTojsonMatchesPython(t *testing.T) {
	obj := func(src string) jinja.Value {
		v, err := parseJSON([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	kw := func(kv ...any) map[string]jinja.Value {
		m := map[string]jinja.Value{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = jinja.FromGoValue(kv[i+1])
		}
		return m
	}
	nested := `{"b":[1,2,{}],"a":{"x":[],"y":null,"z":true}}`
	cases := []struct {
		name   string
		v      jinja.Value
		kwargs map[string]jinja.Value
		want   string
	}{
		{"float 1.0", jinja.NewFloat(1), nil, "1.0"},
		{"float 0.1", jinja.NewFloat(0.1), nil, "0.1"},
		{"float 1e16", jinja.NewFloat(1e16), nil, "1e+16"},
		{"float 1e-05", jinja.NewFloat(1e-5), nil, "1e-05"},
		{"float 0.0001", jinja.NewFloat(0.0001), nil, "0.0001"},
		{"float 2.5e-07", jinja.NewFloat(2.5e-7), nil, "2.5e-07"},
		{"float 123456789.123", jinja.NewFloat(123456789.123), nil, "123456789.123"},
		{"float 1234567890123456.0", jinja.NewFloat(1234567890123456), nil, "1234567890123456.0"},
		{"float 100.0", jinja.NewFloat(100), nil, "100.0"},
		{"float -0.0", jinja.NewFloat(math.Copysign(0, -1)), nil, "-0.0"},
		{"float 1e300", jinja.NewFloat(1e300), nil, "1e+300"},
		{"NaN", jinja.NewFloat(math.NaN()), nil, "NaN"},
		{"Infinity", jinja.NewFloat(math.Inf(1)), nil, "Infinity"},
		{"-Infinity", jinja.NewFloat(math.Inf(-1)), nil, "-Infinity"},
		{"int", jinja.NewInt(-42), nil, "-42"},
		{"null/bool", obj(`[null, true, false]`), nil, "[null, true, false]"},
		{"key order kept", obj(nested), nil, `{"b": [1, 2, {}], "a": {"x": [], "y": null, "z": true}}`},
		{"indent 2", obj(nested), kw("indent", 2), "{\n  \"b\": [\n    1,\n    2,\n    {}\n  ],\n  \"a\": {\n    \"x\": [],\n    \"y\": null,\n    \"z\": true\n  }\n}"},
		{"indent 4 sorted", obj(nested), kw("indent", 4, "sort_keys", true), "{\n    \"a\": {\n        \"x\": [],\n        \"y\": null,\n        \"z\": true\n    },\n    \"b\": [\n        1,\n        2,\n        {}\n    ]\n}"},
		{"indent string", obj(`[1,"a"]`), kw("indent", "\t"), "[\n\t1,\n\t\"a\"\n]"},
		{"separators", obj(`{"b":[1,2],"a":"x"}`), map[string]jinja.Value{"separators": jinja.NewList([]jinja.Value{jinja.NewString(","), jinja.NewString(":")})}, `{"b":[1,2],"a":"x"}`},
		{"string ensure_ascii=False", jinja.NewString("é😀\u2028<&>\"\\\n\t\x01\x7f"), nil, "\"é😀\u2028<&>\\\"\\\\\\n\\t\\u0001\x7f\""},
		{"string ensure_ascii=True", jinja.NewString("é😀\u2028<&>\"\\\n\t\x01\x7f"), kw("ensure_ascii", true), `"\u00e9\ud83d\ude00\u2028<&>\"\\\n\t\u0001\u007f"`},
		{"big int from JSON", obj(`9007199254740993`), nil, "9007199254740993"},
		{"exponent literal is a float", obj(`1e2`), nil, "100.0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tojsonFilter([]jinja.Value{tc.v}, tc.kwargs)
			if err != nil {
				t.Fatal(err)
			}
			if got.AsString() != tc.want {
				t.Fatalf("got  %q\nwant %q", got.AsString(), tc.want)
			}
		})
	}
	// Positional arguments follow transformers' signature:
	// tojson(x, ensure_ascii, indent, separators, sort_keys).
	got, err := tojsonFilter([]jinja.Value{obj(`{"é":1}`), jinja.NewBool(true), jinja.NewInt(1)}, nil)
	if err != nil || got.AsString() != "{\n \"\\u00e9\": 1\n}" {
		t.Fatalf("positional: %q, %v", got.AsString(), err)
	}
	for _, bad := range []map[string]jinja.Value{
		{"separators": jinja.NewString(",")},
		{"indent": jinja.NewBool(true)},
	} {
		if _, err := tojsonFilter([]jinja.Value{jinja.NewInt(1)}, bad); err == nil {
			t.Errorf("kwargs %v: want an error", bad)
		}
	}
	if _, err := tojsonFilter([]jinja.Value{jinja.Undefined()}, nil); err == nil {
		t.Error("undefined must not serialize (json.dumps raises too)")
	}
}

func TestParseJSONErrors(t *testing.T) {
	for _, bad := range []string{``, `{`, `{"a":}`, `[1,]`, `{"a":1} x`, `nul`, strings.Repeat("[", 300) + strings.Repeat("]", 300)} {
		if _, err := parseJSON([]byte(bad)); err == nil {
			t.Errorf("parseJSON(%.20q) succeeded", bad)
		}
	}
}

// FuzzParseJSON checks that any valid JSON survives parseJSON and the tojson
// filter with its meaning intact, and that invalid JSON is an error, not a
// panic.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5, "x", null, true]}`, `"\u00e9\ud83d\ude00"`, `-0.0`, `1e400`, `{"b":{},"a":[]}`, `[9007199254740993]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := parseJSON(data)
		if !json.Valid(data) {
			if err == nil {
				t.Fatalf("invalid JSON %q accepted", data)
			}
			return
		}
		if err != nil {
			if strings.Contains(err.Error(), "nested deeper") {
				return
			}
			t.Fatalf("valid JSON %q rejected: %v", data, err)
		}
		out, err := tojsonFilter([]jinja.Value{v}, nil)
		if err != nil {
			t.Fatalf("tojson of %q: %v", data, err)
		}
		var a, b any
		if json.Unmarshal(data, &a) != nil {
			return
		}
		if err := json.Unmarshal([]byte(out.AsString()), &b); err != nil {
			if strings.Contains(out.AsString(), "Infinity") { // 1e400 overflows: Python writes Infinity too
				return
			}
			t.Fatalf("tojson wrote invalid JSON %q for %q: %v", out.AsString(), data, err)
		}
		if !jsonEqual(a, b) {
			t.Fatalf("round trip changed %q into %q", data, out.AsString())
		}
	})
}

// jsonEqual compares decoded JSON, numbers as float64.
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if !jsonEqual(v, y[k]) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}
