package tensor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"
)

// Matrix multiplication.
//
// MatMul follows ggml's CPU arithmetic so that results track llama.cpp: the
// activations are first converted to the weight type's "vec_dot type"
// (Q8_0 for Q8_0/Q4_0/Q5_0/IQ4_NL weights, Q8_1 for Q4_1/Q5_1, Q8_K for
// Q2_K to Q6_K and IQ4_XS, F16 for F16, BF16 for BF16, none for F32), then
// each output is a dot product computed with integer block sums scaled by
// the blocks' scales. The summation order of the fast kernels differs from
// ggml's only in how float partial sums are added up.
//
// The converted activations live in the Pool's actBuf in a structure-of-
// arrays layout (all quantized values of a token back to back, scales and
// block sums in separate arrays), which is friendlier to SIMD than GGML's
// interleaved blocks and carries the same numbers.

// actBuf holds n tokens of activations converted to one vec_dot type.
//
// It remembers the last conversion (its key and a copy of the input) so that
// products sharing an input — Q, K and V; gate and up — convert it once: the
// copy is compared bit for bit, so reuse is safe whatever the caller did to
// its buffer in between.
type actBuf struct {
	cols int
	q    []int8    // Q8_0 / Q8_K values, cols per token
	d    []float32 // per-block scale: Q8_0 rounded through f16, Q8_K f32
	s    []int32   // Q8_0: per-block −Σq (the row layout's offset)
	g    []byte    // Q8_0: the row layout of the VNNI kernels (see fillQ80Rows)
	gs   int       // Q8_0: bytes of g per block (tokens × q80BlockBytes)
	// t: Q8_0, where tiled: the tile layout of the AMX kernels on
	// unpacked weights (fillQ80Tiles), 36 bytes per block and token.
	t     []byte
	tiled bool
	n     int       // tokens
	bs    []int16   // Q8_K: sums of each 16 values (16 per block)
	s1    []float32 // Q8_1: per-block d·Σq, d before its f16 rounding, rounded to f16
	f     []float32 // F16/BF16-rounded activations widened to f32
	x     []float32 // F32 weights: the caller's activations, unconverted
	h     []uint16  // F16/BF16 activations

	key   convKey   // what the buffer holds, if valid
	valid bool      //
	src   []float32 // copy of the input of the held conversion
}

// convKey identifies a conversion: vec_dot type, row length, tokens and
// whether it fills the tile layout.
type convKey struct {
	vt      DType
	cols, n int
	tiled   bool
}

// sameBits reports whether a and b hold bit-identical values.
func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 {
		return true
	}
	return bytes.Equal(unsafe.Slice((*byte)(unsafe.Pointer(&a[0])), 4*len(a)),
		unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), 4*len(b)))
}

func growI8(s []int8, n int) []int8 {
	if cap(s) < n {
		return make([]int8, n)
	}
	return s[:n]
}

func growF32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

func growI32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}

func growI16(s []int16, n int) []int16 {
	if cap(s) < n {
		return make([]int16, n)
	}
	return s[:n]
}

func growBytes(s []byte, n int) []byte {
	if cap(s) < n {
		return make([]byte, n)
	}
	return s[:n]
}

func growU16(s []uint16, n int) []uint16 {
	if cap(s) < n {
		return make([]uint16, n)
	}
	return s[:n]
}

// prepare sizes the buffer for n tokens of cols activations of vec_dot
// type vt, with the tile layout where tiled (Q8_0, Q8_1).
func (a *actBuf) prepare(vt DType, cols, n int, tiled bool) {
	a.cols, a.n, a.tiled = cols, n, false
	switch vt {
	case Q8_0, Q8_1:
		a.q = growI8(a.q, n*cols)
		a.d = growF32(a.d, n*cols/qk80)
		a.s = growI32(a.s, n*cols/qk80)
		if q80RowLayout {
			a.gs = n * q80BlockBytes
			a.g = growBytes(a.g, cols/qk80*a.gs)
		}
		if tiled {
			a.t = growBytes(a.t, cols/qk80*n*q80TileBlockBytes)
			a.tiled = true
		}
		if vt == Q8_1 {
			a.s1 = growF32(a.s1, n*cols/qk80)
		}
	case Q8_K:
		a.q = growI8(a.q, n*cols)
		a.d = growF32(a.d, n*cols/qkK)
		a.bs = growI16(a.bs, n*cols/16)
	case F16, BF16:
		a.f = growF32(a.f, n*cols)
		a.h = growU16(a.h, n*cols)
		if tiled && vt == BF16 {
			a.t = growBytes(a.t, bf16TileBytes(cols, n))
			a.tiled = true
		}
	}
}

// convertTokens converts tokens [t0,t1) of x to vec_dot type vt.
func (a *actBuf) convertTokens(vt DType, x []float32, t0, t1 int) {
	c := a.cols
	for tok := t0; tok < t1; tok++ {
		xs := x[tok*c : (tok+1)*c]
		switch vt {
		case Q8_0, Q8_1:
			nb := c / qk80
			s := a.s[tok*nb : (tok+1)*nb]
			quantizeActQ80(a.q[tok*c:(tok+1)*c], a.d[tok*nb:(tok+1)*nb], s, xs)
			if q80RowLayout {
				fillQ80Rows(a.g[tok*q80BlockBytes:], a.gs, a.q[tok*c:(tok+1)*c], a.d[tok*nb:(tok+1)*nb], s)
			}
			if a.tiled {
				fillQ80Tiles(a.t, a.n, tok, a.q[tok*c:(tok+1)*c], a.d[tok*nb:(tok+1)*nb])
			}
			if vt == Q8_1 {
				q81Sums(a.s1[tok*nb:(tok+1)*nb], s, xs)
			}
		case Q8_K:
			nb := c / qkK
			quantizeActQ8K(a.q[tok*c:(tok+1)*c], a.d[tok*nb:(tok+1)*nb], a.bs[tok*c/16:(tok+1)*c/16], xs)
		case F16:
			h := a.h[tok*c : (tok+1)*c]
			f := a.f[tok*c : (tok+1)*c]
			convertF16Act(h, f, xs)
		case BF16:
			h := a.h[tok*c : (tok+1)*c]
			f := a.f[tok*c : (tok+1)*c]
			for i, v := range xs {
				h[i] = F32ToBF16(v)
				f[i] = BF16ToF32(h[i])
			}
			if a.tiled {
				fillBF16Tiles(a.t, a.n, tok, h)
			}
		}
	}
}

// The row layout of Q8_0 activations, read by the VNNI Q8_0 kernels
// (asmgen/q80rows.go): for block b and token t of an n-token conversion,
// q80BlockBytes at (b·n + t)·q80BlockBytes — the block's 32 quantized
// values, its offset −128·Σq (int32, the correction for weights made
// unsigned by adding 128) and its scale (f32). A kernel's tokens are then
// at fixed distances from one pointer, which moves n·q80BlockBytes a block.
const (
	q80BlockBytes  = 40
	q80BlockOffset = 32
	q80BlockScale  = 36
)

// fillQ80Rows writes one token's blocks into the row layout: block b at
// g[b·stride:], from its quantized values q, scales d and negated block
// sums s.
func fillQ80Rows(g []byte, stride int, q []int8, d []float32, s []int32) {
	_ = g[(len(d)-1)*stride+q80BlockBytes-1]
	_ = q[len(d)*qk80-1]
	for b := range d {
		// As words (x86 is little-endian and allows unaligned access, and
		// the layout exists only there): byte copies cost a memmove each.
		out := unsafe.Slice((*uint64)(unsafe.Pointer(&g[b*stride])), q80BlockBytes/8)
		in := unsafe.Slice((*uint64)(unsafe.Pointer(&q[b*qk80])), qk80/8)
		out[0], out[1], out[2], out[3] = in[0], in[1], in[2], in[3]
		out[4] = uint64(uint32(128*s[b])) | uint64(math.Float32bits(d[b]))<<32
	}
}

// The tile layout of Q8_0 activations, read by the AMX kernels on
// unpacked weights (asmgen/amx.go): for an n-token conversion, per block
// q80TileBlockBytes·n bytes at block·q80TileBlockBytes·n: eight rows of n
// dwords (row k, dword t: token t's values 4k..4k+3), then the n tokens'
// scales (f32). 16 tokens from any token t are then a tile of eight rows
// of 64 bytes, 4n apart, and a vector of 16 scales.
const q80TileBlockBytes = 9 * 4

// fillQ80Tiles writes token tok of an n-token conversion into the tile
// layout t, from its quantized values q and scales d.
func fillQ80Tiles(t []byte, n, tok int, q []int8, d []float32) {
	rowBytes := 4 * n
	_ = t[(len(d)*q80TileBlockBytes-4)*n+4*tok+3] // the last block's scale
	qb := unsafe.Slice((*byte)(unsafe.Pointer(&q[0])), len(q))
	for b := range d {
		o := b*q80TileBlockBytes*n + 4*tok
		for k := 0; k < 8; k++ {
			copy(t[o+k*rowBytes:o+k*rowBytes+4], qb[b*qk80+4*k:])
		}
		binary.LittleEndian.PutUint32(t[o+8*rowBytes:], math.Float32bits(d[b]))
	}
}

// The pair layout of BF16 activations, read by the AMX-BF16 kernels
// (asmgen/amxbf16.go): for an n-token conversion, per chunk c of 32
// columns, 64n bytes at 64n·c: 16 rows of n dwords (row p, dword t: token
// t's values 32c+2p and 32c+2p+1, the first in the low half); then 64
// bytes the kernels may read past the last token (a tile takes 16 tokens'
// columns from any token, and drops those it was not asked for).
func bf16TileBytes(cols, n int) int { return cols/32*64*n + 64 }

// fillBF16Tiles writes token tok of an n-token conversion, its BF16 values
// h (whole chunks of 32), into the pair layout t.
func fillBF16Tiles(t []byte, n, tok int, h []uint16) {
	rowBytes := 4 * n
	_ = t[(len(h)/32*16-1)*rowBytes+4*tok+3]
	for c := 0; c < len(h)/32; c++ {
		o := 16*c*rowBytes + 4*tok
		for p := 0; p < 16; p++ {
			binary.LittleEndian.PutUint32(t[o+p*rowBytes:], uint32(h[32*c+2*p])|uint32(h[32*c+2*p+1])<<16)
		}
	}
}

// convertF16ActGeneric rounds x to f16 into h and widens it back into f.
func convertF16ActGeneric(h []uint16, f, x []float32) {
	for i, v := range x {
		h[i] = F32ToF16(v)
		f[i] = F16ToF32(h[i])
	}
}

// quantizeActQ80Generic quantizes one token to Q8_0 as ggml's quantize_row_q8_0
// does on x86 (AVX2 path): d = amax/127 stored as f16, values x*(127/amax)
// rounded to nearest even. s receives each block's negated sum −Σq (the
// assembly kernels' offset correction).
func quantizeActQ80Generic(q []int8, d []float32, s []int32, x []float32) {
	for b := range d {
		xs := x[b*qk80 : (b+1)*qk80]
		var amax float32
		for _, v := range xs {
			amax = max(amax, abs32(v))
		}
		dd := amax / 127
		var id float32
		if amax != 0 {
			id = 127 / amax
		}
		d[b] = F16ToF32(F32ToF16(dd))
		qs := q[b*qk80 : (b+1)*qk80]
		var sum int32
		for j, v := range xs {
			r := int8(math.RoundToEven(float64(v * id)))
			qs[j] = r
			sum += int32(r)
		}
		s[b] = -sum
	}
}

// q81Sums sets s1 to the block sums of Q8_1 (ggml's y.s) of one token
// already quantized to Q8_0 (Q8_1's values and d are Q8_0's): s1 = d·Σq
// rounded to f16, with d = amax/127 before its own f16 rounding, as
// quantize_row_q8_1 computes it. negSum holds −Σq per block.
func q81Sums(s1 []float32, negSum []int32, x []float32) {
	for b := range s1 {
		var amax float32
		for _, v := range x[b*qk80 : (b+1)*qk80] {
			amax = max(amax, abs32(v))
		}
		s1[b] = F16ToF32(F32ToF16(amax / 127 * float32(-negSum[b])))
	}
}

// quantizeActQ8KGeneric quantizes one token to Q8_K as ggml's quantize_row_q8_K_ref.
func quantizeActQ8KGeneric(q []int8, d []float32, bs []int16, x []float32) {
	for b := range d {
		xs := x[b*qkK : (b+1)*qkK]
		qs := q[b*qkK : (b+1)*qkK]
		sums := bs[b*16 : (b+1)*16]
		var mx, amax float32
		for _, v := range xs {
			if ax := abs32(v); ax > amax {
				amax = ax
				mx = v
			}
		}
		if amax == 0 {
			d[b] = 0
			clear(qs)
			clear(sums)
			continue
		}
		iscale := -127 / mx
		for j, v := range xs {
			qs[j] = int8(min(127, nearestInt(iscale*v)))
		}
		blockSums16(sums, qs)
		d[b] = 1 / iscale
	}
}

// blockSums16 sets bs[j] to the sum of q[16j:16j+16].
func blockSums16(bs []int16, q []int8) {
	for j := range bs {
		g := q[16*j : 16*j+16]
		var s0, s1 int16
		for i := 0; i < 16; i += 2 {
			s0 += int16(g[i])
			s1 += int16(g[i+1])
		}
		bs[j] = s0 + s1
	}
}

// vecDotType returns the type activations are converted to for weights of
// type t.
func vecDotType(t DType) DType {
	switch t {
	case Q8_0, Q4_0, Q5_0, IQ4_NL:
		return Q8_0
	case Q4_1, Q5_1:
		return Q8_1
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, Q8_K16:
		return Q8_K
	}
	return t
}

// A kernel computes dst[t*ld+r] for rows [r0,r1) of w and tokens [t0,t1) of
// the converted activations a (or x for F32 weights).
type kernel func(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, s *streamScratch)

// kernelTable maps a weight type to its kernel (nil: unsupported); arrays
// rather than maps keep the per-call lookup trivial. Q8_K16, whose id is
// out of GGML's range, has the slot after BF16's.
type kernelTable [q8K16Slot + 1]kernel

const q8K16Slot = BF16 + 1

func (k *kernelTable) get(t DType) kernel {
	switch {
	case t == Q8_K16:
		return k[q8K16Slot]
	case t < q8K16Slot:
		return k[t]
	}
	return nil
}

// portableKernels are the reference kernels, by weight type (read-only).
var portableKernels = kernelTable{
	F32:    genericTile(dotF32Row),
	F16:    genericTile(dotHalfRow(F16)),
	BF16:   genericTile(dotHalfRow(BF16)),
	Q4_0:   genericTile(dotQ40Row),
	Q4_1:   genericTile(dotMinRow(Q4_1)),
	Q5_0:   genericTile(dotQ50Row),
	Q5_1:   genericTile(dotMinRow(Q5_1)),
	Q8_0:   genericTile(dotQ80Row),
	IQ4_NL: genericTile(dotIQ4NLRow),
	IQ4_XS: genericTile(dotIQ4XSRow),
	// The IQ1, IQ2 and IQ3 types compute through Widen, or streamed
	// (stream.go) at the assembly levels; these are their references.
	IQ1_S:     genericTile(dotIQRow(IQ1_S)),
	IQ1_M:     genericTile(dotIQRow(IQ1_M)),
	IQ2_XXS:   genericTile(dotIQRow(IQ2_XXS)),
	IQ2_XS:    genericTile(dotIQRow(IQ2_XS)),
	IQ2_S:     genericTile(dotIQRow(IQ2_S)),
	IQ3_XXS:   genericTile(dotIQRow(IQ3_XXS)),
	IQ3_S:     genericTile(dotIQRow(IQ3_S)),
	q8K16Slot: genericTile(dotIQRow(Q8_K16)),
	Q2_K:      genericTile(dotQ2KRow),
	Q3_K:      genericTile(dotQ3KRow),
	Q4_K:      genericTile(dotQ4KRow),
	Q5_K:      genericTile(dotQ5KRow),
	Q6_K:      genericTile(dotQ6KRow),
}

// portableKernel is the reference kernel of type t (nil if unsupported).
func portableKernel(t DType) kernel { return portableKernels.get(t) }

// rowDot is one dot product between row bytes and token tok of a.
type rowDot func(row []byte, a *actBuf, tok int) float32

func genericTile(dot rowDot) kernel {
	return func(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, _ *streamScratch) {
		for r := r0; r < r1; r++ {
			row := w.Row(r)
			for t := t0; t < t1; t++ {
				dst[t*ld+r] = dot(row, a, t)
			}
		}
	}
}

func dotF32Row(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	y := a.x[tok*c : (tok+1)*c]
	var sum float32
	for i, v := range y {
		sum += float32(math.Float32frombits(binary.LittleEndian.Uint32(row[4*i:])) * v)
	}
	return sum
}

func dotHalfRow(t DType) rowDot {
	conv := F16ToF32
	if t == BF16 {
		conv = BF16ToF32
	}
	return func(row []byte, a *actBuf, tok int) float32 {
		c := a.cols
		y := a.f[tok*c : (tok+1)*c]
		var sum float32
		for i, v := range y {
			sum += float32(conv(binary.LittleEndian.Uint16(row[2*i:])) * v)
		}
		return sum
	}
}

// dotQ80Row is ggml_vec_dot_q8_0_q8_0: per block, the integer dot product
// times the product of the two scales.
func dotQ80Row(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qk80
	q := a.q[tok*c : (tok+1)*c]
	d := a.d[tok*nb : (tok+1)*nb]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*q80Size : (b+1)*q80Size]
		ys := q[b*qk80 : (b+1)*qk80]
		var si int32
		for j, y := range ys {
			si += int32(int8(blk[2+j])) * int32(y)
		}
		sum += float32(si) * float32(f16At(blk, 0)*d[b])
	}
	return sum
}

// dotQ40Row is ggml_vec_dot_q4_0_q8_0.
func dotQ40Row(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qk40
	q := a.q[tok*c : (tok+1)*c]
	d := a.d[tok*nb : (tok+1)*nb]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*q40Size : (b+1)*q40Size]
		ys := q[b*qk40 : (b+1)*qk40]
		var si int32
		for j := 0; j < 16; j++ {
			v := blk[2+j]
			si += (int32(v&0xf) - 8) * int32(ys[j])
			si += (int32(v>>4) - 8) * int32(ys[j+16])
		}
		sum += float32(si) * float32(f16At(blk, 0)*d[b])
	}
	return sum
}

// dotQ50Row is ggml_vec_dot_q5_0_q8_0: Q8_0's integer sums and float steps
// on the values q-16 (so a Q5_0 row widened to Q8_0 gives the same bits).
func dotQ50Row(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qk50
	q := a.q[tok*c : (tok+1)*c]
	d := a.d[tok*nb : (tok+1)*nb]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*q50Size : (b+1)*q50Size]
		ys := q[b*qk50 : (b+1)*qk50]
		var si int32
		for j, y := range ys {
			si += int32(q50Value(blk, j)) * int32(y)
		}
		sum += float32(si) * float32(f16At(blk, 0)*d[b])
	}
	return sum
}

// dotIQ4NLRow is ggml_vec_dot_iq4_nl_q8_0: Q8_0's integer sums and float
// steps on the table's values (so a row widened to Q8_0 gives the same
// bits).
func dotIQ4NLRow(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qk80
	q := a.q[tok*c : (tok+1)*c]
	d := a.d[tok*nb : (tok+1)*nb]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*iq4Size : (b+1)*iq4Size]
		ys := q[b*qk80 : (b+1)*qk80]
		var si int32
		for j := 0; j < 16; j++ {
			si += int32(kvaluesIQ4NL[blk[2+j]&0xf]) * int32(ys[j])
			si += int32(kvaluesIQ4NL[blk[2+j]>>4]) * int32(ys[j+16])
		}
		sum += float32(si) * float32(f16At(blk, 0)*d[b])
	}
	return sum
}

// dotIQ4XSRow is ggml_vec_dot_iq4_xs_q8_K as ggml's x86 code sums it: per
// 256-value block, Σ (ls−32)·(table values · y) over the eight sub-blocks
// of 32 in integers, times d·dy.
func dotIQ4XSRow(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qkK
	q := a.q[tok*c : (tok+1)*c]
	dy := a.d[tok*nb : (tok+1)*nb]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*iq4XSSize : (b+1)*iq4XSSize]
		ys := q[b*qkK : (b+1)*qkK]
		var sumi int32
		for ib := 0; ib < 8; ib++ {
			qs := blk[8+16*ib : 8+16*ib+16]
			y := ys[32*ib : 32*ib+32]
			var s int32
			for j := 0; j < 16; j++ {
				s += int32(kvaluesIQ4NL[qs[j]&0xf]) * int32(y[j])
				s += int32(kvaluesIQ4NL[qs[j]>>4]) * int32(y[j+16])
			}
			sumi += int32(iq4XSScale(blk, ib)) * s
		}
		sum += float32(f16At(blk, 0) * dy[b] * float32(sumi))
	}
	return sum
}

// dotQ2KRow is ggml_vec_dot_q2_K_q8_K: per 256-value block,
// d*dy*Σ sc_k·(q·y)_k − dmin*dy*Σ m_k·(sum of y over sub-block k), over the
// 16 sub-blocks of 16.
func dotQ2KRow(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qkK
	q := a.q[tok*c : (tok+1)*c]
	dy := a.d[tok*nb : (tok+1)*nb]
	bs := a.bs[tok*c/16 : (tok+1)*c/16]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*q2KSize : (b+1)*q2KSize]
		ys := q[b*qkK : (b+1)*qkK]
		var sumi, summ int32
		for k := 0; k < 16; k++ {
			summ += int32(blk[k]>>4) * int32(bs[16*b+k])
			var s int32
			for i := 16 * k; i < 16*k+16; i++ {
				s += int32(q2KValue(blk, i)) * int32(ys[i])
			}
			sumi += int32(blk[k]&0xf) * s
		}
		d, dmin := f16At(blk, 80)*dy[b], f16At(blk, 82)*dy[b]
		sum += float32(d*float32(sumi)) - float32(dmin*float32(summ))
	}
	return sum
}

// dotQ3KRow is ggml_vec_dot_q3_K_q8_K: Q6_K's integer sums and float steps
// on the 3-bit values, Σ sc_k·(q·y)_k times d·dy.
func dotQ3KRow(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qkK
	q := a.q[tok*c : (tok+1)*c]
	dy := a.d[tok*nb : (tok+1)*nb]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*q3KSize : (b+1)*q3KSize]
		ys := q[b*qkK : (b+1)*qkK]
		var sumi int32
		for k := 0; k < 16; k++ {
			var s int32
			for i := 16 * k; i < 16*k+16; i++ {
				s += int32(q3KValue(blk, i)) * int32(ys[i])
			}
			sumi += int32(q3KScale(blk, k)) * s
		}
		sum += float32(f16At(blk, 108) * dy[b] * float32(sumi))
	}
	return sum
}

// dotMinRow is ggml_vec_dot_q4_1_q8_1 or ggml_vec_dot_q5_1_q8_1: per block,
// the integer dot product of the unsigned values times the product of the
// two scales, plus the weights' minimum times the activations' sum s1.
func dotMinRow(t DType) rowDot {
	bs := t.TypeSize()
	return func(row []byte, a *actBuf, tok int) float32 {
		c := a.cols
		nb := c / qk80
		q := a.q[tok*c : (tok+1)*c]
		d := a.d[tok*nb : (tok+1)*nb]
		s1 := a.s1[tok*nb : (tok+1)*nb]
		var sum float32
		for b := 0; b < nb; b++ {
			blk := row[b*bs : (b+1)*bs]
			var si int32
			for j, y := range q[b*qk80 : (b+1)*qk80] {
				si += int32(minBlockValue(t, blk, j)) * int32(y)
			}
			sum += float32(float32(si)*float32(f16At(blk, 0)*d[b])) + float32(f16At(blk, 2)*s1[b])
		}
		return sum
	}
}

// dotQ4KRow is ggml_vec_dot_q4_K_q8_K: per 256-value block,
// d*dy*Σ sc_j·(q·y)_j − dmin*dy*Σ m_j·(sum of y over sub-block j).
func dotQ4KRow(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qkK
	q := a.q[tok*c : (tok+1)*c]
	dy := a.d[tok*nb : (tok+1)*nb]
	bs := a.bs[tok*c/16 : (tok+1)*c/16]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*q4KSize : (b+1)*q4KSize]
		d := f16At(blk, 0) * dy[b]
		dmin := f16At(blk, 2) * dy[b]
		scales := blk[4:16]
		qs := blk[16:144]
		ys := q[b*qkK : (b+1)*qkK]
		var sumi, summ int32
		for j := 0; j < 8; j++ {
			sc, m := scaleMinK4(j, scales)
			summ += int32(m) * (int32(bs[16*b+2*j]) + int32(bs[16*b+2*j+1]))
			chunk := qs[32*(j/2) : 32*(j/2)+32]
			shift := uint(4 * (j & 1))
			yj := ys[32*j : 32*j+32]
			var si int32
			for l, y := range yj {
				si += int32(chunk[l]>>shift&0xf) * int32(y)
			}
			sumi += int32(sc) * si
		}
		sum += float32(d*float32(sumi)) - float32(dmin*float32(summ))
	}
	return sum
}

// dotQ5KRow is ggml_vec_dot_q5_K_q8_K: Q4_K's sums and float steps on the
// 5-bit values.
func dotQ5KRow(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qkK
	q := a.q[tok*c : (tok+1)*c]
	dy := a.d[tok*nb : (tok+1)*nb]
	bs := a.bs[tok*c/16 : (tok+1)*c/16]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*q5KSize : (b+1)*q5KSize]
		d := f16At(blk, 0) * dy[b]
		dmin := f16At(blk, 2) * dy[b]
		ys := q[b*qkK : (b+1)*qkK]
		var sumi, summ int32
		for j := 0; j < 8; j++ {
			sc, m := scaleMinK4(j, blk[4:16])
			summ += int32(m) * (int32(bs[16*b+2*j]) + int32(bs[16*b+2*j+1]))
			var si int32
			for l, y := range ys[32*j : 32*j+32] {
				si += int32(q5KValue(blk, 32*j+l)) * int32(y)
			}
			sumi += int32(sc) * si
		}
		sum += float32(d*float32(sumi)) - float32(dmin*float32(summ))
	}
	return sum
}

// dotQ6KRow is ggml_vec_dot_q6_K_q8_K: d*dy*Σ sc_k·((q-32)·y)_k over the 16
// sub-blocks of each block.
func dotQ6KRow(row []byte, a *actBuf, tok int) float32 {
	c := a.cols
	nb := c / qkK
	q := a.q[tok*c : (tok+1)*c]
	dy := a.d[tok*nb : (tok+1)*nb]
	var sum float32
	for b := 0; b < nb; b++ {
		blk := row[b*q6KSize : (b+1)*q6KSize]
		ys := q[b*qkK : (b+1)*qkK]
		sc := blk[192:208]
		var sumi int32
		for h := 0; h < 2; h++ {
			ql := blk[64*h : 64*h+64]
			qh := blk[128+32*h : 128+32*h+32]
			yh := ys[128*h : 128*h+128]
			var s [8]int32
			for l := 0; l < 32; l++ {
				is := l / 16
				q1 := int32(ql[l]&0xf|(qh[l]>>0&3)<<4) - 32
				q2 := int32(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
				q3 := int32(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
				q4 := int32(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
				s[is+0] += q1 * int32(yh[l])
				s[is+2] += q2 * int32(yh[l+32])
				s[is+4] += q3 * int32(yh[l+64])
				s[is+6] += q4 * int32(yh[l+96])
			}
			for k := 0; k < 8; k++ {
				sumi += int32(int8(sc[8*h+k])) * s[k]
			}
		}
		sum += float32(f16At(blk, 208) * dy[b] * float32(sumi))
	}
	return sum
}

// maxMatMuls is the most products one MatMuls call takes.
const maxMatMuls = 3

// matmulJob is the state of one MatMul (or MatMuls) shared by the pool's
// threads: the input, and per product its output, weights, kernel and cut
// into items. Items are numbered across the products, first to last.
type matmulJob struct {
	x  []float32
	n  int
	vt DType // the activations' conversion
	// parts are the products, then the products of the block minima of
	// the widened matrices that have them (Widen), each added to its
	// product's output after the job.
	parts  [2 * maxMatMuls]matmulPart
	nparts int
	items  int
	// convertItems is the number of token ranges the conversion is cut in.
	convertItems int
	// prep, when set, writes each range's tokens of x before they are
	// converted (MatMulsPrep).
	prep func(t0, t1, thread int)
	// bounds, when set, are the ranges' first tokens and n
	// (convertItems+1 values), cut by the cost of prep (MatMulsPrepCost);
	// else the ranges are equal.
	bounds []int
}

// matmulPart is one product of a job.
type matmulPart struct {
	dst        []float32
	w          Matrix
	kern       kernel
	act        *actBuf
	of         int // a product of minima: the part it adds to
	rowChunk   int
	tokChunk   int
	nRowChunks int
	nTokChunks int
	items      int
}

// runItem computes work item it of the job, a tile of rows × tokens of
// one of its products, on thread id.
func (j *matmulJob) runItem(p *Pool, it, id int) {
	for i := range j.parts[:j.nparts] {
		pt := &j.parts[i]
		if it >= pt.items {
			it -= pt.items
			continue
		}
		tc, rc := it%pt.nTokChunks, it/pt.nTokChunks
		r0 := rc * pt.rowChunk
		r1 := min(r0+pt.rowChunk, pt.w.Rows)
		t0 := tc * pt.tokChunk
		t1 := min(t0+pt.tokChunk, j.n)
		pt.kern(pt.dst, pt.w.Rows, &pt.w, r0, r1, pt.act, t0, t1, &p.scratch[id])
		return
	}
}

// convert converts the activations of item it, one of convertItems
// contiguous ranges of tokens, on thread id; with a prep function, it first
// has prep write them.
func (j *matmulJob) convert(p *Pool, it, id int) {
	t0, t1 := j.n*it/j.convertItems, j.n*(it+1)/j.convertItems
	if j.bounds != nil {
		t0, t1 = j.bounds[it], j.bounds[it+1]
	}
	if t0 == t1 {
		return
	}
	if j.prep != nil {
		j.prep(t0, t1, id)
	}
	if j.vt != F32 {
		p.act.convertTokens(j.vt, j.x, t0, t1)
	}
}

// MatMul computes dst[t*w.Rows + r] = Σ_c W[r][c]·x[t*w.Cols + c] for all
// rows r and tokens t in [0,n), spreading the work over the pool's threads.
// x is first converted to the weight type's vec_dot type as ggml does (see
// the package comment in matmul.go). dst must hold n*w.Rows values and x
// n*w.Cols; MatMul panics otherwise, as for an out-of-range index.
func (p *Pool) MatMul(dst []float32, w Matrix, x []float32, n int) {
	p.matMul(dst, w, x, n, nil)
}

// MatMuls computes, for each i, dsts[i] = ws[i]·x as MatMul does, with
// results identical to separate MatMul calls, but as one job: the products
// share one conversion of x and one wait for the pool's threads (a decode
// step makes hundreds of products, and each job's start and end cost the
// threads a few µs; Q, K and V, or gate and up, need only one). The
// matrices must have the same type and number of columns; at most
// maxMatMuls (3) of them.
func (p *Pool) MatMuls(dsts [][]float32, ws []Matrix, x []float32, n int) {
	checkMatMuls(dsts, ws)
	p.matMuls(dsts, ws, x, n, nil, nil, nil)
}

// checkMatMuls panics unless ws and dsts suit MatMuls.
func checkMatMuls(dsts [][]float32, ws []Matrix) {
	if len(ws) == 0 || len(ws) > maxMatMuls || len(dsts) != len(ws) {
		panic(fmt.Sprintf("tensor: MatMuls: %d matrices and %d outputs (1 to %d of each)", len(ws), len(dsts), maxMatMuls))
	}
	for _, w := range ws[1:] {
		if w.Type != ws[0].Type || w.Cols != ws[0].Cols {
			panic(fmt.Sprintf("tensor: MatMuls: a %v matrix of %d columns with a %v one of %d", w.Type, w.Cols, ws[0].Type, ws[0].Cols))
		}
	}
}

// MatMulsPrep is MatMuls on an input that prep writes first: prep(t0, t1,
// thread) must write tokens [t0, t1) of x (and may do other work for those
// tokens), on behalf of pool thread thread (0 ≤ thread < Threads(): no two
// calls with the same thread run at once, so it can index per-thread
// scratch). The pool calls it once for each token, over disjoint ranges
// that may run in parallel, each range followed at once by the conversion
// of its tokens, while they are in that thread's cache; then it computes
// the products. The same as running prep over all tokens and then
// MatMuls, with one wait for the threads fewer. prep must not use the
// Pool.
func (p *Pool) MatMulsPrep(dsts [][]float32, ws []Matrix, x []float32, n int, prep func(t0, t1, thread int)) {
	checkMatMuls(dsts, ws)
	p.matMuls(dsts, ws, x, n, nil, prep, nil)
}

// MatMulsPrepCost is MatMulsPrep for a prep whose work differs from token
// to token, cost(t) ≥ 0 being token t's share in any unit (for attention:
// the positions it attends to). The token ranges are then cut to cost
// about the same instead of holding as many tokens, so that no thread is
// left waiting for one that drew the dearest tokens (a prompt's last
// tokens attend to many times the positions of its first).
func (p *Pool) MatMulsPrepCost(dsts [][]float32, ws []Matrix, x []float32, n int, prep func(t0, t1, thread int), cost func(t int) int) {
	checkMatMuls(dsts, ws)
	p.matMuls(dsts, ws, x, n, nil, prep, cost)
}

// costBounds cuts tokens [0, n) into items contiguous ranges of about equal
// total cost, into b (items+1 first tokens, the last n), growing it if
// needed. Ranges may be empty.
func costBounds(b []int, n, items int, cost func(t int) int) []int {
	if cap(b) < items+1 {
		b = make([]int, items+1)
	}
	b = b[:items+1]
	b[0] = 0
	var total int64
	for t := range n {
		total += int64(max(cost(t), 0))
	}
	var sum int64
	k := 1
	for t := range n {
		// Token t ends range k-1 once the ranges so far hold k/items of
		// the total.
		sum += int64(max(cost(t), 0))
		for k < items && sum*int64(items) >= total*int64(k) {
			b[k] = t + 1
			k++
		}
	}
	for ; k <= items; k++ {
		b[k] = n
	}
	return b
}

// matMul is MatMul with an optional kernel override (for tests).
func (p *Pool) matMul(dst []float32, w Matrix, x []float32, n int, kern kernel) {
	p.matMuls([][]float32{dst}, []Matrix{w}, x, n, kern, nil, nil)
}

// matMuls runs the products of MatMuls (checked by the caller to share type
// and columns), with an optional kernel override (for tests), prep
// function (MatMulsPrep) and its cost (MatMulsPrepCost).
func (p *Pool) matMuls(dsts [][]float32, ws []Matrix, x []float32, n int, kern kernel, prep func(t0, t1, thread int), cost func(t int) int) {
	if n <= 0 {
		return
	}
	for i, w := range ws {
		if len(dsts[i]) < n*w.Rows || len(x) < n*w.Cols {
			panic(fmt.Sprintf("tensor: MatMul %v %dx%d, n=%d: dst has %d values (need %d), x %d (need %d)",
				w.Type, w.Rows, w.Cols, n, len(dsts[i]), n*w.Rows, len(x), n*w.Cols))
		}
		// The assembly kernels trust the layout: check it as NewMatrix
		// does (a Matrix may be built as a literal).
		if !w.Type.Supported() || w.Rows <= 0 || w.Cols <= 0 || w.Cols%w.Type.BlockSize() != 0 || len(w.Data) < w.Rows*w.RowBytes() {
			panic(fmt.Sprintf("tensor: MatMul: invalid matrix %v %dx%d with %d bytes", w.Type, w.Rows, w.Cols, len(w.Data)))
		}
	}
	w := ws[0]
	p.mu.Lock()
	defer p.mu.Unlock()
	j := &p.mm
	*j = matmulJob{x: x, n: n, nparts: len(ws)}
	for i := range p.scratch { // rows held packed are the last product's
		p.scratch[i].held = heldRows{}
	}
	j.vt = vecDotType(w.Type)
	for i := range ws {
		pt := &j.parts[i]
		pt.dst, pt.w, pt.kern, pt.act = dsts[i], ws[i], kern, &p.act
		if kern == nil {
			pt.kern = kernelFor(ws[i].Type)
		}
		if ws[i].mins != nil {
			j.vt = Q8_1 // Q8_0's values and scales, and the block sums
		}
	}

	// Convert the activations (unless the buffer holds this conversion
	// already), in parallel when there are many tokens.
	key := convKey{j.vt, w.Cols, n, amxTiled(ws, n)}
	xs := x[:n*w.Cols]
	parallel := n >= 4*p.threads && p.threads > 1
	convert := func(vt DType) {
		if vt != F32 {
			p.act.prepare(vt, w.Cols, n, key.tiled)
		}
		if parallel {
			p.kind = jobConvert
			j.convertItems = 2 * p.threads
			if cost != nil {
				p.bounds = costBounds(p.bounds, n, j.convertItems, cost)
				j.bounds = p.bounds
			}
			p.dispatch(j.convertItems)
		} else {
			j.convertItems = 1
			j.convert(p, 0, 0)
		}
	}
	if w.Type == F32 { // the kernels read x itself
		p.act.cols = w.Cols
		p.act.x = xs
	}
	switch {
	case prep != nil:
		// x is written now: no earlier conversion can hold it, and none
		// is kept for later calls (they would compare a copy of x).
		p.act.valid = false
		j.prep = prep
		convert(key.vt)
	case w.Type == F32: // nothing to convert
	case !p.act.valid || p.act.key != key || !sameBits(p.act.src, xs):
		p.act.valid = false
		convert(key.vt)
		p.act.src = append(p.act.src[:0], xs...)
		p.act.key, p.act.valid = key, true
	}

	if j.vt == Q8_1 {
		p.addMinsParts(n)
	}
	for i := range j.parts[:j.nparts] {
		pt := &j.parts[i]
		pt.plan(p.threads, n)
		j.items += pt.items
	}
	p.kind = jobMatMul
	p.dispatch(j.items)
	for i := len(ws); i < j.nparts; i++ {
		pt := &j.parts[i]
		dst := j.parts[pt.of].dst[:len(pt.dst)]
		for k, v := range pt.dst {
			dst[k] += v
		}
	}
	*j = matmulJob{} // keep no references to the caller's memory
	p.act.x = nil
}

// addMinsParts adds to the current job, for each of its products whose
// matrix has block minima (Widen), the product of the minima with the
// activations' Q8_1 block sums s1 (padded as the minima are, minsCols),
// computed into scratch of its own by the F16 kernels (s1 is f16-exact, so
// their conversion keeps it).
func (p *Pool) addMinsParts(n int) {
	j := &p.mm
	nb, mc := j.parts[0].w.Cols/qk80, minsCols(j.parts[0].w.Cols)
	p.s1 = growF32(p.s1, n*mc)
	for t := range n {
		row := p.s1[t*mc : (t+1)*mc]
		copy(row, p.act.s1[t*nb:(t+1)*nb])
		clear(row[nb:])
	}
	p.act2.prepare(F16, mc, n, false)
	p.act2.convertTokens(F16, p.s1, 0, n)
	products := j.nparts
	for i := range j.parts[:products] {
		mins := j.parts[i].w.mins
		if mins == nil {
			continue
		}
		p.minsOut[i] = growF32(p.minsOut[i], n*mins.Rows)
		pt := &j.parts[j.nparts]
		j.nparts++
		pt.dst, pt.w, pt.kern, pt.act, pt.of = p.minsOut[i], *mins, kernelFor(F16), &p.act2, i
	}
}

// Cache budgets of the tiling: a work item's weight rows and activation
// tokens should together stay in a core's L2 (1 MiB on the machines this was
// tuned on, 256 KiB–2 MiB elsewhere) while the kernels pass over them
// several times.
const (
	tileWeightBytes = 256 << 10
	tileActBytes    = 128 << 10
	maxTokChunk     = 64
	smallN          = 4 // at most this many tokens: one pass over the weights
)

// plan cuts the product into work items (tiles of rows × tokens).
//
// With few tokens (decode) the kernels handle all of them in one pass over
// the weights, so items are long contiguous row ranges, a few per thread,
// streamed from memory. With more, the kernels pass over an item's rows once
// per group of up to four tokens: the rows must then stay in cache, so an
// item has at most tileWeightBytes of rows and tileActBytes of activations.
// Token chunks vary fastest, so consecutive items (taken by different
// threads at about the same time) share their weight rows: each weight byte
// comes from memory about once, the activations from the last-level cache.
func (j *matmulPart) plan(threads, n int) {
	w := &j.w
	// Items wanted: two per thread. Fewer, longer row ranges stream the
	// weights better, and every item costs its thread two atomic updates
	// of words all threads share; the price is a longer wait for the last
	// item. SmolLM2-135M Q8_0 decode, 2 threads, p10 of the pass times
	// against four items per thread: batch 1 4.49-4.67 → 4.23-4.60 ms,
	// batch 16 14.74-14.87 → 14.24-14.56 ms (eight per thread: 2-3% slower
	// than four).
	target := 2 * threads
	if n <= smallN {
		j.tokChunk, j.nTokChunks = n, 1
		rc := (w.Rows + target - 1) / target
		j.rowChunk = max(16, (rc+15)/16*16)
	} else {
		actBytes := w.Cols // int8 activations
		if w.Type == F32 || w.Type == F16 || w.Type == BF16 {
			actBytes = 4 * w.Cols
		}
		if w.packed && w.Type == F16 && packedF16ReadsHalf { // the AVX2 tiles read F16 activations
			actBytes = 2 * w.Cols
		}
		// A multiple of the kernels' token group, so that no tile is left
		// with fewer tokens (fewer shared loads per FMA).
		g := tileTokens(w)
		tc := min(maxTokChunk/g*g, max(g, tileActBytes/actBytes/g*g))
		j.nTokChunks = (n + tc - 1) / tc
		// Balanced chunks, each a multiple of g but the last.
		j.tokChunk = ((n+j.nTokChunks-1)/j.nTokChunks + g - 1) / g * g
		j.nTokChunks = (n + j.tokChunk - 1) / j.tokChunk
		rc := min(256, max(16, tileWeightBytes/w.RowBytes()))
		// Enough items for every thread.
		if rows := w.Rows * j.nTokChunks / target; rows < rc {
			rc = max(16, rows)
		}
		j.rowChunk = (rc + 15) / 16 * 16
	}
	j.nRowChunks = (w.Rows + j.rowChunk - 1) / j.rowChunk
	j.items = j.nRowChunks * j.nTokChunks
}
