package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/testshared"
)

func loadTokenizer(t testing.TB, path string) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tok, err := FromGGUF(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tok
}

type vocabCase struct {
	input string
	want  []int32
}

// readVocabTests reads llama.cpp's test vectors the way test-tokenizer-0
// does: inputs separated by "\n__ggml_vocab_test__\n", one line of
// space-separated expected ids per input.
func readVocabTests(t testing.TB, inp, out string) []vocabCase {
	t.Helper()
	rawIn, err := os.ReadFile(inp)
	if err != nil {
		t.Fatal(err)
	}
	rawOut, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	const sep = "\n__ggml_vocab_test__\n"
	var inputs []string
	for s := string(rawIn); s != ""; {
		i := strings.Index(s, sep)
		if i < 0 {
			inputs = append(inputs, s)
			break
		}
		inputs = append(inputs, s[:i])
		s = s[i+len(sep):]
	}
	lines := strings.Split(string(rawOut), "\n")
	if n := len(lines); n > 0 && lines[n-1] == "" {
		lines = lines[:n-1]
	}
	if len(lines) != len(inputs) {
		t.Fatalf("%s: %d inputs but %d outputs", inp, len(inputs), len(lines))
	}
	cases := make([]vocabCase, len(inputs))
	for i, in := range inputs {
		cases[i].input = in
		cases[i].want = []int32{}
		for _, f := range strings.Fields(lines[i]) {
			v, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("%s line %d: %v", out, i+1, err)
			}
			cases[i].want = append(cases[i].want, int32(v))
		}
	}
	return cases
}

// TestVocabGolden tokenises llama.cpp's tokenizer test inputs with every
// vocabulary in shared/testdata/vocab and compares with the ids llama.cpp
// produced (add_special false, parse_special false, as test-tokenizer-0).
func TestVocabGolden(t *testing.T) {
	files, err := filepath.Glob(testshared.Path(t, "testdata", "vocab", "ggml-vocab-*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vocab files: %v", err)
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf"), func(t *testing.T) {
			tok := loadTokenizer(t, path)
			cases := readVocabTests(t, path+".inp", path+".out")
			for i, c := range cases {
				got := tok.Encode(c.input, false, false)
				if !slices.Equal(got, c.want) {
					t.Errorf("case %d %q:\n got %v\nwant %v", i, c.input, got, c.want)
				}
				// Round trip: llama.cpp's detokenize inverts tokenisation
				// except where clean_up_tokenization_spaces rewrites the
				// text (" ?" → "?"), for the vocabularies that use it.
				if tok.cleanSpaces && string(cleanSpaces([]byte(c.input))) != c.input {
					continue
				}
				if got := tok.DecodeWith(c.want, DecodeOptions{Detokenize: true}); got != c.input {
					t.Errorf("case %d %q: detokenized to %q", i, c.input, got)
				}
			}
		})
	}
}
