package tensor_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/testshared"
)

func openModel(t testing.TB, name string) *gguf.File {
	t.Helper()
	path := testshared.Path(t, "models", name)
	if slices.Contains(ownTinyFiles, name) {
		path = testshared.Own(t, "models", name)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func f32Tensor(t testing.TB, f *gguf.File, name string) []float32 {
	t.Helper()
	tt, ok := f.Tensor(name)
	if !ok {
		t.Fatalf("tensor %s missing", name)
	}
	if tt.Type != tensor.F32 {
		t.Fatalf("tensor %s is %v", name, tt.Type)
	}
	out := make([]float32, tt.Elements())
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(tt.Data[4*i:]))
	}
	return out
}

// tinyFiles maps each quantized tiny model to the type its 2-D tensors hold
// (per shared/models/README.md; exceptions are read from the file itself).
var tinyFiles = []string{"tiny-f16.gguf", "tiny-bf16.gguf", "tiny-q8_0.gguf", "tiny-q4_0.gguf", "tiny-q4_k_m.gguf", "tiny-q6_k.gguf", "tiny-q5_0.gguf", "tiny-q5_k_m.gguf", "tiny-q4_1.gguf", "tiny-q5_1.gguf", "tiny-iq4_nl.gguf", "tiny-q3_k_m.gguf", "tiny-q2_k.gguf", "tiny-iq4_xs.gguf"}

// ownTinyFiles are the tiny files in the repository's own testdata/ (made
// by llama-quantize from the shared tiny-f32 the same way).
var ownTinyFiles = []string{"tiny-q5_0.gguf", "tiny-q5_k_m.gguf", "tiny-q4_1.gguf", "tiny-q5_1.gguf", "tiny-iq4_nl.gguf", "tiny-q3_k_m.gguf", "tiny-q2_k.gguf", "tiny-iq4_xs.gguf"}

var weightNames = []string{
	"token_embd.weight", "output.weight",
	"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.attn_output.weight",
	"blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
	"blk.1.attn_q.weight", "blk.1.attn_k.weight", "blk.1.attn_v.weight", "blk.1.attn_output.weight",
	"blk.1.ffn_gate.weight", "blk.1.ffn_up.weight", "blk.1.ffn_down.weight",
}

// TestQuantizeMatchesLlamaQuantize quantizes tiny-f32's weights and compares
// the bytes with what llama-quantize wrote into the other tiny files.
func TestQuantizeMatchesLlamaQuantize(t *testing.T) {
	src := openModel(t, "tiny-f32.gguf")
	for _, file := range tinyFiles {
		q := openModel(t, file)
		for _, name := range weightNames {
			qt, ok := q.Tensor(name)
			if !ok {
				t.Fatalf("%s: %s missing", file, name)
			}
			x := f32Tensor(t, src, name)
			got, err := tensor.Quantize(qt.Type, x)
			if err != nil {
				t.Fatalf("%s %s: %v", file, name, err)
			}
			if !bytes.Equal(got, qt.Data) {
				bs := qt.Type.TypeSize()
				diff := 0
				for b := 0; b < len(got)/bs; b++ {
					if !bytes.Equal(got[b*bs:(b+1)*bs], qt.Data[b*bs:(b+1)*bs]) {
						diff++
					}
				}
				t.Errorf("%s %s (%v): %d of %d blocks differ from llama-quantize", file, name, qt.Type, diff, len(got)/bs)
			}
		}
	}
}

// TestDequantizeRealTensors dequantizes every 2-D weight of the quantized tiny
// models and compares it with the f32 original: the error must stay within
// what the type's step size allows.
func TestDequantizeRealTensors(t *testing.T) {
	src := openModel(t, "tiny-f32.gguf")
	// Relative RMS error allowed per type (weights are N(0, 0.15²)).
	maxRel := map[tensor.DType]float64{
		tensor.F16: 5e-4, tensor.BF16: 4e-3, tensor.Q8_0: 0.01,
		tensor.Q6_K: 0.04, tensor.Q4_K: 0.12, tensor.Q4_0: 0.15, tensor.Q5_0: 0.075,
		tensor.Q5_K: 0.06, tensor.Q4_1: 0.12, tensor.Q5_1: 0.06,
		tensor.IQ4_NL: 0.12, tensor.Q3_K: 0.25, tensor.Q2_K: 0.5, tensor.IQ4_XS: 0.12,
	}
	for _, file := range tinyFiles {
		q := openModel(t, file)
		for _, name := range weightNames {
			qt, _ := q.Tensor(name)
			x := f32Tensor(t, src, name)
			m, err := tensor.NewMatrix(qt.Type, qt.Rows(), qt.Cols(), qt.Data)
			if err != nil {
				t.Fatalf("%s %s: %v", file, name, err)
			}
			y := make([]float32, len(x))
			if err := tensor.Dequantize(qt.Type, y, qt.Data); err != nil {
				t.Fatal(err)
			}
			var se, sx float64
			for i := range x {
				d := float64(y[i] - x[i])
				se += d * d
				sx += float64(x[i]) * float64(x[i])
			}
			rel := math.Sqrt(se / sx)
			if rel > maxRel[qt.Type] || rel == 0 {
				t.Errorf("%s %s (%v): relative rms error %.3g, allowed %.3g", file, name, qt.Type, rel, maxRel[qt.Type])
			}
			// DequantizeRow agrees with Dequantize of the whole tensor.
			row := make([]float32, m.Cols)
			for _, r := range []int{0, m.Rows / 2, m.Rows - 1} {
				m.DequantizeRow(row, r)
				for c, v := range row {
					if v != y[r*m.Cols+c] {
						t.Fatalf("%s %s row %d: DequantizeRow differs at %d", file, name, r, c)
					}
				}
			}
		}
	}
}
