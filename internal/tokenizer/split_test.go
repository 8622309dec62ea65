package tokenizer

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvserve/kvserve/internal/testshared"
)

// splitWords runs splitters over text and returns the words.
func splitWords(text string, sps ...splitter) []string {
	var st splitText
	st.reset(text, cpClassTable())
	segs := []int{len(st.cps)}
	for _, s := range sps {
		segs = s.split(&st, segs, nil)
	}
	var words []string
	pos := 0
	for _, n := range segs {
		var b []byte
		for _, cp := range st.cps[pos : pos+n] {
			b = appendCodePoint(b, cp)
		}
		words = append(words, string(b))
		pos += n
	}
	return words
}

func mustSplitter(t testing.TB, expr string) splitter {
	t.Helper()
	s, err := newSplitter(expr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustRegexSplitter(t testing.TB, expr string) splitter {
	t.Helper()
	s, err := newRegexSplitter(expr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSplitters(t *testing.T) {
	for _, c := range []struct {
		name  string
		exprs []string
		text  string
		want  []string
	}{
		{"gpt2", []string{exprGPT2}, "Hello world's  end 123!!", []string{"Hello", " world", "'s", " ", " end", " 123", "!!"}},
		{"gpt2 trailing space", []string{exprGPT2}, "a  ", []string{"a", "  "}},
		{"llama3 digits", []string{exprLlama3}, "x 1234567", []string{"x", " ", "123", "456", "7"}},
		{"llama3 case-insensitive contraction", []string{exprLlama3}, "WE'VE", []string{"WE", "'VE"}},
		{"llama3 newlines", []string{exprLlama3}, "a \n\n b", []string{"a", " \n\n", " b"}},
		{"llama3 punct", []string{exprLlama3}, "(x)...\n", []string{"(x", ")...\n"}},
		{"qwen2 digits", []string{exprQwen2}, "12a", []string{"1", "2", "a"}},
		{"starcoder", []string{exprDigit, exprGPT2}, "ab 12", []string{"ab", " ", "1", "2"}},
		{"default", preDefault.exprs, "a, 12345", []string{"a", ",", " ", "123", "45"}},
		{"deepseek-coder", preConfigs["deepseek-coder"].exprs, "int x=1;\n", []string{"int", " x", "=", "1", ";", "\n"}},
		{"regex $", []string{`\s+$`}, "a \n", []string{"a", " \n"}},
		{"deepseek-v3", preConfigs["deepseek-v3"].exprs, "Hello, World 12345", []string{"Hello", ",", " World", " ", "123", "45"}},
		{"tekken camel case", preConfigs["tekken"].exprs, "HelloWorld ABCdef", []string{"Hello", "World", " ABCdef"}},
		{"poro", preConfigs["poro-chat"].exprs, "Hello, world…", []string{"Hello", ",", " world", "…"}},
		{"llama.cpp's \\p{S} lacks ~", []string{`\p{S}+`}, "a~+b", []string{"a~", "+", "b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sps []splitter
			for _, e := range c.exprs {
				sps = append(sps, mustSplitter(t, e))
			}
			if got := splitWords(c.text, sps...); !slices.Equal(got, c.want) {
				t.Errorf("split(%q) = %q, want %q", c.text, got, c.want)
			}
		})
	}
}

// The hand-written splitters must agree with the regex engine running the
// expression they replace, the way llama.cpp's std::regex fallback would.
var fastSplitterExprs = []string{exprGPT2, exprLlama3, exprQwen2, exprDigit}

// splitterPairs holds the hand-written splitters and the regex splitters
// for the same expressions, compiled once for all tests.
var splitterPairs = sync.OnceValue(func() (pairs [][2]splitter) {
	for _, e := range fastSplitterExprs {
		fast, err := newSplitter(e)
		if err != nil {
			panic(err)
		}
		slow, err := newRegexSplitter(e)
		if err != nil {
			panic(err)
		}
		pairs = append(pairs, [2]splitter{fast, slow})
	}
	return pairs
})

func checkSplittersAgree(t *testing.T, text string) {
	t.Helper()
	for i, p := range splitterPairs() {
		e := fastSplitterExprs[i]
		fast := splitWords(text, p[0])
		slow := splitWords(text, p[1])
		if !slices.Equal(fast, slow) {
			t.Fatalf("expr %q on %q:\nhand-written %q\nregex        %q", e, text, fast, slow)
		}
	}
}

// splitterSeeds are the vocabulary test inputs plus texts that exercise
// the edges of the patterns.
func splitterSeeds(t testing.TB) []string {
	seeds := []string{
		"", " ", "'", "'s", "'S", "'Re", " '", "a'b", "x'll", "\r\n", " \r\n ", "\t\t\n x", "a  b", "a  ",
		"1234567890", "٣٤٥ ١٢", "Ⅻ 12", "½¾", "x\u00a0\u00a0y", "\u3000\u3000a", "\u0085x",
		"🦙🦙  🦙", "e\u0301", "ﬁ", "\xff\xfe bad", "a\x00b", "İstanbul'DA", "K'LL", "(x)...\n\n",
	}
	files, _ := filepath.Glob(testshared.Path(t, "testdata", "vocab", "*.inp"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, strings.Split(string(raw), "\n__ggml_vocab_test__\n")...)
		seeds = append(seeds, string(raw))
	}
	return seeds
}

// palette holds characters of every class the patterns distinguish; random
// bytes mapped onto it make texts where the alternatives meet often.
var palette = []rune{
	'a', 'Z', 's', 'S', 't', 'e', 'l', 'L', 'v', 'r', 'd', 'm', '\'', '\'', ' ', ' ', ' ', '\n', '\r', '\t', '\v',
	'0', '7', '.', ',', '!', '?', '~', '$', '+', '(', '_', '-', '\\', '/',
	'é', 'ß', 'Ω', 'ж', '中', '٣', 'Ⅻ', '½', '\u00a0', '\u3000', '\u2028', '\u0085', '\u0301', '\u200d',
	'…', '€', '🦙', '\ufeff', '\U000e0001', '\U0010fffd',
}

func paletteText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(palette[int(s[i])%len(palette)])
	}
	return b.String()
}

func TestSplittersAgreeWithRegex(t *testing.T) {
	for _, s := range splitterSeeds(t) {
		checkSplittersAgree(t, s)
	}
	// Deterministic pseudo-random palette texts.
	x := uint64(1)
	for range 3000 {
		b := make([]byte, 1+x%40)
		for i := range b {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			b[i] = byte(x)
		}
		checkSplittersAgree(t, paletteText(string(b)))
	}
}

func FuzzSplitters(f *testing.F) {
	for _, s := range splitterSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkSplittersAgree(t, s)
		checkSplittersAgree(t, paletteText(s))
	})
}
