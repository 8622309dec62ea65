package model_test

import (
	"slices"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// probeModel is the probe tests' model, tiny-q8_0 mapped, and a pool of
// two threads, both closed when the test ends.
func probeModel(t *testing.T) (*model.Model, *tensor.Pool) {
	f, err := model.Open(modelPath(t, "tiny-q8_0"), gguf.Mapped, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	p := tensor.NewPool(2)
	t.Cleanup(p.Close)
	return f.Model, p
}

// TestDecodePass: the probe's pass stands for a whole decode step's weight
// products whatever its budget: it reports the bytes a step reads (the
// classifier's included), and a time for all of them.
func TestDecodePass(t *testing.T) {
	m, p := probeModel(t)
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

// TestPrefillPass: the prompt probe's pass times all the layers' products
// on every token whatever its budget, so a pass of more tokens takes
// longer, and a small budget stands for the whole (within the spread of
// a few passes on a shared machine).
func TestPrefillPass(t *testing.T) {
	m, p := probeModel(t)
	one, many := m.PrefillPass(p, 1, 5, 1<<40), m.PrefillPass(p, 64, 5, 1<<40)
	if one <= 0 || many <= 2*one {
		t.Errorf("a pass on 1 token took %v, on 64 tokens %v", one, many)
	}
	if part := m.PrefillPass(p, 64, 5, m.DecodeBytes()/3); part <= many/2 {
		t.Errorf("a pass on a third of the weights stands for %v, the whole for %v", part, many)
	}
}

// TestSetOneStream: a private (packed) copy's matrices read two streams in
// decode where this CPU has the kernels, one after SetOneStream(true), two
// again after SetOneStream(false); the logits are the same bits either way.
func TestSetOneStream(t *testing.T) {
	for _, name := range []string{"tiny-f16", "tiny-q8_0", "tiny-q4_k_m"} {
		t.Run(name, func(t *testing.T) {
			f, err := model.Open(modelPath(t, name), gguf.HugePages, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m := f.Model
			two := m.TwoStreamMatrices()
			t.Logf("%d matrices read in two streams by default", two)
			if name == "tiny-q4_k_m" && two != 0 {
				t.Fatalf("%d Q4_K/Q6_K matrices read in two streams; they have no such kernel", two)
			}
			want := decodeLogits(t, m)
			m.SetOneStream(true)
			if n := m.TwoStreamMatrices(); n != 0 {
				t.Fatalf("set to one stream, %d matrices still read two", n)
			}
			got := decodeLogits(t, m)
			m.SetOneStream(false)
			if n := m.TwoStreamMatrices(); n != two {
				t.Fatalf("set back to two streams, %d matrices read two, want %d", n, two)
			}
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("sequence %d: logits differ on one stream", i)
				}
			}
		})
	}
}
