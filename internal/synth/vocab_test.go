package synth

import (
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvserve/kvserve/internal/gguf"
)

// TestPlaceholderVocabMatchesShared compares the generated SPM placeholder
// vocabulary with the one in the shared tiny model, array by array.
func TestPlaceholderVocabMatchesShared(t *testing.T) {
	ref := openShared(t, "tiny-f32.gguf")
	s := mustShape(t, "tiny", "")
	v, err := BuildVocabulary(&s)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := ref.Strings("tokenizer.ggml.tokens")
	scores, _ := ref.Float32s("tokenizer.ggml.scores")
	types, _ := ref.Ints("tokenizer.ggml.token_type")
	if !reflect.DeepEqual(v.Tokens, tokens) {
		t.Error("tokens differ from tiny-f32.gguf")
	}
	if !reflect.DeepEqual(v.Scores, scores) {
		t.Error("scores differ from tiny-f32.gguf")
	}
	got := make([]int64, len(v.Types))
	for i, x := range v.Types {
		got[i] = int64(x)
	}
	if !reflect.DeepEqual(got, types) {
		t.Error("token types differ from tiny-f32.gguf")
	}
}

// TestByteLevelVocab checks every BPE shape's vocabulary: size, special
// tokens at their ids and types, the 256 byte tokens, unique texts, merges
// that build their tokens, padding rows, and that every merged token is
// reachable (BPE of its text gives exactly that token).
func TestByteLevelVocab(t *testing.T) {
	tests := []struct {
		shape      string
		firstByte  int // id of the first byte token
		nSpecial   int
		nPad       int
		userDef    int
		checkIDs   map[int]string
		checkTypes map[int]TokenType
	}{
		{"smollm2-135m", 17, 17, 0, 0, map[int]string{0: "<|endoftext|>", 1: "<|im_start|>", 2: "<|im_end|>", 16: "<empty_output>", 17: "!"},
			map[int]TokenType{2: TokenControl, 17: TokenNormal}},
		{"llama-3.2-1b", 0, 256, 0, 0, map[int]string{0: "!", 128000: "<|begin_of_text|>", 128001: "<|end_of_text|>",
			128002: "<|reserved_special_token_0|>", 128006: "<|start_header_id|>", 128009: "<|eot_id|>", 128011: "<|reserved_special_token_3|>",
			128255: "<|reserved_special_token_247|>"}, map[int]TokenType{128009: TokenControl, 127999: TokenNormal}},
		{"qwen2.5-0.5b", 0, 22, 151936 - 151665, 2, map[int]string{151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>",
			151657: "<tool_call>", 151664: "<|file_sep|>", 151665: "[PAD151665]", 151935: "[PAD151935]"},
			map[int]TokenType{151657: TokenUserDefined, 151659: TokenControl, 151665: TokenUnused}},
		{"qwen3-0.6b", 0, 26, 151936 - 151669, 6, map[int]string{151667: "<think>", 151668: "</think>", 151669: "[PAD151669]"},
			map[int]TokenType{151667: TokenUserDefined, 151668: TokenUserDefined, 151644: TokenControl}},
	}
	for _, tc := range tests {
		t.Run(tc.shape, func(t *testing.T) {
			s := mustShape(t, tc.shape, "")
			v, err := BuildVocabulary(&s)
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Tokens) != s.Vocab || len(v.Types) != s.Vocab || v.Scores != nil {
				t.Fatalf("%d tokens, %d types, scores %v", len(v.Tokens), len(v.Types), v.Scores != nil)
			}
			for id, want := range tc.checkIDs {
				if v.Tokens[id] != want {
					t.Errorf("token %d = %q, want %q", id, v.Tokens[id], want)
				}
			}
			for id, want := range tc.checkTypes {
				if v.Types[id] != want {
					t.Errorf("token %d type %d, want %d", id, v.Types[id], want)
				}
			}
			count := map[TokenType]int{}
			for _, ty := range v.Types {
				count[ty]++
			}
			if count[TokenControl]+count[TokenUserDefined] != tc.nSpecial || count[TokenUserDefined] != tc.userDef || count[TokenUnused] != tc.nPad {
				t.Errorf("type counts %v", count)
			}
			nRegular := count[TokenNormal]
			if len(v.Merges) != nRegular-256 {
				t.Errorf("%d merges for %d regular tokens", len(v.Merges), nRegular)
			}
			// The byte tokens, in GPT-2 order, and every byte covered.
			seen := map[rune]bool{}
			for i := 0; i < 256; i++ {
				tok := v.Tokens[tc.firstByte+i]
				r, n := utf8.DecodeRuneInString(tok)
				if n != len(tok) || seen[r] {
					t.Fatalf("byte token %d is %q", i, tok)
				}
				seen[r] = true
			}
			for b := 0; b < 256; b++ {
				if !seen[ByteToRune(byte(b))] {
					t.Errorf("no token for byte %#x", b)
				}
			}
			if v.Tokens[tc.firstByte] != "!" || ByteToRune(' ') != 'Ġ' || ByteToRune('\n') != 'Ċ' {
				t.Error("not GPT-2's byte→unicode mapping")
			}
			// Merges build the regular tokens in order, and each token is
			// reachable with the merges of lower rank.
			ranks := make(map[[2]string]int, len(v.Merges))
			byText := make(map[string]int, len(v.Tokens))
			for id, tok := range v.Tokens {
				if _, dup := byText[tok]; dup {
					t.Fatalf("duplicate token %q", tok)
				}
				byText[tok] = id
			}
			regular := regularIDs(v)
			var syms []string
			for i, m := range v.Merges {
				a, b, ok := strings.Cut(m, " ")
				if !ok || strings.Contains(b, " ") {
					t.Fatalf("merge %d %q is not two tokens", i, m)
				}
				tok := v.Tokens[regular[256+i]]
				if a+b != tok {
					t.Fatalf("merge %d %q does not build token %q", i, m, tok)
				}
				if _, ok := byText[a]; !ok {
					t.Fatalf("merge %d: %q is not a token", i, a)
				}
				if _, ok := byText[b]; !ok {
					t.Fatalf("merge %d: %q is not a token", i, b)
				}
				ranks[[2]string{a, b}] = i
				if syms = bpeSplit(syms[:0], tok, ranks); len(syms) != 1 {
					t.Fatalf("token %q is not reachable: BPE gives %q", tok, syms)
				}
			}
			// The later merges did not change how early tokens split.
			for _, i := range []int{0, 1, len(v.Merges) / 2, len(v.Merges) - 1} {
				tok := v.Tokens[regular[256+i]]
				if syms = bpeSplit(syms[:0], tok, ranks); len(syms) != 1 {
					t.Errorf("token %q is not reachable with all merges: %q", tok, syms)
				}
			}
		})
	}
}

func regularIDs(v *Vocabulary) []int {
	var ids []int
	for id, ty := range v.Types {
		if ty == TokenNormal {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestVocabularyIsStable pins a few generated tokens and merges, so that a
// change to the generator (which would invalidate the recorded llama.cpp
// tokenizations in testdata) is noticed.
func TestVocabularyIsStable(t *testing.T) {
	s := mustShape(t, "llama-3.2-1b", "")
	v, err := BuildVocabulary(&s)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{256: "Ġe", 257: "Ġt", 258: "Ġa", 300: "23", 1000: "225", 100000: "wesi", 127999: "tndl"}
	for id, tok := range want {
		if v.Tokens[id] != tok {
			t.Errorf("token %d = %q, want %q", id, v.Tokens[id], tok)
		}
	}
	if v.Merges[0] != "Ġ e" {
		t.Errorf("merge 0 = %q", v.Merges[0])
	}
}

// TestSyntheticTokenizerLoads loads each synthetic vocabulary with the
// project's tokenizer and checks that text survives encode and decode.
func TestSyntheticTokenizerLoads(t *testing.T) {
	for _, name := range []string{"smollm2-135m", "qwen2.5-0.5b"} {
		t.Run(name, func(t *testing.T) {
			m, err := New(mustShape(t, name, ""), FileF32)
			if err != nil {
				t.Fatal(err)
			}
			w := &gguf.Writer{}
			for _, kv := range m.KVs {
				w.Set(kv.Key, kv.Value)
			}
			f := parseWriter(t, w)
			checkTokenizerRoundTrip(t, f)
		})
	}
}
