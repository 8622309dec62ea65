package synth

import (
	"bytes"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

func parseWriter(t *testing.T, w *gguf.Writer) *gguf.File {
	t.Helper()
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f
}

var roundTripTexts = []string{
	"Hello world",
	"The quick brown fox jumps over the lazy dog.",
	"  leading spaces, tabs\tand\nnewlines\n\n",
	"numbers 1 12 123 1234 3.14159",
	"unicode: héllo wörld — 日本語 🦙",
	"<|im_start|>user\nhi<|im_end|>",
}

// checkTokenizerRoundTrip loads f's vocabulary with internal/tokenizer and
// checks that every text decodes to itself after encoding.
func checkTokenizerRoundTrip(t *testing.T, f *gguf.File) {
	t.Helper()
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range roundTripTexts {
		ids := tok.Encode(text, false, false)
		if len(ids) == 0 {
			t.Errorf("%q encodes to nothing", text)
			continue
		}
		if got := tok.Decode(ids); got != text {
			t.Errorf("%q → %v → %q", text, ids, got)
		}
	}
}
