// Package synth generates synthetic GGUF models: random weights with the
// exact tensor names, shapes, type mix and metadata of real models
// (SmolLM2-135M, Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B) and of the shared
// tiny test models, with a generated tokenizer of the right kind and size.
//
// Why: the engine must be measured and tested on the shapes it will serve
// (their dimensions decide kernel sizes, KV bytes per token, GQA ratios and
// tensor types), but real weights are gigabytes that tests cannot download.
// A synthetic file loads in llama.cpp as the real model would, so the same
// file gives a baseline there and a workload here.
//
// Everything is deterministic: the vocabulary depends only on the shape, the
// weights only on the shape and the seed (math/rand/v2 PCG streams per
// tensor chunk, so the number of goroutines does not change the bytes).
// Tensors are generated, quantized and written one chunk of rows at a time
// through gguf.Writer.AddTensorFunc, so a 5 GB F32 file needs tens of MB of
// memory.
//
// Values: weight matrices N(0, σ²) with σ = 1/√fan_in, which keeps each
// layer's output at the scale of its input; the classifier (token_embd when
// tied) gets σ = logitStd(vocab)/√n_embd so that the median top-1 probability
// is about 0.15 rather than ~1 or uniform; norm weights 1 + 0.1·N(0,1) as in the shared tiny
// models, biases a fifth of their projection's scale (N(0, 0.5²) in the tiny
// shapes, as in tiny-qwen2) (whose shapes use their flat
// σ = 0.15).
package synth

import (
	"context"
	"embed"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"runtime"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tensor"
)

//go:embed templates/*.jinja
var templates embed.FS

// Options control how a model is written. The zero value writes seed 0 with
// GOMAXPROCS workers and no progress reports.
type Options struct {
	// Seed selects the weights; the same seed gives the same file.
	Seed uint64
	// Workers is the number of goroutines generating and quantizing
	// chunks; 0 means GOMAXPROCS.
	Workers int
	// Progress, when set, is called after each chunk of tensor data is
	// written with the bytes written so far and the total.
	Progress func(done, total uint64)
	// Context, when set, stops the writing early when it is done; WriteTo
	// then returns its error.
	Context context.Context
}

// Model is a synthetic model planned but not yet written: its tensors,
// vocabulary and metadata.
type Model struct {
	Shape   Shape
	Type    FileType
	Tensors []TensorSpec
	Vocab   *Vocabulary
	KVs     []gguf.KV
}

// New plans a synthetic model of shape s in file type ft.
func New(s Shape, ft FileType) (*Model, error) {
	ts, err := Plan(&s, ft)
	if err != nil {
		return nil, err
	}
	for i := range ts {
		if !tensor.Quantizable(ts[i].Type) {
			return nil, fmt.Errorf("synth: %s %s needs %s for %s (llama-quantize's choice for rows of %d), which internal/tensor cannot quantize",
				s.Name, ft, ts[i].Type, ts[i].Name, ts[i].Dims[0])
		}
	}
	v, err := BuildVocabulary(&s)
	if err != nil {
		return nil, err
	}
	if len(v.Tokens) != s.Vocab {
		return nil, fmt.Errorf("synth: shape %s: vocabulary of %d tokens, want %d", s.Name, len(v.Tokens), s.Vocab)
	}
	kvs, err := metadata(&s, ft, v)
	if err != nil {
		return nil, err
	}
	return &Model{Shape: s, Type: ft, Tensors: ts, Vocab: v, KVs: kvs}, nil
}

// Name is the general.name of a synthetic model of shape s.
func Name(s *Shape) string {
	if s.Name == "tiny" {
		return "synthetic-tiny-llama" // as the shared tiny-f32.gguf
	}
	return "synthetic-" + s.Name
}

// metadata returns the key/value pairs of the file, in the order llama.cpp's
// tools write them: general keys, the architecture's hyperparameters, the
// tokenizer, the quantization version.
func metadata(s *Shape, ft FileType, v *Vocabulary) ([]gguf.KV, error) {
	var kvs []gguf.KV
	set := func(k string, val gguf.Value) { kvs = append(kvs, gguf.KV{Key: k, Value: val}) }
	u32 := func(k string, n int) { set(k, gguf.Uint32(uint32(n))) }
	a := s.Arch + "."
	set("general.architecture", gguf.String(s.Arch))
	set("general.type", gguf.String("model"))
	set("general.name", gguf.String(Name(s)))
	set("general.file_type", gguf.Uint32(uint32(ft)))
	u32(a+"context_length", s.Context)
	u32(a+"embedding_length", s.Embedding)
	u32(a+"block_count", s.Layers)
	u32(a+"feed_forward_length", s.FFN)
	u32(a+"attention.head_count", s.Heads)
	u32(a+"attention.head_count_kv", s.KVHeads)
	set(a+"rope.freq_base", gguf.Float32(s.RopeTheta))
	set(a+"attention.layer_norm_rms_epsilon", gguf.Float32(s.RMSEps))
	if s.RopeDimKey {
		u32(a+"rope.dimension_count", s.HeadDim)
	}
	if s.KeyLengthKeys {
		u32(a+"attention.key_length", s.HeadDim)
		u32(a+"attention.value_length", s.HeadDim)
	}
	if s.VocabSizeKey {
		u32(a+"vocab_size", s.Vocab)
	}

	tk := &s.Tokenizer
	set("tokenizer.ggml.model", gguf.String(tk.Model))
	if tk.Pre != "" {
		set("tokenizer.ggml.pre", gguf.String(tk.Pre))
	}
	set("tokenizer.ggml.tokens", gguf.Strings(v.Tokens))
	if v.Scores != nil {
		set("tokenizer.ggml.scores", gguf.Float32Array(v.Scores))
	}
	types := make([]int32, len(v.Types))
	for i, t := range v.Types {
		types[i] = int32(t)
	}
	set("tokenizer.ggml.token_type", gguf.Int32Array(types))
	if v.Merges != nil {
		set("tokenizer.ggml.merges", gguf.Strings(v.Merges))
	}
	for _, id := range []struct {
		key string
		id  int
	}{{"unknown_token_id", tk.UNK}, {"bos_token_id", tk.BOS}, {"eos_token_id", tk.EOS}, {"padding_token_id", tk.PAD}} {
		if id.id >= 0 {
			u32("tokenizer.ggml."+id.key, id.id)
		}
	}
	if tk.AddBOS != nil {
		set("tokenizer.ggml.add_bos_token", gguf.Bool(*tk.AddBOS))
	}
	if tk.AddEOS != nil {
		set("tokenizer.ggml.add_eos_token", gguf.Bool(*tk.AddEOS))
	}
	if tk.Template != "" {
		t, err := templates.ReadFile("templates/" + tk.Template)
		if err != nil {
			return nil, fmt.Errorf("synth: chat template %s: %w", tk.Template, err)
		}
		set("tokenizer.chat_template", gguf.String(string(t)))
	}
	set("general.quantization_version", gguf.Uint32(2))
	return kvs, nil
}

// Writer returns a gguf.Writer holding the model's metadata and, as
// streamed tensors, its weights: nothing is generated until WriteTo.
func (m *Model) Writer(opts Options) (*gguf.Writer, error) {
	w := &gguf.Writer{}
	for _, kv := range m.KVs {
		w.Set(kv.Key, kv.Value)
	}
	g := &generator{shape: &m.Shape, seed: opts.Seed, workers: opts.Workers, progress: opts.Progress, ctx: opts.Context}
	if g.ctx == nil {
		g.ctx = context.Background()
	}
	if g.workers <= 0 {
		g.workers = runtime.GOMAXPROCS(0)
	}
	for i := range m.Tensors {
		t := &m.Tensors[i]
		if err := w.AddTensorFunc(t.Name, t.Type, t.Dims, g.fill(t)); err != nil {
			return nil, fmt.Errorf("synth: %w", err)
		}
	}
	g.total = w.DataSize()
	return w, nil
}

// WriteTo generates the weights and writes the whole file to out.
func (m *Model) WriteTo(out io.Writer, opts Options) (int64, error) {
	w, err := m.Writer(opts)
	if err != nil {
		return 0, err
	}
	n, err := w.WriteTo(out)
	if err != nil {
		return n, fmt.Errorf("synth: write %s: %w", m.Shape.Name, err)
	}
	return n, nil
}

// generator produces tensor contents chunk by chunk.
type generator struct {
	shape    *Shape
	seed     uint64
	workers  int
	progress func(done, total uint64)
	ctx      context.Context
	done     uint64
	total    uint64
}

// chunkElems is the target number of values per chunk: small enough that
// workers × window chunks stay in tens of MB, large enough that the
// per-chunk overhead vanishes. It is fixed (not derived from the worker
// count) because chunks are the unit of the random streams.
const chunkElems = 1 << 20

// fill returns the AddTensorFunc callback of tensor t: it cuts the tensor
// into chunks of whole rows, generates and encodes them on g.workers
// goroutines, and writes them in order, keeping at most 2×workers chunks in
// memory.
func (g *generator) fill(t *TensorSpec) func(io.Writer) error {
	return func(out io.Writer) error {
		rowLen := int(t.Dims[0])
		rows := int(t.Elements()) / rowLen
		perChunk := max(1, chunkElems/rowLen)
		nChunks := (rows + perChunk - 1) / perChunk
		type result struct {
			data []byte
			err  error
		}
		results := make([]chan result, nChunks)
		for i := range results {
			results[i] = make(chan result, 1)
		}
		window := make(chan struct{}, 2*g.workers) // chunks generated but not yet written
		work := make(chan int)
		stop := make(chan struct{})
		defer close(stop)
		for w := 0; w < min(g.workers, nChunks); w++ {
			go func() {
				for c := range work {
					first := c * perChunk
					n := min(perChunk, rows-first)
					data, err := g.chunk(t, c, first, n)
					results[c] <- result{data, err}
				}
			}()
		}
		go func() {
			defer close(work)
			for c := 0; c < nChunks; c++ {
				select {
				case window <- struct{}{}:
				case <-stop:
					return
				}
				select {
				case work <- c:
				case <-stop:
					return
				}
			}
		}()
		for c := 0; c < nChunks; c++ {
			if err := g.ctx.Err(); err != nil {
				return err
			}
			var r result
			select {
			case r = <-results[c]:
			case <-g.ctx.Done():
				return g.ctx.Err()
			}
			<-window
			if r.err != nil {
				return r.err
			}
			if _, err := out.Write(r.data); err != nil {
				return err
			}
			g.done += uint64(len(r.data))
			if g.progress != nil {
				g.progress(g.done, g.total)
			}
		}
		return nil
	}
}

// chunk generates rows [first, first+n) of tensor t (chunk number c) and
// encodes them in the tensor's type.
func (g *generator) chunk(t *TensorSpec, c, first, n int) ([]byte, error) {
	rowLen := int(t.Dims[0])
	src := make([]float32, n*rowLen)
	switch t.Init {
	case InitRopeFreqs:
		if g.shape.Llama3Rope == nil {
			return nil, fmt.Errorf("synth: %s: rope factors without rope scaling", t.Name)
		}
		copy(src, llama3RopeFactors(g.shape)[first*rowLen:])
	default:
		r := rand.New(rand.NewPCG(g.seed, streamID(t.Name, c)))
		for i := range src {
			x := r.NormFloat64()
			switch t.Init {
			case InitNorm:
				src[i] = float32(1 + 0.1*x)
			case InitBias:
				src[i] = float32(t.Std * x)
			default:
				src[i] = float32(t.Std * x)
			}
		}
	}
	data, err := encode(t.Type, src)
	if err != nil {
		return nil, fmt.Errorf("synth: %s: %w", t.Name, err)
	}
	return data, nil
}

// streamID names the random stream of chunk c of a tensor.
func streamID(name string, c int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() ^ (uint64(c)+1)*0x9e3779b97f4a7c15
}

// encode stores values in type t with internal/tensor's quantizers, which
// reproduce llama-quantize's output byte for byte.
func encode(t tensor.DType, src []float32) ([]byte, error) {
	return tensor.Quantize(t, src)
}
