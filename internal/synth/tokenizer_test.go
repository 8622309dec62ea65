package synth

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// TestTokenizerMatchesLlamaCpp checks internal/tokenizer on the synthetic
// vocabularies against llama.cpp: testdata/tokenizer holds llama-tokenize's
// ids for every input (see its README), without special handling (.out) and
// with BOS and special-token parsing (.special.out).
func TestTokenizerMatchesLlamaCpp(t *testing.T) {
	dir := filepath.Join("testdata", "tokenizer")
	raw, err := os.ReadFile(filepath.Join(dir, "inputs.inp"))
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	inputs := strings.Split(string(raw), sep)
	inputs = inputs[:len(inputs)-1]
	for _, shape := range []string{"smollm2-135m", "llama-3.2-1b", "qwen2.5-0.5b", "qwen3-0.6b"} {
		t.Run(shape, func(t *testing.T) {
			m, err := New(mustShape(t, shape, ""), FileF32)
			if err != nil {
				t.Fatal(err)
			}
			w := &gguf.Writer{}
			for _, kv := range m.KVs {
				w.Set(kv.Key, kv.Value)
			}
			tok, err := tokenizer.FromGGUF(parseWriter(t, w))
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []struct {
				file    string
				special bool
			}{{shape + ".out", false}, {shape + ".special.out", true}} {
				want := readIDLines(t, filepath.Join(dir, mode.file))
				if len(want) != len(inputs) {
					t.Fatalf("%s has %d lines for %d inputs", mode.file, len(want), len(inputs))
				}
				bad := 0
				for i, text := range inputs {
					got := tok.Encode(text, mode.special, mode.special)
					if !slices.Equal(got, want[i]) {
						if bad++; bad <= 5 {
							t.Errorf("%s input %d %q:\n got %v\nwant %v", mode.file, i, text, got, want[i])
						}
					}
				}
				if bad > 5 {
					t.Errorf("%s: %d of %d inputs differ", mode.file, bad, len(inputs))
				}
			}
		})
	}
}

func readIDLines(t *testing.T, path string) [][]int32 {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	out := make([][]int32, len(lines))
	for i, l := range lines {
		out[i] = []int32{}
		for _, f := range strings.Fields(l) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s line %d: %v", path, i+1, err)
			}
			out[i] = append(out[i], int32(n))
		}
	}
	return out
}
