package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAppendJSONString(t *testing.T) {
	tests := []string{"", "plain", `q"uote\back`, "tab\tnl\ncr\r", "\x00\x01\x1f\x7f", "<a&b>", "é😀", "\u2028\u2029", "bad\xffutf8\xc3", "\xe2\x82"}
	for _, s := range tests {
		got := string(AppendJSONString(nil, s))
		if gotB := string(AppendJSONString(nil, []byte(s))); gotB != got {
			t.Fatalf("string and bytes encodings differ for %q: %s vs %s", s, got, gotB)
		}
		var back, want string
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, got, err)
		}
		ref, _ := json.Marshal(s)
		_ = json.Unmarshal(ref, &want)
		if back != want {
			t.Fatalf("%q round-trips to %q, encoding/json gives %q", s, back, want)
		}
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\xff", "\u2028", "x\ny"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := AppendJSONString(nil, s)
		var back, want string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, out, err)
		}
		ref, _ := json.Marshal(s)
		_ = json.Unmarshal(ref, &want)
		if back != want {
			t.Fatalf("%q round-trips to %q, want %q", s, back, want)
		}
	})
}

func TestDecodeJSONBytes(t *testing.T) {
	type body struct {
		A int    `json:"a"`
		B string `json:"b"`
	}
	tests := []struct {
		in   string
		code Code
		ok   bool
	}{
		{`{"a":1,"b":"x"}`, 0, true},
		{`{"a":1,"unknown":[1,2]}`, 0, true},
		{`  {"a":1}  `, 0, true},
		{`{"a":1}{"a":2}`, CodeInvalidRequest, false},
		{`{"a":"one"}`, CodeInvalidRequest, false},
		{`{"a":`, CodeInvalidRequest, false},
		{``, CodeInvalidRequest, false},
		{`{"b":"` + strings.Repeat("[", 200) + `"}`, 0, true}, // brackets inside strings do not nest
		{`{"c":` + strings.Repeat("[", MaxJSONDepth) + strings.Repeat("]", MaxJSONDepth) + `}`, CodeInvalidRequest, false},
	}
	for _, tc := range tests {
		var v body
		err := DecodeJSONBytes([]byte(tc.in), &v)
		if (err == nil) != tc.ok {
			t.Fatalf("%.40q: error %v, want ok %v", tc.in, err, tc.ok)
		}
		var ae *Error
		if err != nil && (!errors.As(err, &ae) || ae.Code != tc.code) {
			t.Fatalf("%.40q: error %v, want code %d", tc.in, err, tc.code)
		}
	}
}

// FuzzDecodeJSON: DecodeJSONBytes never panics, always answers with an API
// error of a client code, and accepts exactly the valid JSON objects whose
// nesting is within bounds.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":[1,{"b":null}]}`, `[`, `{"a":"\u00e9"}`, `{"a":1} x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v map[string]any
		err := DecodeJSONBytes(b, &v)
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Code != CodeInvalidRequest {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
	})
}

func TestDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{`"5m"`, 5 * time.Minute, true}, {`300`, 300 * time.Second, true}, {`"90"`, 90 * time.Second, true},
		{`1.5`, 1500 * time.Millisecond, true}, {`"-1m"`, 0, false}, {`-3`, 0, false}, {`"soon"`, 0, false}, {`true`, 0, false},
	}
	for _, tc := range tests {
		var d Duration
		err := json.Unmarshal([]byte(tc.in), &d)
		if (err == nil) != tc.ok || (tc.ok && time.Duration(d) != tc.want) {
			t.Errorf("%s: %v, %v; want %v (ok %v)", tc.in, time.Duration(d), err, tc.want, tc.ok)
		}
	}
}

func TestErrorTable(t *testing.T) {
	for c := Code(0); c < numCodes; c++ {
		k := c.Kind()
		if k.Status < 400 || k.OpenAIType == "" || k.AnthropicType == "" || k.GeminiStatus == "" {
			t.Errorf("code %d has an incomplete row %+v", c, k)
		}
	}
	if Code(200).Status() != 500 {
		t.Error("an unknown code is not a 500")
	}
}
