package model

import (
	"fmt"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tensor"
)

// Arch is a supported model architecture, named as in GGUF's
// general.architecture.
type Arch string

// The supported architectures.
const (
	ArchLlama Arch = "llama" // Llama 2/3.x, SmolLM/SmolLM2, TinyLlama, Mistral-style
	ArchQwen2 Arch = "qwen2" // Qwen2/2.5: Q/K/V bias, NeoX RoPE
	ArchQwen3 Arch = "qwen3" // Qwen3 dense: per-head Q/K RMSNorm, NeoX RoPE
)

// Config is the shape and numerics of a model, read from GGUF metadata.
type Config struct {
	Arch      Arch
	Name      string
	Embed     int // n_embd: width of the residual stream
	Layers    int
	Heads     int // query heads
	KVHeads   int // key/value heads (GQA when fewer than Heads)
	HeadDim   int // per-head width of queries and keys (n_embd_head_k)
	HeadDimV  int // per-head width of values (n_embd_head_v)
	FFN       int // feed-forward hidden width
	Vocab     int
	Context   int // training context length
	NormEps   float32
	Rope      tensor.RoPE
	RopeNeoX  bool
	TiedEmbed bool // output projection shares token_embd.weight
}

// KVDim is the width of one token's keys (or values) in one layer: all KV heads.
func (c *Config) KVDim() int { return c.KVHeads * c.HeadDim }

// KVBytesPerToken is the KV-cache memory one token takes across all layers
// with elemBytes per element (2 for f16).
func (c *Config) KVBytesPerToken(elemBytes int) int {
	return c.Layers * c.KVHeads * (c.HeadDim + c.HeadDimV) * elemBytes
}

// ReadConfig reads and validates the model configuration from GGUF metadata.
func ReadConfig(f *gguf.File) (Config, error) {
	var c Config
	arch, err := f.String("general.architecture")
	if err != nil {
		return c, fmt.Errorf("model: %w", err)
	}
	c.Arch = Arch(arch)
	switch c.Arch {
	case ArchLlama, ArchQwen2, ArchQwen3:
	default:
		return c, fmt.Errorf("model: unsupported architecture %q (supported: llama, qwen2, qwen3)", arch)
	}
	c.Name, _ = f.StringOr("general.name", "")

	p := arch + "."
	geti := func(key string, def int64, required bool) int {
		if err != nil {
			return 0
		}
		var v int64
		if required {
			v, err = f.Int(p + key)
		} else {
			v, err = f.IntOr(p+key, def)
		}
		if err == nil && (v < 0 || v > 1<<30) {
			err = fmt.Errorf("metadata %s%s = %d is out of range", p, key, v)
		}
		return int(v)
	}
	c.Embed = geti("embedding_length", 0, true)
	c.Layers = geti("block_count", 0, true)
	c.FFN = geti("feed_forward_length", 0, true)
	c.Heads = geti("attention.head_count", 0, true)
	c.KVHeads = geti("attention.head_count_kv", int64(c.Heads), false)
	c.Context = geti("context_length", 2048, false)
	if err != nil {
		return c, fmt.Errorf("model: %w", err)
	}
	if c.Embed == 0 || c.Layers == 0 || c.FFN == 0 || c.Heads == 0 || c.KVHeads == 0 {
		return c, fmt.Errorf("model: embedding, layers, FFN, heads and KV heads must all be positive (got %d, %d, %d, %d, %d)",
			c.Embed, c.Layers, c.FFN, c.Heads, c.KVHeads)
	}
	if c.Heads%c.KVHeads != 0 {
		return c, fmt.Errorf("model: %d query heads are not a multiple of %d KV heads", c.Heads, c.KVHeads)
	}
	c.HeadDim = geti("attention.key_length", int64(c.Embed/c.Heads), false)
	c.HeadDimV = geti("attention.value_length", int64(c.Embed/c.Heads), false)
	nRot := geti("rope.dimension_count", int64(c.HeadDim), false)
	if err != nil {
		return c, fmt.Errorf("model: %w", err)
	}
	if c.HeadDim == 0 || c.HeadDim != c.HeadDimV {
		return c, fmt.Errorf("model: key head width %d and value head width %d must be equal and positive", c.HeadDim, c.HeadDimV)
	}
	if nRot <= 0 || nRot > c.HeadDim || nRot%2 != 0 {
		return c, fmt.Errorf("model: rope dimension count %d invalid for head width %d", nRot, c.HeadDim)
	}
	if c.Arch == ArchLlama && nRot != c.HeadDim {
		return c, fmt.Errorf("model: llama requires rope dimension count %d to equal head width %d", nRot, c.HeadDim)
	}

	eps, err := f.Float(p + "attention.layer_norm_rms_epsilon")
	if err != nil {
		return c, fmt.Errorf("model: %w", err)
	}
	c.NormEps = float32(eps)

	c.RopeNeoX = c.Arch == ArchQwen2 || c.Arch == ArchQwen3
	if c.Rope, err = readRope(f, p, nRot, c.Context); err != nil {
		return c, fmt.Errorf("model: %w", err)
	}
	c.Rope.NeoX = c.RopeNeoX

	if emb, ok := f.Tensor("token_embd.weight"); ok && len(emb.Dims) == 2 {
		c.Vocab = int(emb.Dims[1])
	} else {
		return c, fmt.Errorf("model: missing 2-D tensor token_embd.weight")
	}
	if toks, err := f.Strings("tokenizer.ggml.tokens"); err == nil && len(toks) != c.Vocab {
		// llama.cpp tolerates a padded embedding (more rows than tokens), not fewer.
		if len(toks) > c.Vocab {
			return c, fmt.Errorf("model: tokenizer has %d tokens but token_embd.weight has only %d rows", len(toks), c.Vocab)
		}
	}
	_, hasOutput := f.Tensor("output.weight")
	c.TiedEmbed = !hasOutput
	return c, nil
}

func readRope(f *gguf.File, p string, nRot, ctx int) (tensor.RoPE, error) {
	r := tensor.RoPE{Dims: nRot, FreqScale: 1, AttnFactor: 1, BetaFast: 32, BetaSlow: 1, OrigCtx: ctx}
	base, err := f.FloatOr(p+"rope.freq_base", 10000)
	if err != nil {
		return r, err
	}
	r.Base = float32(base)
	scaling, err := f.StringOr(p+"rope.scaling.type", "linear")
	if err != nil {
		return r, err
	}
	factor, err := f.FloatOr(p+"rope.scaling.factor", 0)
	if err != nil {
		return r, err
	}
	if factor == 0 {
		if factor, err = f.FloatOr(p+"rope.scale_linear", 0); err != nil {
			return r, err
		}
	}
	attn, err := f.FloatOr(p+"rope.scaling.attn_factor", 1)
	if err != nil {
		return r, err
	}
	r.AttnFactor = float32(attn)
	orig, err := f.IntOr(p+"rope.scaling.original_context_length", int64(ctx))
	if err != nil {
		return r, err
	}
	r.OrigCtx = int(orig)
	switch scaling {
	case "none":
	case "linear", "yarn":
		if factor != 0 {
			r.FreqScale = float32(1 / factor)
		}
		if scaling == "yarn" {
			r.ExtFactor = 1
		}
	default:
		return r, fmt.Errorf("unsupported rope scaling type %q (supported: none, linear, yarn)", scaling)
	}
	return r, nil
}
