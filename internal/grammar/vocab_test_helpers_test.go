package grammar

import (
	"bytes"
	"sync"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/testshared"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// Tokenizers are loaded once per test binary (read-only after loading).
var (
	tokMu    sync.Mutex
	tokCache = map[string]*tokenizer.Tokenizer{}
	vocabs   = map[string]*Vocab{}
)

// synthTokenizer loads the tokenizer of a synthetic model shape
// (smollm2-135m: 49k BPE, qwen2.5-0.5b: 152k BPE) from its metadata alone.
func synthTokenizer(t testing.TB, shape string) *tokenizer.Tokenizer {
	t.Helper()
	tokMu.Lock()
	defer tokMu.Unlock()
	if tok, ok := tokCache[shape]; ok {
		return tok
	}
	s, err := synth.LookupShape(shape, "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := synth.New(s, synth.FileF32)
	if err != nil {
		t.Fatal(err)
	}
	w := &gguf.Writer{}
	for _, kv := range m.KVs {
		w.Set(kv.Key, kv.Value)
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	tokCache[shape] = tok
	return tok
}

// tinyTokenizer loads the placeholder SPM vocabulary of the shared tiny
// model (byte tokens only up to 0x7F).
func tinyTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tokMu.Lock()
	defer tokMu.Unlock()
	if tok, ok := tokCache["tiny"]; ok {
		return tok
	}
	f, err := gguf.Open(testshared.Path(t, "models", "tiny-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	tokCache["tiny"] = tok
	return tok
}

// testVocab returns the (shared) Vocab of a named tokenizer: "tiny",
// "smollm2-135m" or "qwen2.5-0.5b".
func testVocab(t testing.TB, name string) (*Vocab, *tokenizer.Tokenizer) {
	t.Helper()
	var tok *tokenizer.Tokenizer
	if name == "tiny" {
		tok = tinyTokenizer(t)
	} else {
		tok = synthTokenizer(t, name)
	}
	tokMu.Lock()
	defer tokMu.Unlock()
	v, ok := vocabs[name]
	if !ok {
		v = NewVocab(tok)
		vocabs[name] = v
	}
	return v, tok
}
