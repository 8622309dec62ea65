package tokenizer

import (
	"os"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/testshared"
)

// benchText is about 40 kB of mixed text: the vocabulary test inputs
// (English, code-like punctuation, CJK, emoji, Cyrillic, whitespace runs)
// repeated.
func benchText(b *testing.B) string {
	raw, err := os.ReadFile(testshared.Path(b, "testdata", "vocab", "ggml-vocab-gpt-2.gguf.inp"))
	if err != nil {
		b.Fatal(err)
	}
	s := strings.ReplaceAll(string(raw), "\n__ggml_vocab_test__\n", "\n")
	return strings.Repeat(s, 40000/len(s)+1)
}

// BenchmarkEncode tokenises ~40 kB with each test vocabulary, with a warm
// word cache and without caches, and reports tokens per second.
func BenchmarkEncode(b *testing.B) {
	text := benchText(b)
	for _, name := range []string{"llama-spm", "gpt-2", "starcoder", "deepseek-coder", "deepseek-llm"} {
		for _, cache := range []string{"cached", "uncached"} {
			b.Run(name+"/"+cache, func(b *testing.B) {
				opts := Options{}
				if cache == "uncached" {
					opts = noCaches
				}
				tok := loadTokenizerOptions(b, testshared.Path(b, "testdata", "vocab", "ggml-vocab-"+name+".gguf"), opts)
				benchEncode(b, tok, text)
			})
		}
	}
}

func benchEncode(b *testing.B, tok *Tokenizer, text string) {
	ids := tok.Encode(text, false, false)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ids = tok.AppendEncode(ids[:0], text, false, false)
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(len(ids)), "tokens")
}

// BenchmarkDecode renders ~10k tokens back to text.
func BenchmarkDecode(b *testing.B) {
	text := benchText(b)
	tok := loadTokenizer(b, testshared.Path(b, "testdata", "vocab", "ggml-vocab-gpt-2.gguf"))
	ids := tok.Encode(text, false, false)
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = tok.AppendDecodeRaw(buf[:0], ids, DecodeOptions{})
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkStreamDecoder adds ids one at a time.
func BenchmarkStreamDecoder(b *testing.B) {
	text := benchText(b)
	tok := loadTokenizer(b, testshared.Path(b, "testdata", "vocab", "ggml-vocab-llama-spm.gguf"))
	ids := tok.Encode(text, false, false)
	d := tok.NewStreamDecoder()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		for _, id := range ids {
			buf = d.AppendAdd(buf[:0], id)
		}
	}
	b.ReportMetric(float64(len(ids))*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkLoad measures building a tokenizer from an opened file.
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{"llama-spm", "deepseek-llm"} {
		b.Run(name, func(b *testing.B) {
			path := testshared.Path(b, "testdata", "vocab", "ggml-vocab-"+name+".gguf")
			f := loadTokenizer(b, path) // warm the page cache
			_ = f
			for b.Loop() {
				loadTokenizer(b, path)
			}
		})
	}
}
