package model_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// TestUnsupportedTypeRefused: a file with a matrix of a type the kernels do
// not compute (TQ1_0 here, tiny-f32 with one matrix rewritten) is refused
// at load with the type, the tensor and the supported types named.
func TestUnsupportedTypeRefused(t *testing.T) {
	src, err := gguf.Open(modelPath(t, "tiny-f32"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	w := &gguf.Writer{Alignment: src.Alignment}
	for _, kv := range src.KVs {
		w.Set(kv.Key, kv.Value)
	}
	for _, tt := range src.Tensors {
		typ, data := tt.Type, tt.Data
		if tt.Name == "blk.0.ffn_up.weight" {
			typ = tensor.TQ1_0
			data = make([]byte, typ.RowBytes(tt.Cols())*tt.Rows())
		}
		if err := w.AddTensor(tt.Name, typ, tt.Dims, data); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	_, err = model.Load(f)
	if err == nil {
		t.Fatal("a file with a TQ1_0 matrix loaded")
	}
	for _, want := range []string{"blk.0.ffn_up.weight", "TQ1_0", "Q4_0, Q4_1, Q5_0, Q5_1", "Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ4_NL, IQ3_S, IQ2_S, IQ4_XS", "IQ1_M, BF16"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
