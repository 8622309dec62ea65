package model_test

import (
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// TestPlanWidening checks the choice of matrices to widen within a limit on
// a file of two widened types (tiny-iq2_m: IQ3_S, whose copy is 1.9 times
// its size, and IQ2_S, 3.4 times) and a token embedding apart from its
// output projection, never widened: nothing with no room, everything with
// no limit, the cheaper type first, never more than the limit, and no
// matrix left that would still fit.
func TestPlanWidening(t *testing.T) {
	f, err := gguf.Open(modelPath(t, "tiny-iq2_m"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	wide := map[string]int64{}
	var iq3 int64
	nIQ3 := 0
	for _, ts := range f.Tensors {
		if _, ok := tensor.WidenedType(ts.Type); ok && len(ts.Dims) == 2 && ts.Name != "token_embd.weight" {
			wide[ts.Name] = int64(tensor.WidenedRowBytes(ts.Type, ts.Cols())) * int64(ts.Rows())
			if ts.Type == tensor.IQ3_S {
				iq3 += wide[ts.Name]
				nIQ3++
			}
		}
	}
	emb, _ := f.Tensor("token_embd.weight")
	if _, untied := f.Tensor("output.weight"); !untied || len(wide) != 14 || nIQ3 != 4 || emb.Type != tensor.IQ3_S {
		t.Fatalf("tiny-iq2_m: %d widened matrices, %d IQ3_S, embedding %v: not the file expected", len(wide), nIQ3, emb.Type)
	}
	n := len(wide)
	var all int64
	for _, n := range wide {
		all += n
	}
	for _, tc := range []struct {
		limit    int64
		widened  int
		onlyIQ3S bool
	}{
		{0, 0, false},
		{model.NoWidenLimit, n, false},
		{all, n, false},
		{all - 1, n - 1, false},
		{iq3, nIQ3, true},
		{iq3 + wide["blk.0.ffn_up.weight"] - 1, nIQ3 + 2, false}, // and the two smallest IQ2_S
		{iq3 / 2, nIQ3 / 2, true},
	} {
		w := model.PlanWidening(f, tc.limit, false)
		if w.Names["token_embd.weight"] {
			t.Errorf("limit %d: the token embedding widened", tc.limit)
		}
		var widened int
		var bytes int64
		for name := range w.Names {
			widened++
			bytes += wide[name]
			if tc.onlyIQ3S {
				if ts, _ := f.Tensor(name); ts.Type != tensor.IQ3_S {
					t.Errorf("limit %d: %s (%v) widened before IQ3_S's matrices", tc.limit, name, ts.Type)
				}
			}
		}
		if widened != tc.widened || bytes != w.Bytes() || bytes > tc.limit || w.Streamed() != n-widened {
			t.Errorf("limit %d: widened %d matrices (want %d) in %d bytes (plan says %d), %d streamed", tc.limit, widened, tc.widened, bytes, w.Bytes(), w.Streamed())
		}
		for name, n := range wide {
			if ts, _ := f.Tensor(name); ts.Type == tensor.IQ3_S && tc.limit >= iq3 && !w.Names[name] {
				t.Errorf("limit %d: %s (IQ3_S) streamed, the IQ2_S matrices first", tc.limit, name)
			}
			if !w.Names[name] && n <= tc.limit-bytes {
				t.Errorf("limit %d: %s (%d bytes) streamed, with %d bytes left", tc.limit, name, n, tc.limit-bytes)
			}
		}
		var streamed int64
		for _, ty := range w.Types {
			streamed += ty.StreamedWideBytes
		}
		if streamed+bytes != all {
			t.Errorf("limit %d: %d bytes widened and %d streamed of %d", tc.limit, bytes, streamed, all)
		}
	}
}
