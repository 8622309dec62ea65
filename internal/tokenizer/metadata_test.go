package tokenizer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/testshared"
)

// fakeMetadata is an in-memory Metadata.
type fakeMetadata map[string]gguf.Value

func (m fakeMetadata) Get(key string) (gguf.Value, bool) {
	v, ok := m[key]
	return v, ok
}

// spmMetadata builds a small SentencePiece vocabulary: <unk>, <s>, </s>,
// the 256 byte tokens, then the given pieces (normal, score -index) and
// extra special tokens.
func spmMetadata(pieces []string, control, userDefined []string) fakeMetadata {
	tokens := []string{"<unk>", "<s>", "</s>"}
	types := []int32{typeUnknown, typeControl, typeControl}
	for b := range 256 {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, typeByte)
	}
	for _, p := range pieces {
		tokens = append(tokens, p)
		types = append(types, typeNormal)
	}
	for _, p := range control {
		tokens = append(tokens, p)
		types = append(types, typeControl)
	}
	for _, p := range userDefined {
		tokens = append(tokens, p)
		types = append(types, typeUserDefined)
	}
	scores := make([]float32, len(tokens))
	for i := range scores {
		scores[i] = -float32(i)
	}
	return fakeMetadata{
		keyModel:     gguf.String("llama"),
		keyTokens:    gguf.Strings(tokens),
		keyScores:    gguf.Float32Array(scores),
		keyTokenType: gguf.Int32Array(types),
	}
}

// bpeMetadata builds a byte-level BPE vocabulary: the 256 byte characters,
// then the merges' results, then extra tokens.
func bpeMetadata(pre string, merges []string, control []string) fakeMetadata {
	var tokens []string
	var types []int32
	for b := range 256 {
		tokens = append(tokens, string(byteRunes[b]))
		types = append(types, typeNormal)
	}
	for _, m := range merges {
		tokens = append(tokens, strings.Replace(m, " ", "", 1))
		types = append(types, typeNormal)
	}
	for _, c := range control {
		tokens = append(tokens, c)
		types = append(types, typeControl)
	}
	md := fakeMetadata{
		keyModel:     gguf.String("gpt2"),
		keyTokens:    gguf.Strings(tokens),
		keyTokenType: gguf.Int32Array(types),
		keyMerges:    gguf.Strings(merges),
	}
	if pre != "" {
		md[keyPre] = gguf.String(pre)
	}
	return md
}

func mustLoad(t testing.TB, md Metadata) *Tokenizer {
	t.Helper()
	tok, err := FromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestSPMMerging(t *testing.T) {
	// Pieces 259.. in order; higher score (earlier) merges first.
	md := spmMetadata([]string{"\u2581a", "ab", "\u2581ab", "bc", "\u2581abc", "c", "\u2581"}, []string{"<|x|>"}, nil)
	tok := mustLoad(t, md)
	id := func(s string) int32 {
		i, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	for _, c := range []struct {
		text         string
		addSpecial   bool
		parseSpecial bool
		want         []int32
	}{
		{"", false, false, []int32{}},
		{"", true, false, []int32{1}},
		{"ab", false, false, []int32{id("\u2581ab")}},
		{"abc", true, false, []int32{1, id("\u2581abc")}},
		// ▁a (259) beats ab (260); then ▁a+b needs "▁ab" which is a token.
		{"abd", false, false, []int32{id("\u2581ab"), 3 + 'd'}},
		// Spaces are ▁; é has no piece and falls back to bytes.
		{"a é", false, false, []int32{id("\u2581a"), id("\u2581"), 3 + 0xC3, 3 + 0xA9}},
		// Special token text is split out only with parseSpecial, and the
		// text after it gets a prefix space again.
		{"<|x|>ab", false, true, []int32{id("<|x|>"), id("\u2581ab")}},
		{"ab<|x|>", false, true, []int32{id("\u2581ab"), id("<|x|>")}},
	} {
		got := tok.Encode(c.text, c.addSpecial, c.parseSpecial)
		if !slices.Equal(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
			t.Errorf("Encode(%q, %v, %v) = %v, want %v", c.text, c.addSpecial, c.parseSpecial, got, c.want)
		}
	}
	if got := tok.Encode("<|x|>", false, false); slices.Contains(got, id("<|x|>")) {
		t.Errorf("control token parsed without parseSpecial: %v", got)
	}
	if got := tok.DecodeWith(tok.Encode("ab <|x|> c", true, true), DecodeOptions{Special: true}); got != "<s> ab <|x|>  c" {
		t.Errorf("decode with special = %q", got)
	}
	// The text after a special token gets its own prefix space.
	if got := tok.Decode(tok.Encode("ab <|x|> c", true, true)); got != " ab   c" {
		t.Errorf("decode = %q", got)
	}
}

func TestBPEMerging(t *testing.T) {
	// "Ġ" is the byte-level character of a space.
	merges := []string{"a b", "Ġ a", "Ġa b", "c c", "cc c"}
	tok := mustLoad(t, bpeMetadata("gpt-2", merges, []string{"<|end|>"}))
	id := func(s string) int32 {
		i, ok := tok.TokenID(s)
		if !ok {
			t.Fatalf("no token %q", s)
		}
		return i
	}
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"ab", []int32{id("ab")}},
		// "Ġ a" ranks below "a b": a+b merges first, then Ġ+ab has no rule.
		{" ab", []int32{id("Ġ"), id("ab")}},
		{" a", []int32{id("Ġa")}},
		// Ranks, not greed: "c c" applies to every pair before "cc c".
		{"cccc", []int32{id("cc"), id("cc")}},
		{"ccc", []int32{id("ccc")}},
		{"é", []int32{id("Ã"), id("©")}},
	} {
		if got := tok.Encode(c.text, false, false); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
		if got := tok.DecodeWith(c.want, DecodeOptions{Detokenize: true}); got != c.text {
			t.Errorf("Decode(%v) = %q, want %q", c.want, got, c.text)
		}
	}
	if got := tok.Encode("ab<|end|>", false, true); !slices.Equal(got, []int32{id("ab"), id("<|end|>")}) {
		t.Errorf("parse special: %v", got)
	}
	if !tok.IsEOG(id("<|end|>")) || tok.EOT() != id("<|end|>") {
		t.Errorf("<|end|> should be detected as EOT and end generation")
	}
	if tok.BOS() != 11 || tok.AddBOS() {
		t.Errorf("gpt2 defaults: BOS %d (want 11), addBOS %v", tok.BOS(), tok.AddBOS())
	}
}

// TestSpecialStrip checks the rstrip rule llama.cpp applies to Phi-3's
// special tokens with the real phi-3 vocabulary.
func TestSpecialStrip(t *testing.T) {
	tok := loadTokenizer(t, testshared.Path(t, "testdata", "vocab", "ggml-vocab-phi-3.gguf"))
	end, _ := tok.TokenID("<|end|>")
	sys, _ := tok.TokenID("<|system|>")
	hi := tok.Encode("Hi", false, false) // "▁Hi": text after a special token gets the prefix space
	want := append(append([]int32{sys}, hi...), end)
	want = append(want, hi...)
	if got := tok.Encode("<|system|>Hi<|end|>\n \tHi", false, true); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := tok.Encode("<|end|>", false, false); slices.Contains(got, end) {
		t.Errorf("control token parsed without parseSpecial: %v", got)
	}
	if !tok.IsEOG(end) || tok.EOT() != end || !tok.IsEOG(32000) || tok.EOS() != 32000 {
		t.Errorf("EOG: end %v eot %d", tok.IsEOG(end), tok.EOT())
	}
	// </s> is user-defined in this vocabulary: matched even without parseSpecial.
	eos2, _ := tok.TokenID("</s>")
	if got := tok.Encode("a</s>", false, false); !slices.Contains(got, eos2) {
		t.Errorf("user-defined token not matched: %v", got)
	}
}

func TestCleanSpaces(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"a , b .", "a, b."},
		{" ?", "?"},
		{"x ' y", "x'y"},
		{"x ' ' y", "x'' y"}, // the swallowed space reads as NUL to the next apostrophe
		{"he 's I 'm we 're you 've", "he's I'm we're you've"},
		{"don 't I 'd we 'll", "don 't I 'd we 'll"},
	} {
		if got := string(cleanSpaces([]byte(c.in))); got != c.want {
			t.Errorf("cleanSpaces(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestStreamDecoder(t *testing.T) {
	md := spmMetadata([]string{"\u2581a"}, nil, nil)
	tok := mustLoad(t, md)
	byteID := func(b byte) int32 { return 3 + int32(b) }
	for _, c := range []struct {
		name  string
		ids   []int32
		steps []string // output of each Add, then Flush
	}{
		{"split 2-byte", []int32{byteID(0xC3), byteID(0xA9)}, []string{"", "é", ""}},
		{"split 4-byte", []int32{byteID(0xF0), byteID(0x9F), byteID(0xA6), byteID(0x99)}, []string{"", "", "", "🦙", ""}},
		{"lone continuation", []int32{byteID(0xA9), byteID('x')}, []string{"\uFFFD", "x", ""}},
		{"broken lead", []int32{byteID(0xC3), byteID('A')}, []string{"", "\uFFFDA", ""}},
		{"incomplete at end", []int32{byteID('a'), byteID(0xF0), byteID(0x9F)}, []string{"a", "", "", "\uFFFD\uFFFD"}},
		{"control renders nothing", []int32{1, 259, 2}, []string{"", " a", "", ""}},
		{"out of range", []int32{-5, 1 << 20}, []string{"", "", ""}},
	} {
		d := tok.NewStreamDecoder()
		var got []string
		for _, id := range c.ids {
			got = append(got, d.Add(id))
		}
		got = append(got, d.Flush())
		if !slices.Equal(got, c.steps) {
			t.Errorf("%s: steps %q, want %q", c.name, got, c.steps)
		}
		if all := strings.Join(got, ""); all != tok.Decode(c.ids) {
			t.Errorf("%s: stream %q != Decode %q", c.name, all, tok.Decode(c.ids))
		}
	}
}

// checkStream checks the StreamDecoder invariants for one id sequence.
func checkStream(t *testing.T, tok *Tokenizer, ids []int32, special bool) {
	t.Helper()
	d := tok.NewStreamDecoderWith(special)
	var b strings.Builder
	for _, id := range ids {
		s := d.Add(id)
		if !utf8.ValidString(s) {
			t.Fatalf("Add(%d) = %q: invalid UTF-8", id, s)
		}
		b.WriteString(s)
	}
	s := d.Flush()
	if !utf8.ValidString(s) || d.Pending() {
		t.Fatalf("Flush = %q (pending %v)", s, d.Pending())
	}
	b.WriteString(s)
	if want := tok.DecodeWith(ids, DecodeOptions{Special: special}); b.String() != want {
		t.Fatalf("ids %v: stream %q, Decode %q", ids, b.String(), want)
	}
}

func FuzzStreamDecoder(f *testing.F) {
	tok := mustLoad(f, spmMetadata([]string{"\u2581a", "é", "\u2581🦙"}, []string{"<|c|>"}, []string{"ü"}))
	f.Add([]byte{0xC3 - 0, 0xA9}, false)
	f.Add([]byte{0xF0, 0x9F, 0xA6, 0x99, 1, 2}, true)
	f.Fuzz(func(t *testing.T, raw []byte, special bool) {
		ids := make([]int32, len(raw))
		for i, b := range raw {
			// Mostly byte tokens, sometimes pieces, specials and bad ids.
			ids[i] = int32(b) + 3
			if b >= 250 {
				ids[i] = int32(tok.VocabSize()) - 6 + int32(b-250)
			}
		}
		checkStream(t, tok, ids, special)
	})
}

func TestHostileMetadata(t *testing.T) {
	good := func() fakeMetadata { return spmMetadata([]string{"\u2581a"}, nil, nil) }
	for _, c := range []struct {
		name   string
		edit   func(fakeMetadata)
		errSub string
	}{
		{"no model", func(m fakeMetadata) { delete(m, keyModel) }, "missing metadata"},
		{"model not a string", func(m fakeMetadata) { m[keyModel] = gguf.Uint32(1) }, "want string"},
		{"unsupported model", func(m fakeMetadata) { m[keyModel] = gguf.String("t5") }, `"t5"`},
		{"bert", func(m fakeMetadata) { m[keyModel] = gguf.String("bert") }, `"bert"`},
		{"no tokens", func(m fakeMetadata) { delete(m, keyTokens) }, "missing metadata"},
		{"tokens wrong type", func(m fakeMetadata) { m[keyTokens] = gguf.Float32Array([]float32{1}) }, "want array of string"},
		{"empty vocabulary", func(m fakeMetadata) { m[keyTokens] = gguf.Strings(nil) }, "0 tokens"},
		{"short scores", func(m fakeMetadata) { m[keyScores] = gguf.Float32Array([]float32{1, 2}) }, "2 entries"},
		{"long types", func(m fakeMetadata) { m[keyTokenType] = gguf.Int32Array(make([]int32, 1000)) }, "1000 entries"},
		{"scores wrong type", func(m fakeMetadata) { m[keyScores] = gguf.Strings([]string{"x"}) }, "want array of float32"},
		{"duplicate token", func(m fakeMetadata) {
			toks := slices.Clone(m[keyTokens].V.([]string))
			toks[5] = toks[6]
			m[keyTokens] = gguf.Strings(toks)
		}, "same text"},
		{"bos out of range", func(m fakeMetadata) { m["tokenizer.ggml.bos_token_id"] = gguf.Uint32(100000) }, "outside the vocabulary"},
		{"eos out of range", func(m fakeMetadata) { m["tokenizer.ggml.eos_token_id"] = gguf.Int32(-7) }, "outside the vocabulary"},
		{"eot out of range", func(m fakeMetadata) { m["tokenizer.ggml.eot_token_id"] = gguf.Uint64(1 << 40) }, "outside the vocabulary"},
		{"bos wrong type", func(m fakeMetadata) { m["tokenizer.ggml.bos_token_id"] = gguf.String("1") }, "want an integer"},
		{"add_bos wrong type", func(m fakeMetadata) { m[keyAddBOS] = gguf.Uint32(1) }, "want bool"},
		{"gpt2 without merges", func(m fakeMetadata) { m[keyModel] = gguf.String("gpt2") }, "missing metadata"},
		{"unknown pre", func(m fakeMetadata) {
			m[keyModel] = gguf.String("gpt2")
			m[keyMerges] = gguf.Strings(nil)
			m[keyPre] = gguf.String("no-such-pre")
		}, "unknown pre-tokenizer"},
		{"add_eos without eos", func(m fakeMetadata) {
			m[keyModel] = gguf.String("gpt2")
			m[keyMerges] = gguf.Strings(nil)
			m[keyPre] = gguf.String("chatglm-bpe")
			m[keyAddBOS] = gguf.Bool(true)
		}, "no BOS token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			md := good()
			c.edit(md)
			_, err := FromMetadata(md)
			if err == nil || !strings.Contains(err.Error(), c.errSub) || !strings.HasPrefix(err.Error(), "tokenizer: ") {
				t.Fatalf("err = %v, want one containing %q", err, c.errSub)
			}
		})
	}
	// Tolerated like llama.cpp: a padding id out of range, a -1 id.
	md := good()
	md["tokenizer.ggml.padding_token_id"] = gguf.Uint32(1 << 30)
	md["tokenizer.ggml.bos_token_id"] = gguf.Uint32(0xFFFFFFFF)
	tok, err := FromMetadata(md)
	if err != nil {
		t.Fatal(err)
	}
	if tok.PAD() != -1 || tok.BOS() != 1 {
		t.Errorf("pad %d bos %d, want -1 and the default 1", tok.PAD(), tok.BOS())
	}
}

// FuzzFromMetadata loads vocabularies built from fuzzed parts, including
// mismatched lengths, bad types and out-of-range ids: loading must fail
// cleanly or yield a tokenizer whose output stays in range.
func FuzzFromMetadata(f *testing.F) {
	f.Add("llama", "", "a\x00b\x00ab\x00\u2581a", 4, []byte{2, 3, 3, 1, 6}, "", int64(1), int64(2), true, false, "ab a")
	f.Add("gpt2", "llama-bpe", "a\x00b\x00ab\x00<|eot_id|>", 4, []byte{1, 1, 1, 3}, "a b\nab ab", int64(0), int64(3), false, true, "abab <|eot_id|>")
	f.Add("gpt2", "qwen2", "x\x00y", 0, []byte{}, "x y\nq", int64(-1), int64(99), true, true, "xy")
	f.Add("gpt2", "deepseek-llm", "1\x002\x00 ", 3, []byte{4, 4, 4}, "1 2", int64(0), int64(0), false, false, "12 1")
	f.Fuzz(func(t *testing.T, model, pre, tokens string, nScores int, types []byte, merges string, bos, eos int64, addBOS, addEOS bool, text string) {
		md := fakeMetadata{keyModel: gguf.String(model)}
		if pre != "" {
			md[keyPre] = gguf.String(pre)
		}
		toks := strings.Split(tokens, "\x00")
		if len(toks) > 4096 {
			toks = toks[:4096]
		}
		md[keyTokens] = gguf.Strings(toks)
		if nScores = nScores % 5000; nScores > 0 {
			sc := make([]float32, nScores)
			for i := range sc {
				sc[i] = float32(i%7) - 3
			}
			md[keyScores] = gguf.Float32Array(sc)
		}
		if len(types) > 0 {
			ty := make([]int32, len(types))
			for i, b := range types {
				ty[i] = int32(b % 8)
			}
			md[keyTokenType] = gguf.Int32Array(ty)
		}
		if merges != "" {
			md[keyMerges] = gguf.Strings(strings.Split(merges, "\n"))
		}
		md["tokenizer.ggml.bos_token_id"] = gguf.Value{Type: gguf.TypeInt64, V: bos}
		md["tokenizer.ggml.eos_token_id"] = gguf.Value{Type: gguf.TypeInt64, V: eos}
		md[keyAddBOS] = gguf.Bool(addBOS)
		md[keyAddEOS] = gguf.Bool(addEOS)
		tok, err := FromMetadata(md)
		if err != nil {
			return
		}
		for _, ps := range []bool{false, true} {
			ids := tok.Encode(text, true, ps)
			for _, id := range ids {
				if id < 0 || int(id) >= tok.VocabSize() {
					t.Fatalf("id %d out of range %d", id, tok.VocabSize())
				}
			}
			checkStream(t, tok, ids, ps)
			_ = tok.DecodeWith(ids, DecodeOptions{Detokenize: true, RemoveSpecial: true})
		}
	})
}

// TestEveryPreTokenizer loads a small vocabulary with every pre-tokenizer
// name llama.cpp knows and checks the flags that come with some of them.
func TestEveryPreTokenizer(t *testing.T) {
	text := "Hello, y'all! 12345 héllo 中文 <sentinel:1> IMGIMGABZ\n\n  x"
	for _, pre := range PreTokenizers() {
		tok, err := FromMetadata(bpeMetadata(pre, []string{"H e", "l l"}, []string{"<|eot_id|>"}))
		if err != nil {
			t.Errorf("%s: %v", pre, err)
			continue
		}
		ids := tok.Encode(text, false, false)
		if got := tok.Decode(ids); got != text {
			t.Errorf("%s: round trip %q", pre, got)
		}
		switch pre {
		case "llama3", "llama-bpe", "tekken", "chameleon":
			if !tok.AddBOS() {
				t.Errorf("%s: add_bos should default to true", pre)
			}
		case "chatglm-bpe":
			if tok.BOS() != -1 {
				t.Errorf("%s: BOS %d, want none", pre, tok.BOS())
			}
		}
		if want := !preConfigs[pre].keepSpaces; tok.cleanSpaces != want {
			t.Errorf("%s: clean spaces %v", pre, tok.cleanSpaces)
		}
	}
	if len(PreTokenizers()) < 40 {
		t.Errorf("only %d pre-tokenizers", len(PreTokenizers()))
	}
}
