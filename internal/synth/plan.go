package synth

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/kvserve/kvserve/internal/tensor"
)

// FileType is the type of a synthetic file, as llama.cpp's general.file_type
// names it: one base type for the 2-D weights, or a mix (Q2_K, Q3_K_M,
// Q4_K_M, Q5_K_M).
type FileType int

// The file types `model synth --type` offers; the values are llama.cpp's
// llama_ftype numbers, written as general.file_type.
const (
	FileF32   FileType = 0
	FileF16   FileType = 1
	FileQ4_0  FileType = 2
	FileQ8_0  FileType = 7
	FileQ5_0  FileType = 8
	FileQ2_K  FileType = 10
	FileQ3_KM FileType = 12
	FileQ4_KM FileType = 15
	FileQ5_KM FileType = 17
)

// ParseFileType maps "f32", "f16", "q8_0", "q4_0", "q5_0", "q2_k", "q3_k" (or "q3_k_m"),
// "q4_k" (or "q4_k_m") and "q5_k" (or "q5_k_m") to a FileType.
func ParseFileType(s string) (FileType, error) {
	switch strings.ToLower(s) {
	case "f32":
		return FileF32, nil
	case "f16":
		return FileF16, nil
	case "q8_0":
		return FileQ8_0, nil
	case "q4_0":
		return FileQ4_0, nil
	case "q5_0":
		return FileQ5_0, nil
	case "q2_k":
		return FileQ2_K, nil
	case "q3_k", "q3_k_m":
		return FileQ3_KM, nil
	case "q4_k", "q4_k_m":
		return FileQ4_KM, nil
	case "q5_k", "q5_k_m":
		return FileQ5_KM, nil
	}
	return 0, fmt.Errorf("synth: unknown type %q (have f32, f16, q8_0, q4_0, q5_0, q2_k, q3_k, q4_k, q5_k)", s)
}

// String returns the type's name as llama-quantize spells it.
func (f FileType) String() string {
	switch f {
	case FileF32:
		return "F32"
	case FileF16:
		return "F16"
	case FileQ8_0:
		return "Q8_0"
	case FileQ4_0:
		return "Q4_0"
	case FileQ5_0:
		return "Q5_0"
	case FileQ2_K:
		return "Q2_K"
	case FileQ3_KM:
		return "Q3_K_M"
	case FileQ4_KM:
		return "Q4_K_M"
	case FileQ5_KM:
		return "Q5_K_M"
	}
	return fmt.Sprintf("filetype(%d)", int(f))
}

// Init says how a tensor's values are drawn.
type Init int

// The kinds of tensor contents.
const (
	InitNormal    Init = iota // N(0, Std²): weight matrices
	InitNorm                  // 1 + 0.1·N(0,1): norm weights, not all ones so a missing multiply shows
	InitBias                  // N(0, Std²): attention biases
	InitRopeFreqs             // Llama 3 rope scaling factors, computed, not random
)

// TensorSpec is one tensor of a synthetic model.
type TensorSpec struct {
	Name string
	Type tensor.DType
	Dims []uint64 // GGML order, row length first
	Init Init
	Std  float64 // for InitNormal
}

// Elements returns the number of values of the tensor.
func (t *TensorSpec) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// layer returns the block number of a "blk.N." tensor, or -1.
func (t *TensorSpec) layer() int {
	rest, ok := strings.CutPrefix(t.Name, "blk.")
	if !ok {
		return -1
	}
	n, _, _ := strings.Cut(rest, ".")
	i, err := strconv.Atoi(n)
	if err != nil {
		return -1
	}
	return i
}

// Plan returns the tensors of a synthetic model of shape s and file type ft:
// names and shapes as llama.cpp's converter writes them for the real model,
// types as llama-quantize chooses them. For F32 and F16 the order is the
// converter's; for quantized types it is llama-quantize's (non-layer tensors
// by name, then each layer's by name), so loaders that rely on order break
// here as they would on real files.
func Plan(s *Shape, ft FileType) ([]TensorSpec, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	e, ff, v := uint64(s.Embedding), uint64(s.FFN), uint64(s.Vocab)
	qDim, kvDim := uint64(s.Heads*s.HeadDim), uint64(s.KVHeads*s.HeadDim)
	std := func(fanIn uint64) float64 {
		if s.WeightStd != 0 {
			return s.WeightStd
		}
		return 1 / math.Sqrt(float64(fanIn))
	}
	qkGain := 1.0
	if s.WeightStd == 0 {
		qkGain = attentionGain
	}
	// Biases are a fifth of the typical size of the projection they are
	// added to (whose elements have std gain × 1 for a unit-scale input);
	// the tiny shapes keep the shared tiny-qwen2's N(0, 0.5²). A bias as
	// large as the projection itself would add the same vector to every
	// position's value and make all positions' outputs alike.
	biasStd := func(gain float64) float64 {
		if s.WeightStd != 0 {
			return 0.5
		}
		return 0.2 * gain
	}
	outStd := s.WeightStd
	if outStd == 0 {
		outStd = logitStd(s.Vocab) / math.Sqrt(float64(e))
	}
	embStd := outStd
	if !s.Tied && s.WeightStd == 0 {
		embStd = 1 / math.Sqrt(float64(e))
	}
	var ts []TensorSpec
	add := func(name string, init Init, sd float64, dims ...uint64) {
		ts = append(ts, TensorSpec{Name: name, Init: init, Std: sd, Dims: dims})
	}
	add("token_embd.weight", InitNormal, embStd, e, v)
	if s.Llama3Rope != nil {
		add("rope_freqs.weight", InitRopeFreqs, 0, uint64(s.HeadDim/2))
	}
	for i := 0; i < s.Layers; i++ {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", InitNorm, 0, e)
		add(p+"attn_q.weight", InitNormal, qkGain*std(e), e, qDim)
		add(p+"attn_k.weight", InitNormal, qkGain*std(e), e, kvDim)
		add(p+"attn_v.weight", InitNormal, std(e), e, kvDim)
		if s.QKVBias {
			add(p+"attn_q.bias", InitBias, biasStd(qkGain), qDim)
			add(p+"attn_k.bias", InitBias, biasStd(qkGain), kvDim)
			add(p+"attn_v.bias", InitBias, biasStd(1), kvDim)
		}
		if s.QKNorm {
			add(p+"attn_q_norm.weight", InitNorm, 0, uint64(s.HeadDim))
			add(p+"attn_k_norm.weight", InitNorm, 0, uint64(s.HeadDim))
		}
		add(p+"attn_output.weight", InitNormal, std(qDim), qDim, e)
		add(p+"ffn_norm.weight", InitNorm, 0, e)
		add(p+"ffn_gate.weight", InitNormal, std(e), e, ff)
		add(p+"ffn_up.weight", InitNormal, std(e), e, ff)
		add(p+"ffn_down.weight", InitNormal, std(ff), ff, e)
	}
	add("output_norm.weight", InitNorm, 0, e)
	if !s.Tied {
		add("output.weight", InitNormal, outStd, e, v)
	}
	if ft != FileF32 && ft != FileF16 {
		sort.SliceStable(ts, func(a, b int) bool {
			la, lb := ts[a].layer(), ts[b].layer()
			if la != lb {
				return la < lb
			}
			return ts[a].Name < ts[b].Name
		})
	}
	for i := range ts {
		t, err := tensorType(s, ft, &ts[i])
		if err != nil {
			return nil, err
		}
		ts[i].Type = t
	}
	return ts, nil
}

// attentionGain multiplies the fan-in σ of attn_q and attn_k: with plain
// 1/√fan_in the attention scores have std 1, attention is nearly uniform,
// every position's output tends to the running mean of the values, and the
// hidden states of later positions converge (greedy decoding then repeats
// one token). A gain of 2 on both gives scores of std 4, so each position
// attends to a few others, as trained models do.
const attentionGain = 2.0

// logitStd is the standard deviation of the output logits that makes the
// median top-1 probability of a random model about 0.15 for a vocabulary of
// n tokens: not ~1 (one token always wins) and not uniform (1/n). For a
// given final hidden state the logits of a random classifier are i.i.d.
// Gaussian; simulating softmax over n such logits puts the median top-1 at
// 0.15 for σ ≈ 2.6 (n = 512), 3.8 (n = 49152) and 4.2 (n = 151936), which
// √(2 ln n) − 0.8 follows to within 0.15. (The tiny models' σ = 0.15 over
// 256 dimensions is 2.4.)
func logitStd(n int) float64 {
	return max(1.0, math.Sqrt(2*math.Log(float64(n)))-0.8)
}

// tensorType returns the storage type of one tensor in a file of type ft:
// 1-D tensors (norms, biases, rope factors) stay F32 in every file; 2-D
// weights take the file's type, or for the mixes llama-quantize's choice.
func tensorType(s *Shape, ft FileType, t *TensorSpec) (tensor.DType, error) {
	if len(t.Dims) < 2 {
		return tensor.F32, nil
	}
	var typ tensor.DType
	switch ft {
	case FileF32:
		return tensor.F32, nil
	case FileF16:
		return tensor.F16, nil
	case FileQ8_0:
		typ = tensor.Q8_0
	case FileQ4_0, FileQ5_0:
		typ = legacyType(s, t, ft)
	case FileQ2_K, FileQ3_KM, FileQ4_KM, FileQ5_KM:
		typ = kMixType(s, t, ft)
	default:
		return 0, fmt.Errorf("synth: unsupported file type %v", ft)
	}
	return fallback(typ, t.Dims[0]), nil
}

// legacyType is the type llama-quantize gives a 2-D tensor in a Q4_0 or
// Q5_0 file: the classifier's as in the k-quant mixes (Q6_K, or Q8_0 where
// 256 does not divide its rows), the file's type otherwise.
func legacyType(s *Shape, t *TensorSpec, ft FileType) tensor.DType {
	if c, ok := classifierType(s, t); ok {
		return c
	}
	if ft == FileQ5_0 {
		return tensor.Q5_0
	}
	return tensor.Q4_0
}

// classifierType is llama-quantize's type for the classifier
// (output.weight, or token_embd.weight when the embeddings are tied) in
// the quantized files: Q6_K, or Q8_0 where 256 does not divide its rows;
// false for other tensors.
func classifierType(s *Shape, t *TensorSpec) (tensor.DType, bool) {
	if t.Name != "output.weight" && (!s.Tied || t.Name != "token_embd.weight") {
		return 0, false
	}
	if t.Dims[0]%256 != 0 {
		return tensor.Q8_0, true
	}
	return tensor.Q6_K, true
}

// useMoreBits is llama-quantize's choice of layers that get more bits in the
// _M mixes: the first and last eighth and every third layer between.
func useMoreBits(layer, n int) bool {
	return layer < n/8 || layer >= 7*n/8 || (layer-n/8)%3 == 2
}

// kMixType is the type llama-quantize (llama_tensor_get_type) gives a 2-D
// tensor of a non-MoE llama/qwen model for a k-quant mix without an
// importance matrix (before the fallback for rows 256 does not divide):
// Q6_K for the classifier (output.weight, or token_embd.weight when the
// embeddings are tied) when its rows are a multiple of 256, else Q8_0; then
// by mix:
//
//	Q4_K_M, Q5_K_M  Q6_K for attn_v and ffn_down of the layers useMoreBits
//	                picks; Q4_K or Q5_K otherwise
//	Q3_K_M          attn_v Q5_K in layers 0-1, else Q4_K; ffn_down Q5_K in
//	                the first sixteenth of the layers, else Q4_K;
//	                attn_output Q4_K; Q3_K otherwise
//	Q2_K            attn_v Q4_K where four or more query heads share a KV
//	                head, else Q3_K; ffn_down and attn_output Q3_K; Q2_K
//	                otherwise
func kMixType(s *Shape, t *TensorSpec, ft FileType) tensor.DType {
	if c, ok := classifierType(s, t); ok {
		return c
	}
	layer := t.layer()
	attnV := strings.Contains(t.Name, "attn_v.weight")
	ffnDown := strings.Contains(t.Name, "ffn_down")
	attnOut := strings.Contains(t.Name, "attn_output.weight")
	switch ft {
	case FileQ2_K:
		switch {
		case attnV && s.Heads >= 4*s.KVHeads:
			return tensor.Q4_K
		case attnV, ffnDown, attnOut:
			return tensor.Q3_K
		}
		return tensor.Q2_K
	case FileQ3_KM:
		switch {
		case attnV && layer < 2, ffnDown && layer < s.Layers/16:
			return tensor.Q5_K
		case attnV, ffnDown, attnOut:
			return tensor.Q4_K
		}
		return tensor.Q3_K
	}
	if (attnV || ffnDown) && useMoreBits(layer, s.Layers) {
		return tensor.Q6_K
	}
	if ft == FileQ5_KM {
		return tensor.Q5_K
	}
	return tensor.Q4_K
}

// fallback is llama-quantize's replacement for a type whose block does not
// divide the row length: Q2_K and Q3_K→IQ4_NL, Q4_K→Q5_0, Q5_K→Q5_1,
// Q6_K→Q8_0, and F16 if even that does not fit. (SmolLM2's 576-wide and Qwen2.5's 896-wide rows take this path.)
func fallback(t tensor.DType, rowLen uint64) tensor.DType {
	if rowLen%uint64(t.BlockSize()) == 0 {
		return t
	}
	switch t {
	case tensor.Q2_K, tensor.Q3_K:
		t = tensor.IQ4_NL
	case tensor.Q4_K:
		t = tensor.Q5_0
	case tensor.Q5_K:
		t = tensor.Q5_1
	case tensor.Q6_K:
		t = tensor.Q8_0
	}
	if rowLen%uint64(t.BlockSize()) != 0 {
		return tensor.F16
	}
	return t
}

// Params returns the number of parameters of a plan.
func Params(ts []TensorSpec) uint64 {
	var n uint64
	for i := range ts {
		n += ts[i].Elements()
	}
	return n
}

// llama3RopeFactors computes rope_freqs.weight the way llama.cpp's converter
// does from Llama 3's rope_scaling: for each of the head_dim/2 rotation
// frequencies, 1 for short wavelengths, factor for long ones, and a smooth
// blend between.
func llama3RopeFactors(s *Shape) []float32 {
	// The converter does this in float32 torch arithmetic; so does this.
	r := s.Llama3Rope
	dim := s.HeadDim
	factor, low, high := float32(r.Factor), float32(r.LowFreqFactor), float32(r.HighFreqFactor)
	oldCtx := float32(r.OriginalContext)
	lowWavelen, highWavelen := oldCtx/low, oldCtx/high
	out := make([]float32, dim/2)
	for i := range out {
		freq := 1 / float32(math.Pow(float64(s.RopeTheta), float64(float32(2*i)/float32(dim))))
		wavelen := float32(2*math.Pi) / freq
		switch {
		case wavelen < highWavelen:
			out[i] = 1
		case wavelen > lowWavelen:
			out[i] = factor
		default:
			smooth := (oldCtx/wavelen - low) / (high - low)
			out[i] = 1 / ((1-smooth)/factor + smooth)
		}
	}
	return out
}
