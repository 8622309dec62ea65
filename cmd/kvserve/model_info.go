package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tensor"
)

// modelInfo is what `kvserve model info` reports about a GGUF file. Field
// names are the JSON output's.
type modelInfo struct {
	File      string `json:"file"`
	FileBytes int64  `json:"file_bytes"`
	Version   uint32 `json:"gguf_version"`

	Architecture string `json:"architecture"`
	Name         string `json:"name,omitempty"`
	FileType     string `json:"file_type,omitempty"`
	Parameters   uint64 `json:"parameters"`

	Layers     int  `json:"layers"`
	Heads      int  `json:"heads"`
	KVHeads    int  `json:"kv_heads"`
	HeadDim    int  `json:"head_dim"`
	ValueDim   int  `json:"value_dim"`
	Embedding  int  `json:"embedding"`
	FFN        int  `json:"ffn"`
	Vocab      int  `json:"vocab"`
	Context    int  `json:"context"`
	TiedOutput bool `json:"tied_embeddings"`

	RMSEps float64  `json:"rms_eps,omitempty"`
	Rope   ropeInfo `json:"rope"`

	KVBytesPerToken int `json:"kv_bytes_per_token_f16"`

	TensorCount int           `json:"tensor_count"`
	TensorTypes []typeSummary `json:"tensor_types"`

	Tokenizer tokenizerInfo `json:"tokenizer"`

	// Weights says where --model-memory auto puts the weights on this
	// machine and why, and which kernels compute with them.
	Weights string `json:"weights,omitempty"`
}

type ropeInfo struct {
	FreqBase      float64 `json:"freq_base"`
	Dimensions    int     `json:"dimensions"`
	Style         string  `json:"style,omitempty"` // "normal" (adjacent pairs) or "neox" (split halves)
	ScalingType   string  `json:"scaling_type,omitempty"`
	ScalingFactor float64 `json:"scaling_factor,omitempty"`
	OriginalCtx   int     `json:"original_context,omitempty"`
	FreqFactors   bool    `json:"freq_factors"` // rope_freqs.weight present (Llama 3 scaling)
}

type typeSummary struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
	Bytes uint64 `json:"bytes"`
}

type tokenizerInfo struct {
	Model          string `json:"model,omitempty"` // tokenizer.ggml.model
	Kind           string `json:"kind,omitempty"`  // SentencePiece, byte-level BPE, ...
	Pre            string `json:"pre,omitempty"`
	Size           int    `json:"size"`
	Merges         int    `json:"merges,omitempty"`
	BOS            *int64 `json:"bos,omitempty"`
	EOS            *int64 `json:"eos,omitempty"`
	ChatTemplate   bool   `json:"chat_template"`
	TemplateFamily string `json:"template_family,omitempty"`
}

// fileTypeNames are llama.cpp's llama_ftype values (general.file_type).
var fileTypeNames = map[int64]string{
	0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
	11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
	18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S",
	25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M",
	32: "BF16", 36: "TQ1_0", 37: "TQ2_0",
}

// neoxArchs use NeoX-style RoPE (rotating the two halves of each head)
// in llama.cpp; the llama family rotates adjacent pairs.
var neoxArchs = map[string]bool{"qwen": true, "qwen2": true, "qwen2moe": true, "qwen3": true, "qwen3moe": true,
	"phi2": true, "phi3": true, "gemma": true, "gemma2": true, "gemma3": true, "falcon": true, "gptneox": true,
	"stablelm": true, "olmo2": true, "starcoder2": true}

// inspect describes a parsed GGUF file. Missing keys leave fields at their
// defaults (llama.cpp's where it has one); a key of the wrong type is an
// error.
func inspect(f *gguf.File) (*modelInfo, error) {
	info := &modelInfo{Version: f.Version}
	var err error
	if info.Architecture, err = f.StringOr("general.architecture", "unknown"); err != nil {
		return nil, err
	}
	if info.Name, err = f.StringOr("general.name", ""); err != nil {
		return nil, err
	}
	if ft, err := f.IntOr("general.file_type", -1); err != nil {
		return nil, err
	} else if ft >= 0 {
		info.FileType = fileTypeNames[ft]
		if info.FileType == "" {
			info.FileType = fmt.Sprintf("file_type %d", ft)
		}
	}
	a := info.Architecture + "."
	intKey := func(key string, def int) int {
		if err != nil {
			return def
		}
		var v int
		v, err = intOrMax(f, key, def)
		return v
	}
	info.Layers = intKey(a+"block_count", 0)
	info.Context = intKey(a+"context_length", 0)
	info.Embedding = intKey(a+"embedding_length", 0)
	info.FFN = intKey(a+"feed_forward_length", 0)
	info.Heads = intKey(a+"attention.head_count", 0)
	info.KVHeads = intKey(a+"attention.head_count_kv", info.Heads)
	def := 0
	if info.Heads > 0 {
		def = info.Embedding / info.Heads
	}
	info.HeadDim = intKey(a+"attention.key_length", def)
	info.ValueDim = intKey(a+"attention.value_length", info.HeadDim)
	info.Rope.Dimensions = intKey(a+"rope.dimension_count", info.HeadDim)
	info.Rope.OriginalCtx = intKey(a+"rope.scaling.original_context_length", 0)
	if err != nil {
		return nil, err
	}
	if info.Rope.FreqBase, err = floatKey(f, a+"rope.freq_base", 10000); err != nil {
		return nil, err
	}
	if info.Rope.ScalingType, err = f.StringOr(a+"rope.scaling.type", ""); err != nil {
		return nil, err
	}
	if info.Rope.ScalingFactor, err = floatKey(f, a+"rope.scaling.factor", 0); err != nil {
		return nil, err
	}
	if info.RMSEps, err = floatKey(f, a+"attention.layer_norm_rms_epsilon", 0); err != nil {
		return nil, err
	}
	if info.Architecture != "unknown" {
		info.Rope.Style = "normal"
		if neoxArchs[info.Architecture] {
			info.Rope.Style = "neox"
		}
	}
	_, info.Rope.FreqFactors = f.Tensor("rope_freqs.weight")
	_, hasOutput := f.Tensor("output.weight")
	_, hasEmbd := f.Tensor("token_embd.weight")
	info.TiedOutput = hasEmbd && !hasOutput

	byType := map[tensor.DType]*typeSummary{}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		info.Parameters += t.Elements()
		s := byType[t.Type]
		if s == nil {
			s = &typeSummary{Type: t.Type.String()}
			byType[t.Type] = s
		}
		s.Count++
		s.Bytes += uint64(len(t.Data))
	}
	info.TensorCount = len(f.Tensors)
	for _, s := range byType {
		info.TensorTypes = append(info.TensorTypes, *s)
	}
	sort.Slice(info.TensorTypes, func(i, j int) bool {
		if info.TensorTypes[i].Count != info.TensorTypes[j].Count {
			return info.TensorTypes[i].Count > info.TensorTypes[j].Count
		}
		return info.TensorTypes[i].Type < info.TensorTypes[j].Type
	})
	info.KVBytesPerToken = info.Layers * info.KVHeads * (info.HeadDim + info.ValueDim) * 2

	if err := inspectTokenizer(f, info); err != nil {
		return nil, err
	}
	return info, nil
}

// floatKey reads a number; a float32 is widened through its shortest decimal
// form, so 1e-5 stored as float32 reports as 1e-05, not 9.99999974e-06.
func floatKey(f *gguf.File, key string, def float64) (float64, error) {
	v, ok := f.Get(key)
	if !ok {
		return def, nil
	}
	if x, ok := v.V.(float32); ok {
		return strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
	}
	return f.Float(key)
}

// intOrMax reads an integer key; per-layer arrays (some models vary head
// counts by layer) report their largest element.
func intOrMax(f *gguf.File, key string, def int) (int, error) {
	v, ok := f.Get(key)
	if !ok {
		return def, nil
	}
	if v.Type == gguf.TypeArray {
		xs, err := f.Ints(key)
		if err != nil {
			return 0, err
		}
		m := int64(0)
		for _, x := range xs {
			m = max(m, x)
		}
		return int(m), nil
	}
	n, err := f.Int(key)
	return int(n), err
}

func inspectTokenizer(f *gguf.File, info *modelInfo) error {
	tk := &info.Tokenizer
	var err error
	if tk.Model, err = f.StringOr("tokenizer.ggml.model", ""); err != nil {
		return err
	}
	switch tk.Model {
	case "llama":
		tk.Kind = "SentencePiece"
	case "gpt2":
		tk.Kind = "byte-level BPE"
	case "bert":
		tk.Kind = "WordPiece"
	case "t5":
		tk.Kind = "Unigram"
	case "rwkv":
		tk.Kind = "RWKV"
	case "no_vocab", "none":
		tk.Kind = "none"
	}
	if tk.Pre, err = f.StringOr("tokenizer.ggml.pre", ""); err != nil {
		return err
	}
	var tokens []string
	if _, ok := f.Get("tokenizer.ggml.tokens"); ok {
		if tokens, err = f.Strings("tokenizer.ggml.tokens"); err != nil {
			return err
		}
	}
	tk.Size = len(tokens)
	if _, ok := f.Get("tokenizer.ggml.merges"); ok {
		m, err := f.Strings("tokenizer.ggml.merges")
		if err != nil {
			return err
		}
		tk.Merges = len(m)
	}
	for _, id := range []struct {
		key string
		dst **int64
	}{{"tokenizer.ggml.bos_token_id", &tk.BOS}, {"tokenizer.ggml.eos_token_id", &tk.EOS}} {
		if _, ok := f.Get(id.key); ok {
			v, err := f.Int(id.key)
			if err != nil {
				return err
			}
			*id.dst = &v
		}
	}
	tmpl, err := f.StringOr("tokenizer.chat_template", "")
	if err != nil {
		return err
	}
	tk.ChatTemplate = tmpl != ""
	tk.TemplateFamily = templateFamily(tmpl)

	info.Vocab = tk.Size
	if info.Vocab == 0 {
		if info.Vocab, err = intOrMax(f, info.Architecture+".vocab_size", 0); err != nil {
			return err
		}
	}
	if t, ok := f.Tensor("token_embd.weight"); ok && info.Vocab == 0 && len(t.Dims) == 2 {
		info.Vocab = int(t.Dims[1])
	}
	return nil
}

// templateFamily names a chat template's family from the markers it uses.
func templateFamily(t string) string {
	has := func(s ...string) bool {
		for _, x := range s {
			if !strings.Contains(t, x) {
				return false
			}
		}
		return true
	}
	switch {
	case t == "":
		return ""
	case has("<|start_header_id|>", "<|eot_id|>"):
		return "llama3"
	case has("<|im_start|>", "<think>"):
		return "chatml (qwen3, thinking)"
	case has("<|im_start|>", "<tool_call>"):
		return "chatml (qwen2.5, tools)"
	case has("<|im_start|>"):
		return "chatml"
	case has("<start_of_turn>"):
		return "gemma"
	case has("<|START_OF_TURN_TOKEN|>"):
		return "command-r"
	case has("<｜User｜>"), has("<｜Assistant｜>"):
		return "deepseek"
	case has("<|user|>", "<|end|>"):
		return "phi3"
	case has("[INST]"):
		return "mistral/llama2"
	}
	return "other"
}

// print writes the human-readable report.
func (m *modelInfo) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("file", "%s (%s, GGUF v%d)", m.File, humanBytes(uint64(m.FileBytes)), m.Version)
	row("architecture", "%s", m.Architecture)
	if m.Name != "" {
		row("name", "%s", m.Name)
	}
	if m.FileType != "" {
		row("file type", "%s", m.FileType)
	}
	row("parameters", "%s (%d)", humanCount(m.Parameters), m.Parameters)
	row("layers", "%d", m.Layers)
	row("heads", "%d query, %d KV (GQA %s), head dim %d", m.Heads, m.KVHeads, gqa(m.Heads, m.KVHeads), m.HeadDim)
	row("embedding", "%d", m.Embedding)
	row("feed-forward", "%d", m.FFN)
	row("vocab", "%d", m.Vocab)
	row("context", "%d", m.Context)
	tied := "no (output.weight)"
	if m.TiedOutput {
		tied = "yes (token_embd.weight is the classifier)"
	}
	row("tied embeddings", "%s", tied)
	rope := fmt.Sprintf("freq base %g, %d dims", m.Rope.FreqBase, m.Rope.Dimensions)
	if m.Rope.Style != "" {
		rope += ", " + m.Rope.Style
	}
	if m.Rope.ScalingType != "" {
		rope += fmt.Sprintf(", scaling %s ×%g", m.Rope.ScalingType, m.Rope.ScalingFactor)
	}
	if m.Rope.OriginalCtx > 0 {
		rope += fmt.Sprintf(" (original context %d)", m.Rope.OriginalCtx)
	}
	if m.Rope.FreqFactors {
		rope += ", rope_freqs.weight (Llama 3 scaling)"
	}
	row("rope", "%s", rope)
	if m.RMSEps != 0 {
		row("rms eps", "%g", m.RMSEps)
	}
	row("KV bytes/token", "%d (%s, F16 cache: %d layers × (K %d + V %d) × %d KV heads × 2 B)",
		m.KVBytesPerToken, humanBytes(uint64(m.KVBytesPerToken)), m.Layers, m.HeadDim, m.ValueDim, m.KVHeads)
	var types []string
	for _, t := range m.TensorTypes {
		types = append(types, fmt.Sprintf("%s×%d (%s)", t.Type, t.Count, humanBytes(t.Bytes)))
	}
	row("tensors", "%d: %s", m.TensorCount, strings.Join(types, ", "))
	tk := &m.Tokenizer
	tok := tk.Kind
	if tok == "" {
		tok = tk.Model
	}
	if tk.Pre != "" {
		tok += ", pre " + tk.Pre
	}
	tok += fmt.Sprintf(", %d tokens", tk.Size)
	if tk.Merges > 0 {
		tok += fmt.Sprintf(", %d merges", tk.Merges)
	}
	if tk.BOS != nil {
		tok += fmt.Sprintf(", BOS %d", *tk.BOS)
	}
	if tk.EOS != nil {
		tok += fmt.Sprintf(", EOS %d", *tk.EOS)
	}
	row("tokenizer", "%s", tok)
	tmpl := "no"
	if tk.ChatTemplate {
		tmpl = "yes"
		if tk.TemplateFamily != "" {
			tmpl += " (" + tk.TemplateFamily + ")"
		}
	}
	row("chat template", "%s", tmpl)
	if m.Weights != "" {
		row("weights", "%s", m.Weights)
	}
	tw.Flush()
}

func gqa(heads, kv int) string {
	if kv == 0 || heads%kv != 0 {
		return "?"
	}
	return fmt.Sprintf("%d:1", heads/kv)
}
