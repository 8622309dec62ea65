package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/kvserve/kvserve/internal/testshared"
)

// fuzzVocabNames are the real vocabularies FuzzEncode runs against: both
// tokenizer models, the hand-written and the regex pre-tokenizers, and
// user-defined tokens with strip flags.
var fuzzVocabNames = []string{"llama-spm", "gpt-2", "starcoder", "deepseek-llm", "deepseek-coder", "phi-3", "falcon"}

var fuzzVocabs struct {
	once sync.Once
	toks []*Tokenizer
	sets []cachedSet // the same vocabularies without caches, with default and with tiny ones
	err  error
}

func loadFuzzVocabs(t testing.TB) []*Tokenizer {
	fuzzVocabs.once.Do(func() {
		for _, name := range fuzzVocabNames {
			path := testshared.Path(t, "testdata", "vocab", "ggml-vocab-"+name+".gguf")
			set := loadCachedSet(t, name, func(o Options) *Tokenizer { return loadTokenizerOptions(t, path, o) })
			fuzzVocabs.sets = append(fuzzVocabs.sets, set)
			fuzzVocabs.toks = append(fuzzVocabs.toks, set.cached)
		}
	})
	if len(fuzzVocabs.toks) != len(fuzzVocabNames) {
		t.Fatal("vocabularies failed to load")
	}
	return fuzzVocabs.toks
}

// checkEncode checks what must hold for any text: ids in range, the
// stream decoder agrees with Decode, and where llama.cpp's detokenizer
// inverts its tokenizer, it round-trips.
func checkEncode(t *testing.T, tok *Tokenizer, text string, addSpecial, parseSpecial bool) {
	t.Helper()
	ids := tok.Encode(text, addSpecial, parseSpecial)
	for _, id := range ids {
		if !tok.valid(id) {
			t.Fatalf("%s: id %d out of range", tok.Pre(), id)
		}
	}
	checkStream(t, tok, ids, parseSpecial)
	// What callers refuse too long a text by, unencoded.
	if least := len(text) / tok.MaxBytesPerToken(); len(ids) < least {
		t.Fatalf("%s: %d bytes encoded to %d tokens, fewer than the bound %d (at most %d bytes a token)", tok.Pre(), len(text), len(ids), least, tok.MaxBytesPerToken())
	}
	if addSpecial || parseSpecial || slices.ContainsFunc(ids, func(id int32) bool {
		return tok.attrs[id]&(attrControl|attrUnknown|attrUserDefined) != 0
	}) {
		return
	}
	if !utf8.ValidString(text) || (tok.cleanSpaces && string(cleanSpaces([]byte(text))) != text) {
		// BPE reads invalid UTF-8 as U+FFFD, SPM cuts characters by their
		// lead byte (which can swallow part of an escaped space);
		// clean-up rewrites some spacing.
		return
	}
	if tok.Kind() == KindBPE && strings.ContainsFunc(text, func(r rune) bool {
		var b [4]byte
		for _, c := range b[:utf8.EncodeRune(b[:], r)] {
			if !tok.valid(tok.byteSid[c]) {
				return true
			}
		}
		return false
	}) {
		return // the vocabulary lacks a byte's token: llama.cpp drops that byte
	}
	if tok.Kind() == KindSPM && strings.Contains(text, "\u2581") {
		return // SPM cannot tell a literal ▁ from an escaped space
	}
	got := string(tok.AppendDecodeRaw(nil, ids, DecodeOptions{Detokenize: true}))
	if got != text {
		t.Fatalf("%s %s: %q → %v → %q", tok.Kind(), tok.Pre(), text, ids, got)
	}
}

func encodeSeeds(t testing.TB) []string {
	seeds := []string{"<s>x</s>", "<|endoftext|>a", "<|end|>\n b", "õ ø", ">>TITLE<< x", "\xe2\x96", "a\u2581b"}
	files, _ := filepath.Glob(testshared.Path(t, "testdata", "vocab", "*.inp"))
	raw, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return append(seeds, strings.Split(string(raw), "\n__ggml_vocab_test__\n")...)
}

func TestEncodeProperties(t *testing.T) {
	toks := loadFuzzVocabs(t)
	for _, s := range encodeSeeds(t) {
		for _, tok := range toks {
			for _, flags := range [][2]bool{{false, false}, {true, false}, {true, true}} {
				checkEncode(t, tok, s, flags[0], flags[1])
			}
		}
	}
}

func FuzzEncode(f *testing.F) {
	for _, s := range encodeSeeds(f) {
		f.Add(s, uint8(0), false, false)
	}
	f.Fuzz(func(t *testing.T, text string, which uint8, addSpecial, parseSpecial bool) {
		toks := loadFuzzVocabs(t)
		i := int(which) % len(toks)
		checkEncode(t, toks[i], text, addSpecial, parseSpecial)
		// The caches never change a token: cold and warm, word cache and
		// fragment cache, roomy and tiny (always evicting).
		checkCached(t, fuzzVocabs.sets[i], text)
	})
}

// TestConcurrentEncode shares one Tokenizer between goroutines.
func TestConcurrentEncode(t *testing.T) {
	tok := loadTokenizer(t, testshared.Path(t, "testdata", "vocab", "ggml-vocab-deepseek-coder.gguf"))
	inputs := encodeSeeds(t)
	want := make([][]int32, len(inputs))
	for i, s := range inputs {
		want[i] = tok.Encode(s, true, true)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 20 {
				i := (g*7 + k) % len(inputs)
				if got := tok.Encode(inputs[i], true, true); !slices.Equal(got, want[i]) {
					t.Errorf("goroutine %d: input %d differs", g, i)
				}
			}
		})
	}
	wg.Wait()
}
