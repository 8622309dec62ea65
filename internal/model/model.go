// Package model runs decoder-only transformer models (llama, qwen2, qwen3
// families) loaded from GGUF files.
//
// A Model is the immutable part: its configuration and weights, which are
// views of the memory-mapped file (or of its private copy), except the
// matrices of a type widened to one with faster kernels (tensor.Widen),
// which are copies of their own. A Runner holds
// the mutable part of computing: the thread pool and scratch buffers, sized
// once for the largest batch. One Runner runs one forward pass at a time; the
// scheduler batches many sequences into each pass.
//
// A forward pass takes a batch of sequences, each with one or more new tokens
// (a prefill chunk or a single decode token) at consecutive positions, writes
// their keys and values into each sequence's Cache and returns logits where
// asked. Numerics follow llama.cpp's CPU backend: activations are converted to
// each weight type's dot-product type, K and V are stored as f16, and queries
// and softmax weights are rounded to f16 in attention.
package model

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tensor"
)

// Layer holds one transformer block's weights.
type Layer struct {
	AttnNorm       []float32
	Q, K, V, O     tensor.Matrix
	QBias, KBias   []float32 // qwen2 (optional elsewhere)
	VBias, OBias   []float32
	QNorm, KNorm   []float32 // qwen3: per-head RMSNorm weights, HeadDim long
	FFNNorm        []float32
	Gate, Up, Down tensor.Matrix
}

// Model is a loaded model: configuration and weights viewed in place.
type Model struct {
	Config     Config
	TokenEmbed tensor.Matrix // Vocab rows of Embed
	OutputNorm []float32
	Output     tensor.Matrix // Vocab rows of Embed; TokenEmbed when tied
	Layers     []Layer
	// WeightBytes is the total size of the weights as stored.
	WeightBytes int64
	// WidenedBytes is the memory of the copies of weights widened to a
	// type with faster kernels (tensor.Widen), on top of the file's.
	WidenedBytes int64
	// Widening says which matrices were widened, which left in their own
	// bytes (streamed) for the memory limit given.
	Widening Widening
	// ReleasedBytes is the memory of a private copy of the file
	// (gguf.File.Private) given back after widening: the whole pages of
	// the widened matrices' original bytes, which nothing reads again.
	ReleasedBytes int64
}

// Load builds a Model from a parsed GGUF file, with no limit to widening
// (PlanWidening). The file must stay open while the model is used: the
// weights are views of it.
func Load(f *gguf.File) (*Model, error) {
	return LoadWith(f, Options{WidenLimit: NoWidenLimit})
}

// LoadWith is Load with options.
func LoadWith(f *gguf.File, o Options) (*Model, error) {
	cfg, err := ReadConfig(f)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: cfg}
	l := loader{f: f}
	c := &cfg
	m.TokenEmbed = l.matrix("token_embd.weight", c.Vocab, c.Embed)
	m.OutputNorm = l.vector("output_norm.weight", c.Embed)
	if c.TiedEmbed {
		m.Output = m.TokenEmbed
	} else {
		m.Output = l.matrix("output.weight", c.Vocab, c.Embed)
	}
	if _, ok := f.Tensor("rope_freqs.weight"); ok {
		m.Config.Rope.FreqFactors = l.vector("rope_freqs.weight", c.Rope.Dims/2)
	}
	qDim, kvDim := c.Heads*c.HeadDim, c.KVHeads*c.HeadDim
	m.Layers = make([]Layer, c.Layers)
	for i := range m.Layers {
		b := fmt.Sprintf("blk.%d.", i)
		ly := &m.Layers[i]
		ly.AttnNorm = l.vector(b+"attn_norm.weight", c.Embed)
		ly.Q = l.matrix(b+"attn_q.weight", qDim, c.Embed)
		ly.K = l.matrix(b+"attn_k.weight", kvDim, c.Embed)
		ly.V = l.matrix(b+"attn_v.weight", c.KVHeads*c.HeadDimV, c.Embed)
		ly.O = l.matrix(b+"attn_output.weight", c.Embed, c.Heads*c.HeadDimV)
		ly.QBias = l.optionalVector(b+"attn_q.bias", qDim, c.Arch == ArchQwen2)
		ly.KBias = l.optionalVector(b+"attn_k.bias", kvDim, c.Arch == ArchQwen2)
		ly.VBias = l.optionalVector(b+"attn_v.bias", c.KVHeads*c.HeadDimV, c.Arch == ArchQwen2)
		ly.OBias = l.optionalVector(b+"attn_output.bias", c.Embed, false)
		if c.Arch == ArchQwen3 {
			ly.QNorm = l.vector(b+"attn_q_norm.weight", c.HeadDim)
			ly.KNorm = l.vector(b+"attn_k_norm.weight", c.HeadDim)
		}
		ly.FFNNorm = l.vector(b+"ffn_norm.weight", c.Embed)
		ly.Gate = l.matrix(b+"ffn_gate.weight", c.FFN, c.Embed)
		ly.Up = l.matrix(b+"ffn_up.weight", c.FFN, c.Embed)
		ly.Down = l.matrix(b+"ffn_down.weight", c.Embed, c.FFN)
	}
	if l.err != nil {
		return nil, l.err
	}
	for _, t := range f.Tensors {
		m.WeightBytes += int64(len(t.Data))
	}
	private := f.Private()
	if o.WidenedFrom != nil {
		// The same matrices widened as the model sharing its copies, in
		// whichever placement: a type widened only where the weights are
		// mapped (tensor.StreamedPreferred) is left in its own bytes here
		// too, so that the load probe times the plan it would keep.
		private = o.WidenedFrom.Widening.Private
	}
	m.Widening = PlanWidening(f, o.WidenLimit, private)
	sources, err := m.widen(f, m.Widening, o.WidenedFrom)
	if err != nil {
		return nil, err
	}
	if f.Private() {
		if err := f.Rewrite(m.pack); err != nil {
			return nil, fmt.Errorf("model: pack weights: %w", err)
		}
		var names []string
		for _, t := range f.Tensors {
			if len(t.Data) > 0 && sources[&t.Data[0]] {
				names = append(names, t.Name)
			}
		}
		m.ReleasedBytes = f.Release(names...)
	}
	return m, nil
}

// pack rewrites the weight matrices in the layout the CPU's kernels read
// fastest (tensor.Pack), for weights in private memory (~0.4 s for a 1.3 GB
// Q8_0 model on one CPU).
func (m *Model) pack() {
	m.eachMatrix(func(w *tensor.Matrix) { *w = tensor.Pack(*w) })
}

// eachMatrix runs fn on every weight matrix, spread over the CPUs. Each
// is visited once: tied embeddings share the result.
func (m *Model) eachMatrix(fn func(*tensor.Matrix)) {
	ws := m.matrices()
	var wg sync.WaitGroup
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, w := range ws {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			fn(w)
			<-slots
		}()
	}
	wg.Wait()
	if m.Config.TiedEmbed {
		m.Output = m.TokenEmbed
	}
}

// matrices lists the weight matrices, the token embedding first, then the
// classifier where it is not the embedding, then each layer's.
func (m *Model) matrices() []*tensor.Matrix {
	ws := []*tensor.Matrix{&m.TokenEmbed}
	if !m.Config.TiedEmbed {
		ws = append(ws, &m.Output)
	}
	return append(ws, m.layerMatrices()...)
}

// DecodeBytes is the weight memory one decode step reads: every matrix
// once, as the kernels hold it (widened where it was, tensor.Widen), but
// only one row of an untied token embedding.
func (m *Model) DecodeBytes() int64 {
	n := int64(m.Output.Bytes())
	for _, w := range m.layerMatrices() {
		n += int64(w.Bytes())
	}
	return n
}

// layerMatrices lists the layers' weight matrices.
func (m *Model) layerMatrices() []*tensor.Matrix {
	var ws []*tensor.Matrix
	for i := range m.Layers {
		ly := &m.Layers[i]
		ws = append(ws, &ly.Q, &ly.K, &ly.V, &ly.O, &ly.Gate, &ly.Up, &ly.Down)
	}
	return ws
}

// loader fetches and checks tensors, keeping the first error.
type loader struct {
	f   *gguf.File
	err error
}

func (l *loader) tensor(name string, dims ...int) *gguf.Tensor {
	if l.err != nil {
		return nil
	}
	t, ok := l.f.Tensor(name)
	if !ok {
		l.err = fmt.Errorf("model: missing tensor %s", name)
		return nil
	}
	if len(t.Dims) != len(dims) {
		l.err = fmt.Errorf("model: tensor %s has shape %v, want %v", name, t.Dims, dims)
		return nil
	}
	for i, d := range dims {
		if int(t.Dims[i]) != d {
			l.err = fmt.Errorf("model: tensor %s has shape %v, want %v", name, t.Dims, dims)
			return nil
		}
	}
	return t
}

// supportedTypes lists the weight types the kernels compute with, for the
// error that refuses a file.
func supportedTypes() string {
	var names []string
	for t := range tensor.DType(64) {
		if t.Known() && t.Supported() {
			names = append(names, t.String())
		}
	}
	return strings.Join(names, ", ")
}

func (l *loader) matrix(name string, rows, cols int) tensor.Matrix {
	t := l.tensor(name, cols, rows)
	if t == nil {
		return tensor.Matrix{}
	}
	if !t.Type.Supported() {
		l.err = fmt.Errorf("model: tensor %s has type %s, which is not supported (supported: %s)", name, t.Type, supportedTypes())
		return tensor.Matrix{}
	}
	m, err := tensor.NewMatrix(t.Type, rows, cols, t.Data)
	if err != nil {
		l.err = fmt.Errorf("model: tensor %s: %w", name, err)
	}
	return m
}

func (l *loader) vector(name string, n int) []float32 {
	t := l.tensor(name, n)
	if t == nil {
		return nil
	}
	if t.Type != tensor.F32 {
		l.err = fmt.Errorf("model: tensor %s has type %s, want F32", name, t.Type)
		return nil
	}
	return f32View(t.Data)
}

func (l *loader) optionalVector(name string, n int, required bool) []float32 {
	if _, ok := l.f.Tensor(name); !ok && !required {
		return nil
	}
	return l.vector(name, n)
}

// f16View reinterprets little-endian f16 bytes in place.
func f16View(b []byte) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), len(b)/2)
}

// f32View reinterprets little-endian float32 bytes in place. GGUF data is
// aligned to at least 32 bytes, so the view is aligned; all supported
// targets are little-endian.
func f32View(b []byte) []float32 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), len(b)/4)
}
