package outparse

import (
	"encoding/json"
	"testing"
)

func TestPyLiteral(t *testing.T) {
	cases := []struct {
		in, want string
		st       pyStatus
	}{
		{`{'arguments': {'symbol': 'TSLA'}, 'name': 'f'}`, `{"symbol": "TSLA"}|"f"`, pyOK},
		{`{"a": [1, -2.5, 1e3, True, False, None, (1, 2), 'it\'s', "q\"", '\u00e9\x41\n'],}`, `[1, -2.5, 1e3, true, false, null, [1, 2], "it's", "q\"", "éA\n"]`, pyOK},
		{`{'a': .5, 'b': 1., 'c': +3}`, `0.5|1.0|3`, pyOK},
		{`{'a': {'b': {}}}`, `{"b": {}}`, pyOK},
		{`{'a': 'x`, ``, pyMore},
		{`{'a': Tr`, ``, pyMore},
		{`{'a': 12`, ``, pyMore},
		{`{'a'`, ``, pyMore},
		{`{'a': x}`, ``, pyBad},
		{`{'a': 'x' 'y'}`, ``, pyBad},
		{`{1: 2}`, ``, pyBad},
		{`{'a': 0x10}`, ``, pyBad},
		{"{'a': 'line\nbreak'}", ``, pyBad},
		{`['a']`, ``, pyBad},
	}
	for _, tc := range cases {
		r := pyReader{s: tc.in}
		fields, st := r.dict()
		if st != tc.st {
			t.Errorf("%q: status %d, want %d", tc.in, st, tc.st)
			continue
		}
		if st != pyOK {
			continue
		}
		got := ""
		for i, f := range fields {
			if i > 0 {
				got += "|"
			}
			got += f.json
			if !json.Valid([]byte(f.json)) {
				t.Errorf("%q: field %q is not JSON: %s", tc.in, f.key, f.json)
			}
		}
		if got != tc.want {
			t.Errorf("%q: got %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestPyCallArgs(t *testing.T) {
	cases := []struct{ in, want string }{
		{`query="x")`, `{"query": "x"}`},
		{` query = 'a"b' , n=3, ok=None )  `, `{"query": "a\"b", "n": 3, "ok": null}`},
		{`)`, `{}`},
		{`x=(1))`, `{"x": [1]}`},
		{`x=[1, 2],)`, `{"x": [1, 2]}`},
	}
	for _, tc := range cases {
		if got, ok := pyCallArgs(tc.in); !ok || got != tc.want {
			t.Errorf("pyCallArgs(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	for _, bad := range []string{`x=(1)`, `query="x"`, `query="x") extra`, `=1)`, `x 1)`, `x=1 y=2)`, `x=)`, `x="a)`} {
		if got, ok := pyCallArgs(bad); ok {
			t.Errorf("pyCallArgs(%q) = %q, want failure", bad, got)
		}
	}
}

// FuzzPyLiteral checks that the Python-literal reader never panics and
// writes valid JSON whenever it accepts its input.
func FuzzPyLiteral(f *testing.F) {
	for _, s := range []string{`{'arguments': {'symbol': 'TSLA'}, 'name': 'f'}`, `{"a": (1, [True, None], '\x41')}`, `query="x", n=3)`, `x=(1))`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r := pyReader{s: s}
		if fields, st := r.dict(); st == pyOK {
			for _, fl := range fields {
				if !json.Valid([]byte(fl.json)) {
					t.Fatalf("%q: field %q is not JSON: %s", s, fl.key, fl.json)
				}
			}
		}
		if js, ok := pyCallArgs(s); ok && !json.Valid([]byte(js)) {
			t.Fatalf("pyCallArgs(%q) = %s, not JSON", s, js)
		}
	})
}
