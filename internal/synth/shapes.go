package synth

import (
	"fmt"
	"sort"
	"strings"
)

// Shape is the architecture of one real model: every hyperparameter that
// decides tensor names, shapes and metadata, plus the tokenizer it ships
// with. The values are the published configurations of those models.
type Shape struct {
	// Name is the shape's name on the command line, e.g. "smollm2-135m".
	Name string
	// Arch is the GGUF general.architecture: "llama", "qwen2" or "qwen3".
	Arch string
	// Model names the real model the shape copies, for humans.
	Model string

	Context   int // training context length
	Embedding int // hidden size (n_embd)
	Layers    int // transformer blocks
	Heads     int // query heads
	KVHeads   int // key/value heads (GQA)
	HeadDim   int // dimension of one head
	FFN       int // feed-forward (intermediate) size
	Vocab     int // rows of token_embd.weight = tokenizer size

	RopeTheta float32 // rope.freq_base
	RMSEps    float32 // attention.layer_norm_rms_epsilon

	Tied    bool // tied embeddings: no output.weight, token_embd is the classifier
	QKVBias bool // attn_{q,k,v}.bias tensors (qwen2)
	QKNorm  bool // attn_q_norm / attn_k_norm per layer (qwen3)
	// Llama3Rope, when set, adds rope_freqs.weight as llama.cpp's
	// converter computes it from Llama 3's rope_scaling.
	Llama3Rope *Llama3Rope

	// Which optional keys the real files carry.
	KeyLengthKeys bool // <arch>.attention.key_length and value_length
	RopeDimKey    bool // <arch>.rope.dimension_count
	VocabSizeKey  bool // <arch>.vocab_size

	// WeightStd, when non-zero, is the standard deviation of every 2-D
	// weight instead of the fan-in rule (see initFor); the tiny shapes use
	// the 0.15 of the shared tiny models.
	WeightStd float64

	Tokenizer Tokenizer
}

// Llama3Rope is Llama 3's rope_scaling (rope_type "llama3").
type Llama3Rope struct {
	Factor          float64
	LowFreqFactor   float64
	HighFreqFactor  float64
	OriginalContext int
}

// Tokenizer describes the vocabulary a shape ships with: its kind, where the
// special tokens sit, and the ids and flags the real model's GGUF records.
type Tokenizer struct {
	// Model is tokenizer.ggml.model: "llama" (SentencePiece; here the
	// placeholder vocabulary of the tiny models) or "gpt2" (byte-level BPE).
	Model string
	// Pre is tokenizer.ggml.pre, the BPE pre-tokenizer ("smollm", ...).
	Pre string
	// Specials are the added tokens at their real ids.
	Specials []Special
	// BOS, EOS, UNK and PAD are the special token ids; -1 means the key is
	// not written.
	BOS, EOS, UNK, PAD int
	// AddBOS and AddEOS are tokenizer.ggml.add_{bos,eos}_token when
	// non-nil.
	AddBOS, AddEOS *bool
	// Template is the file name under templates/ of the chat template, or
	// "" for none.
	Template string
}

// Special is one added token.
type Special struct {
	ID   int
	Text string
	Type TokenType
}

// TokenType is a GGUF token type (tokenizer.ggml.token_type).
type TokenType int32

// The token types of llama.cpp's vocabulary.
const (
	TokenNormal      TokenType = 1
	TokenUnknown     TokenType = 2
	TokenControl     TokenType = 3
	TokenUserDefined TokenType = 4
	TokenUnused      TokenType = 5
	TokenByte        TokenType = 6
)

func ptr(b bool) *bool { return &b }

// chatML lists added tokens: each text gets CONTROL unless it is in user,
// starting at id first.
func specials(first int, texts []string, userDefined ...string) []Special {
	user := map[string]bool{}
	for _, u := range userDefined {
		user[u] = true
	}
	out := make([]Special, len(texts))
	for i, t := range texts {
		typ := TokenControl
		if user[t] {
			typ = TokenUserDefined
		}
		out[i] = Special{ID: first + i, Text: t, Type: typ}
	}
	return out
}

// The added tokens of the real tokenizers. Qwen marks <tool_call> and the
// like as non-special; llama.cpp's converter then types them USER_DEFINED
// unless they look like <|...|>.
var (
	smollmSpecials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>",
		"<reponame>", "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
		"<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>", "<jupyter_output>",
		"<jupyter_script>", "<empty_output>"}
	qwen25Specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
		"<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
		"<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
		"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
		"<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"}
	qwen3Extra = []string{"<tool_response>", "</tool_response>", "<think>", "</think>"}
	qwenUser   = []string{"<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"}
)

// llama3Specials returns Llama 3's 256 added tokens at 128000..128255.
func llama3Specials() []Special {
	named := map[int]string{0: "<|begin_of_text|>", 1: "<|end_of_text|>", 4: "<|finetune_right_pad_id|>",
		6: "<|start_header_id|>", 7: "<|end_header_id|>", 8: "<|eom_id|>", 9: "<|eot_id|>", 10: "<|python_tag|>"}
	texts := make([]string, 256)
	reserved := 0
	for i := range texts {
		if s, ok := named[i]; ok {
			texts[i] = s
			continue
		}
		texts[i] = fmt.Sprintf("<|reserved_special_token_%d|>", reserved)
		reserved++
	}
	return specials(128000, texts)
}

func qwenSpecials(extra bool) []Special {
	texts := append([]string(nil), qwen25Specials...)
	if extra {
		texts = append(texts, qwen3Extra...)
	}
	return specials(151643, texts, qwenUser...)
}

// tinySPM is the placeholder SentencePiece vocabulary of the shared tiny
// models (models/README.md).
var tinySPM = Tokenizer{Model: "llama", BOS: 1, EOS: 2, UNK: 0, PAD: -1, AddBOS: ptr(true), AddEOS: ptr(false)}

// shapes returns every known shape. The tables are facts from the models'
// config.json, tokenizer_config.json and llama.cpp's converter.
func shapes() []Shape {
	tiny := Shape{
		Name: "tiny", Arch: "llama", Model: "shared/models/tiny-f32.gguf",
		Context: 256, Embedding: 256, Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, FFN: 512, Vocab: 512,
		RopeTheta: 10000, RMSEps: 1e-5,
		KeyLengthKeys: true, RopeDimKey: true, VocabSizeKey: true,
		WeightStd: 0.15, Tokenizer: tinySPM,
	}
	tinyQwen2 := tiny
	tinyQwen2.Name, tinyQwen2.Arch, tinyQwen2.Model = "tiny-qwen2", "qwen2", "shared/models/tiny-qwen2-f32.gguf"
	tinyQwen2.RMSEps, tinyQwen2.Tied, tinyQwen2.QKVBias = 1e-6, true, true
	tinyQwen2.KeyLengthKeys, tinyQwen2.RopeDimKey, tinyQwen2.VocabSizeKey = false, false, false
	tinyQwen3 := tinyQwen2
	tinyQwen3.Name, tinyQwen3.Arch, tinyQwen3.Model = "tiny-qwen3", "qwen3", "tiny dimensions with Qwen3's features (kvserve extension)"
	tinyQwen3.QKVBias, tinyQwen3.QKNorm, tinyQwen3.KeyLengthKeys = false, true, true

	return []Shape{
		{
			Name: "smollm2-135m", Arch: "llama", Model: "HuggingFaceTB/SmolLM2-135M-Instruct",
			Context: 8192, Embedding: 576, Layers: 30, Heads: 9, KVHeads: 3, HeadDim: 64, FFN: 1536, Vocab: 49152,
			RopeTheta: 100000, RMSEps: 1e-5, Tied: true,
			RopeDimKey: true, VocabSizeKey: true,
			Tokenizer: Tokenizer{Model: "gpt2", Pre: "smollm", Specials: specials(0, smollmSpecials),
				BOS: 1, EOS: 2, UNK: 0, PAD: 2, AddBOS: ptr(false), Template: "smollm2.jinja"},
		},
		{
			Name: "llama-3.2-1b", Arch: "llama", Model: "meta-llama/Llama-3.2-1B-Instruct",
			Context: 131072, Embedding: 2048, Layers: 16, Heads: 32, KVHeads: 8, HeadDim: 64, FFN: 8192, Vocab: 128256,
			RopeTheta: 500000, RMSEps: 1e-5, Tied: true,
			Llama3Rope:    &Llama3Rope{Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalContext: 8192},
			KeyLengthKeys: true, RopeDimKey: true, VocabSizeKey: true,
			Tokenizer: Tokenizer{Model: "gpt2", Pre: "llama-bpe", Specials: llama3Specials(),
				BOS: 128000, EOS: 128009, UNK: -1, PAD: -1, Template: "llama-3.2.jinja"},
		},
		{
			Name: "qwen2.5-0.5b", Arch: "qwen2", Model: "Qwen/Qwen2.5-0.5B-Instruct",
			Context: 32768, Embedding: 896, Layers: 24, Heads: 14, KVHeads: 2, HeadDim: 64, FFN: 4864, Vocab: 151936,
			RopeTheta: 1e6, RMSEps: 1e-6, Tied: true, QKVBias: true,
			Tokenizer: Tokenizer{Model: "gpt2", Pre: "qwen2", Specials: qwenSpecials(false),
				BOS: 151643, EOS: 151645, UNK: -1, PAD: 151643, AddBOS: ptr(false), Template: "qwen2.5.jinja"},
		},
		{
			Name: "qwen3-0.6b", Arch: "qwen3", Model: "Qwen/Qwen3-0.6B",
			Context: 40960, Embedding: 1024, Layers: 28, Heads: 16, KVHeads: 8, HeadDim: 128, FFN: 3072, Vocab: 151936,
			RopeTheta: 1e6, RMSEps: 1e-6, Tied: true, QKNorm: true, KeyLengthKeys: true,
			Tokenizer: Tokenizer{Model: "gpt2", Pre: "qwen2", Specials: qwenSpecials(true),
				BOS: 151643, EOS: 151645, UNK: -1, PAD: 151643, AddBOS: ptr(false), Template: "qwen3.jinja"},
		},
		tiny, tinyQwen2, tinyQwen3,
	}
}

// ShapeNames returns the names of all shapes, sorted.
func ShapeNames() []string {
	var names []string
	for _, s := range shapes() {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	return names
}

// LookupShape returns the shape for a model shape name and, optionally, an
// architecture. An empty arch means the shape's own. The only shape that
// exists for several architectures is "tiny": with arch qwen2 or qwen3 it
// becomes "tiny-qwen2" or "tiny-qwen3". Any other disagreement is an error,
// since e.g. a qwen2 model with SmolLM2's dimensions is no real model.
func LookupShape(name, arch string) (Shape, error) {
	name = strings.ToLower(name)
	arch = strings.ToLower(arch)
	if name == "tiny" && arch != "" && arch != "llama" {
		name = "tiny-" + arch
	}
	for _, s := range shapes() {
		if s.Name != name {
			continue
		}
		if arch != "" && arch != s.Arch {
			return Shape{}, fmt.Errorf("synth: shape %s is a %s model, not %s (only tiny exists for several architectures)", s.Name, s.Arch, arch)
		}
		return s, nil
	}
	if arch != "" && name == "tiny-"+arch {
		return Shape{}, fmt.Errorf("synth: no tiny shape for architecture %q (have llama, qwen2, qwen3)", arch)
	}
	return Shape{}, fmt.Errorf("synth: unknown shape %q (have %s)", name, strings.Join(ShapeNames(), ", "))
}

// Validate checks that the shape's dimensions are consistent.
func (s *Shape) Validate() error {
	switch {
	case s.Arch != "llama" && s.Arch != "qwen2" && s.Arch != "qwen3":
		return fmt.Errorf("synth: shape %s: unsupported architecture %q", s.Name, s.Arch)
	case s.Embedding <= 0 || s.Layers <= 0 || s.Heads <= 0 || s.KVHeads <= 0 || s.HeadDim <= 0 || s.FFN <= 0 || s.Vocab <= 0:
		return fmt.Errorf("synth: shape %s: dimensions must be positive", s.Name)
	case s.Heads%s.KVHeads != 0:
		return fmt.Errorf("synth: shape %s: %d heads are not a multiple of %d KV heads", s.Name, s.Heads, s.KVHeads)
	case !s.KeyLengthKeys && s.HeadDim*s.Heads != s.Embedding:
		return fmt.Errorf("synth: shape %s: head dim %d × %d heads ≠ embedding %d needs the key_length keys", s.Name, s.HeadDim, s.Heads, s.Embedding)
	case s.HeadDim%2 != 0:
		return fmt.Errorf("synth: shape %s: odd head dimension %d", s.Name, s.HeadDim)
	}
	for _, sp := range s.Tokenizer.Specials {
		if sp.ID < 0 || sp.ID >= s.Vocab {
			return fmt.Errorf("synth: shape %s: special token %q id %d outside the vocabulary", s.Name, sp.Text, sp.ID)
		}
	}
	return nil
}

// KVBytesPerToken is the KV-cache size of one token with an F16 cache:
// layers × 2 (K and V) × KV heads × head dim × 2 bytes.
func (s *Shape) KVBytesPerToken() int { return s.Layers * 2 * s.KVHeads * s.HeadDim * 2 }
