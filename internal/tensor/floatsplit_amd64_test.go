//go:build amd64 && !purego

package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestOneTokenSplit: one token's product over two streams (oneToken with
// f16PackedS_1, bf16PackedS_1) gives the one-stream kernel's bits for every
// block count, odd ones and those too few to split included, on odd
// numbers of steps.
func TestOneTokenSplit(t *testing.T) {
	if zmmRowStep(F16) == 0 {
		t.Skip("no zmm F16 layout on this CPU (AVX-512 level)")
	}
	rng := rand.New(rand.NewPCG(41, 42))
	type kernels struct {
		typ   DType
		one   halfFn
		split halfSplitFn
		step  int // columns a step
	}
	cases := []kernels{{F16, f16PackedZ_1, f16PackedS_1, 8}}
	if zmmRowStep(BF16) != 0 {
		cases = append(cases, kernels{BF16, bf16PackedZ_1, bf16PackedS_1, 16})
	} else {
		t.Log("BF16: no vdpbf16ps on this CPU, its split kernel not tested")
	}
	for _, c := range cases {
		for _, cols := range []int{16, 16 * 37} {
			for _, blocks := range []int{1, 2, 3, 15, 16, 17, 32, 33, 40} {
				rows := 8 * blocks
				m, _ := randMatrix(t, rng, c.typ, rows, cols)
				m = Pack(m)
				if !m.packed {
					t.Fatalf("%v %dx%d: not packed", c.typ, rows, cols)
				}
				x := randVec(rng, cols, 1)
				y, yStride := unsafe.Pointer(&x[0]), cols*4
				if c.typ == BF16 { // the kernels read the token's BF16 values
					h := make([]uint16, cols)
					for i, v := range x {
						h[i] = F32ToBF16(v)
					}
					y, yStride = unsafe.Pointer(&h[0]), cols*2
				}
				rb, steps := m.RowBytes(), cols/c.step
				want, got := make([]float32, rows), make([]float32, rows)
				c.one(&m.Data[0], 8*rb, blocks, y, yStride, steps, &want[0], 4)
				for i := range got {
					got[i] = float32(math.NaN())
				}
				// Split wherever there are two blocks, and where the
				// halves are at least 16 blocks.
				for _, minSplit := range []int{0, 16 * 8 * rb} {
					oneToken(c.one, c.split, minSplit, m.Data, 8*rb, blocks, y, yStride, steps, got)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %d blocks × %d columns, split from %d bytes: row %d = %v, want %v", c.typ, blocks, cols, minSplit, i, got[i], want[i])
						}
						got[i] = float32(math.NaN())
					}
				}
			}
		}
	}
}

// TestOneStreamSetting: a packed matrix of each type with a two-stream
// kernel reads its decode items in two streams by default and in one when
// set to (Matrix.OneStream), with the same bits either way; types without
// such a kernel, and unpacked matrices, never split.
func TestOneStreamSetting(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	p := NewPool(2)
	defer p.Close()
	for _, tc := range []struct {
		typ        DType
		rows, cols int
	}{{F16, 1003, 2048}, {BF16, 1003, 2048}, {Q8_0, 4003, 2048}, {Q4_0, 4003, 2048}, {Q4_K, 64, 256}} {
		m, _ := randMatrix(t, rng, tc.typ, tc.rows, tc.cols)
		if m.TwoStreams() {
			t.Fatalf("%v: unpacked matrix reads two streams", tc.typ)
		}
		pm := Pack(Matrix{Type: m.Type, Rows: m.Rows, Cols: m.Cols, Data: append([]byte(nil), m.Data...)})
		one := pm.OneStream(true)
		if got, want := pm.TwoStreams(), splitKernel(tc.typ) && pm.packed; got != want {
			t.Fatalf("%v: TwoStreams = %v, want %v", tc.typ, got, want)
		}
		if one.TwoStreams() || one.minSplit() != math.MaxInt || pm.minSplit() != splitMinBytes {
			t.Fatalf("%v: set to one stream, TwoStreams = %v, minSplit %d (default %d)", tc.typ, one.TwoStreams(), one.minSplit(), pm.minSplit())
		}
		if pm.OneStream(true).OneStream(false).TwoStreams() != pm.TwoStreams() {
			t.Fatalf("%v: OneStream(false) does not restore the default", tc.typ)
		}
		x := randVec(rng, tc.cols, 1)
		want, got := make([]float32, tc.rows), make([]float32, tc.rows)
		p.MatMul(want, pm, x, 1)
		p.MatMul(got, one, x, 1)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%v: row %d = %v on one stream, %v on two", tc.typ, i, got[i], want[i])
			}
		}
	}
}
