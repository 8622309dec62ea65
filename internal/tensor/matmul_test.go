package tensor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// allTypes are the types Quantize writes; kernelTypes, every type with
// kernels, add Q8_K16, only made by Widen, and the types only read (whose
// kernels at the assembly levels stream them, stream.go).
var (
	allTypes    = []DType{F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K}
	kernelTypes = append(allTypes[:len(allTypes):len(allTypes)], Q8_K16, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S)
)

func randVec(rng *rand.Rand, n int, std float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * std)
	}
	return v
}

func randMatrix(t testing.TB, rng *rand.Rand, typ DType, rows, cols int) (Matrix, []float32) {
	t.Helper()
	if typ == Q8_K16 {
		// Made only by Widen: of an IQ2_XS matrix, whose values span
		// Q8_K16's (|q| ≤ 43, odd scales up to 31).
		m, wd := randMatrix(t, rng, IQ2_XS, rows, cols)
		return Widen(m), wd
	}
	var q []byte
	if isIQGrid(typ) {
		// No quantizer (Quantize refuses them): random blocks, whose every
		// bit pattern is valid, with a random d of the usual size.
		q = randIQBlocks(rng, typ, rows*cols/qkK)
	} else {
		var err error
		if q, err = Quantize(typ, randVec(rng, rows*cols, 0.15)); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewMatrix(typ, rows, cols, q)
	if err != nil {
		t.Fatal(err)
	}
	wd := make([]float32, rows*cols)
	Dequantize(typ, wd, q)
	return m, wd
}

// convertedActivations returns the activations as the kernels see them
// after conversion to the vec_dot type, widened to float64, and the
// conversion itself.
func convertedActivations(typ DType, x []float32, cols, n int) ([]float64, *actBuf) {
	var a actBuf
	out := make([]float64, len(x))
	if typ == F32 {
		for i, v := range x {
			out[i] = float64(v)
		}
		return out, &a
	}
	a.prepare(vecDotType(typ), cols, n, false)
	a.convertTokens(vecDotType(typ), x, 0, n)
	for i := range x {
		switch vecDotType(typ) {
		case Q8_0, Q8_1:
			out[i] = float64(a.q[i]) * float64(a.d[i/qk80])
		case Q8_K:
			out[i] = float64(a.q[i]) * float64(a.d[i/qkK])
		default:
			out[i] = float64(a.f[i])
		}
	}
	return out, &a
}

// hasMins reports whether typ's blocks carry a minimum (x = d·q + m), whose
// product ggml takes with the activations' block sum s1 (Q8_1).
func hasMins(typ DType) bool { return typ == Q4_1 || typ == Q5_1 }

// matMulRef holds float64 references for one product: exact is the result
// with the activations as the kernels see them after conversion (only the
// float32 summation differs from a kernel's), orig the result with the
// original activations, abs the sum of |w·x| (scale for rounding errors) and
// bound the largest effect of the activation conversion.
type matMulRef struct {
	exact, orig, abs, bound []float64
}

func newMatMulRef(typ DType, wd, x []float32, rows, cols, n int) *matMulRef {
	xa, act := convertedActivations(typ, x, cols, n)
	ref := &matMulRef{
		exact: make([]float64, n*rows), orig: make([]float64, n*rows),
		abs: make([]float64, n*rows), bound: make([]float64, n*rows),
	}
	convErr := make([]float64, cols)
	for tok := 0; tok < n; tok++ {
		xs := x[tok*cols : (tok+1)*cols]
		// Per-element bound on the activation conversion error.
		switch typ {
		case Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
			IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, Q8_K16:
			bs := typ.BlockSize()
			for b := 0; b < cols/bs; b++ {
				var amax float64
				for _, v := range xs[b*bs : (b+1)*bs] {
					amax = max(amax, math.Abs(float64(v)))
				}
				for c := b * bs; c < (b+1)*bs; c++ {
					convErr[c] = amax/254*1.002 + 1e-30
				}
			}
		case F16, BF16:
			e := 0x1p-11
			if typ == BF16 {
				e = 0x1p-8
			}
			for c, v := range xs {
				convErr[c] = math.Abs(float64(v)) * e
			}
		default:
			clear(convErr)
		}
		for r := 0; r < rows; r++ {
			w := wd[r*cols : (r+1)*cols]
			var exact, orig, abs, bound float64
			for c, wv := range w {
				exact += float64(wv) * xa[tok*cols+c]
				orig += float64(wv) * float64(xs[c])
				abs += math.Abs(float64(wv) * xa[tok*cols+c])
				bound += math.Abs(float64(wv)) * convErr[c]
			}
			if hasMins(typ) {
				// ggml takes the minimum m's product with the rounded
				// block sum s1 instead of with Σ of the block's values
				// (d·Σq). A block's smallest value is d·0 + m = m
				// exactly (its smallest input maps to q = 0).
				for b := 0; b < cols/qk80; b++ {
					m := float64(slices.Min(w[b*qk80 : (b+1)*qk80]))
					nb := cols / qk80
					var sq float64
					for _, v := range act.q[tok*cols+b*qk80 : tok*cols+(b+1)*qk80] {
						sq += float64(v)
					}
					s1 := float64(act.s1[tok*nb+b])
					exact += m * (s1 - float64(act.d[tok*nb+b])*sq)
					bound += math.Abs(m*s1) * 0x1p-11
				}
			}
			i := tok*rows + r
			ref.exact[i], ref.orig[i], ref.abs[i], ref.bound[i] = exact, orig, abs, bound
		}
	}
	return ref
}

// check compares dst with the references: against the converted activations
// the only difference is float32 summation (tight), against the original
// activations the conversion error is bounded by the vec_dot type's step.
func (ref *matMulRef) check(t *testing.T, label string, dst []float32, rows int) {
	t.Helper()
	for i := range ref.exact {
		got := float64(dst[i])
		tol := 2e-6*ref.abs[i] + 1e-30
		if d := math.Abs(got - ref.exact[i]); d > tol {
			t.Fatalf("%s: row %d token %d: got %v, exact %v (diff %.3g, allowed %.3g)", label, i%rows, i/rows, got, ref.exact[i], d, tol)
		}
		if d := math.Abs(got - ref.orig[i]); d > ref.bound[i]+tol {
			t.Fatalf("%s: row %d token %d: got %v, unconverted reference %v (diff %.3g, bound %.3g)", label, i%rows, i/rows, got, ref.orig[i], d, ref.bound[i])
		}
	}
}

// checkMatMul checks one product against freshly computed references.
func checkMatMul(t *testing.T, label string, typ DType, dst, wd, x []float32, rows, cols, n int) {
	t.Helper()
	newMatMulRef(typ, wd, x, rows, cols, n).check(t, label, dst, rows)
}

func TestMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	pools := []*Pool{NewPool(1), NewPool(2), NewPool(3)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	for _, typ := range kernelTypes {
		colsList := []int{32, 64, 96, 512}
		if typ.BlockSize() == 256 {
			colsList = []int{256, 512, 768}
		}
		for _, cols := range colsList {
			for _, rows := range []int{1, 5, 17, 100} {
				m, wd := randMatrix(t, rng, typ, rows, cols)
				for _, n := range []int{1, 2, 3, 4, 5, 7, 9, 70} {
					x := randVec(rng, n*cols, 1)
					ref := newMatMulRef(typ, wd, x, rows, cols, n)
					for _, p := range pools {
						dst := make([]float32, n*rows)
						p.MatMul(dst, m, x, n)
						ref.check(t, fmt.Sprintf("%v %dx%d n=%d threads=%d", typ, rows, cols, n, p.Threads()), dst, rows)
					}
				}
			}
		}
	}
}

// TestMatMulKernelsAgree runs the kernel of each type at every instruction
// set level this CPU has (the portable one included) against the float64
// references, on odd shapes: one block, many blocks, rows not a multiple of the
// tile, 1..9 tokens and a multi-tile batch.
func TestMatMulKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range kernelTypes {
		colsList := []int{32, 32 * 37, 4, 8, 12, 100}
		switch typ.BlockSize() {
		case 256:
			colsList = []int{256, 1024}
		case 32:
			// Q8_0's VNNI kernels work in groups of 8 blocks: one partial
			// group, one full, full groups plus a partial one of 2 or 5.
			colsList = []int{32, 256, 576, 32 * 37}
		}
		for _, cols := range colsList {
			for _, rows := range []int{1, 3, 4, 13, 64, 67} {
				m, wd := randMatrix(t, rng, typ, rows, cols)
				for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 16, 18, 31, 65} {
					x := randVec(rng, n*cols, 1)
					ref := newMatMulRef(typ, wd, x, rows, cols, n)
					for _, level := range availableISAs() {
						got := make([]float32, n*rows)
						p.matMul(got, m, x, n, kernelAt(typ, level))
						ref.check(t, fmt.Sprintf("%v %v %dx%d n=%d", level, typ, rows, cols, n), got, rows)
					}
				}
			}
		}
	}
}

// TestMatMulIntegerExact uses data on which every kernel's arithmetic is
// exact (unit scales, integer values, sums below 2^24): all levels must then
// produce identical results.
func TestMatMulIntegerExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	p := NewPool(2)
	defer p.Close()
	const cols = 512
	for _, typ := range []DType{Q8_0, Q4_0} {
		lo, hi := -127, 127
		if typ == Q4_0 {
			lo, hi = -8, 7
		}
		// Integer weights whose blocks reach the extreme value, so the
		// quantizer picks a unit scale and keeps them exactly.
		intVec := func(n, lo, hi int) []float32 {
			v := make([]float32, n)
			for i := range v {
				if i%32 == 5 {
					v[i] = float32(lo) // Q4_0's scale comes from the most negative value
					if typ == Q8_0 {
						v[i] = float32(hi)
					}
					continue
				}
				v[i] = float32(lo + rng.IntN(hi-lo+1))
			}
			return v
		}
		for _, rows := range []int{1, 4, 7, 33} {
			w := intVec(rows*cols, lo, hi)
			q, _ := Quantize(typ, w)
			m, _ := NewMatrix(typ, rows, cols, q)
			for _, n := range []int{1, 3, 4, 9} {
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(rng.IntN(255) - 127)
					if i%32 == 0 {
						x[i] = 127
					}
				}
				want := make([]float32, n*rows)
				for tok := 0; tok < n; tok++ {
					for r := 0; r < rows; r++ {
						var s int64
						for c := 0; c < cols; c++ {
							s += int64(w[r*cols+c]) * int64(x[tok*cols+c])
						}
						want[tok*rows+r] = float32(s)
					}
				}
				for _, level := range availableISAs() {
					got := make([]float32, n*rows)
					p.matMul(got, m, x, n, kernelAt(typ, level))
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%v %v rows=%d n=%d: output %d = %v, want exactly %v", level, typ, rows, n, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestMatMulReusesConversion checks the activation cache: products with the
// same input reuse its conversion, and any change to the input (even in
// place, even one bit) or to the vec_dot type is noticed.
// TestMatMulIntegerExactK does the same for Q2_K to Q6_K and IQ4_XS with
// hand-built blocks: unit super-block scales, small sub-block scales and
// mins, integer activations whose blocks start with −127 (so Q8_K's scale is
// exactly 1).
func TestMatMulIntegerExactK(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	p := NewPool(2)
	defer p.Close()
	const cols = 512
	one := F32ToF16(1)
	for _, typ := range []DType{Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, Q8_K16} {
		for _, rows := range []int{1, 5, 16} {
			data := make([]byte, rows*typ.RowBytes(cols))
			for b := 0; b < len(data)/typ.TypeSize(); b++ {
				blk := data[b*typ.TypeSize() : (b+1)*typ.TypeSize()]
				for i := range blk {
					blk[i] = byte(rng.Uint32())
				}
				if typ == Q8_K16 {
					for i := 0; i < 256; i++ { // q+64 in [0, 127]
						blk[i] &= 0x7f
					}
					for k := 256; k < 272; k++ {
						blk[k] = byte(int8(rng.IntN(5) - 2))
					}
					binary.LittleEndian.PutUint32(blk[272:], math.Float32bits(1))
				} else if typ == IQ4_XS {
					binary.LittleEndian.PutUint16(blk[0:], one)
					var h uint16
					clear(blk[4:8])
					for ib := 0; ib < 8; ib++ { // ls−32 in [-2,2]
						l := byte(rng.IntN(5) - 2 + 32)
						blk[4+ib/2] |= (l & 0xf) << (4 * (ib % 2))
						h |= uint16(l>>4) << (2 * ib)
					}
					binary.LittleEndian.PutUint16(blk[2:], h)
				} else if typ == Q3_K {
					binary.LittleEndian.PutUint16(blk[108:], one)
					clear(blk[96:108])
					for k := 0; k < 16; k++ { // scale in [-2,2], as sc+32
						u := byte(rng.IntN(5) - 2 + 32)
						blk[96+k%8] |= (u & 0xf) << (4 * (k / 8))
						blk[96+8+k%4] |= (u >> 4) << (2 * (k / 4))
					}
				} else if typ == Q2_K {
					binary.LittleEndian.PutUint16(blk[80:], one)
					binary.LittleEndian.PutUint16(blk[82:], one)
					for j := 0; j < 16; j++ { // scale and min in [0,3]
						blk[j] = byte(rng.IntN(4)) | byte(rng.IntN(4))<<4
					}
				} else if typ == Q4_K || typ == Q5_K {
					binary.LittleEndian.PutUint16(blk[0:], one)
					binary.LittleEndian.PutUint16(blk[2:], one)
					for j := 4; j < 16; j++ {
						blk[j] = 0
					}
					for j := 0; j < 8; j++ { // scale and min in [0,3]
						sc, m := byte(rng.IntN(4)), byte(rng.IntN(4))
						if j < 4 {
							blk[4+j], blk[4+j+4] = sc, m
						} else {
							blk[4+j+4] = sc | m<<4
						}
					}
				} else {
					for j := 192; j < 208; j++ {
						blk[j] = byte(int8(rng.IntN(5) - 2))
					}
					binary.LittleEndian.PutUint16(blk[208:], one)
				}
			}
			m, err := NewMatrix(typ, rows, cols, data)
			if err != nil {
				t.Fatal(err)
			}
			wd := make([]float32, rows*cols)
			Dequantize(typ, wd, data)
			for _, n := range []int{1, 2, 4, 5} {
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(rng.IntN(253) - 126)
					if i%256 == 0 {
						x[i] = -127
					}
				}
				want := make([]float32, n*rows)
				for tok := 0; tok < n; tok++ {
					for r := 0; r < rows; r++ {
						var s int64
						for c := 0; c < cols; c++ {
							s += int64(wd[r*cols+c]) * int64(x[tok*cols+c])
						}
						want[tok*rows+r] = float32(s)
					}
				}
				for _, level := range availableISAs() {
					got := make([]float32, n*rows)
					p.matMul(got, m, x, n, kernelAt(typ, level))
					for i := range got {
						if got[i] != want[i] {
							t.Fatalf("%v %v rows=%d n=%d: output %d = %v, want exactly %v", level, typ, rows, n, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestMatMulBatchInvariant checks that a token's outputs are bit-identical
// whatever else is in the batch and however the work is split: alone, in
// batches of every tile shape (single-row and four-row kernels, one or many
// token chunks) and with 1–3 threads. The model's prefix caching and chunked
// prefill rely on it.
func TestMatMulBatchInvariant(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	pools := []*Pool{NewPool(1), NewPool(2), NewPool(3)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	type shape struct {
		typ  DType
		cols int
	}
	var shapes []shape
	for _, typ := range kernelTypes {
		switch typ.BlockSize() {
		case 1:
			shapes = append(shapes, shape{typ, 300}) // a column tail for the float kernels
		case 32:
			// The Q8_0 kernels work on groups of eight blocks, padding a
			// partial last one: rows of 1, 3, 12, 18 (SmolLM2's 576 columns)
			// and 37 blocks end in groups of 1, 3, 4, 2 and 5.
			for _, blocks := range []int{37, 18, 1, 3, 12} {
				shapes = append(shapes, shape{typ, 32 * blocks})
			}
		default:
			shapes = append(shapes, shape{typ, 512})
		}
	}
	for _, sh := range shapes {
		typ, cols := sh.typ, sh.cols
		const rows, n = 37, 150
		m, _ := randMatrix(t, rng, typ, rows, cols)
		x := randVec(rng, n*cols, 1)
		for _, level := range availableISAs() {
			kern := kernelAt(typ, level)
			want := make([]float32, n*rows)
			for tok := 0; tok < n; tok++ {
				pools[0].matMul(want[tok*rows:(tok+1)*rows], m, x[tok*cols:(tok+1)*cols], 1, kern)
			}
			for _, p := range pools {
				for _, batch := range []int{2, 3, 4, 5, 13, 16, 17, 18, 64, 150} {
					got := make([]float32, n*rows)
					for t0 := 0; t0 < n; t0 += batch {
						nb := min(batch, n-t0)
						p.matMul(got[t0*rows:(t0+nb)*rows], m, x[t0*cols:(t0+nb)*cols], nb, kern)
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%v %v cols=%d threads=%d batch=%d: token %d row %d = %v, alone %v",
								level, typ, cols, p.Threads(), batch, i/rows, i%rows, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestMatMulReusesConversion(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	p := NewPool(2)
	defer p.Close()
	q8, wq8 := randMatrix(t, rng, Q8_0, 8, 256)
	q4, wq4 := randMatrix(t, rng, Q4_0, 8, 256)
	k4, wk4 := randMatrix(t, rng, Q4_K, 8, 256)
	x := randVec(rng, 2*256, 1)
	dst := make([]float32, 2*8)
	check := func(label string, m Matrix, wd []float32) {
		t.Helper()
		p.MatMul(dst, m, x, 2)
		checkMatMul(t, label, m.Type, dst, wd, x, 8, 256, 2)
	}
	check("first", q8, wq8)
	check("same input again", q8, wq8)
	check("Q4_0 shares the Q8_0 conversion", q4, wq4)
	x[300] = math.Nextafter32(x[300], 10) // in place, one ulp
	check("changed in place", q4, wq4)
	check("other vec_dot type", k4, wk4)
	check("back", q8, wq8)
	// Fewer tokens of the same buffer.
	p.MatMul(dst[:8], q8, x[:256], 1)
	checkMatMul(t, "one token", Q8_0, dst[:8], wq8, x[:256], 8, 256, 1)
}

func TestMatMulNoAllocs(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range kernelTypes {
		m, _ := randMatrix(t, rng, typ, 64, 512)
		for _, n := range []int{1, 16} {
			x := randVec(rng, n*512, 1)
			dst := make([]float32, n*64)
			p.MatMul(dst, m, x, n)
			if a := testing.AllocsPerRun(20, func() { p.MatMul(dst, m, x, n) }); a != 0 {
				t.Errorf("%v n=%d: %v allocations per MatMul", typ, n, a)
			}
		}
	}
}

// TestMatMuls checks that one MatMuls job gives, bit for bit, what
// separate MatMul calls give, for every type and batch size (decode's one
// pass over the weights, prefill's tiles), with no allocation.
func TestMatMuls(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range allTypes {
		cols := 576
		if typ.BlockSize() == 256 {
			cols = 512
		}
		var ws []Matrix
		for _, rows := range []int{40, 13, 77} {
			m, _ := randMatrix(t, rng, typ, rows, cols)
			ws = append(ws, m)
		}
		for _, n := range []int{1, 3, 16, 40} {
			x := randVec(rng, n*cols, 1)
			for k := 1; k <= len(ws); k++ {
				want := make([][]float32, k)
				got := make([][]float32, k)
				for i := range k {
					want[i] = make([]float32, n*ws[i].Rows)
					got[i] = make([]float32, n*ws[i].Rows)
					p.MatMul(want[i], ws[i], x, n)
				}
				p.MatMuls(got, ws[:k], x, n)
				for i := range k {
					for e := range got[i] {
						if math.Float32bits(got[i][e]) != math.Float32bits(want[i][e]) {
							t.Fatalf("%v n=%d, %d products: product %d output %d = %v, MatMul %v", typ, n, k, i, e, got[i][e], want[i][e])
						}
					}
				}
				if a := testing.AllocsPerRun(5, func() { p.MatMuls(got, ws[:k], x, n) }); a != 0 {
					t.Errorf("%v n=%d, %d products: %v allocations per MatMuls", typ, n, k, a)
				}
			}
		}
	}
}

// TestMatMulsPrep checks that MatMulsPrep and MatMulsPrepCost (with costs
// that grow along the tokens, as attention's do, or are all zero) equal
// writing the input and then MatMuls, bit for bit, and that they call prep
// once per token over disjoint ranges, on valid threads, never twice at
// once on one thread.
func TestMatMulsPrep(t *testing.T) {
	costs := map[string]func(int) int{
		"":           nil,
		" cost=t*t":  func(t int) int { return t * t },
		" cost=zero": func(int) int { return 0 },
	}
	rng := rand.New(rand.NewPCG(29, 30))
	for _, threads := range []int{1, 2, 3} {
		p := NewPool(threads)
		for _, typ := range []DType{Q8_0, Q4_K, F32} {
			cols := 576
			if typ.BlockSize() == 256 {
				cols = 512
			}
			var ws []Matrix
			for _, rows := range []int{40, 13} {
				m, _ := randMatrix(t, rng, typ, rows, cols)
				ws = append(ws, m)
			}
			for _, n := range []int{1, 3, 8, 16, 40} {
				for costName, cost := range costs {
					src := randVec(rng, n*cols, 1)
					want := [][]float32{make([]float32, n*ws[0].Rows), make([]float32, n*ws[1].Rows)}
					got := [][]float32{make([]float32, n*ws[0].Rows), make([]float32, n*ws[1].Rows)}
					// The input buffer holds stale values until prep writes it.
					x := randVec(rng, n*cols, 1)
					p.MatMuls(want, ws, src, n)
					p.MatMuls(got, ws, x, n) // leaves a conversion of the stale x behind
					calls := make([]atomic.Int32, n)
					busy := make([]atomic.Bool, threads)
					var bad atomic.Value
					prep := func(t0, t1, thread int) {
						if thread < 0 || thread >= threads || !busy[thread].CompareAndSwap(false, true) {
							bad.Store(fmt.Sprintf("prep on thread %d (of %d) while it is busy or out of range", thread, threads))
							return
						}
						defer busy[thread].Store(false)
						for tok := t0; tok < t1; tok++ {
							calls[tok].Add(1)
							copy(x[tok*cols:(tok+1)*cols], src[tok*cols:(tok+1)*cols])
						}
					}
					if cost == nil {
						p.MatMulsPrep(got, ws, x, n, prep)
					} else {
						p.MatMulsPrepCost(got, ws, x, n, prep, cost)
					}
					label := fmt.Sprintf("%v threads=%d n=%d%s", typ, threads, n, costName)
					if msg := bad.Load(); msg != nil {
						t.Fatalf("%s: %s", label, msg)
					}
					for tok := range calls {
						if c := calls[tok].Load(); c != 1 {
							t.Fatalf("%s: token %d prepared %d times", label, tok, c)
						}
					}
					for i := range got {
						for e := range got[i] {
							if math.Float32bits(got[i][e]) != math.Float32bits(want[i][e]) {
								t.Fatalf("%s: product %d output %d = %v, want %v", label, i, e, got[i][e], want[i][e])
							}
						}
					}
				}
			}
		}
		p.Close()
	}
	p := NewPool(2)
	defer p.Close()
	m, _ := randMatrix(t, rng, Q8_0, 64, 512)
	x := randVec(rng, 16*512, 1)
	dst := [][]float32{make([]float32, 16*64)}
	ws := []Matrix{m}
	prep := func(t0, t1, _ int) { x[t0*512] = float32(t0) }
	if a := testing.AllocsPerRun(20, func() { p.MatMulsPrep(dst, ws, x, 16, prep) }); a != 0 {
		t.Errorf("%v allocations per MatMulsPrep", a)
	}
	cost := func(t int) int { return t }
	if a := testing.AllocsPerRun(20, func() { p.MatMulsPrepCost(dst, ws, x, 16, prep, cost) }); a != 0 {
		t.Errorf("%v allocations per MatMulsPrepCost", a)
	}
}

// TestCostBounds checks the cut of tokens into ranges of about equal cost:
// the bounds run from 0 to n without going back, and no range costs more
// than an equal share plus one token (the token that crosses a share's
// end stays in the range before it).
func TestCostBounds(t *testing.T) {
	tests := []struct {
		name  string
		costs []int
		items int
		want  []int
	}{
		{"equal", []int{1, 1, 1, 1, 1, 1, 1, 1}, 4, []int{0, 2, 4, 6, 8}},
		{"growing", []int{1, 2, 3, 4, 5, 6, 7, 8}, 2, []int{0, 6, 8}},
		{"one dear token", []int{0, 0, 9, 0, 0}, 3, []int{0, 3, 3, 5}},
		{"all zero", []int{0, 0, 0, 0}, 2, []int{0, 1, 4}},
		{"fewer tokens than items", []int{5, 5}, 4, []int{0, 1, 1, 2, 2}},
		{"negative as zero", []int{-3, 1, 1}, 2, []int{0, 2, 3}},
		{"no tokens", nil, 2, []int{0, 0, 0}},
	}
	for _, tc := range tests {
		got := costBounds(nil, len(tc.costs), tc.items, func(t int) int { return tc.costs[t] })
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: bounds %v, want %v", tc.name, got, tc.want)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	var b []int
	for range 200 {
		n, items := rng.IntN(300), 1+rng.IntN(9)
		costs := make([]int, n)
		total, most := 0, 0
		for i := range costs {
			costs[i] = rng.IntN(1 + i) // attention's shape: later tokens dearer
			total += costs[i]
			most = max(most, costs[i])
		}
		b = costBounds(b, n, items, func(t int) int { return costs[t] })
		if len(b) != items+1 || b[0] != 0 || b[items] != n {
			t.Fatalf("n=%d items=%d: bounds %v", n, items, b)
		}
		for k := range items {
			if b[k+1] < b[k] {
				t.Fatalf("n=%d items=%d: bounds %v go back", n, items, b)
			}
			sum := 0
			for _, c := range costs[b[k]:b[k+1]] {
				sum += c
			}
			if float64(sum) > float64(total)/float64(items)+float64(most) {
				t.Fatalf("n=%d items=%d: range %d costs %d of %d (bounds %v)", n, items, k, sum, total, b)
			}
		}
	}
}

func TestMatMulsPanicsOnMismatch(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	a, _ := randMatrix(t, rng, Q8_0, 4, 64)
	b, _ := randMatrix(t, rng, Q4_0, 4, 64)
	c, _ := randMatrix(t, rng, Q8_0, 4, 96)
	out := make([]float32, 4)
	for _, tc := range []struct {
		name string
		dsts [][]float32
		ws   []Matrix
	}{
		{"types", [][]float32{out, out}, []Matrix{a, b}},
		{"columns", [][]float32{out, out}, []Matrix{a, c}},
		{"outputs", [][]float32{out}, []Matrix{a, a}},
		{"none", nil, nil},
		{"too many", [][]float32{out, out, out, out}, []Matrix{a, a, a, a}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", tc.name)
				}
			}()
			p.MatMuls(tc.dsts, tc.ws, make([]float32, 96), 1)
		}()
	}
}

func TestMatMulPanicsOnBadMatrix(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	m, _ := randMatrix(t, rand.New(rand.NewPCG(1, 1)), Q8_0, 4, 64)
	for _, bad := range []Matrix{
		{Type: Q8_0, Rows: 4, Cols: 64, Data: m.Data[:len(m.Data)-1]},
		{Type: Q8_0, Rows: 4, Cols: 48, Data: m.Data},
		{Type: Q5_K, Rows: 4, Cols: 64, Data: m.Data},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic for %v %dx%d with %d bytes", bad.Type, bad.Rows, bad.Cols, len(bad.Data))
				}
			}()
			p.MatMul(make([]float32, 4), bad, make([]float32, 64), 1)
		}()
	}
}

func TestMatMulPanicsOnShortSlices(t *testing.T) {
	p := NewPool(1)
	defer p.Close()
	m, _ := randMatrix(t, rand.New(rand.NewPCG(1, 1)), Q8_0, 4, 32)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a short dst")
		}
	}()
	p.MatMul(make([]float32, 3), m, make([]float32, 32), 1)
}

func TestPoolParallel(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 8} {
		p := NewPool(threads)
		if p.Threads() != threads {
			t.Fatalf("Threads() = %d, want %d", p.Threads(), threads)
		}
		for _, n := range []int{1, 2, 7, 100, 1001} {
			for rep := 0; rep < 50; rep++ {
				hits := make([]int32, n)
				var calls atomic.Int32
				p.Parallel(n, func(lo, hi int) {
					calls.Add(1)
					if lo >= hi {
						t.Errorf("empty chunk [%d,%d)", lo, hi)
					}
					for i := lo; i < hi; i++ {
						atomic.AddInt32(&hits[i], 1)
					}
				})
				for i, h := range hits {
					if h != 1 {
						t.Fatalf("threads=%d n=%d: index %d covered %d times", threads, n, i, h)
					}
				}
				if c := int(calls.Load()); c > threads {
					t.Fatalf("threads=%d n=%d: %d chunks", threads, n, c)
				}
			}
		}
		p.Close()
		p.Close() // idempotent
		// After Close, work still runs (serially).
		var sum atomic.Int64
		p.Parallel(10, func(lo, hi int) { sum.Add(int64(hi - lo)) })
		if sum.Load() != 10 {
			t.Fatalf("after Close: covered %d of 10", sum.Load())
		}
	}
	if p := NewPool(0); p.Threads() < 1 {
		t.Fatal("NewPool(0) has no threads")
	} else {
		p.Close()
	}
}

// TestPoolWakeAfterPark lets the workers park and checks they still wake.
func TestPoolWakeAfterPark(t *testing.T) {
	if testing.Short() {
		t.Skip("sleeps")
	}
	p := NewPool(3)
	defer p.Close()
	for rep := 0; rep < 3; rep++ {
		var n atomic.Int32
		p.Parallel(3, func(lo, hi int) { n.Add(int32(hi - lo)) })
		if n.Load() != 3 {
			t.Fatalf("covered %d of 3", n.Load())
		}
		parkAll(p)
	}
}

// TestPoolYieldsDuringLongJobs: a long job lets other goroutines of its P
// run between items (every yieldEvery), instead of holding the P until the
// job ends or the runtime preempts it after ~10 ms. One P, one thread, items
// of 500 µs: a goroutine made runnable before the job must have run by the
// job's third item (without the yields: about its twentieth).
func TestPoolYieldsDuringLongJobs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	p := NewPool(1)
	defer p.Close()
	w, _ := randMatrix(t, rand.New(rand.NewPCG(1, 2)), Q8_0, 8192, 32)
	const n = 16
	x := make([]float32, n*w.Cols)
	dst := make([]float32, n*w.Rows)
	var ran atomic.Bool
	items, firstSeen := 0, -1
	busy := func(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, _ *streamScratch) {
		if firstSeen < 0 && ran.Load() {
			firstSeen = items
		}
		items++
		for start := time.Now(); time.Since(start) < 500*time.Microsecond; {
		}
	}
	go ran.Store(true)
	p.matMul(dst, w, x, n, busy)
	if items < 20 {
		t.Fatalf("the job had %d items; the test needs at least 20", items)
	}
	if firstSeen < 0 || firstSeen > 2 {
		t.Fatalf("the waiting goroutine first ran before item %d of %d (want ≤ 2)", firstSeen, items)
	}
}

// TestPoolYieldsOnlyHoldingEveryP: the pool yields between items only
// where its threads hold every P; with a P left idle a goroutine made ready
// runs there, and a yield would only wake that P's thread.
func TestPoolYieldsOnlyHoldingEveryP(t *testing.T) {
	for _, c := range []struct {
		procs, threads, nice int
		want                 bool
	}{
		{1, 1, 0, true},
		{2, 2, 0, true},
		{2, 3, 0, true},
		{2, 1, 0, false},
		{4, 2, 0, false},
		{1, 1, 5, false}, // background threads never hand their P over
	} {
		func() {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(c.procs))
			p := NewPoolWith(PoolOptions{Threads: c.threads, Nice: c.nice})
			defer p.Close()
			if got := p.yields(); got != c.want {
				t.Errorf("GOMAXPROCS %d, %d threads, nice %d: yields %v, want %v", c.procs, c.threads, c.nice, got, c.want)
			}
		}()
	}
}

// parkAll waits until every worker of p is parked.
func parkAll(p *Pool) {
	for !allParked(p) {
		sleepBriefly()
	}
}

func sleepBriefly() { time.Sleep(time.Millisecond) }

// TestFillQ80Rows checks the row layout field by field: block b of token
// tok of an n-token conversion at (b·n + tok)·q80BlockBytes, and nothing
// else written.
func TestFillQ80Rows(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, nb := range []int{1, 2, 18, 41} {
		const n = 3
		stride := n * q80BlockBytes
		got := make([]byte, nb*stride+7)
		for i := range got {
			got[i] = 0xa5
		}
		var q [n][]int8
		var d [n][]float32
		var s [n][]int32
		for tok := range n {
			x := randVec(rng, nb*qk80, 1)
			q[tok], d[tok], s[tok] = make([]int8, nb*qk80), make([]float32, nb), make([]int32, nb)
			quantizeActQ80Generic(q[tok], d[tok], s[tok], x)
			fillQ80Rows(got[tok*q80BlockBytes:], stride, q[tok], d[tok], s[tok])
		}
		for b := 0; b < nb; b++ {
			for tok := range n {
				blk := got[b*stride+tok*q80BlockBytes:]
				if !bytes.Equal(blk[:qk80], int8Bytes(q[tok][b*qk80:(b+1)*qk80])) {
					t.Fatalf("nb=%d block %d token %d: values differ", nb, b, tok)
				}
				if g := int32(binary.LittleEndian.Uint32(blk[q80BlockOffset:])); g != 128*s[tok][b] {
					t.Fatalf("nb=%d block %d token %d: offset %d, want %d", nb, b, tok, g, 128*s[tok][b])
				}
				if g := math.Float32frombits(binary.LittleEndian.Uint32(blk[q80BlockScale:])); g != d[tok][b] {
					t.Fatalf("nb=%d block %d token %d: scale %g, want %g", nb, b, tok, g, d[tok][b])
				}
			}
		}
		for i, v := range got[nb*stride:] {
			if v != 0xa5 {
				t.Fatalf("nb=%d: byte %d past the layout written", nb, nb*stride+i)
			}
		}
	}
}

func int8Bytes(q []int8) []byte {
	b := make([]byte, len(q))
	for i, v := range q {
		b[i] = byte(v)
	}
	return b
}

// TestPoolRest: after Rest the idle workers park at once instead of
// spinning out their spin limit (here endless: without Rest they never
// park), the next job wakes them, and no item is lost or run twice over
// many Rest/job cycles.
func TestPoolRest(t *testing.T) {
	p := NewPoolWith(PoolOptions{Threads: 3, spinLimit: math.MaxInt})
	defer p.Close()
	const rounds, n = 50, 300
	var sum atomic.Int64
	for round := range rounds {
		p.Parallel(n, func(lo, hi int) { sum.Add(int64(hi - lo)) })
		p.Rest()
		for deadline := time.Now().Add(10 * time.Second); !allParked(p); sleepBriefly() {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: workers still spinning 10 s after Rest", round)
			}
		}
	}
	if got := sum.Load(); got != rounds*n {
		t.Fatalf("items covered %d times in all, want %d", got, rounds*n)
	}
}

func allParked(p *Pool) bool {
	for i := range p.workers {
		if p.workers[i].sleeping.Load() == 0 {
			return false
		}
	}
	return true
}

// TestWiden: a Q5_0 matrix widened to Q8_0 holds the same values, and the
// Q8_0 reference kernel on it gives the Q5_0 reference kernel's products bit
// for bit (ggml's two dot products share their integer sums and float
// steps), for any number of tokens; every level's Q8_0 kernels on it, and
// this CPU's on it packed, agree with the reference as for any Q8_0 matrix.
func TestWiden(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range []DType{Q5_0, Q4_1, Q5_1, IQ4_NL, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S} {
		wt, _ := WidenedType(typ)
		for _, shape := range [][2]int{{1, 32}, {9, 576}, {24, 896}, {67, 256}, {13, 512}} {
			rows, cols := shape[0], shape[1]
			if cols%typ.BlockSize() != 0 {
				continue
			}
			m, wd := randMatrix(t, rng, typ, rows, cols)
			w := Widen(m)
			if w.Type != wt || w.Rows != rows || w.Cols != cols || len(w.Data) != rows*wt.RowBytes(cols) || w.Bytes() != rows*WidenedRowBytes(typ, cols) {
				t.Fatalf("%v %dx%d: widened to %v %dx%d, %d bytes", typ, rows, cols, w.Type, w.Rows, w.Cols, w.Bytes())
			}
			// Every row as the original's, bit for bit, packed or not,
			// with no allocation (an embedding lookup).
			row := make([]float32, cols)
			for _, v := range []Matrix{w, Pack(Widen(m))} {
				if a := testing.AllocsPerRun(5, func() { v.DequantizeRow(row, rows-1) }); a != 0 {
					t.Fatalf("%v %dx%d packed=%v: %v allocations per DequantizeRow", typ, rows, cols, v.Packed(), a)
				}
				for r := 0; r < rows; r++ {
					v.DequantizeRow(row, r)
					for c, x := range row {
						if x != wd[r*cols+c] {
							t.Fatalf("%v %dx%d packed=%v: widened row %d value %d is %v, %v's %v", typ, rows, cols, v.Packed(), r, c, x, typ, wd[r*cols+c])
						}
					}
				}
			}
			for _, n := range []int{1, 2, 5, 17} {
				x := randVec(rng, n*cols, 1)
				if !hasMins(typ) {
					// The same float steps as the type's own kernel: the
					// same bits.
					want := make([]float32, n*rows)
					p.matMul(want, m, x, n, portableKernel(typ))
					have := make([]float32, n*rows)
					p.matMul(have, w, x, n, portableKernel(wt))
					for i := range want {
						if math.Float32bits(want[i]) != math.Float32bits(have[i]) {
							t.Fatalf("%v %dx%d n=%d: output %d is %v widened, %v unwidened", typ, rows, cols, n, i, have[i], want[i])
						}
					}
				}
				ref := newMatMulRef(typ, wd, x, rows, cols, n)
				for _, level := range availableISAs() {
					out := make([]float32, n*rows)
					p.matMul(out, w, x, n, kernelAt(wt, level))
					ref.check(t, fmt.Sprintf("%v %v widened %dx%d n=%d", level, typ, rows, cols, n), out, rows)
				}
				// Packed (as the model loader leaves it), for this CPU's kernels.
				out := make([]float32, n*rows)
				p.matMul(out, Pack(Widen(m)), x, n, kernelAt(wt, cpuISA))
				ref.check(t, fmt.Sprintf("%v packed widened %dx%d n=%d", typ, rows, cols, n), out, rows)
			}
		}
	}
	for _, typ := range []DType{Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, IQ4_XS, F16} {
		m, _ := randMatrix(t, rng, typ, 8, 256)
		if w := Widen(m); w.Type != typ || &w.Data[0] != &m.Data[0] {
			t.Errorf("%v: widened to %v (or copied)", typ, w.Type)
		}
	}
}

// TestQ80TileLayout checks the tile layout the AMX row kernels read
// (fillQ80Tiles) against its definition: for an n-token conversion, block
// b's row k holds token t's values 4k..4k+3 at (9b + k)·4n + 4t, its
// scale at (9b + 8)·4n + 4t.
func TestQ80TileLayout(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	for _, shape := range [][2]int{{32, 1}, {64, 16}, {96, 17}, {32 * 37, 35}} {
		cols, n := shape[0], shape[1]
		x := randVec(rng, n*cols, 1)
		var a actBuf
		a.prepare(Q8_0, cols, n, true)
		a.convertTokens(Q8_0, x, 0, n)
		nb := cols / qk80
		if len(a.t) != nb*36*n {
			t.Fatalf("%d×%d: tile layout of %d bytes, want %d", n, cols, len(a.t), nb*36*n)
		}
		for tok := range n {
			for b := range nb {
				for k := range 8 {
					for i := range 4 {
						got, want := int8(a.t[(9*b+k)*4*n+4*tok+i]), a.q[tok*cols+b*qk80+4*k+i]
						if got != want {
							t.Fatalf("%d×%d: token %d block %d value %d = %d, want %d", n, cols, tok, b, 4*k+i, got, want)
						}
					}
				}
				o := (9*b+8)*4*n + 4*tok
				if got := math.Float32frombits(binary.LittleEndian.Uint32(a.t[o:])); got != a.d[tok*nb+b] {
					t.Fatalf("%d×%d: token %d block %d scale %v, want %v", n, cols, tok, b, got, a.d[tok*nb+b])
				}
			}
		}
	}
}

// TestKSameBits: every level's Q2_K to Q6_K and IQ4_XS kernel, packed or
// not, gives the portable kernel's bits (ggml_vec_dot_q2_K_q8_K's to
// _q6_K_q8_K's and _iq4_xs_q8_K's integer sums and float steps, per
// block), for every token count and rows
// with tails. Packing, the memory placement and the batch a token runs in
// cannot change a result.
func TestKSameBits(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range []DType{Q4_K, Q5_K, Q6_K, IQ4_XS, Q3_K, Q2_K} {
		for _, cols := range []int{256, 512, 1280, 256 * 9} {
			for _, rows := range []int{1, 8, 13, 64, 67} {
				m, _ := randMatrix(t, rng, typ, rows, cols)
				pm := m
				pm.Data = append([]byte(nil), m.Data...)
				pm = Pack(pm)
				if packable(typ) && rows >= 8 && !pm.packed {
					t.Fatalf("%v %dx%d: not packed", typ, rows, cols)
				}
				for _, n := range []int{1, 2, 3, 4, 5, 16, 17, 40} {
					x := randVec(rng, n*cols, 1)
					want := make([]float32, n*rows)
					p.matMul(want, m, x, n, portableKernel(typ))
					for _, level := range availableISAs() {
						for _, w := range []Matrix{m, pm} {
							if w.packed && level != cpuISA {
								continue
							}
							got := make([]float32, n*rows)
							p.matMul(got, w, x, n, kernelAt(typ, level))
							for i := range want {
								if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
									t.Fatalf("%v %dx%d n=%d %v packed=%v: token %d row %d = %v, want %v", typ, rows, cols, n, level, w.packed, i/rows, i%rows, got[i], want[i])
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestBF16TileLayout reads every token's BF16 values back out of the pair
// layout the AMX-BF16 kernels take (any machine fills it the same way).
func TestBF16TileLayout(t *testing.T) {
	const cols, n = 96, 5
	x := randVec(rand.New(rand.NewPCG(49, 50)), n*cols, 1)
	a := new(actBuf)
	a.prepare(BF16, cols, n, true)
	a.convertTokens(BF16, x, 0, n)
	if len(a.t) != cols/32*64*n+64 {
		t.Fatalf("layout of %d bytes, want %d", len(a.t), cols/32*64*n+64)
	}
	for tok := 0; tok < n; tok++ {
		for c := 0; c < cols; c++ {
			chunk, pair, half := c/32, c%32/2, c%2
			dword := binary.LittleEndian.Uint32(a.t[64*n*chunk+4*n*pair+4*tok:])
			if got, want := uint16(dword>>(16*half)), F32ToBF16(x[tok*cols+c]); got != want {
				t.Fatalf("token %d column %d: %#04x in the layout, want %#04x", tok, c, got, want)
			}
		}
	}
}

// TestBF16TilePack reads every row of BF16 weights back out of the tile
// layout of the AMX-BF16 kernels (any machine packs it the same way).
func TestBF16TilePack(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	m, wd := randMatrix(t, rng, BF16, 48, 96)
	data := append([]byte(nil), m.Data...)
	packBF16Tiles(data, m.RowBytes())
	if bytes.Equal(data, m.Data) {
		t.Fatal("packing changed nothing")
	}
	row := make([]float32, m.Cols)
	for r := range m.Rows {
		dequantizeBF16TileRow(row, data[r&^15*m.RowBytes():(r|15+1)*m.RowBytes()], r&15)
		if !slices.Equal(row, wd[r*m.Cols:(r+1)*m.Cols]) {
			t.Fatalf("row %d reads %v…, want %v…", r, row[:4], wd[r*m.Cols:r*m.Cols+4])
		}
	}
}
