package grammar

import (
	"testing"
)

const benchSchema = `{"type":"object","properties":{
	"name":{"type":"string"},
	"age":{"type":"integer","minimum":0,"maximum":150},
	"unit":{"enum":["celsius","fahrenheit","kelvin"]},
	"tags":{"type":"array","items":{"type":"string"}},
	"address":{"type":"object","properties":{"city":{"type":"string"},"zip":{"type":"string","pattern":"^\\d{5}$"}},"required":["city","zip"]}
},"required":["name","age","unit","tags","address"],"additionalProperties":false}`

// benchStates are typical matcher states, reached by tokenizing a prefix.
var benchStates = []struct {
	name, grammar, prefix string
}{
	{"value-start", "value", ``},
	{"in-key", "value", `{"ke`},
	{"after-colon", "value", `{"key": `},
	{"in-string", "value", `{"key": "some text`},
	{"in-number", "value", `[1, 23`},
	{"after-item", "value", `[1, 23, "x"`},
	{"schema-key", "schema", `{"`},
	{"schema-string", "schema", `{"name": "Ada Love`},
	{"schema-int-range", "schema", `{"name": "Ada", "age": 1`},
	{"schema-enum", "schema", `{"name": "Ada", "age": 36, "unit": "`},
	{"schema-array", "schema", `{"name": "Ada", "age": 36, "unit": "kelvin", "tags": ["a", `},
	{"schema-pattern", "schema", `{"name": "Ada", "age": 36, "unit": "kelvin", "tags": [], "address": {"city": "London", "zip": "12`},
}

// BenchmarkProcess measures Process (the per-token cost) in typical states
// once their masks are cached: the steady state of a server.
func BenchmarkProcess(b *testing.B) {
	for _, vocab := range []string{"smollm2-135m", "qwen2.5-0.5b"} {
		v, tok := testVocab(b, vocab)
		grammars := map[string]*Grammar{"value": JSONValue(), "schema": mustSchemaB(b, benchSchema)}
		for _, st := range benchStates {
			b.Run(vocab+"/"+st.name, func(b *testing.B) {
				m := grammars[st.grammar].NewMatcher(v)
				for _, id := range tok.Encode(st.prefix, false, false) {
					m.Accept(id)
				}
				if m.Err() != nil {
					b.Fatal(m.Err())
				}
				logits := make([]float32, v.Size())
				m.Process(logits)
				for b.Loop() {
					m.Process(logits)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N), "µs/token")
			})
		}
	}
}

// BenchmarkWalkState measures a cache miss: walking the whole trie from a
// state (once per state and vocabulary; JSON string states are shared by
// all grammars).
func BenchmarkWalkState(b *testing.B) {
	for _, vocab := range []string{"smollm2-135m", "qwen2.5-0.5b"} {
		v, tok := testVocab(b, vocab)
		for _, st := range []struct{ name, prefix string }{{"value-start", ``}, {"in-string", `{"key": "some text`}} {
			b.Run(vocab+"/"+st.name, func(b *testing.B) {
				m := JSONValue().NewMatcher(v)
				for _, id := range tok.Encode(st.prefix, false, false) {
					m.Accept(id)
				}
				q := m.cur[0].st
				for b.Loop() {
					m.w.frames = m.w.frames[:m.nframes]
					m.a.walkState(q, &m.w, m.scratch)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/walk")
			})
		}
	}
}

// BenchmarkGenerate runs Process and Accept over a whole schema document,
// as a server does per token (masks cached after the first run).
func BenchmarkGenerate(b *testing.B) {
	const doc = `{"name": "Ada Lovelace", "age": 36, "unit": "kelvin", "tags": ["math", "engines", "poetry"], "address": {"city": "London", "zip": "12345"}}`
	for _, vocab := range []string{"smollm2-135m", "qwen2.5-0.5b"} {
		v, tok := testVocab(b, vocab)
		g := mustSchemaB(b, benchSchema)
		ids := tok.Encode(doc, false, false)
		logits := make([]float32, v.Size())
		b.Run(vocab, func(b *testing.B) {
			for b.Loop() {
				m := g.NewMatcher(v)
				for _, id := range ids {
					m.Process(logits)
					m.Accept(id)
				}
				if !m.Done() {
					b.Fatal("document not accepted")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(b.N*len(ids)), "µs/token")
		})
	}
}

// BenchmarkCompileSchema measures building a grammar from a schema and its
// automaton for a vocabulary: the per-request setup of json_schema.
func BenchmarkCompileSchema(b *testing.B) {
	v, _ := testVocab(b, "qwen2.5-0.5b")
	for b.Loop() {
		g := mustSchemaB(b, benchSchema)
		g.NewMatcher(v)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e6/float64(b.N), "ms/schema")
}

// BenchmarkNewVocab measures building the trie of a 152k vocabulary.
func BenchmarkNewVocab(b *testing.B) {
	_, tok := testVocab(b, "qwen2.5-0.5b")
	for b.Loop() {
		NewVocab(tok)
	}
}

func mustSchemaB(b *testing.B, schema string) *Grammar {
	b.Helper()
	g, err := FromJSONSchema([]byte(schema))
	if err != nil {
		b.Fatal(err)
	}
	return g
}
