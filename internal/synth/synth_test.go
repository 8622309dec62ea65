package synth

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/testshared"
)

var big = flag.Bool("big", false, "also write the large shapes (slow)")

// openShared opens a tiny model from the shared data, or from the
// repository's own testdata/ for the ones it made itself.
func openShared(t *testing.T, name string) *gguf.File {
	t.Helper()
	path := testshared.Path(t, "models", name)
	if own := testshared.Own(t, "models", name); fileExists(own) {
		path = own
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func mustShape(t testing.TB, name, arch string) Shape {
	t.Helper()
	s, err := LookupShape(name, arch)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// canEncode reports whether every tensor type of a plan can be written by
// this build (the quantizers live in internal/tensor).
func canEncode(ts []TensorSpec) error {
	for i := range ts {
		if _, err := encode(ts[i].Type, make([]float32, ts[i].Dims[0])); err != nil {
			return err
		}
	}
	return nil
}

// writeModel writes a model to memory and parses it back.
func writeModel(t *testing.T, m *Model, opts Options) (*gguf.File, []byte) {
	t.Helper()
	var buf bytes.Buffer
	n, err := m.WriteTo(&buf, opts)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return f, buf.Bytes()
}

// layoutOf returns "name type dims" for every tensor, in file order.
func layoutOf(f *gguf.File) []string {
	var out []string
	for i := range f.Tensors {
		t := &f.Tensors[i]
		out = append(out, fmt.Sprintf("%s %s %v", t.Name, t.Type, t.Dims))
	}
	return out
}

func planLayout(ts []TensorSpec) []string {
	var out []string
	for i := range ts {
		out = append(out, fmt.Sprintf("%s %s %v", ts[i].Name, ts[i].Type, ts[i].Dims))
	}
	return out
}

// metadataExcept returns the file's metadata without the given keys.
func metadataExcept(f *gguf.File, skip ...string) map[string]gguf.Value {
	out := map[string]gguf.Value{}
	for _, kv := range f.KVs {
		out[kv.Key] = kv.Value
	}
	for _, k := range skip {
		delete(out, k)
	}
	return out
}

// TestTinyPlansMatchShared checks the tensor list (names, order, types,
// dims) of every tiny plan against the shared files llama-quantize made, and
// the metadata against the shared F32 file: the synthetic tiny models have
// the shared models' layout exactly.
func TestTinyPlansMatchShared(t *testing.T) {
	tests := []struct {
		shape, arch, file string
		ft                FileType
	}{
		{"tiny", "", "tiny-f32.gguf", FileF32},
		{"tiny", "", "tiny-f16.gguf", FileF16},
		{"tiny", "llama", "tiny-q8_0.gguf", FileQ8_0},
		{"tiny", "", "tiny-q4_k_m.gguf", FileQ4_KM},
		{"tiny", "", "tiny-q4_0.gguf", FileQ4_0},
		// the repository's own testdata/
		{"tiny", "", "tiny-q5_k_m.gguf", FileQ5_KM},
		{"tiny", "", "tiny-q3_k_m.gguf", FileQ3_KM},
		{"tiny", "", "tiny-q2_k.gguf", FileQ2_K},
		{"tiny", "qwen2", "tiny-qwen2-f32.gguf", FileF32},
		{"tiny-qwen2", "", "tiny-qwen2-q8_0.gguf", FileQ8_0},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			s := mustShape(t, tc.shape, tc.arch)
			ref := openShared(t, tc.file)
			m, err := New(s, tc.ft)
			if err != nil {
				t.Fatal(err)
			}
			got, want := planLayout(m.Tensors), layoutOf(ref)
			if tc.ft == FileF16 {
				// llama-quantize writes its own order even for F16.
				got, want = sorted(got), sorted(want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("tensors differ from %s\n got %q\nwant %q", tc.file, got, want)
			}
			if p := Params(m.Tensors); tc.file == "tiny-f32.gguf" && p != 1443072 {
				t.Errorf("%d parameters, models/README.md says 1,443,072", p)
			} else if tc.file == "tiny-qwen2-f32.gguf" && p != 1313024 {
				t.Errorf("%d parameters, models/README.md says 1,313,024", p)
			}
			if ft, _ := ref.Int("general.file_type"); FileType(ft) != tc.ft {
				t.Errorf("shared file has file_type %d, plan %d", ft, tc.ft)
			}
			// Metadata: every key of the shared file, same type and value,
			// except the ones only the generator tools differ in.
			ours := map[string]gguf.Value{}
			for _, kv := range m.KVs {
				ours[kv.Key] = kv.Value
			}
			theirs := metadataExcept(ref, "general.alignment", "general.quantization_version")
			for k, v := range theirs {
				if !reflect.DeepEqual(ours[k], v) {
					t.Errorf("metadata %s = %v (%s), shared file has %v (%s)", k, ours[k], ours[k].Type, v, v.Type)
				}
			}
			for k := range ours {
				if _, ok := theirs[k]; !ok && k != "general.type" && k != "general.quantization_version" {
					t.Errorf("extra metadata %s", k)
				}
			}
		})
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// TestTinyFileRoundTrip writes the tiny models in every type this build can
// encode and checks the written files: layout as planned, metadata, data
// sizes, and the value statistics of the weights.
func TestTinyFileRoundTrip(t *testing.T) {
	for _, shape := range []string{"tiny", "tiny-qwen2", "tiny-qwen3"} {
		for _, ft := range []FileType{FileF32, FileF16, FileQ8_0, FileQ4_0, FileQ5_0, FileQ2_K, FileQ3_KM, FileQ4_KM, FileQ5_KM} {
			t.Run(shape+"-"+ft.String(), func(t *testing.T) {
				m, err := New(mustShape(t, shape, ""), ft)
				if err != nil {
					t.Fatal(err)
				}
				if err := canEncode(m.Tensors); err != nil {
					t.Skipf("this build cannot write %s: %v", ft, err)
				}
				f, _ := writeModel(t, m, Options{Seed: 1})
				if got, want := layoutOf(f), planLayout(m.Tensors); !reflect.DeepEqual(got, want) {
					t.Errorf("written tensors %q, planned %q", got, want)
				}
				if name, _ := f.String("general.name"); !strings.HasPrefix(name, "synthetic-tiny") {
					t.Errorf("general.name %q", name)
				}
				if ft == FileF32 {
					checkStats(t, m, f)
				}
			})
		}
	}
}

// checkStats checks the sample mean and standard deviation of each F32
// tensor against its Init.
func checkStats(t *testing.T, m *Model, f *gguf.File) {
	t.Helper()
	for i := range m.Tensors {
		spec := &m.Tensors[i]
		tt, ok := f.Tensor(spec.Name)
		if !ok {
			t.Fatalf("%s missing", spec.Name)
		}
		var sum, sq float64
		n := len(tt.Data) / 4
		for j := 0; j < n; j++ {
			x := float64(math.Float32frombits(uint32(tt.Data[4*j]) | uint32(tt.Data[4*j+1])<<8 | uint32(tt.Data[4*j+2])<<16 | uint32(tt.Data[4*j+3])<<24))
			sum += x
			sq += x * x
		}
		mean := sum / float64(n)
		sd := math.Sqrt(sq/float64(n) - mean*mean)
		wantMean, wantSD := 0.0, spec.Std
		switch spec.Init {
		case InitNorm:
			wantMean, wantSD = 1, 0.1
		case InitRopeFreqs:
			continue
		}
		// Standard errors: sd/√n for the mean, sd/√(2n) for the sd; allow 5.
		if math.Abs(mean-wantMean) > 5*wantSD/math.Sqrt(float64(n)) || math.Abs(sd-wantSD) > 5*wantSD/math.Sqrt(float64(2*n)) {
			t.Errorf("%s: mean %.4f sd %.4f, want %.4f %.4f (n=%d)", spec.Name, mean, sd, wantMean, wantSD, n)
		}
	}
}

// TestDeterminism: the same seed gives the same bytes whatever the number of
// workers; another seed gives other weights but the same header.
func TestDeterminism(t *testing.T) {
	m, err := New(mustShape(t, "tiny", ""), FileF32)
	if err != nil {
		t.Fatal(err)
	}
	_, a := writeModel(t, m, Options{Seed: 7, Workers: 1})
	_, b := writeModel(t, m, Options{Seed: 7, Workers: 3})
	if !bytes.Equal(a, b) {
		t.Error("1 and 3 workers wrote different files")
	}
	fc, c := writeModel(t, m, Options{Seed: 8})
	if bytes.Equal(a, c) {
		t.Error("seeds 7 and 8 wrote the same file")
	}
	if hdr := fc.DataOffset; !bytes.Equal(a[:hdr], c[:hdr]) {
		t.Error("the header depends on the seed")
	}
}

// TestProgress checks the progress callback's totals.
func TestProgress(t *testing.T) {
	m, err := New(mustShape(t, "tiny", ""), FileF32)
	if err != nil {
		t.Fatal(err)
	}
	var calls int
	var last, total uint64
	f, data := writeModel(t, m, Options{Progress: func(done, tot uint64) {
		if done < last {
			t.Errorf("progress went back from %d to %d", last, done)
		}
		calls++
		last, total = done, tot
	}})
	if calls < len(m.Tensors) {
		t.Errorf("%d progress calls for %d tensors", calls, len(m.Tensors))
	}
	var sum uint64
	for i := range f.Tensors {
		sum += uint64(len(f.Tensors[i].Data))
	}
	if last != sum || total < sum || f.DataOffset+total != uint64(len(data)) {
		t.Errorf("progress ended at %d of %d; tensor data is %d bytes", last, total, sum)
	}
}

// TestBigPlans checks the tensor lists of the real shapes without writing
// data: counts, the shapes of one layer, tied embeddings, parameter counts
// equal to the published ones, and the Q4_K_M mix.
func TestBigPlans(t *testing.T) {
	tests := []struct {
		shape   string
		params  uint64 // published parameter count (+ rope_freqs for Llama 3.2)
		tensors int
		layer0  []string
		kvBytes int
	}{
		{"smollm2-135m", 134515008, 2 + 30*9, []string{
			"blk.0.attn_norm.weight F32 [576]", "blk.0.attn_q.weight F32 [576 576]", "blk.0.attn_k.weight F32 [576 192]",
			"blk.0.attn_v.weight F32 [576 192]", "blk.0.attn_output.weight F32 [576 576]", "blk.0.ffn_norm.weight F32 [576]",
			"blk.0.ffn_gate.weight F32 [576 1536]", "blk.0.ffn_up.weight F32 [576 1536]", "blk.0.ffn_down.weight F32 [1536 576]"},
			30 * 2 * 3 * 64 * 2},
		{"llama-3.2-1b", 1235814400 + 32, 3 + 16*9, []string{
			"blk.0.attn_norm.weight F32 [2048]", "blk.0.attn_q.weight F32 [2048 2048]", "blk.0.attn_k.weight F32 [2048 512]",
			"blk.0.attn_v.weight F32 [2048 512]", "blk.0.attn_output.weight F32 [2048 2048]", "blk.0.ffn_norm.weight F32 [2048]",
			"blk.0.ffn_gate.weight F32 [2048 8192]", "blk.0.ffn_up.weight F32 [2048 8192]", "blk.0.ffn_down.weight F32 [8192 2048]"},
			16 * 2 * 8 * 64 * 2},
		{"qwen2.5-0.5b", 494032768, 2 + 24*12, []string{
			"blk.0.attn_norm.weight F32 [896]", "blk.0.attn_q.weight F32 [896 896]", "blk.0.attn_k.weight F32 [896 128]",
			"blk.0.attn_v.weight F32 [896 128]", "blk.0.attn_q.bias F32 [896]", "blk.0.attn_k.bias F32 [128]",
			"blk.0.attn_v.bias F32 [128]", "blk.0.attn_output.weight F32 [896 896]", "blk.0.ffn_norm.weight F32 [896]",
			"blk.0.ffn_gate.weight F32 [896 4864]", "blk.0.ffn_up.weight F32 [896 4864]", "blk.0.ffn_down.weight F32 [4864 896]"},
			24 * 2 * 2 * 64 * 2},
		{"qwen3-0.6b", 596049920, 2 + 28*11, []string{
			"blk.0.attn_norm.weight F32 [1024]", "blk.0.attn_q.weight F32 [1024 2048]", "blk.0.attn_k.weight F32 [1024 1024]",
			"blk.0.attn_v.weight F32 [1024 1024]", "blk.0.attn_q_norm.weight F32 [128]", "blk.0.attn_k_norm.weight F32 [128]",
			"blk.0.attn_output.weight F32 [2048 1024]", "blk.0.ffn_norm.weight F32 [1024]",
			"blk.0.ffn_gate.weight F32 [1024 3072]", "blk.0.ffn_up.weight F32 [1024 3072]", "blk.0.ffn_down.weight F32 [3072 1024]"},
			28 * 2 * 8 * 128 * 2},
	}
	for _, tc := range tests {
		t.Run(tc.shape, func(t *testing.T) {
			s := mustShape(t, tc.shape, "")
			ts, err := Plan(&s, FileF32)
			if err != nil {
				t.Fatal(err)
			}
			if len(ts) != tc.tensors {
				t.Errorf("%d tensors, want %d", len(ts), tc.tensors)
			}
			if p := Params(ts); p != tc.params {
				t.Errorf("%d parameters, want %d", p, tc.params)
			}
			lay := planLayout(ts)
			first := 1
			if s.Llama3Rope != nil {
				first = 2
				if lay[1] != "rope_freqs.weight F32 [32]" {
					t.Errorf("tensor 1 is %q", lay[1])
				}
			}
			if got := lay[first : first+len(tc.layer0)]; !reflect.DeepEqual(got, tc.layer0) {
				t.Errorf("layer 0:\n got %q\nwant %q", got, tc.layer0)
			}
			if lay[0] != fmt.Sprintf("token_embd.weight F32 [%d %d]", s.Embedding, s.Vocab) {
				t.Errorf("tensor 0 is %q", lay[0])
			}
			for _, l := range lay {
				if strings.HasPrefix(l, "output.weight") {
					t.Errorf("tied model has %s", l)
				}
			}
			if got := s.KVBytesPerToken(); got != tc.kvBytes {
				t.Errorf("KV bytes per token %d, want %d", got, tc.kvBytes)
			}
		})
	}
}

// TestQ4KMMix checks the Q4_K_M type choices of llama-quantize on the real
// shapes: the classifier, the attn_v/ffn_down layers that get Q6_K, and the
// fallbacks for rows that are not a multiple of 256.
func TestQ4KMMix(t *testing.T) {
	tests := []struct {
		shape string
		want  map[string]tensor.DType
		count map[tensor.DType]int
	}{
		{"llama-3.2-1b", map[string]tensor.DType{
			"token_embd.weight": tensor.Q6_K, "rope_freqs.weight": tensor.F32,
			"blk.0.attn_v.weight": tensor.Q6_K, "blk.2.attn_v.weight": tensor.Q4_K, "blk.3.attn_v.weight": tensor.Q4_K,
			"blk.4.attn_v.weight": tensor.Q6_K, "blk.14.ffn_down.weight": tensor.Q6_K, "blk.13.ffn_down.weight": tensor.Q6_K,
			"blk.12.ffn_down.weight": tensor.Q4_K, "blk.5.attn_q.weight": tensor.Q4_K,
		}, map[tensor.DType]int{tensor.Q6_K: 1 + 2*8, tensor.Q4_K: 16*7 - 2*8, tensor.F32: 1 + 1 + 16*2}},
		{"qwen3-0.6b", map[string]tensor.DType{
			"token_embd.weight": tensor.Q6_K, "blk.0.attn_q_norm.weight": tensor.F32,
			"blk.27.ffn_down.weight": tensor.Q6_K, "blk.5.ffn_down.weight": tensor.Q6_K, "blk.6.ffn_down.weight": tensor.Q4_K,
		}, nil},
		{"smollm2-135m", map[string]tensor.DType{
			// 576-wide rows: Q4_K → Q5_0, Q6_K → Q8_0; 1536-wide ffn_down keeps k-quants.
			"token_embd.weight": tensor.Q8_0, "blk.0.attn_q.weight": tensor.Q5_0, "blk.0.attn_v.weight": tensor.Q8_0,
			"blk.4.attn_v.weight": tensor.Q5_0, "blk.0.ffn_down.weight": tensor.Q6_K, "blk.4.ffn_down.weight": tensor.Q4_K,
			"blk.4.ffn_gate.weight": tensor.Q5_0,
		}, nil},
		{"qwen2.5-0.5b", map[string]tensor.DType{
			"token_embd.weight": tensor.Q8_0, "blk.1.attn_q.bias": tensor.F32, "blk.1.attn_k.weight": tensor.Q5_0,
			"blk.23.ffn_down.weight": tensor.Q6_K, "blk.10.ffn_down.weight": tensor.Q4_K,
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.shape, func(t *testing.T) {
			s := mustShape(t, tc.shape, "")
			ts, err := Plan(&s, FileQ4_KM)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]tensor.DType{}
			count := map[tensor.DType]int{}
			for i := range ts {
				got[ts[i].Name] = ts[i].Type
				count[ts[i].Type]++
			}
			for name, want := range tc.want {
				if got[name] != want {
					t.Errorf("%s is %s, want %s", name, got[name], want)
				}
			}
			if tc.count != nil && !reflect.DeepEqual(count, tc.count) {
				t.Errorf("type counts %v, want %v", count, tc.count)
			}
		})
	}
}

func TestLookupShape(t *testing.T) {
	tests := []struct {
		name, arch, want, err string
	}{
		{"smollm2-135m", "", "smollm2-135m", ""},
		{"smollm2-135m", "llama", "smollm2-135m", ""},
		{"SmolLM2-135M", "LLAMA", "smollm2-135m", ""},
		{"smollm2-135m", "qwen2", "", "is a llama model, not qwen2"},
		{"qwen3-0.6b", "llama", "", "is a qwen3 model"},
		{"tiny", "", "tiny", ""},
		{"tiny", "llama", "tiny", ""},
		{"tiny", "qwen2", "tiny-qwen2", ""},
		{"tiny", "qwen3", "tiny-qwen3", ""},
		{"tiny", "gemma", "", "no tiny shape for architecture"},
		{"gpt-5", "", "", "unknown shape"},
	}
	for _, tc := range tests {
		s, err := LookupShape(tc.name, tc.arch)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("LookupShape(%q, %q): error %v, want %q", tc.name, tc.arch, err, tc.err)
			}
			continue
		}
		if err != nil || s.Name != tc.want {
			t.Errorf("LookupShape(%q, %q) = %s, %v; want %s", tc.name, tc.arch, s.Name, err, tc.want)
		}
	}
	for _, name := range ShapeNames() {
		s := mustShape(t, name, "")
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestParseFileType(t *testing.T) {
	for in, want := range map[string]FileType{"f32": FileF32, "F16": FileF16, "q8_0": FileQ8_0, "q4_k": FileQ4_KM, "Q4_K_M": FileQ4_KM, "q5_k": FileQ5_KM, "Q5_K_M": FileQ5_KM, "q4_0": FileQ4_0, "Q5_0": FileQ5_0, "q2_k": FileQ2_K, "q3_k": FileQ3_KM, "Q3_K_M": FileQ3_KM} {
		if got, err := ParseFileType(in); err != nil || got != want {
			t.Errorf("ParseFileType(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"q3_k_s", "iq4_xs", ""} {
		if _, err := ParseFileType(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestRopeFactors checks rope_freqs.weight of Llama 3.2 against the rule:
// 1 for wavelengths under 8192/4, 32 over 8192/1, blended between, and
// monotonic.
func TestRopeFactors(t *testing.T) {
	s := mustShape(t, "llama-3.2-1b", "")
	f := llama3RopeFactors(&s)
	if len(f) != 32 {
		t.Fatalf("%d factors", len(f))
	}
	var ones, full, blend int
	for i, x := range f {
		if i > 0 && x < f[i-1] {
			t.Errorf("factor %d (%g) < factor %d (%g)", i, x, i-1, f[i-1])
		}
		switch {
		case x == 1:
			ones++
		case x == 32:
			full++
		default:
			blend++
		}
	}
	// With θ = 500000 and head dim 64 the wavelength 2π·θ^(i/32) passes
	// 2048 at i ≈ 14.1 and 8192 at i ≈ 17.5.
	if ones != 15 || blend != 3 || full != 14 {
		t.Errorf("%d ones, %d blended, %d full factors: %v", ones, blend, full, f)
	}
}

// TestWriteLargeStreams writes SmolLM2-135M in F32 (540 MB) to a discarding
// writer and checks that memory stays far below the file size. Slow: run
// with -big.
func TestWriteLargeStreams(t *testing.T) {
	if !*big {
		t.Skip("slow; run with -big")
	}
	m, err := New(mustShape(t, "smollm2-135m", ""), FileF32)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	peak := make(chan uint64)
	go func() {
		var max uint64
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				peak <- max
				return
			default:
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > max {
				max = ms.HeapInuse
			}
			runtime.Gosched()
		}
	}()
	n, err := m.WriteTo(io.Discard, Options{Seed: 1})
	close(stop)
	p := <-peak
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d bytes, peak heap %d MB", n, p>>20)
	if p > 256<<20 {
		t.Errorf("peak heap %d MB for a %d MB file", p>>20, n>>20)
	}
}

// TestQuantizedMatchF32 writes tiny in every type with the same seed and
// checks that each quantized tensor dequantizes to its F32 values within the
// type's error, and that 1-D tensors are byte-identical: the types differ
// only in how the same weights are stored.
func TestQuantizedMatchF32(t *testing.T) {
	m32, err := New(mustShape(t, "tiny", ""), FileF32)
	if err != nil {
		t.Fatal(err)
	}
	f32, _ := writeModel(t, m32, Options{Seed: 5})
	// Relative RMS error bounds: Q8_0 ~0.4%, Q6_K ~1.5%, Q5_K ~3%, Q4_K ~6%,
	// Q3_K ~15%, Q2_K ~30% on Gaussian data; F16 ~0.02%.
	bound := map[tensor.DType]float64{tensor.F32: 0, tensor.F16: 0.001, tensor.Q8_0: 0.01, tensor.Q6_K: 0.03,
		tensor.Q5_K: 0.05, tensor.Q4_K: 0.1, tensor.Q3_K: 0.2, tensor.Q2_K: 0.35, tensor.Q5_0: 0.06, tensor.Q4_0: 0.12}
	for _, ft := range []FileType{FileF16, FileQ8_0, FileQ4_0, FileQ5_0, FileQ2_K, FileQ3_KM, FileQ4_KM, FileQ5_KM} {
		t.Run(ft.String(), func(t *testing.T) {
			m, err := New(mustShape(t, "tiny", ""), ft)
			if err != nil {
				t.Fatal(err)
			}
			f, _ := writeModel(t, m, Options{Seed: 5})
			for i := range f.Tensors {
				q := &f.Tensors[i]
				ref, _ := f32.Tensor(q.Name)
				want := make([]float32, ref.Elements())
				got := make([]float32, q.Elements())
				if err := tensor.Dequantize(tensor.F32, want, ref.Data); err != nil {
					t.Fatal(err)
				}
				if err := tensor.Dequantize(q.Type, got, q.Data); err != nil {
					t.Fatal(err)
				}
				var num, den float64
				for j := range want {
					d := float64(got[j] - want[j])
					num += d * d
					den += float64(want[j]) * float64(want[j])
				}
				rel := math.Sqrt(num / den)
				b, ok := bound[q.Type]
				if !ok || rel > b {
					t.Errorf("%s (%s): relative RMS error %.4f (bound %v)", q.Name, q.Type, rel, b)
				}
				if q.Type == tensor.F32 && !bytes.Equal(q.Data, ref.Data) {
					t.Errorf("%s: F32 bytes differ", q.Name)
				}
			}
		})
	}
}

// TestKMixFallbacks: llama-quantize's Q4_K_M and Q5_K_M give rows that 256
// does not divide (SmolLM2's 576, Qwen2.5's 896) Q5_0 and Q5_1 instead of
// Q4_K and Q5_K, and Q8_0 instead of Q6_K; rows of multiples of 256 keep
// the k-quants. Q5_K_M is Q4_K_M's mix with Q5_K for Q4_K.
func TestKMixFallbacks(t *testing.T) {
	for _, mix := range []struct {
		ft             FileType
		base, fallback tensor.DType
	}{{FileQ4_KM, tensor.Q4_K, tensor.Q5_0}, {FileQ5_KM, tensor.Q5_K, tensor.Q5_1}} {
		for _, tc := range []struct {
			shape    string
			fallback bool
		}{
			{"smollm2-135m", true}, {"qwen2.5-0.5b", true}, {"llama-3.2-1b", false}, {"qwen3-0.6b", false},
		} {
			m, err := New(mustShape(t, tc.shape, ""), mix.ft)
			if err != nil {
				t.Fatalf("%s %v: %v", tc.shape, mix.ft, err)
			}
			q4, err := New(mustShape(t, tc.shape, ""), FileQ4_KM)
			if err != nil {
				t.Fatal(err)
			}
			for i, ts := range m.Tensors {
				switch {
				case len(ts.Dims) != 2:
				case ts.Dims[0]%256 != 0 && !slices.Contains([]tensor.DType{mix.fallback, tensor.Q8_0}, ts.Type):
					t.Errorf("%s %v: %s, rows of %d, is %v", tc.shape, mix.ft, ts.Name, ts.Dims[0], ts.Type)
				case ts.Dims[0]%256 == 0 && !slices.Contains([]tensor.DType{mix.base, tensor.Q6_K}, ts.Type):
					t.Errorf("%s %v: %s, rows of %d, is %v", tc.shape, mix.ft, ts.Name, ts.Dims[0], ts.Type)
				}
				// The same choice as Q4_K_M's, on the mix's own types.
				want := map[tensor.DType]tensor.DType{tensor.Q4_K: mix.base, tensor.Q5_0: mix.fallback}[q4.Tensors[i].Type]
				if want == 0 {
					want = q4.Tensors[i].Type
				}
				if ts.Name != q4.Tensors[i].Name || ts.Type != want {
					t.Errorf("%s %v: %s is %v, Q4_K_M's %s is %v", tc.shape, mix.ft, ts.Name, ts.Type, q4.Tensors[i].Name, q4.Tensors[i].Type)
				}
			}
			hasFallback := slices.ContainsFunc(m.Tensors, func(ts TensorSpec) bool { return ts.Type == mix.fallback })
			if hasFallback != tc.fallback {
				t.Errorf("%s %v: %v tensors %v, want %v", tc.shape, mix.ft, mix.fallback, hasFallback, tc.fallback)
			}
		}
	}
}

// TestLowKMixes: Q3_K_M's and Q2_K's choices beyond the tiny files (which
// llama-quantize checks byte for byte in TestTinyPlansMatchShared): Q2_K's
// attn_v is Q4_K where four or more query heads share a KV head (Llama 3.2:
// 32/8) and Q3_K where fewer do (Qwen3-0.6B: 16/8); Q3_K_M's attn_v is Q5_K
// in the first two layers; rows 256 does not divide (SmolLM2's 576) fall
// back to IQ4_NL from Q2_K and Q3_K. (The whole plans of SmolLM2-135M,
// Qwen2.5-0.5B and Llama-3.2-1B in Q2_K, Q3_K_M and Q5_K_M were compared with
// llama-quantize's files once, outside the tests: every tensor's type.)
func TestLowKMixes(t *testing.T) {
	typeOf := func(shape string, ft FileType, name string) tensor.DType {
		m, err := New(mustShape(t, shape, ""), ft)
		if err != nil {
			t.Fatalf("%s %v: %v", shape, ft, err)
		}
		for _, ts := range m.Tensors {
			if ts.Name == name {
				return ts.Type
			}
		}
		t.Fatalf("%s: no %s", shape, name)
		return 0
	}
	for _, tc := range []struct {
		shape string
		ft    FileType
		name  string
		want  tensor.DType
	}{
		{"llama-3.2-1b", FileQ2_K, "blk.3.attn_v.weight", tensor.Q4_K},
		{"qwen3-0.6b", FileQ2_K, "blk.3.attn_v.weight", tensor.Q3_K},
		{"llama-3.2-1b", FileQ2_K, "blk.3.ffn_gate.weight", tensor.Q2_K},
		{"llama-3.2-1b", FileQ2_K, "blk.3.attn_output.weight", tensor.Q3_K},
		{"llama-3.2-1b", FileQ3_KM, "blk.1.attn_v.weight", tensor.Q5_K},
		{"llama-3.2-1b", FileQ3_KM, "blk.2.attn_v.weight", tensor.Q4_K},
		{"llama-3.2-1b", FileQ3_KM, "blk.0.ffn_down.weight", tensor.Q5_K},
		{"llama-3.2-1b", FileQ3_KM, "blk.1.ffn_down.weight", tensor.Q4_K},
		{"llama-3.2-1b", FileQ3_KM, "blk.1.ffn_up.weight", tensor.Q3_K},
		{"smollm2-135m", FileQ2_K, "blk.1.ffn_up.weight", tensor.IQ4_NL},
		{"smollm2-135m", FileQ3_KM, "blk.1.attn_q.weight", tensor.IQ4_NL},
		{"smollm2-135m", FileQ3_KM, "blk.0.ffn_down.weight", tensor.Q5_K},
		{"smollm2-135m", FileQ3_KM, "blk.1.ffn_down.weight", tensor.Q4_K},
	} {
		if got := typeOf(tc.shape, tc.ft, tc.name); got != tc.want {
			t.Errorf("%s %v: %s is %v, want %v", tc.shape, tc.ft, tc.name, got, tc.want)
		}
	}
}

// TestCancel: a cancelled context stops the writing with its error.
func TestCancel(t *testing.T) {
	m, err := New(mustShape(t, "tiny", ""), FileF32)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, err = m.WriteTo(io.Discard, Options{Context: ctx, Progress: func(done, total uint64) {
		if calls++; calls == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
}

// TestInitScales pins the value scales: the tiny shapes use the shared tiny
// models' σ (0.15 weights, 0.5 biases); the real shapes the fan-in rule.
func TestInitScales(t *testing.T) {
	std := func(shape, name string) float64 {
		s := mustShape(t, shape, "")
		ts, err := Plan(&s, FileF32)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ts {
			if ts[i].Name == name {
				return ts[i].Std
			}
		}
		t.Fatalf("%s has no %s", shape, name)
		return 0
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, c := range []struct {
		shape, name string
		want        float64
	}{
		{"tiny-qwen2", "blk.0.attn_q.bias", 0.5},
		{"tiny-qwen2", "blk.1.attn_v.bias", 0.5},
		{"tiny", "blk.0.attn_q.weight", 0.15},
		{"tiny", "output.weight", 0.15},
		{"qwen2.5-0.5b", "blk.0.attn_q.bias", 0.4},
		{"qwen2.5-0.5b", "blk.0.attn_v.bias", 0.2},
		{"qwen2.5-0.5b", "blk.0.attn_v.weight", 1 / math.Sqrt(896)},
		{"qwen2.5-0.5b", "blk.0.attn_k.weight", 2 / math.Sqrt(896)},
		{"llama-3.2-1b", "blk.3.ffn_down.weight", 1 / math.Sqrt(8192)},
		{"llama-3.2-1b", "token_embd.weight", logitStd(128256) / math.Sqrt(2048)},
	} {
		if got := std(c.shape, c.name); !near(got, c.want) {
			t.Errorf("%s %s: σ %g, want %g", c.shape, c.name, got, c.want)
		}
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
