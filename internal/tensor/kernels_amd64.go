//go:build amd64 && !purego

package tensor

//go:generate go run ./asmgen

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Instruction-set levels of the amd64 kernels.
const (
	isaAVX2 isa = isaPortable + 1 + iota // AVX2 + FMA + F16C
	isaVNNI                              // isaAVX2 + AVX512F/BW/VL + AVX512-VNNI
)

func (i isa) String() string { return [...]string{"portable", "avx2", "avx512vnni"}[i] }

// cpuISA is the best level this CPU supports (read-only after init).
var cpuISA = func() isa {
	x := cpu.X86
	if !(x.HasAVX2 && x.HasFMA && x.HasF16C && x.HasOSXSAVE) {
		return isaPortable
	}
	if x.HasAVX512F && x.HasAVX512BW && x.HasAVX512VL && x.HasAVX512VNNI {
		return isaVNNI
	}
	return isaAVX2
}()

// q8RowsFn is a Q8_0 row kernel (see asmgen/q80rows.go).
type q8RowsFn func(w *byte, rowBytes, prefetch, rows int, act *byte, blockStride, blocks int, dst *float32, ldBytes int)

// q80Rows drives the VNNI Q8_0 kernels, which compute eight rows at a time
// (a lane each) on the row layout of the activations: t[T] computes all
// rows of a range for T ≤ 16 tokens, p[T] the packed blocks of eight rows
// of a packed matrix (Pack). All of them add a given output's products in
// the same order, so results depend neither on T (batch invariance) nor on
// the packing.
type q80Rows struct {
	t   [17]q8RowsFn
	p   [17]q8PackedFn // on packed weights (Pack)
	ps  q8SplitFn      // one token on two ranges of packed blocks (oneTokenQ8)
	amx *amxKernel     // 16 tokens of packed weights, where it is used
	// amxRows: 16 tokens of the rows as the file has them, where it is
	// used and the conversion filled the tile layout.
	amxRows *amxKernel
}

// q8PackedFn is a Q8_0 kernel on packed weights (see asmgen/q80rows.go).
type q8PackedFn func(w *byte, prefetch, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, ldBytes int)

// q8SplitFn is a one-token Q8_0 (Q4_0) kernel on two ranges of packed row
// blocks, half bytes apart (see asmgen/q80rows.go).
type q8SplitFn func(w *byte, half, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, halfOut int)

// oneTokenQ8 is oneToken for the packed Q8_0 and Q4_0 kernels: one token's
// products with the rowBlocks blocks of eight rows at w (blockBytes each)
// into dst, the halves as two streams (split) where they start at least
// minSplit bytes apart, the rest with one (one).
func oneTokenQ8(one q8PackedFn, split q8SplitFn, minSplit int, w []byte, blockBytes, rowBlocks int, act *byte, blockStride, blocks int, dst []float32) {
	b := 0
	if half := splitHalf(split != nil, rowBlocks, blockBytes, minSplit); half > 0 {
		split(&w[0], half*blockBytes, half, act, blockStride, blocks, &dst[0], half*8*4)
		b = 2 * half
	}
	if b < rowBlocks {
		one(&w[b*blockBytes], q80PackedPrefetchRows*blockBytes/8, rowBlocks-b, act, blockStride, blocks, &dst[8*b], 4)
	}
}

// q80PrefetchRows is how far ahead, in rows, the kernels prefetch the
// weights (see asmgen/q80rows.go).
const q80PrefetchRows = 16

// q80RowLayout says the Q8_0 conversion must fill the row layout.
const q80RowLayout = true

func (k *q80Rows) run(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, _ *streamScratch) {
	nb := w.Cols / qk80
	rb := w.RowBytes()
	// Rows in packed blocks (work items start at multiples of 16 rows).
	pr1 := r0
	if w.packed {
		if r0%8 != 0 {
			panic(fmt.Sprintf("tensor: packed matrix cut at row %d", r0))
		}
		pr1 = max(r0, min(r1, w.packedRows()))
	}
	packedAMX := pr1 > r0 && t1-t0 >= 16 && k.amx.on()
	rowTiles := amxRowTiles(k.amxRows, w, pr1, r1, a, t1-t0, ld)
	var amx *amxScratch
	if packedAMX || rowTiles > 0 {
		amx = new(amxScratch) // on the stack: the kernels keep no pointer
	}
	for t := t0; t < t1; {
		T := min(16, t1-t)
		switch {
		case pr1 > r0 && T == 16 && packedAMX:
			k.amx.kernel(dst, ld, w, r0, (pr1-r0)/8, a, t, amx)
		case pr1 > r0 && T == 1:
			oneTokenQ8(k.p[1], k.ps, w.minSplit(), w.Data[r0*rb:pr1*rb], 8*rb, (pr1-r0)/8, &a.g[t*q80BlockBytes], a.gs, nb, dst[t*ld+r0:t*ld+pr1])
		case pr1 > r0:
			k.p[T](&w.Data[r0*rb], q80PackedPrefetchRows*rb, (pr1-r0)/8, &a.g[t*q80BlockBytes], a.gs, nb, &dst[t*ld+r0], ld*4)
		}
		rowsAfterTiles(k.amxRows, rowTiles, amx, k.t[T], dst, ld, w, pr1, r1, a, t, T)
		t += T
	}
}

// rowsAfterTiles computes rows [r0, r1) of w, as the file has them, for
// the T tokens from t: where T is 16, the first 16·rowTiles on the AMX row
// kernel x (scratch s), and the rest with f, a row kernel for T tokens.
func rowsAfterTiles(x *amxKernel, rowTiles int, s *amxScratch, f q8RowsFn, dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t, T int) {
	if T == 16 && rowTiles > 0 {
		x.rowsKernel(dst, ld, w, r0, rowTiles, a, t, s)
		r0 += 16 * rowTiles
	}
	if r1 > r0 {
		rb := w.RowBytes()
		f(&w.Data[r0*rb], rb, q80PrefetchRows*rb, r1-r0, &a.g[t*q80BlockBytes], a.gs, w.Cols/qk80, &dst[t*ld+r0], ld*4)
	}
}

// amxRowTiles is the number of 16-row tiles of rows [r0, r1) of w, as the
// file has them, that row kernel x computes for 16-token groups of tokens
// tokens: none unless it is used and a's conversion has the tile layout.
func amxRowTiles(x *amxKernel, w *Matrix, r0, r1 int, a *actBuf, tokens, ld int) int {
	if tokens < 16 || r1-r0 < 16 || !a.tiled || !x.on() || !amxIndexable(w.RowBytes(), 4*ld) {
		return 0
	}
	return (r1 - r0) / 16
}

// q80PackedPrefetchRows is how far ahead, in rows, the packed kernels of
// more than two tokens prefetch the weights.
const q80PackedPrefetchRows = 16

// packable says whether Pack has a layout for weights of type t: Q8_0's
// for each level's kernels, Q4_0's for both (the same layout), Q4_1's,
// Q5_0's, Q5_1's and IQ4_NL's for the AVX2 level's, Q2_K's to Q6_K's and
// IQ4_XS's for the VNNI level's, F16's for the AVX2 kernels or the zmm
// ones, BF16's for the vdpbf16ps kernels where the CPU has them, else for
// the AVX2 ones (zmmRowStep).
func packable(t DType) bool {
	switch t {
	case Q8_0, Q4_0, F16, BF16:
		return cpuISA >= isaAVX2
	case Q4_1, Q5_0, Q5_1, IQ4_NL: // the VNNI level computes them streamed (q80Direct)
		return cpuISA == isaAVX2
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS:
		return cpuISA == isaVNNI
	}
	return false
}

// q80PackedXor is what the packed Q8_0 layout adds to each weight byte: the
// VNNI kernels take q+128 (xor 0x80), the AVX2 ones q itself.
func q80PackedXor() byte {
	if cpuISA == isaVNNI {
		return 0x80
	}
	return 0
}

// eightRows drives the Q4_0 kernels and the AVX2 Q8_0 ones
// (asmgen/q40avx2.go, asmgen/q80rows.go), which compute eight rows at a
// time, a lane each, with the float steps of the VNNI Q8_0 kernels: n[T]
// all rows of a range for T < len(n) tokens on the weights as the file has
// them (more tokens go in turns: prefill tiles, whose rows are then read
// from cache), p[T] the packed blocks of eight rows of a packed matrix
// (Pack) for T < len(p) tokens. Results depend neither on T (batch
// invariance) nor on the packing, nor, for Q4_0, on the level.
type eightRows struct {
	n []q8RowsFn
	p []q8PackedFn
	// avx2Layout: p reads the packed layout Pack makes at the AVX2 level
	// only (Q8_0's differs at the VNNI level; Q4_0's is the same).
	avx2Layout bool
	amx        *amxKernel // 16 tokens of packed weights, where it is used
	amxRows    *amxKernel // 16 tokens of unpacked rows, as q80Rows'
	ps         q8SplitFn  // one token on two ranges of packed blocks (oneTokenQ8)
}

func (k *eightRows) run(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, _ *streamScratch) {
	nb := w.Cols / 32
	rb := w.RowBytes()
	pr1 := r0
	if w.packed {
		if r0%8 != 0 || (k.avx2Layout && cpuISA != isaAVX2) {
			panic(fmt.Sprintf("tensor: packed matrix cut at row %d, or packed for other kernels", r0))
		}
		pr1 = max(r0, min(r1, w.packedRows()))
	}
	if pr1 > r0 {
		var amx *amxScratch
		if t1-t0 >= 16 && k.amx.on() {
			amx = new(amxScratch) // on the stack: the kernels keep no pointer
		}
		for t := t0; t < t1; {
			T := min(len(k.p)-1, t1-t)
			if T == 16 && amx != nil {
				k.amx.kernel(dst, ld, w, r0, (pr1-r0)/8, a, t, amx)
			} else if T == 1 {
				oneTokenQ8(k.p[1], k.ps, w.minSplit(), w.Data[r0*rb:pr1*rb], 8*rb, (pr1-r0)/8, &a.g[t*q80BlockBytes], a.gs, nb, dst[t*ld+r0:t*ld+pr1])
			} else {
				k.p[T](&w.Data[r0*rb], q80PackedPrefetchRows*rb, (pr1-r0)/8, &a.g[t*q80BlockBytes], a.gs, nb, &dst[t*ld+r0], ld*4)
			}
			t += T
		}
	}
	rowTiles := amxRowTiles(k.amxRows, w, pr1, r1, a, t1-t0, ld)
	var amx *amxScratch
	if rowTiles > 0 {
		amx = new(amxScratch) // on the stack: the kernels keep no pointer
	}
	for t := t0; t < t1 && r1 > pr1; {
		T := min(len(k.n)-1, t1-t)
		rowsAfterTiles(k.amxRows, rowTiles, amx, k.n[T], dst, ld, w, pr1, r1, a, t, T)
		t += T
	}
}

var (
	q40AVX2 = &eightRows{
		n: []q8RowsFn{nil, q40AVX2N_1, q40AVX2N_2},
		p: []q8PackedFn{nil, q40AVX2P_1, q40AVX2P_2, q40AVX2P_3, q40AVX2P_4},
	}
	q80AVX2 = &eightRows{
		n:          []q8RowsFn{nil, q80AVX2N_1, q80AVX2N_2},
		p:          []q8PackedFn{nil, q80AVX2P_1, q80AVX2P_2, q80AVX2P_3, q80AVX2P_4},
		avx2Layout: true,
	}
	// q40VNNI: the Q4_0 kernels of the VNNI level, vpdpbusd on the
	// nibbles and up to 16 tokens a pass over a block of rows; decode on
	// unpacked rows is the AVX2 level's (one or two tokens need no
	// transpose).
	q40VNNI = &eightRows{
		n: []q8RowsFn{nil, q40AVX2N_1, q40AVX2N_2,
			q40VNNIR_3, q40VNNIR_4, q40VNNIR_5, q40VNNIR_6, q40VNNIR_7, q40VNNIR_8, q40VNNIR_9,
			q40VNNIR_10, q40VNNIR_11, q40VNNIR_12, q40VNNIR_13, q40VNNIR_14, q40VNNIR_15, q40VNNIR_16},
		p: []q8PackedFn{nil, q40VNNIP_1, q40VNNIP_2, q40VNNIP_3, q40VNNIP_4, q40VNNIP_5, q40VNNIP_6, q40VNNIP_7, q40VNNIP_8,
			q40VNNIP_9, q40VNNIP_10, q40VNNIP_11, q40VNNIP_12, q40VNNIP_13, q40VNNIP_14, q40VNNIP_15, q40VNNIP_16},
		ps:      q40VNNIS_1,
		amx:     q40AMX,
		amxRows: q40AMXRows,
	}
)

var q80VNNI = &q80Rows{
	t: [17]q8RowsFn{nil, q80VNNIN_1, q80VNNIN_2,
		q80VNNIR_3, q80VNNIR_4, q80VNNIR_5, q80VNNIR_6, q80VNNIR_7, q80VNNIR_8, q80VNNIR_9,
		q80VNNIR_10, q80VNNIR_11, q80VNNIR_12, q80VNNIR_13, q80VNNIR_14, q80VNNIR_15, q80VNNIR_16},
	p: [17]q8PackedFn{nil, q80VNNIP_1, q80VNNIP_2,
		q80VNNIP_3, q80VNNIP_4, q80VNNIP_5, q80VNNIP_6, q80VNNIP_7, q80VNNIP_8, q80VNNIP_9,
		q80VNNIP_10, q80VNNIP_11, q80VNNIP_12, q80VNNIP_13, q80VNNIP_14, q80VNNIP_15, q80VNNIP_16},
	ps:      q80VNNIS_1,
	amx:     q80AMX,
	amxRows: q80AMXRows,
}

type floatFn func(w *byte, rowBytes, groups int, y *float32, yStride int, steps int, dst *float32, ldBytes int)

// floatTiles drives the F32 / F16 / BF16 tile kernels: r4[T] (T <= 3) for
// groups of 4 rows, r1[T] (T <= 4) for single rows. Columns beyond the last
// multiple of 8 are added in Go. On packed F16 and BF16 weights (Pack) the
// packed kernels compute the blocks of eight rows (asmgen/floatpacked.go):
// p8 one token eight rows at a time, p4[T] (T = 2, 3) four rows at a time.
//
// At the AVX-512 level the packed F16 blocks go to the zmm kernels instead
// (the same results): z[T], eight rows × T ≤ 6 tokens, and zs for one
// token over two ranges of blocks at once (oneToken).
type floatTiles struct {
	typ    DType
	r4, r1 [5]floatFn
	p8     halfFn
	p4     [4]halfFn
	z      [7]halfFn
	zs     halfSplitFn
}

// halfFn is a kernel on packed F16 or BF16 weights (asmgen/floatpacked.go).
type halfFn func(w *byte, blockBytes, blocks int, y unsafe.Pointer, yStride int, steps int, dst *float32, ldBytes int)

// halfSplitFn is a one-token kernel on two ranges of blocks of packed F16
// or BF16 weights, half bytes apart (asmgen/floatpacked.go).
type halfSplitFn func(w *byte, half, blocks int, y unsafe.Pointer, halfOut int, steps int, dst *float32)

// splitMinBytes is how far apart oneToken's two streams must start for
// it to split a range of blocks: two streams gained more over one the
// farther apart they were, from about a quarter MiB, and two neighbouring
// blocks read slower than one stream.
const splitMinBytes = 256 << 10

// minSplit is how far apart the two streams of w's one-token products
// must start (splitHalf): never, where w is set to one stream.
func (w *Matrix) minSplit() int {
	if w.oneStream {
		return math.MaxInt
	}
	return splitMinBytes
}

// splitKernel says whether the one-token kernel of type t at this CPU's
// level reads packed weights in two streams (oneToken, oneTokenQ8).
func splitKernel(t DType) bool {
	if cpuISA != isaVNNI {
		return false
	}
	switch t {
	case F16:
		return f16VNNI.zs != nil
	case BF16: // not where the AMX-BF16 tiles compute BF16 products
		return hasBF16 && bf16DP.zs != nil && !bf16AMX.on()
	case Q8_0:
		return q80VNNI.ps != nil
	case Q4_0:
		return q40VNNI.ps != nil
	}
	return false
}

// splitHalf is the blocks in each of the two streams a one-token product
// of blocks blocks of blockBytes reads (the rest, an odd last block, with
// one stream): half of them where there is a split kernel and the halves
// start at least minSplit bytes apart, else 0.
func splitHalf(hasSplit bool, blocks, blockBytes, minSplit int) int {
	if half := blocks / 2; hasSplit && half > 0 && half*blockBytes >= minSplit {
		return half
	}
	return 0
}

// oneToken computes one token's products with the blocks of eight packed
// rows at w (blockBytes each, of steps steps) into dst: the first and the
// second half of the blocks as two streams read side by side (split),
// where the halves start at least minSplit bytes apart (splitMinBytes),
// an odd last block and smaller ranges with one. One token's product
// waits on one core's pull of the weights from memory, and two distant
// streams kept more reads in flight than one. Every output is the
// one-stream kernel's bits.
func oneToken(one halfFn, split halfSplitFn, minSplit int, w []byte, blockBytes, blocks int, y unsafe.Pointer, yStride, steps int, dst []float32) {
	b := 0
	if half := splitHalf(split != nil, blocks, blockBytes, minSplit); half > 0 {
		split(&w[0], half*blockBytes, half, y, half*8*4, steps, &dst[0])
		b = 2 * half
	}
	if b < blocks {
		one(&w[b*blockBytes], blockBytes, blocks-b, y, yStride, steps, &dst[8*b], 4)
	}
}

func (k *floatTiles) run(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, _ *streamScratch) {
	cols := w.Cols
	ys := a.f
	if k.typ == F32 {
		ys = a.x
	}
	steps := cols / 8
	rb := w.RowBytes()
	if w.packed {
		if r0%8 != 0 || (k.z[1] == nil) != (zmmRowStep(k.typ) == 0) {
			panic(fmt.Sprintf("tensor: packed matrix cut at row %d, or packed for other kernels", r0))
		}
		if pr1 := max(r0, min(r1, w.packedRows())); pr1 > r0 && k.z[1] != nil {
			k.runWide(dst, ld, w, r0, pr1, a, t0, t1)
			r0 = pr1
		} else if pr1 > r0 {
			// Few tokens (decode) stream the weights from memory: all
			// the tokens' tiles of a block while it is in cache. More
			// (prefill, its rows in cache): all the blocks of a tile's
			// tokens while they are in L1.
			// F16 tiles read the activations' F16 conversion, BF16 tiles
			// their f32 values (asmgen/floatpacked.go).
			y, ysz := unsafe.Pointer(&a.h[0]), 2
			if k.typ == BF16 {
				y, ysz = unsafe.Pointer(&ys[0]), 4
			}
			b0, b1, bstep := r0/8, pr1/8, pr1/8-r0/8
			if t1-t0 <= smallN {
				bstep = 1
			}
			for b := b0; b < b1; b += bstep {
				blocks := min(bstep, b1-b)
				for t := t0; t < t1; {
					T := halfPackedTokens(t1 - t)
					fn := k.p4[T]
					if T == 1 {
						fn = k.p8
					}
					fn(&w.Data[8*b*rb], 8*rb, blocks, unsafe.Add(y, t*cols*ysz), cols*ysz, steps, &dst[t*ld+8*b], ld*4)
					t += T
				}
			}
			r0 = pr1
		}
		if r0 == r1 {
			return
		}
	}
	if steps > 0 {
		r := r0
		if g := (r1 - r) / 4; g > 0 && t1-t0 >= 3 {
			for t := t0; t < t1; {
				T := min(3, t1-t)
				k.r4[T](&w.Data[r*rb], rb, g, &ys[t*cols], cols*4, steps, &dst[t*ld+r], ld*4)
				t += T
			}
			r += 4 * g
		}
		if r < r1 {
			for t := t0; t < t1; {
				T := min(4, t1-t)
				k.r1[T](&w.Data[r*rb], rb, r1-r, &ys[t*cols], cols*4, steps, &dst[t*ld+r], ld*4)
				t += T
			}
		}
	}
	if tail := steps * 8; tail < cols {
		esz := int(k.typ.TypeSize())
		for r := r0; r < r1; r++ {
			row := w.Row(r)
			for t := t0; t < t1; t++ {
				y := ys[t*cols : (t+1)*cols]
				var sum float32
				if steps == 0 {
					dst[t*ld+r] = 0
				}
				for c := tail; c < cols; c++ {
					var wv float32
					switch k.typ {
					case F32:
						wv = math.Float32frombits(binary.LittleEndian.Uint32(row[c*esz:]))
					case F16:
						wv = F16ToF32(binary.LittleEndian.Uint16(row[c*esz:]))
					case BF16:
						wv = BF16ToF32(binary.LittleEndian.Uint16(row[c*esz:]))
					}
					sum += wv * y[c]
				}
				dst[t*ld+r] += sum
			}
		}
	}
}

// runWide computes the packed blocks of rows [r0, r1) with the zmm kernels
// on the activations' f32 values, up to six tokens at a time over every
// block: all of decode's tokens in one pass over the weights, prefill's
// while they are in L1.
func (k *floatTiles) runWide(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int) {
	cols, rb := w.Cols, w.RowBytes()
	b0, blocks := r0/8, (r1-r0)/8
	for t := t0; t < t1; {
		T := min(len(k.z)-1, t1-t)
		if T == 1 {
			oneToken(k.z[1], k.zs, w.minSplit(), w.Data[8*b0*rb:r1*rb], 8*rb, blocks, unsafe.Pointer(&a.f[t*cols]), cols*4, cols/8, dst[t*ld+r0:t*ld+r1])
		} else {
			k.z[T](&w.Data[8*b0*rb], 8*rb, blocks, unsafe.Pointer(&a.f[t*cols]), cols*4, cols/8, &dst[t*ld+r0], ld*4)
		}
		t += T
	}
}

// packedF16ReadsHalf says whether the packed F16 tiles read the
// activations' F16 conversion (the AVX2 kernels) rather than their f32
// values (the zmm kernels).
var packedF16ReadsHalf = cpuISA == isaAVX2

// tileTokens is the number of tokens the prefill tiles of w take at once:
// 32 on the AMX-BF16 tiles, three for the float kernels of 16 registers
// (four rows × three tokens), four for the others.
func tileTokens(w *Matrix) int {
	t, packed := w.Type, w.packed
	switch {
	case bf16OnTiles(*w):
		return 32 // bf16AMXR_32
	case t == BF16 && hasBF16:
		return 4
	case t == F16 && packed && cpuISA == isaVNNI:
		return 6 // f16PackedZ_6
	case t == F32 || t == F16 || t == BF16:
		return 3
	}
	return 4
}

// halfPackedTokens is the number of tokens of the next packed F16/BF16
// tile when n are left: three where it can, two rather than a last single
// one (the one-token kernel shares no weights between tokens).
func halfPackedTokens(n int) int {
	switch n {
	case 1, 2:
		return n
	case 4:
		return 2
	}
	return 3
}

type kFn func(w *byte, rows int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int)

// kTiles drives the k-quant kernels (Q2_K to Q6_K), IQ4_XS's and Q8_K16's: t[T] computes all rows of a range
// for T tokens.
type kTiles struct{ t [5]kFn }

func (k *kTiles) run(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, _ *streamScratch) {
	cols := w.Cols
	nb := cols / qkK
	rb := w.RowBytes()
	for t := t0; t < t1; {
		T := min(4, t1-t)
		k.t[T](&w.Data[r0*rb], r1-r0, &a.q[t*cols], cols, &a.d[t*nb], nb*4, &a.bs[t*cols/16], nb*32, nb, &dst[t*ld+r0], ld*4)
		t += T
	}
}

// kPackedFn is a k-quant kernel on packed weights, for up to 16 tokens.
type kPackedFn func(w *byte, groups int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int, tokens int)

// kPacked1Fn is kPackedFn for one token.
type kPacked1Fn func(w *byte, groups int, y *int8, d *float32, bs *int16, nb int, dst *float32)

// kPacked drives a k-quant type with a packed layout (Q2_K to Q6_K and
// IQ4_XS at the VNNI level): p computes the packed blocks of eight
// rows, 16 tokens at a time (p1 one token), rows the rest (and every row of
// an unpacked matrix), all with the same bits.
type kPacked struct {
	rows *kTiles
	p    kPackedFn
	p1   kPacked1Fn
	// packTokens is the fewest tokens of a product for which the rows of
	// an unpacked matrix (the file mapped) are packed into a thread's
	// scratch for p: about twice the tokens whose time on the row kernels
	// the packing costs (Q6_K's and Q3_K's row kernels are the fastest:
	// at 64 tokens packing them was 10–17% slower, or even).
	packTokens int
	amx        *amxKernel // 16 tokens on the tiles, where it is used
}

func (k *kPacked) run(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, s *streamScratch) {
	pr1 := r0
	switch {
	case w.packed:
		if r0%8 != 0 {
			panic(fmt.Sprintf("tensor: packed matrix cut at row %d", r0))
		}
		pr1 = max(r0, min(r1, w.packedRows()))
		k.packed(dst, ld, w, r0, pr1, a, t0, t1)
	case s != nil && a.n >= k.packTokens && r1-r0 >= 8:
		// A prompt's rows as the file has them: packed once per thread
		// and row range, and reused by the range's token chunks, as
		// streamScratch.packedItem does.
		rb := w.RowBytes()
		pr1 = r0 + (r1-r0)&^7
		if h := (heldRows{&w.Data[0], r0, pr1}); s.held != h {
			s.rows = growBytes(s.rows, (pr1-r0)*rb)
			packK45Rows(w.Type, s.rows, w.Data[r0*rb:pr1*rb], rb, (pr1-r0)/8)
			s.held = h
		}
		s.m = Matrix{Type: w.Type, Rows: pr1 - r0, Cols: w.Cols, Data: s.rows[:(pr1-r0)*rb], packed: true}
		k.packed(dst[r0:], ld, &s.m, 0, pr1-r0, a, t0, t1)
		s.m = Matrix{}
	}
	if r1 > pr1 {
		k.rows.run(dst, ld, w, pr1, r1, a, t0, t1, s)
	}
}

// packed computes rows [r0, r1) of w, all in packed blocks, for tokens
// [t0, t1).
func (k *kPacked) packed(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int) {
	if r1 <= r0 {
		return
	}
	cols := w.Cols
	nb := cols / qkK
	if t1-t0 == 1 {
		k.p1(&w.Data[r0*w.RowBytes()], (r1-r0)/8, &a.q[t0*cols], &a.d[t0*nb], &a.bs[t0*cols/16], nb, &dst[t0*ld+r0])
		return
	}
	var amx *amxScratch
	if t1-t0 >= 16 && k.amx.on() {
		amx = new(amxScratch) // on the stack: the kernels keep no pointer
	}
	for t := t0; t < t1; {
		T := min(16, t1-t)
		if T == 16 && amx != nil {
			k.amx.kernel(dst, ld, w, r0, (r1-r0)/8, a, t, amx)
		} else {
			k.p(&w.Data[r0*w.RowBytes()], (r1-r0)/8, &a.q[t*cols], cols, &a.d[t*nb], nb*4, &a.bs[t*cols/16], nb*32, nb, &dst[t*ld+r0], ld*4, T)
		}
		t += T
	}
}

var (
	q4KVNNI         = &kTiles{[5]kFn{nil, q4KVNNI_1, q4KVNNI_2, q4KVNNI_3, q4KVNNI_4}}
	q4KVNNIPacked   = &kPacked{rows: q4KVNNI, p: q4KVNNIP, p1: q4KVNNIP1, packTokens: 32, amx: q4KAMX}
	q5KVNNIPacked   = &kPacked{rows: q5KVNNI, p: q5KVNNIP, p1: q5KVNNIP1, packTokens: 32, amx: q5KAMX}
	q6KVNNIPacked   = &kPacked{rows: q6KVNNI, p: q6KVNNIP, p1: q6KVNNIP1, packTokens: 128, amx: q6KAMX}
	iq4XSVNNIPacked = &kPacked{rows: iq4XSVNNI, p: iq4XSVNNIP, p1: iq4XSVNNIP1, packTokens: 32, amx: iq4XSAMX}
	q3KVNNIPacked   = &kPacked{rows: q3KVNNI, p: q3KVNNIP, p1: q3KVNNIP1, packTokens: 128, amx: q3KAMX}
	q2KVNNIPacked   = &kPacked{rows: q2KVNNI, p: q2KVNNIP, p1: q2KVNNIP1, packTokens: 128, amx: q2KAMX}
	// kPackedKernels are the packed k-quant types' drivers, for the AMX
	// probe (kPackedFor) and the tests.
	kPackedKernels = []*kPacked{q4KVNNIPacked, q5KVNNIPacked, q6KVNNIPacked, iq4XSVNNIPacked, q3KVNNIPacked, q2KVNNIPacked}
	q5KVNNI        = &kTiles{[5]kFn{nil, q5KVNNI_1, q5KVNNI_2, q5KVNNI_3, q5KVNNI_4}}
	q2KVNNI        = &kTiles{[5]kFn{nil, q2KVNNI_1, q2KVNNI_2, q2KVNNI_3, q2KVNNI_4}}
	q3KVNNI        = &kTiles{[5]kFn{nil, q3KVNNI_1, q3KVNNI_2, q3KVNNI_3, q3KVNNI_4}}
	iq4XSVNNI      = &kTiles{[5]kFn{nil, iq4XSVNNI_1, iq4XSVNNI_2, iq4XSVNNI_3, iq4XSVNNI_4}}
	q6KVNNI        = &kTiles{[5]kFn{nil, q6KVNNI_1, q6KVNNI_2, q6KVNNI_3, q6KVNNI_4}}
	q8K16VNNI      = &kTiles{[5]kFn{nil, q8K16VNNI_1, q8K16VNNI_2, q8K16VNNI_3, q8K16VNNI_4}}
	q4KAVX2        = &kTiles{[5]kFn{nil, q4KAVX2_1, q4KAVX2_2, q4KAVX2_3, q4KAVX2_4}}
	q5KAVX2        = &kTiles{[5]kFn{nil, q5KAVX2_1, q5KAVX2_2, q5KAVX2_3, q5KAVX2_4}}
	q2KAVX2        = &kTiles{[5]kFn{nil, q2KAVX2_1, q2KAVX2_2, q2KAVX2_3, q2KAVX2_4}}
	q3KAVX2        = &kTiles{[5]kFn{nil, q3KAVX2_1, q3KAVX2_2, q3KAVX2_3, q3KAVX2_4}}
	iq4XSAVX2      = &kTiles{[5]kFn{nil, iq4XSAVX2_1, iq4XSAVX2_2, iq4XSAVX2_3, iq4XSAVX2_4}}
	q6KAVX2        = &kTiles{[5]kFn{nil, q6KAVX2_1, q6KAVX2_2, q6KAVX2_3, q6KAVX2_4}}
	q8K16AVX2      = &kTiles{[5]kFn{nil, q8K16AVX2_1, q8K16AVX2_2, q8K16AVX2_3, q8K16AVX2_4}}
	// The IQ1, IQ2 and IQ3 types in their own bytes (VNNI level with VBMI;
	// asmgen/iqdirect.go).
	iqDirectKernels = map[DType]*kTiles{
		IQ2_XXS: {[5]kFn{nil, iq2XXSVNNI_1, iq2XXSVNNI_2, iq2XXSVNNI_3, iq2XXSVNNI_4}},
		IQ2_XS:  {[5]kFn{nil, iq2XSVNNI_1, iq2XSVNNI_2, iq2XSVNNI_3, iq2XSVNNI_4}},
		IQ2_S:   {[5]kFn{nil, iq2SVNNI_1, iq2SVNNI_2, iq2SVNNI_3, iq2SVNNI_4}},
		IQ3_XXS: {[5]kFn{nil, iq3XXSVNNI_1, iq3XXSVNNI_2, iq3XXSVNNI_3, iq3XXSVNNI_4}},
		IQ3_S:   {[5]kFn{nil, iq3SVNNI_1, iq3SVNNI_2, iq3SVNNI_3, iq3SVNNI_4}},
		IQ1_S:   {[5]kFn{nil, iq1SVNNI_1, iq1SVNNI_2, iq1SVNNI_3, iq1SVNNI_4}},
		IQ1_M:   {[5]kFn{nil, iq1MVNNI_1, iq1MVNNI_2, iq1MVNNI_3, iq1MVNNI_4}},
	}
	// The same with AVX2's instructions (asmgen/iqdirectavx2.go).
	iqDirectAVX2Kernels = map[DType]*kTiles{
		IQ2_XXS: {[5]kFn{nil, iq2XXSAVX2_1, iq2XXSAVX2_2, iq2XXSAVX2_3, iq2XXSAVX2_4}},
		IQ2_XS:  {[5]kFn{nil, iq2XSAVX2_1, iq2XSAVX2_2, iq2XSAVX2_3, iq2XSAVX2_4}},
		IQ2_S:   {[5]kFn{nil, iq2SAVX2_1, iq2SAVX2_2, iq2SAVX2_3, iq2SAVX2_4}},
		IQ3_XXS: {[5]kFn{nil, iq3XXSAVX2_1, iq3XXSAVX2_2, iq3XXSAVX2_3, iq3XXSAVX2_4}},
		IQ3_S:   {[5]kFn{nil, iq3SAVX2_1, iq3SAVX2_2, iq3SAVX2_3, iq3SAVX2_4}},
		IQ1_S:   {[5]kFn{nil, iq1SAVX2_1, iq1SAVX2_2, iq1SAVX2_3, iq1SAVX2_4}},
		IQ1_M:   {[5]kFn{nil, iq1MAVX2_1, iq1MAVX2_2, iq1MAVX2_3, iq1MAVX2_4}},
	}
)

// kPackedFor is the packed driver whose AMX kernel is x, nil if none.
func kPackedFor(x *amxKernel) *kPacked {
	for _, k := range kPackedKernels {
		if k.amx == x {
			return k
		}
	}
	return nil
}

// hasVBMI reports whether the CPU has AVX512-VBMI (vpermb,
// vpmultishiftqb), which the direct IQ kernels need beyond the VNNI level.
var hasVBMI = cpuISA == isaVNNI && cpu.X86.HasAVX512VBMI

// directKernel returns the kernel computing streamed type t in its own
// bytes at level i and the most tokens it takes, or nil where there is
// none.
func directKernel(t DType, i isa) (kernel, int) {
	if i == isaAVX2 && t == Q4_1 {
		return q41AVX2.run, q41AVX2Tokens
	}
	if k := iqDirectKernels[t]; k != nil && i == isaVNNI && hasVBMI {
		return k.run, directTokens
	}
	if k := iqDirectAVX2Kernels[t]; k != nil {
		// Also the VNNI level's where the CPU lacks VBMI (Cascade Lake):
		// their integer sums and float steps are Q8_K16's kernels' at
		// either level, so the results are the widened rows' there too.
		return k.run, directTokens
	}
	if i != isaVNNI {
		return nil, 0
	}
	if k := q80DirectKernels[t]; k != nil {
		if k.mins {
			// Their rows kernels take at most eight tokens a pass (the
			// minima's sums take half of the registers): past one pass,
			// packing the rows was faster (BenchmarkStreamedDirect).
			return k.run, len(k.k) - 1
		}
		return k.run, directPackTokens
	}
	return nil, 0
}

// directPacker returns the function that writes rows of streamed type t
// as packed Q8_0 blocks at level i (the layout Pack makes of its widened
// rows), or nil where there is none: a prompt's streamed rows are then
// unpacked once per work item for the packed kernels, rather than once per
// 16 tokens by the direct kernels.
func directPacker(t DType, i isa) *rowPacker {
	if i != isaVNNI {
		return nil
	}
	k := q80DirectKernels[t]
	if k == nil || k.pack == nil {
		return nil
	}
	p := &rowPacker{pack: func(dst, mins, src []byte, rowBytes, rowBlocks, cols int) {
		_ = src[8*rowBlocks*rowBytes-1]
		_ = dst[8*rowBlocks*cols/qk80*q80Size-1]
		if !k.mins {
			k.pack(&src[0], rowBytes, q80PrefetchRows*rowBytes, rowBlocks, cols/qk80, &dst[0], nil)
			return
		}
		// One row block a call: pairs of them share their minima's
		// 32-byte lines (minsAddVNNI).
		nb := cols / qk80
		_ = mins[pairedMinsBytes(rowBlocks, nb)-1]
		for rb := range rowBlocks {
			k.pack(&src[8*rb*rowBytes], rowBytes, q80PrefetchRows*rowBytes, 1, nb, &dst[8*rb*nb*q80Size], &mins[rb/2*nb*32+rb%2*16])
		}
	}}
	if k.mins {
		p.addMins = func(dst []float32, ld int, mins []byte, rowBlocks, cols int, a *actBuf, t0, t1 int) {
			nb := cols / qk80
			_ = mins[pairedMinsBytes(rowBlocks, nb)-1]
			_ = a.s1[t1*nb-1]
			_ = dst[(t1-1)*ld+8*rowBlocks-1]
			minsAddVNNI(&mins[0], nb, &a.s1[t0*nb], 4*nb, t1-t0, &dst[t0*ld], 4*ld, rowBlocks)
		}
	}
	return p
}

// q41AVX2 is Q4_1's direct kernels at the AVX2 level: one or two tokens a
// pass over the rows in their own bytes (asmgen/q40avx2.go), up to
// q41AVX2Tokens in turns (decode from the file's mapping; past that,
// q41AVX2Kernel packs the rows).
var q41AVX2 = &q80Direct{k: []q8DirectFn{nil, q41AVX2N_1, q41AVX2N_2}, mins: true}

// q41AVX2Tokens is the most tokens q41AVX2 takes: two passes over the
// rows in their own bytes read as much as one over a widened copy, where a
// decode-sized work item packed (its rows too many for the cache) would be
// written out and read back.
const q41AVX2Tokens = 4

// avx2PackedFn is a kernel of packed weights of a type the VNNI level
// streams to Q8_0, at the AVX2 level: a q8PackedFn that also reads the
// activations' Q8_1 block sums s1 (block-major for its tokens) where the
// type has minima.
type avx2PackedFn func(w *byte, prefetch, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, ldBytes int, s1 *float32)

// avx2Packed drives the kernels of packed Q4_1, Q5_0, Q5_1 and IQ4_NL
// weights at the AVX2 level (Pack; asmgen/q40avx2.go): p[T], T ≤ 4 tokens
// a pass over a block of rows, Q4_0's packed kernels with the float steps
// of the rows widened to Q8_0, so the same bits as the rows streamed or
// widened.
type avx2Packed struct {
	p    []avx2PackedFn
	mins bool // Q4_1, Q5_1
	// unpack, where not nil (IQ4_NL), writes blocks (> 0) packed blocks
	// of eight rows as the AVX2 level's packed Q8_0 blocks, for prompts:
	// p's steps per token are more than the Q8_0 kernels' there.
	unpack func(src *byte, blocks int, dst *byte)
}

var (
	q41AVX2Packed   = &avx2Packed{p: []avx2PackedFn{nil, q41AVX2P_1, q41AVX2P_2, q41AVX2P_3, q41AVX2P_4}, mins: true}
	q51AVX2Packed   = &avx2Packed{p: []avx2PackedFn{nil, q51AVX2P_1, q51AVX2P_2, q51AVX2P_3, q51AVX2P_4}, mins: true}
	q50AVX2Packed   = &avx2Packed{p: []avx2PackedFn{nil, noS1(q50AVX2P_1), noS1(q50AVX2P_2), noS1(q50AVX2P_3), noS1(q50AVX2P_4)}}
	iq4NLAVX2Packed = &avx2Packed{p: []avx2PackedFn{nil, noS1(iq4NLAVX2P_1), noS1(iq4NLAVX2P_2), noS1(iq4NLAVX2P_3), noS1(iq4NLAVX2P_4)}, unpack: iq4NLAVX2U}
)

// unpacked computes tokens [t0, t1) of packed rows [r0, r1) of w (whole
// blocks of eight) with the packed Q8_0 kernels, on the rows unpacked into
// the thread's scratch once per work item (its token chunks reuse them, as
// packedItem's).
func (k *avx2Packed) unpacked(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, s *streamScratch) {
	n, nb := r1-r0, w.Cols/qk80
	wrb := Q8_0.RowBytes(w.Cols)
	if h := (heldRows{&w.Data[0], r0, r1}); s.held != h {
		s.rows = growBytes(s.rows, n*wrb)
		k.unpack(&w.Data[r0*w.RowBytes()], n/8*nb, &s.rows[0])
		s.held = h
	}
	s.m = Matrix{Type: Q8_0, Rows: n, Cols: w.Cols, Data: s.rows[:n*wrb], packed: true}
	q80AVX2.run(dst, ld, &s.m, 0, n, a, t0, t1, nil)
	s.m = Matrix{}
}

// noS1 is f, a kernel of a type without minima, as an avx2PackedFn.
func noS1(f q8PackedFn) avx2PackedFn {
	return func(w *byte, prefetch, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, ldBytes int, _ *float32) {
		f(w, prefetch, rowBlocks, act, blockStride, blocks, dst, ldBytes)
	}
}

// run computes tokens [t0, t1) of rowBlocks blocks of eight packed rows,
// rb bytes a row, from data into dst (at the first row's outputs).
func (k *avx2Packed) run(dst []float32, ld int, data []byte, rb, rowBlocks, cols int, a *actBuf, t0, t1 int, s *streamScratch) {
	nb := cols / qk80
	for t := t0; t < t1; {
		T := min(len(k.p)-1, t1-t)
		var s1 *float32
		if k.mins {
			s1 = s.blockMajorS1(a, t, T, nb)
		}
		k.p[T](&data[0], q80PackedPrefetchRows*rb, rowBlocks, &a.g[t*q80BlockBytes], a.gs, nb, &dst[t*ld], ld*4, s1)
		t += T
	}
}

// kernel is Q5_0's, Q5_1's or IQ4_NL's kernel at the AVX2 level: a packed
// matrix's blocks of eight rows go to k, the rest (a mapping's rows, the
// last rows of fewer than eight) to streamed, the type's streamed kernel.
// The model loader widens these types where the weights are mapped
// (StreamedPreferred).
func (k *avx2Packed) kernel(streamed kernel) kernel {
	return func(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, s *streamScratch) {
		pr1 := r0
		if w.packed {
			if r0%8 != 0 {
				panic(fmt.Sprintf("tensor: packed matrix cut at row %d", r0))
			}
			pr1 = max(r0, min(r1, w.packedRows()))
			rb := w.RowBytes()
			switch {
			case pr1 == r0:
			case k.unpack != nil && a.n > len(k.p)-1:
				k.unpacked(dst[r0:], ld, w, r0, pr1, a, t0, t1, s)
			default:
				k.run(dst[r0:], ld, w.Data[r0*rb:], rb, (pr1-r0)/8, w.Cols, a, t0, t1, s)
			}
		}
		if r1 > pr1 {
			streamed(dst, ld, w, pr1, r1, a, t0, t1, s)
		}
	}
}

// q41AVX2Kernel is Q4_1's kernel at the AVX2 level. A packed matrix's
// blocks of eight rows go to the packed kernels; so do a prompt's rows of
// the file's layout, packed into the thread's scratch once per work item
// (its token chunks reuse them, as packedItem's): Pack's layout is the
// file's bytes rearranged, a copy's cost. The rest (decode on the file's
// rows, the last rows of fewer than eight) go to the direct kernels.
func q41AVX2Kernel(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, s *streamScratch) {
	rb := w.RowBytes()
	pr1, data := r0, w.Data[r0*rb:]
	switch {
	case w.packed:
		if r0%8 != 0 {
			panic(fmt.Sprintf("tensor: packed matrix cut at row %d", r0))
		}
		pr1 = max(r0, min(r1, w.packedRows()))
	case a.n > q41AVX2Tokens && r1-r0 >= 8:
		pr1 = r0 + (r1-r0)&^7
		if h := (heldRows{&w.Data[0], r0, pr1}); s.held != h {
			s.rows = growBytes(s.rows, (pr1-r0)*rb)
			packQ4Rows(Q4_1, s.rows, w.Data[r0*rb:pr1*rb], rb)
			s.held = h
		}
		data = s.rows
	}
	if pr1 > r0 {
		q41AVX2Packed.run(dst[r0:], ld, data, rb, (pr1-r0)/8, w.Cols, a, t0, t1, s)
	}
	if r1 > pr1 {
		q41AVX2.run(dst, ld, w, pr1, r1, a, t0, t1, s)
	}
}

// q8DirectFn is a direct kernel of a type streamed to Q8_0
// (asmgen/q80direct.go).
type q8DirectFn func(w *byte, rowBytes, prefetch, rows int, act *byte, blockStride, blocks int, dst *float32, ldBytes int, s1 *float32)

// q80Direct drives the direct kernels of Q5_0, IQ4_NL, Q4_1 and Q5_1 (VNNI
// level): k[T] computes all rows of a range for T tokens, in the weights'
// own bytes, with the float steps of the Q8_0 kernels on the rows widened
// (and, with mins, of addMins): k[1] and k[2] without a transpose
// (decode), the others transposing each block for all T (prompts: the
// work items' rows stay in cache while the kernels pass over them once per
// len(k)-1 tokens). They are faster than widening the rows to scratch in
// Go for any number of tokens (BenchmarkStreamedDirect), and than packing
// the rows (pack) for the packed Q8_0 kernels for up to directPackTokens
// tokens (Q5_0, IQ4_NL) or one pass (Q4_1, Q5_1: eight).
type q80Direct struct {
	k    []q8DirectFn
	mins bool // Q4_1, Q5_1: reads the activations' Q8_1 block sums
	// pack writes rows as packed Q8_0 blocks, and the minima of the types
	// with minima beside them (directPacker).
	pack func(w *byte, rowBytes, prefetch, rowBlocks, blocks int, dst, mins *byte)
}

func (k *q80Direct) run(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, s *streamScratch) {
	nb := w.Cols / qk80
	rb := w.RowBytes()
	for t := t0; t < t1; {
		T := min(len(k.k)-1, t1-t)
		var s1 *float32
		if k.mins {
			s1 = s.blockMajorS1(a, t, T, nb)
		}
		k.k[T](&w.Data[r0*rb], rb, q80PrefetchRows*rb, r1-r0, &a.g[t*q80BlockBytes], a.gs, nb, &dst[t*ld+r0], ld*4, s1)
		t += T
	}
}

// blockMajorS1 returns the Q8_1 block sums of tokens [t, t+T) of a, nb
// blocks each, block-major (block b's token i at b·T + i), as the direct
// kernels read them: a's own for one token, else copied into s.
func (s *streamScratch) blockMajorS1(a *actBuf, t, T, nb int) *float32 {
	if T == 1 {
		return &a.s1[t*nb]
	}
	s.s1 = growF32(s.s1, nb*T)
	for i := range T {
		for b, v := range a.s1[(t+i)*nb : (t+i+1)*nb] {
			s.s1[b*T+i] = v
		}
	}
	return &s.s1[0]
}

// q80DirectKernels are the direct kernels of the types streamed to Q8_0.
var q80DirectKernels = map[DType]*q80Direct{
	Q5_0: {k: []q8DirectFn{nil, q50VNNIN_1, q50VNNIN_2,
		q50VNNIR_3, q50VNNIR_4, q50VNNIR_5, q50VNNIR_6, q50VNNIR_7, q50VNNIR_8, q50VNNIR_9,
		q50VNNIR_10, q50VNNIR_11, q50VNNIR_12, q50VNNIR_13, q50VNNIR_14, q50VNNIR_15, q50VNNIR_16}, pack: q50VNNIW},
	IQ4_NL: {k: []q8DirectFn{nil, iq4NLVNNIN_1, iq4NLVNNIN_2,
		iq4NLVNNIR_3, iq4NLVNNIR_4, iq4NLVNNIR_5, iq4NLVNNIR_6, iq4NLVNNIR_7, iq4NLVNNIR_8, iq4NLVNNIR_9,
		iq4NLVNNIR_10, iq4NLVNNIR_11, iq4NLVNNIR_12, iq4NLVNNIR_13, iq4NLVNNIR_14, iq4NLVNNIR_15, iq4NLVNNIR_16}, pack: iq4NLVNNIW},
	Q4_1: {k: []q8DirectFn{nil, q41VNNIN_1, q41VNNIN_2,
		q41VNNIR_3, q41VNNIR_4, q41VNNIR_5, q41VNNIR_6, q41VNNIR_7, q41VNNIR_8}, mins: true, pack: q41VNNIW},
	Q5_1: {k: []q8DirectFn{nil, q51VNNIN_1, q51VNNIN_2,
		q51VNNIR_3, q51VNNIR_4, q51VNNIR_5, q51VNNIR_6, q51VNNIR_7, q51VNNIR_8}, mins: true, pack: q51VNNIW},
}

type bf16Fn func(w *byte, rowBytes, groups int, y *uint16, yStride int, steps int, dst *float32, ldBytes int)

// bf16Tiles drives the AVX512-BF16 kernels: r4[T] for groups of 4 rows,
// r1[T] for single rows, T <= 4. Columns beyond the last multiple of 16 are
// added in Go.
//
// On packed weights (Pack, zmmRowStep) z[T] computes the blocks of eight
// rows, T ≤ 4 tokens at a time, in zmm registers, and zs one token over
// two ranges of blocks at once (oneToken; the same results).
type bf16Tiles struct {
	r4, r1 [5]bf16Fn
	z      [5]halfFn
	zs     halfSplitFn
}

func (k *bf16Tiles) run(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, _ *streamScratch) {
	cols := w.Cols
	steps := cols / 16
	rb := w.RowBytes()
	if w.packed {
		if r0%8 != 0 || zmmRowStep(BF16) == 0 {
			panic(fmt.Sprintf("tensor: packed matrix cut at row %d, or packed for other kernels", r0))
		}
		if pr1 := max(r0, min(r1, w.packedRows())); pr1 > r0 {
			for t := t0; t < t1; {
				T := min(len(k.z)-1, t1-t)
				if T == 1 {
					oneToken(k.z[1], k.zs, w.minSplit(), w.Data[r0*rb:pr1*rb], 8*rb, (pr1-r0)/8, unsafe.Pointer(&a.h[t*cols]), cols*2, steps, dst[t*ld+r0:t*ld+pr1])
				} else {
					k.z[T](&w.Data[r0*rb], 8*rb, (pr1-r0)/8, unsafe.Pointer(&a.h[t*cols]), cols*2, steps, &dst[t*ld+r0], ld*4)
				}
				t += T
			}
			r0 = pr1
		}
		if r0 == r1 {
			return
		}
	}
	if steps > 0 {
		r := r0
		// As for the float kernels: four-row tiles only from cache.
		if g := (r1 - r) / 4; g > 0 && t1-t0 >= 3 {
			for t := t0; t < t1; {
				T := min(4, t1-t)
				k.r4[T](&w.Data[r*rb], rb, g, &a.h[t*cols], cols*2, steps, &dst[t*ld+r], ld*4)
				t += T
			}
			r += 4 * g
		}
		if r < r1 {
			for t := t0; t < t1; {
				T := min(4, t1-t)
				k.r1[T](&w.Data[r*rb], rb, r1-r, &a.h[t*cols], cols*2, steps, &dst[t*ld+r], ld*4)
				t += T
			}
		}
	}
	if tail := steps * 16; tail < cols {
		for r := r0; r < r1; r++ {
			row := w.Row(r)
			for t := t0; t < t1; t++ {
				y := a.f[t*cols : (t+1)*cols]
				var sum float32
				if steps == 0 {
					dst[t*ld+r] = 0
				}
				for c := tail; c < cols; c++ {
					sum += BF16ToF32(binary.LittleEndian.Uint16(row[2*c:])) * y[c]
				}
				dst[t*ld+r] += sum
			}
		}
	}
}

// hasBF16 reports whether the CPU has AVX512-BF16 (vdpbf16ps).
var hasBF16 = cpuISA == isaVNNI && cpu.X86.HasAVX512BF16

// zmmRowStep is the bytes of a row in a step of Pack's layout of F16 or
// BF16 weights for the zmm kernels (matrix.go), or 0 where Pack lays them
// out for the AVX2 ones: F16 at the AVX-512 level, BF16 where the CPU has
// vdpbf16ps.
func zmmRowStep(t DType) int {
	switch {
	case t == F16 && cpuISA == isaVNNI:
		return 16
	case t == BF16 && hasBF16:
		return 32
	}
	return 0
}

var (
	bf16DP = &bf16Tiles{
		r4: [5]bf16Fn{nil, bf16DP_4x1, bf16DP_4x2, bf16DP_4x3, bf16DP_4x4},
		r1: [5]bf16Fn{nil, bf16DP_1x1, bf16DP_1x2, bf16DP_1x3, bf16DP_1x4},
		z:  [5]halfFn{nil, bf16PackedZ_1, bf16PackedZ_2, bf16PackedZ_3, bf16PackedZ_4},
		zs: bf16PackedS_1,
	}
	// bf16VNNI is the BF16 kernel of the AVX-512 level: vdpbf16ps where
	// the CPU has it, else the FMA kernel.
	bf16VNNI = func() kernel {
		if hasBF16 {
			return bf16DP.run
		}
		return bf16FMA.run
	}()
)

// bf16Kernel is the BF16 kernel of the AVX-512 level: the AMX-BF16 family
// for the matrices it takes (bf16OnTiles), else bf16VNNI.
func bf16Kernel(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, s *streamScratch) {
	if !bf16OnTiles(*w) {
		bf16VNNI(dst, ld, w, r0, r1, a, t0, t1, s)
		return
	}
	if !a.tiled {
		// Products of another family would differ in bits from those of
		// the same matrix on other token counts.
		panic("tensor: BF16 product on the tiles without the pair layout")
	}
	bf16AMXRun(dst, ld, w, r0, r1, a, t0, t1)
}

var (
	f32FMA = &floatTiles{typ: F32,
		r4: [5]floatFn{nil, f32FMA_4x1, f32FMA_4x2, f32FMA_4x3},
		r1: [5]floatFn{nil, f32FMA_1x1, f32FMA_1x2, f32FMA_1x3, f32FMA_1x4},
	}
	f16FMA = &floatTiles{typ: F16,
		r4: [5]floatFn{nil, f16FMA_4x1, f16FMA_4x2, f16FMA_4x3},
		r1: [5]floatFn{nil, f16FMA_1x1, f16FMA_1x2, f16FMA_1x3, f16FMA_1x4},
		p8: f16Packed_8x1,
		p4: [4]halfFn{nil, nil, f16Packed_4x2, f16Packed_4x3},
	}
	f16VNNI = &floatTiles{typ: F16, r4: f16FMA.r4, r1: f16FMA.r1,
		z:  [7]halfFn{nil, f16PackedZ_1, f16PackedZ_2, f16PackedZ_3, f16PackedZ_4, f16PackedZ_5, f16PackedZ_6},
		zs: f16PackedS_1,
	}
	bf16FMA = &floatTiles{typ: BF16,
		r4: [5]floatFn{nil, bf16FMA_4x1, bf16FMA_4x2, bf16FMA_4x3},
		r1: [5]floatFn{nil, bf16FMA_1x1, bf16FMA_1x2, bf16FMA_1x3, bf16FMA_1x4},
		p8: bf16Packed_8x1,
		p4: [4]halfFn{nil, nil, bf16Packed_4x2, bf16Packed_4x3},
	}
)

// isaKernels holds the kernel of each weight type at each level (read-only),
// the types Widen converts streamed (stream.go).
var isaKernels = withStreamKernels([isaVNNI + 1]kernelTable{
	isaAVX2: {
		F32: f32FMA.run, F16: f16FMA.run, BF16: bf16FMA.run,
		Q8_0: q80AVX2.run, Q4_0: q40AVX2.run,
		IQ4_XS: iq4XSAVX2.run, Q2_K: q2KAVX2.run, Q3_K: q3KAVX2.run, Q4_K: q4KAVX2.run, Q5_K: q5KAVX2.run, Q6_K: q6KAVX2.run,
		q8K16Slot: q8K16AVX2.run,
	},
	isaVNNI: {
		F32: f32FMA.run, F16: f16VNNI.run, BF16: bf16Kernel,
		Q8_0: q80VNNI.run, Q4_0: q40VNNI.run,
		IQ4_XS: iq4XSVNNIPacked.run, Q2_K: q2KVNNIPacked.run, Q3_K: q3KVNNIPacked.run, Q4_K: q4KVNNIPacked.run, Q5_K: q5KVNNIPacked.run, Q6_K: q6KVNNIPacked.run,
		q8K16Slot: q8K16VNNI.run,
	},
})

// withStreamKernels adds to k, at each level, the streaming kernel of every
// type Widen converts, over its streamType's kernel there and its direct
// kernel where it has one.
func withStreamKernels(k [isaVNNI + 1]kernelTable) [isaVNNI + 1]kernelTable {
	for i := isaAVX2; i <= isaVNNI; i++ {
		for t := range q8K16Slot {
			if wt, ok := streamType(t); ok {
				direct, maxTokens := directKernel(t, i)
				k[i][t] = streamKernel(t, k[i].get(wt), direct, maxTokens, directPacker(t, i))
				if i == isaAVX2 {
					switch t {
					case Q4_1:
						k[i][t] = q41AVX2Kernel
					case Q5_0:
						k[i][t] = q50AVX2Packed.kernel(k[i][t])
					case Q5_1:
						k[i][t] = q51AVX2Packed.kernel(k[i][t])
					case IQ4_NL:
						k[i][t] = iq4NLAVX2Packed.kernel(k[i][t])
					}
				}
			}
		}
	}
	return k
}

// kernelAt returns the kernel of type t at level i, falling back to lower
// levels and finally the portable kernel.
func kernelAt(t DType, i isa) kernel {
	for ; i > isaPortable; i-- {
		if k := isaKernels[i].get(t); k != nil {
			return k
		}
	}
	return portableKernel(t)
}
