package tensor

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestStreamedAsWidened checks that a matrix computed in its own bytes
// (streamed, at every assembly level, by the direct kernels up to
// directTokens tokens where the CPU has them) gives what its widened copy
// gives: bit for bit where both run the same kernel (the IQ2 types on
// Q8_K16, Q5_0 and IQ4_NL on Q8_0, packed or not), else within the
// kernels' rounding, as TestMatMulKernelsAgree checks it (the IQ1 and IQ3
// types widen to Q6_K; Q4_1's and Q5_1's minima are summed in another
// order), and the IQ1 and IQ3 types bit for bit against their rows widened
// to Q8_K16. Where the CPU has a direct kernel for the type, it is checked
// bit for bit against the widening path (rows widened to scratch). The
// shapes cross the scratch's row steps.
func TestStreamedAsWidened(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	p := NewPool(2)
	defer p.Close()
	levels := availableISAs()[1:]
	if len(levels) == 0 {
		t.Skip("no assembly kernels in this build: the portable kernels compute every type as it is")
	}
	for _, typ := range []DType{Q5_0, Q4_1, Q5_1, IQ4_NL, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S} {
		st, _ := streamType(typ)
		wt, _ := WidenedType(typ)
		for _, shape := range [][2]int{{1, 256}, {27, 512}, {67, 1024}, {130, 4096}} {
			rows, cols := shape[0], shape[1]
			m, wd := randMatrix(t, rng, typ, rows, cols)
			for _, n := range []int{1, 2, 3, 4, 5, 70} {
				x := randVec(rng, n*cols, 1)
				ref := newMatMulRef(typ, wd, x, rows, cols, n)
				for _, level := range levels {
					got := make([]float32, n*rows)
					p.matMul(got, m, x, n, kernelAt(typ, level))
					label := fmt.Sprintf("%v %v %dx%d n=%d", level, typ, rows, cols, n)
					ref.check(t, label, got, rows)
					if direct, maxTokens := directKernel(typ, level); direct != nil {
						want := make([]float32, n*rows)
						if n <= maxTokens {
							// The direct kernel against the rows widened
							// to scratch, its streamType's kernel on them.
							p.matMul(want, m, x, n, streamKernel(typ, kernelAt(st, level), nil, 0, nil))
							sameBitsOrFail(t, label+" direct", got, want)
						} else {
							// A prompt's rows packed against the direct
							// kernels (decode's): batch invariance.
							p.matMul(want, m, x, n, streamKernel(typ, kernelAt(st, level), direct, math.MaxInt, nil))
							sameBitsOrFail(t, label+" packed", got, want)
						}
					}
					if st != wt || hasMins(typ) {
						if st == Q8_K16 {
							// The IQ1 and IQ3 types: against their rows
							// widened to Q8_K16, their streamed form.
							want := make([]float32, n*rows)
							p.matMul(want, widenedQ8K16(typ, m), x, n, kernelAt(Q8_K16, level))
							sameBitsOrFail(t, label, got, want)
						}
						continue
					}
					for _, w := range []Matrix{Widen(m), Pack(Widen(m))} {
						if w.Packed() && level != cpuISA {
							continue // packed for this CPU's kernels only
						}
						want := make([]float32, n*rows)
						p.matMul(want, w, x, n, kernelAt(wt, level))
						for i := range want {
							if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
								t.Fatalf("%s packed=%v: output %d is %v streamed, %v widened", label, w.Packed(), i, got[i], want[i])
							}
						}
					}
				}
			}
		}
	}
}

// widenedQ8K16 returns IQ matrix m with every block widened to Q8_K16.
func widenedQ8K16(t DType, m Matrix) Matrix {
	w := Matrix{Type: Q8_K16, Rows: m.Rows, Cols: m.Cols, Data: make([]byte, m.Rows*Q8_K16.RowBytes(m.Cols))}
	bs := t.TypeSize()
	for k := range len(m.Data) / bs {
		widenIQBlockQ8K16(t, w.Data[k*q8K16Size:(k+1)*q8K16Size], m.Data[k*bs:(k+1)*bs])
	}
	return w
}

// sameBitsOrFail fails t unless got and want hold the same bits.
func sameBitsOrFail(t *testing.T, label string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: output %d is %v streamed, %v widened", label, i, got[i], want[i])
		}
	}
}

// TestDirectPacker checks that the packer of a streamed type writes, byte
// for byte, the packed layout of its rows widened (Pack(Widen)), through
// rows of several blocks of eight, and for Q4_1 and Q5_1 each block's
// minima (f16 as the file has them) per pair of row blocks.
func TestDirectPacker(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	tested := 0
	for _, typ := range []DType{Q5_0, IQ4_NL, Q4_1, Q5_1, IQ2_XXS} {
		pack := directPacker(typ, cpuISA)
		if pack == nil {
			continue
		}
		tested++
		for _, shape := range [][2]int{{8, 32}, {24, 1024}, {16, 4096}} {
			rows, cols := shape[0], shape[1]
			m, _ := randMatrix(t, rng, typ, rows, cols)
			want := Pack(Widen(m))
			if !want.Packed() {
				t.Fatalf("%v: Pack does not pack its widened rows on this CPU", typ)
			}
			got := make([]byte, len(want.Data))
			nb, bs := cols/qk80, typ.TypeSize()
			mins := make([]byte, pairedMinsBytes(rows/8, nb))
			pack.pack(got, mins, m.Data, m.RowBytes(), rows/8, cols)
			if typ == Q4_1 || typ == Q5_1 {
				for r := range rows {
					for b := range nb {
						at := ((r/16*nb+b)*16 + r%16) * 2
						src := m.Data[r*m.RowBytes()+b*bs+2:]
						if mins[at] != src[0] || mins[at+1] != src[1] {
							t.Fatalf("%v %dx%d: row %d block %d's minimum is %#x, the file's %#x", typ, rows, cols, r, b, mins[at:at+2], src[:2])
						}
					}
				}
			}
			if !bytes.Equal(got, want.Data) {
				i := 0
				for got[i] == want.Data[i] {
					i++
				}
				t.Fatalf("%v %dx%d: byte %d is %#x packed from its own bytes, %#x widened and packed", typ, rows, cols, i, got[i], want.Data[i])
			}
		}
	}
	if tested == 0 {
		t.Skipf("no direct packer on this CPU (%v)", cpuISA)
	}
}

// TestStreamedPackedRowsForgotten checks that the rows a thread holds
// packed for a prompt's streamed matrix are not reused by the next
// product, even where the next matrix's bytes are at the same address.
func TestStreamedPackedRowsForgotten(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	p := NewPool(2)
	defer p.Close()
	const rows, cols, n = 130, 4096, 70 // row chunks of several token chunks (plan)
	tested := 0
	for _, typ := range []DType{Q5_0, IQ4_NL, Q4_1} {
		// Q4_1 at the AVX2 level packs the file's rows in its own layout
		// (q41AVX2Kernel); IQ4_NL there unpacks a packed matrix's rows to
		// packed Q8_0 (avx2Packed.unpacked).
		unpacks := typ == IQ4_NL && packable(typ)
		if directPacker(typ, cpuISA) == nil && !(typ == Q4_1 && packable(typ)) && !unpacks {
			continue
		}
		tested++
		m, _ := randMatrix(t, rng, typ, rows, cols)
		other, _ := randMatrix(t, rng, typ, rows, cols)
		if unpacks {
			m, other = Pack(m), Pack(other)
		}
		x := randVec(rng, n*cols, 1)
		got := make([]float32, n*rows)
		p.MatMul(got, m, x, n)
		copy(m.Data, other.Data) // new weights at the same address
		p.MatMul(got, m, x, n)
		want := make([]float32, n*rows)
		p.MatMul(want, other, x, n) // at another address
		sameBitsOrFail(t, typ.String(), got, want)
	}
	if tested == 0 {
		t.Skipf("no packer of a streamed type's rows on this CPU (%v)", cpuISA)
	}
}
