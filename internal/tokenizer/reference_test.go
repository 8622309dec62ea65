package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/testshared"
)

type referenceFile struct {
	Model string `json:"model"`
	Cases []struct {
		PromptText      *string `json:"prompt_text"`
		PromptTokens    []int32 `json:"prompt_tokens"`
		NoSpecialTokens []int32 `json:"tokenize_add_special_false"`
		GeneratedText   *string `json:"generated_text"`
		GeneratedTokens []int32 `json:"generated_tokens"`
		Stop            string  `json:"stop"`
	} `json:"cases"`
}

// TestAidreamsReference checks the SPM tokenizer of the real aidreams260K
// model against llama-server: /tokenize with and without special tokens,
// and the text the server returned for the generated ids.
func TestAidreamsReference(t *testing.T) {
	shared := testshared.Dir(t)
	tok := loadTokenizer(t, filepath.Join(shared, "models", "aidreams260K-f32.gguf"))
	raw, err := os.ReadFile(filepath.Join(shared, "testdata", "reference", "aidreams260K-f32.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ref referenceFile
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	if tok.Kind() != KindSPM || tok.VocabSize() != 512 || tok.BOS() != 1 || tok.EOS() != 2 || !tok.AddBOS() || tok.AddEOS() {
		t.Fatalf("unexpected vocabulary: kind %v size %d bos %d eos %d addBOS %v addEOS %v",
			tok.Kind(), tok.VocabSize(), tok.BOS(), tok.EOS(), tok.AddBOS(), tok.AddEOS())
	}
	texts := 0
	for i, c := range ref.Cases {
		gen := c.GeneratedTokens
		if c.Stop == "eos" {
			if len(gen) == 0 || !tok.IsEOG(gen[len(gen)-1]) {
				t.Fatalf("case %d: stop eos but last token %v is not end-of-generation", i, gen)
			}
			gen = gen[:len(gen)-1]
		}
		for _, id := range gen {
			if tok.IsEOG(id) {
				t.Errorf("case %d: generated id %d inside the sequence is end-of-generation", i, id)
			}
		}
		if c.PromptText == nil {
			continue
		}
		texts++
		text := *c.PromptText
		if got := tok.Encode(text, true, true); !slices.Equal(got, c.PromptTokens) {
			t.Errorf("case %d %q add_special:\n got %v\nwant %v", i, text, got, c.PromptTokens)
		}
		if got := tok.Encode(text, false, true); !slices.Equal(got, c.NoSpecialTokens) {
			t.Errorf("case %d %q no special:\n got %v\nwant %v", i, text, got, c.NoSpecialTokens)
		}
		if got := tok.DecodeWith(c.PromptTokens, DecodeOptions{Detokenize: true}); got != " "+text {
			// BOS first: llama.cpp keeps the prefix space (see DecodeOptions).
			t.Errorf("case %d: detokenize(prompt) = %q, want %q", i, got, " "+text)
		}
		if got := tok.DecodeWith(c.NoSpecialTokens, DecodeOptions{Detokenize: true}); got != text {
			t.Errorf("case %d: detokenize(prompt without BOS) = %q, want %q", i, got, text)
		}
		if c.GeneratedText == nil {
			t.Fatalf("case %d: text prompt without generated_text", i)
		}
		if got := tok.Decode(gen); got != *c.GeneratedText {
			t.Errorf("case %d: Decode(generated) = %q, want %q", i, got, *c.GeneratedText)
		}
		sd := tok.NewStreamDecoder()
		var sb strings.Builder
		for _, id := range gen {
			sb.WriteString(sd.Add(id))
		}
		sb.WriteString(sd.Flush())
		if sb.String() != *c.GeneratedText {
			t.Errorf("case %d: stream-decoded generated = %q, want %q", i, sb.String(), *c.GeneratedText)
		}
	}
	if texts != 8 {
		t.Errorf("found %d text cases, want 8", texts)
	}
}

// TestTinyPlaceholderVocab loads the synthetic models' placeholder
// vocabulary (SPM, byte tokens only up to 0x7F) and checks what it can do.
func TestTinyPlaceholderVocab(t *testing.T) {
	shared := testshared.Dir(t)
	for _, name := range []string{"tiny-f32.gguf", "tiny-q4_0.gguf", "tiny-qwen2-f32.gguf", "tiny-qwen2-q8_0.gguf"} {
		t.Run(name, func(t *testing.T) {
			tok := loadTokenizer(t, filepath.Join(shared, "models", name))
			if tok.VocabSize() != 512 || tok.Kind() != KindSPM || tok.BOS() != 1 || tok.EOS() != 2 || tok.UNK() != 0 || !tok.AddBOS() {
				t.Fatalf("size %d kind %v bos %d eos %d unk %d addBOS %v", tok.VocabSize(), tok.Kind(), tok.BOS(), tok.EOS(), tok.UNK(), tok.AddBOS())
			}
			// 131..511 are ▁ plus the id in base 26 (a=0): 131 = 5·26+1 = "fb".
			if got := tok.TokenText(131); got != "\u2581fb" {
				t.Errorf("token 131 = %q, want ▁fb", got)
			}
			if !tok.IsEOG(2) || tok.IsEOG(1) || !tok.IsControl(1) || tok.IsControl(131) || !tok.IsByte(3) {
				t.Errorf("special flags wrong")
			}
			// ASCII falls back to byte tokens 3+b. The prefix ▁ and anything
			// non-ASCII have no token and no byte token: each of their bytes
			// becomes UNK (where llama.cpp throws).
			got := tok.Encode("a!", true, false)
			want := []int32{1, 0, 0, 0, 3 + 'a', 3 + '!'}
			if !slices.Equal(got, want) {
				t.Errorf("Encode(a!) = %v, want %v", got, want)
			}
			if got := tok.Decode([]int32{1, 131, 3 + 'x', 2}); got != " fbx" {
				t.Errorf("Decode = %q, want %q", got, " fbx")
			}
		})
	}
}
