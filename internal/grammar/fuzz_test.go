package grammar

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// hostileSchemas are schemas built to blow up a naive compiler: deep
// nesting, huge enums and counts, recursive and mutually recursive refs,
// exponential regular expressions. Each must give a clear error or a
// grammar, quickly.
func hostileSchemas() []string {
	deep := strings.Repeat(`{"type":"array","items":`, 200) + `{"type":"null"}` + strings.Repeat(`}`, 200)
	deepAny := strings.Repeat(`{"anyOf":[`, 100) + `{"type":"null"}` + strings.Repeat(`]}`, 100)
	var enum strings.Builder
	enum.WriteString(`{"enum":[`)
	for i := range 20000 {
		if i > 0 {
			enum.WriteByte(',')
		}
		enum.WriteString(`"value-` + strings.Repeat("x", i%17) + string(rune('a'+i%26)) + `"`)
	}
	enum.WriteString(`]}`)
	return []string{
		deep,
		strings.Repeat("[", 300) + strings.Repeat("]", 300),
		deepAny,
		enum.String(),
		`{"$defs":{"a":{"type":"array","items":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`,
		`{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/b"},{"type":"object","properties":{"x":{"$ref":"#/$defs/a"},"y":{"$ref":"#/$defs/b"}}}]},"b":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"array","items":{"$ref":"#/$defs/b"}}]}},"$ref":"#/$defs/a"}`,
		`{"type":"array","maxItems":4096,"items":{"type":"string","maxLength":4096}}`,
		`{"type":"string","pattern":"^(a|b)*a(a|b){30}$"}`,
		`{"type":"string","pattern":"((a{1000}){1000}){1000}"}`,
		`{"type":"string","pattern":"^(x+x+)+y$"}`,
		`{"type":"integer","minimum":-1e400,"maximum":1e400}`,
		`{"type":"number","minimum":1e-999999999,"multipleOf":1}`,
		`{"type":"object","properties":{` + strings.Repeat(`"p":{"type":"string"},`, 50) + `"q":true}}`,
	}
}

func TestHostileSchemas(t *testing.T) {
	v := byteVocab()
	for i, s := range hostileSchemas() {
		start := time.Now()
		g, err := FromJSONSchema([]byte(s))
		if err == nil {
			m := g.NewMatcher(v)
			logits := make([]float32, v.Size())
			m.Process(logits)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("schema %d took %v (err %v)", i, d, err)
		}
	}
}

// FuzzFromJSONSchema feeds arbitrary documents to the schema compiler:
// it must return an error or a grammar, never panic or hang, and a
// grammar's matcher must always allow something until it is complete.
func FuzzFromJSONSchema(f *testing.F) {
	for _, s := range hostileSchemas()[4:] {
		f.Add([]byte(s))
	}
	for _, s := range propertySchemas {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"type":"object","properties":{"a":{"type":"string","format":"date-time"}},"additionalProperties":{"type":"integer","minimum":3}}`))
	v := byteVocab()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 4096 {
			return
		}
		g, err := FromJSONSchema(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "grammar: ") {
				t.Fatalf("error without package prefix: %v", err)
			}
			return
		}
		_ = g.String()
		m := g.NewMatcher(v)
		if m.Err() != nil {
			t.Fatalf("checked grammar cannot start: %v", m.Err())
		}
		logits := make([]float32, v.Size())
		var out []byte
		for step := 0; step < 300 && !m.Done(); step++ {
			clear(logits)
			m.Process(logits)
			// Take a data-dependent allowed byte: the first allowed at or
			// after a position chosen from the input.
			start := 0
			if len(data) > 0 {
				start = int(data[step%len(data)])
			}
			pick := -1
			for k := range 257 {
				if id := (start + k) % 257; !math.IsInf(float64(logits[id]), -1) {
					pick = id
					break
				}
			}
			if pick < 0 {
				t.Fatalf("deadlock after %q", out)
			}
			m.Accept(int32(pick))
			if m.Err() != nil {
				t.Fatalf("allowed token rejected after %q: %v", out, m.Err())
			}
			if pick == 256 {
				break
			}
			out = append(out, byte(pick))
		}
		if m.Done() && !json.Valid(out) {
			t.Fatalf("complete output %q is not JSON", out)
		}
	})
}

// FuzzJSONValue checks that whatever the JSON grammar accepts completely
// is valid JSON.
func FuzzJSONValue(f *testing.F) {
	for _, s := range []string{`{"a": [1, 2.5e3, "x\u00e9"], "b": null}`, `[]`, `"\ud800"`, "\"\xed\xa0\x80\"", `-0.0e-00`, `{"a":{"b":{"c":[[]]}}}`, "[\n  1,\n  2\n]"} {
		f.Add([]byte(s))
	}
	g := Options{MaxDepth: 8}.JSONValue()
	v := byteVocab()
	f.Fuzz(func(t *testing.T, data []byte) {
		m := g.NewMatcher(v)
		for _, b := range data {
			m.Accept(int32(b))
			if m.Err() != nil {
				return
			}
		}
		if m.Done() && !json.Valid(data) {
			t.Fatalf("accepted %q, which is not valid JSON", data)
		}
	})
}
