package model_test

import (
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// TestDecodePass: the probe's pass stands for a whole decode step's weight
// products whatever its budget: it reports the bytes a step reads (the
// classifier's included), and a time for all of them.
func TestDecodePass(t *testing.T) {
	f, err := model.Open(modelPath(t, "tiny-q8_0"), gguf.Mapped, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := f.Model
	p := tensor.NewPool(2)
	defer p.Close()
	for _, budget := range []int64{1, m.DecodeBytes() / 3, 1 << 40} {
		d, n := m.DecodePass(p, 2, budget)
		if n != m.DecodeBytes() {
			t.Errorf("budget %d: a pass stands for %d bytes, a decode step reads %d", budget, n, m.DecodeBytes())
		}
		if d <= 0 {
			t.Errorf("budget %d: time %v", budget, d)
		}
	}
}
