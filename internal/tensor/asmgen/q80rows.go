package main

import "fmt"

// Q8_0 weight × Q8_0 activation kernels of the AVX512-VNNI level, eight rows
// at a time, one row per lane.
//
// Each output adds its blocks' products in block order, as ggml's reference
// dot product does:
//
//	S = Σ w·y over the block's 32 values    exact (|S| < 2^24), in any order
//	D = dw_b · dy_b                          f32 product of the two scales
//	acc = fma(float32(S), D, acc)            b = 0, 1, …, nb-1
//
// Every kernel of the family takes exactly these float steps, whatever the
// number of tokens T, so a token's results do not depend on the tile (batch
// invariance).
//
// Per block, a kernel loads the eight rows' 32 weight bytes, transposes them
// (24 shuffles: dword k of row r to lane r of Yk) and makes them unsigned
// (xor 0x80, corrected by the activations' −128·Σy), and then, for each
// token, eight vpdpbusd take the token's dword k as a broadcast 4-byte
// operand. The previous family held one row's eight blocks in the lanes and
// read each token's activations, transposed, as 32-byte vectors: ten vector
// loads per 256 products, which the L1 cache's bandwidth held to ~6.6 cycles
// per token and eight blocks, against ~5.0 with broadcast operands (the same
// instructions on cached data, a throwaway loop on the EPYC machine). A
// token's eight results are also one 32-byte store here, where one row's
// results went to T scattered outputs.
//
// Activations (the "row layout", matmul.go): for block b and token t of an
// n-token conversion, q80BlockBytes at (b·n + t)·q80BlockBytes: the block's
// 32 quantized values, the offset 128·s = −128·Σy (int32) and the scale dy
// (f32). A call's tokens are consecutive, so token t's fields sit at fixed
// displacements t·40 from the block's pointer, which moves by n·40.
//
// Arguments: w *byte, rowBytes, prefetch, rows int, act *byte, blockStride,
// blocks int, dst *float32, ldBytes int, with prefetch the distance of the
// weights' prefetch in bytes (q80RowPrefetch). Results: dst[t*ld + r]. A
// last block of fewer than eight rows loads only its rows and stores
// through a lane mask.
const q80RowsSig = "(w *byte, rowBytes, prefetch, rows int, act *byte, blockStride, blocks int, dst *float32, ldBytes int)"

// The row layout's bytes per block and token, and its fields' offsets.
const (
	q80BlockBytes  = 40
	q80BlockOffset = 32
	q80BlockScale  = 36
)

// q80RowAddr addresses byte off of row r (0-7) of the current block: rows
// 0-3 from DI, 4-7 from R12, with R8 = rowBytes and R13 = 3·rowBytes.
func q80RowAddr(off, r int) string {
	base := "DI"
	if r >= 4 {
		base = "R12"
	}
	return stride(off, base, "R8", "R13", r%4)
}

// q80RowScale adds row r's f16 block scale to the packed scales: rows 0-3
// in AX, 4-7 in BX. R9 is scratch.
func q80RowScale(a *asm, r int) { q80RowHalf(a, 0, r) }

// q80RowHalf adds the f16 at byte off of row r's block to the packed
// halves: rows 0-3 in AX, 4-7 in BX. R9 is scratch.
func q80RowHalf(a *asm, off, r int) {
	reg := "AX"
	if r >= 4 {
		reg = "BX"
	}
	if r%4 == 0 {
		a.p("MOVWLZX %s, %s", q80RowAddr(off, r), reg)
		return
	}
	a.p("MOVWLZX %s, R9", q80RowAddr(off, r))
	a.p("SHLQ $%d, R9", 16*(r%4))
	a.p("ORQ R9, %s", reg)
}

// q80RowPrefetch requests the current block's lines of the eight rows
// prefetch bytes on (R10; past the call's rows too, which the next item, on
// this thread or the other, reads next, and past the matrix, a harmless
// hint). R9 is scratch.
//
// The weights come from DRAM for most matrices, and the hardware prefetcher
// does not follow eight rows read 34 bytes at a time: without this, batch 1
// decode took twice as long. Into L2 (prefetcht1): into L1 (prefetcht0)
// filled the core's L1 miss buffers, 35-80% slower at batch 1. 16 rows on
// was best at batch 16 against 8, 24 and 32 rows, and against walking the
// row block 16 rows on front to back in 272-byte steps (SmolLM2-135M, 2
// threads); at batch 1 they were equal within the machine's noise.
func q80RowPrefetch(a *asm) {
	a.p("LEAQ (DI)(R10*1), R9")
	for r := 0; r < 8; r++ {
		if r == 4 {
			a.p("LEAQ (R9)(R8*4), R9")
		}
		a.p("PREFETCHT1 %s", stride(0, "R9", "R8", "R13", r%4))
	}
}

// q80RowTokens runs T tokens over the block's transposed weights Y0..Y7 and
// scales Y8, the tokens' fields at t·40 from R14. Y9-Y14 are scratch. The
// weights are unsigned, which the row layout's offset −128·Σy shifted
// right by shift (exact) corrects: by 0 for Q8_0's (q+128), by 4 for Q4_0's
// nibbles (q+8); none where shift < 0. after, if not nil, follows token t's
// float steps, Y(td) free for it.
//
// A token's eight vpdpbusd alternate between two registers, added at the
// end (an exact integer sum): one chain of eight dependent vpdpbusd per
// token needs more tokens in flight than the scheduler holds.
func q80RowTokens(a *asm, T, shift int, after func(t, td int)) {
	q80RowTokensTo(a, T, shift, 16, after)
}

// q80RowTokensTo is q80RowTokens with token t's float sums in Y(acc+t).
func q80RowTokensTo(a *asm, T, shift, acc int, after func(t, td int)) {
	for t := 0; t < T; t++ {
		ti := 9 + 3*(t%2)
		tj, td := ti+1, ti+2
		base := q80BlockBytes * t
		if shift < 0 {
			a.p("VPXOR Y%d, Y%d, Y%d", ti, ti, ti)
		} else {
			a.p("VPBROADCASTD %d(R14), Y%d", base+q80BlockOffset, ti)
		}
		if shift > 0 {
			a.p("VPSRAD $%d, Y%d, Y%d", shift, ti, ti)
		}
		a.p("VPXOR Y%d, Y%d, Y%d", tj, tj, tj)
		for k := 0; k < 8; k++ {
			sum := ti
			if k%2 == 1 {
				sum = tj
			}
			a.p("VPDPBUSD.BCST %d(R14), Y%d, Y%d", base+4*k, k, sum)
		}
		a.p("VPADDD Y%d, Y%d, Y%d", tj, ti, ti)
		a.p("VCVTDQ2PS Y%d, Y%d", ti, ti)
		a.p("VMULPS.BCST %d(R14), Y8, Y%d", base+q80BlockScale, td)
		a.p("VFMADD231PS Y%d, Y%d, Y%d", td, ti, acc+t)
		if after != nil {
			after(t, td)
		}
	}
}

// q80Shift is q80RowTokens' shift for Q8_0 weights or, with q4, Q4_0's.
func q80Shift(q4 bool) int {
	if q4 {
		return 4
	}
	return 0
}

// q80RowsKernel generates q80VNNIR_T, the 8-row × T-token kernel. With q4
// it generates q40VNNIR_T, the same on unpacked Q4_0 rows: each row's 16
// nibble bytes unpacked into its 32 values (q+8, already unsigned) before
// the transpose, the offset corrected as in q80RowTokens; the float steps
// of q40AVX2N_T.
//
// Registers: Y0-Y7 the block's weights transposed and unsigned; Y8 their
// scales; Y9-Y14 per-token scratch; Y15 the 0x80 bytes; Y16+t token t's
// float accumulators (lane r = row r). During the load and transpose Y8-Y15
// hold the rows and Y0-Y15 the stages.
// GPRs: SI the row block's first row, DI / R12 its rows 0-3 / 4-7 at the
// current block, R8 rowBytes, R13 3·rowBytes, R15 rows left, CX blocks
// left, R14 the block's activations, R11 blockStride, DX the row block's
// outputs, AX/BX/R9 the scales, R10 the prefetch distance and then the
// store cursor.
func q80RowsKernel(a *asm, d *decl, T int, q4 bool) {
	name, typ, bsz := fmt.Sprintf("q80VNNIR_%d", T), "Q8_0", 34
	if q4 {
		name, typ, bsz = fmt.Sprintf("q40VNNIR_%d", T), "Q4_0", 18
	}
	text(a, d, fmt.Sprintf("%s computes rows × %d tokens of %s weights × Q8_0 activations, eight rows at a time (VNNI).", name, T, typ), name, q80RowsSig, "$0-72")
	q80RowsArgs(a)
	q80RowBlockStart(a, name, 16, T)
	// load puts row r's 32 values in Y(8+r) (Y0 scratch).
	load := func(r int) {
		if !q4 {
			a.p("VMOVDQU %s, Y%d", q80RowAddr(2, r), 8+r)
			return
		}
		a.p("VMOVDQU %s, X%d", q80RowAddr(2, r), 8+r)
		a.p("VPSRLW $4, X%d, X0", 8+r)
		a.p("VINSERTI128 $1, X0, Y%d, Y%d", 8+r, 8+r)
		a.p("VPANDD.BCST q40Mask<>(SB), Y%d, Y%d", 8+r, 8+r)
	}

	a.label(name + "_block")
	a.p("CMPQ R15, $8")
	a.p("JL %s_part", name)
	a.p("XORL BX, BX")
	for r := 0; r < 8; r++ {
		load(r)
		q80RowScale(a, r)
	}
	a.p("JMP %s_loaded", name)
	// A last row block of fewer than eight rows: the missing rows stay
	// zero (with zero scales they add exactly zero to lanes never stored).
	a.label(name + "_part")
	for r := 1; r < 8; r++ {
		a.p("VPXOR Y%d, Y%d, Y%d", 8+r, 8+r, 8+r)
	}
	a.p("XORL BX, BX")
	for r := 0; r < 8; r++ {
		if r > 0 {
			a.p("CMPQ R15, $%d", r)
			a.p("JLE %s_loaded", name)
		}
		load(r)
		q80RowScale(a, r)
	}
	a.label(name + "_loaded")
	q80RowPrefetch(a)
	q80Transpose(a)
	if !q4 {
		a.p("VPBROADCASTD q80Bias<>(SB), Y15")
		for k := 0; k < 8; k++ {
			a.p("VPXOR Y15, Y%d, Y%d", k, k)
		}
	}
	q80Scales(a, 8)
	q80RowTokens(a, T, q80Shift(q4), nil)
	q80RowsClose(a, name, T, 16, bsz)
}

// The packed layout of Q8_0 weights (tensor.Pack, for weights in private
// memory): each block of eight rows is rewritten, in place, as the
// registers of the kernels above hold it — per block of columns, 272
// bytes: the 32-byte vectors k = 0..7 with dword k of rows 0-7, already
// unsigned (xor 0x80), then the eight rows' f16 scales. The kernels then
// skip the transpose, the bias and the scale gather (~45 of ~300
// instructions per block at 16 tokens, ~25 of ~50 at one), and read the
// weights front to back, one stream the hardware prefetcher follows.
const q80PackedBlock = 8 * 34

// q80PackedKernel generates q80VNNIP_T, the kernel for T ≤ 16 tokens on
// packed weights: rowBlocks blocks of eight rows from w. Registers and
// float steps as q80VNNIR_T.
//
// With q4 it generates q40VNNIP_T, the same on packed Q4_0 weights (the
// layout of q40PackedBlock, which the AVX2 kernels read too): a mask and a
// shift per vector (the mask in Y15) give the eight rows' dword k of
// nibbles in Yk, and the offset is corrected for them (q80RowTokens). The
// integer sums and float steps are those of q40AVX2N_T and q40AVX2P_T, so
// the two levels' products are bit-identical.
//
// Arguments: w *byte, prefetch, rowBlocks int, act *byte, blockStride,
// blocks int, dst *float32, ldBytes int; prefetch is the distance in bytes
// ahead of the weights being read that each block requests (0: none).
func q80PackedKernel(a *asm, d *decl, T int, q4 bool) {
	name, typ, blk := fmt.Sprintf("q80VNNIP_%d", T), "Q8_0", q80PackedBlock
	if q4 {
		name, typ, blk = fmt.Sprintf("q40VNNIP_%d", T), "Q4_0", q40PackedBlock
	}
	text(a, d, fmt.Sprintf("%s computes rowBlocks × 8 rows × %d tokens of packed %s weights × Q8_0 activations (VNNI).", name, T, typ), name,
		"(w *byte, prefetch, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, ldBytes int)", "$0-64")
	if q4 {
		a.p("VPBROADCASTD q40Mask<>(SB), Y15")
	}
	a.p("MOVQ w+0(FP), DI")
	a.p("MOVQ prefetch+8(FP), R10")
	a.p("MOVQ rowBlocks+16(FP), R15")
	a.p("MOVQ blockStride+32(FP), R11")
	a.p("MOVQ dst+48(FP), DX")
	a.p("MOVQ ldBytes+56(FP), R9")
	a.label(name + "_rows")
	for t := 0; t < T; t++ {
		a.p("VPXORD Y%d, Y%d, Y%d", 16+t, 16+t, 16+t)
	}
	a.p("MOVQ act+24(FP), R14")
	a.p("MOVQ blocks+40(FP), CX")
	a.label(name + "_block")
	if q80PackedPrefetch(T) {
		a.p("TESTQ R10, R10")
		a.p("JZ %s_nopf", name)
		a.p("LEAQ (DI)(R10*1), R12")
		for off := 0; off < blk; off += 64 {
			a.p("PREFETCHT1 %d(R12)", off)
		}
		a.label(name + "_nopf")
	}
	q80PackedLoad(a, q4, "DI")
	q80RowTokens(a, T, q80Shift(q4), nil)
	a.p("ADDQ $%d, DI", blk)
	a.p("ADDQ R11, R14")
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
	a.p("MOVQ DX, R13")
	q80StoreTokens(a, T, 16, "", "R13")
	a.p("ADDQ $32, DX")
	nextOrReturn(a, "R15", name+"_rows")
}

// q80PackedSplitKernel generates q80VNNIS_1 (with q4, q40VNNIS_1):
// q80VNNIP_1 (q40VNNIP_1) on two ranges of row blocks at once, the second
// half bytes after the first, each column block of both read in turn (see
// f16PackedSplitKernel: one token's product waits on one core's pull of
// the weights, and two distant streams kept more reads in flight). Each
// row's steps are q80VNNIP_1's, so results are its bits.
//
// Arguments: w *byte, half, rowBlocks (per range) int, act *byte,
// blockStride, blocks int, dst *float32 (the first range's outputs),
// halfOut (bytes from them to the second range's).
func q80PackedSplitKernel(a *asm, d *decl, q4 bool) {
	name, typ, blk := "q80VNNIS_1", "Q8_0", q80PackedBlock
	if q4 {
		name, typ, blk = "q40VNNIS_1", "Q4_0", q40PackedBlock
	}
	text(a, d, fmt.Sprintf("%s computes rowBlocks × 8 rows × one token of packed %s weights × Q8_0 activations on two ranges of row blocks half bytes apart (VNNI).", name, typ), name,
		"(w *byte, half, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, halfOut int)", "$0-64")
	if q4 {
		a.p("VPBROADCASTD q40Mask<>(SB), Y15")
	}
	a.p("MOVQ w+0(FP), DI")
	a.p("MOVQ half+8(FP), R8")
	a.p("MOVQ rowBlocks+16(FP), R15")
	a.p("MOVQ blockStride+32(FP), R11")
	a.p("MOVQ dst+48(FP), DX")
	a.p("MOVQ halfOut+56(FP), R10")
	a.label(name + "_rows")
	a.p("VPXORD Y16, Y16, Y16")
	a.p("VPXORD Y17, Y17, Y17")
	a.p("MOVQ act+24(FP), R14")
	a.p("MOVQ blocks+40(FP), CX")
	a.p("LEAQ (DI)(R8*1), BX")
	a.label(name + "_block")
	for r, base := range []string{"DI", "BX"} {
		q80PackedLoad(a, q4, base)
		q80RowTokensTo(a, 1, q80Shift(q4), 16+r, nil)
	}
	a.p("ADDQ $%d, DI", blk)
	a.p("ADDQ $%d, BX", blk)
	a.p("ADDQ R11, R14")
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
	a.p("VMOVUPS Y16, (DX)")
	a.p("VMOVUPS Y17, (DX)(R10*1)")
	a.p("ADDQ $32, DX")
	nextOrReturn(a, "R15", name+"_rows")
}

// q80PackedLoad loads the packed Q8_0 (with q4, Q4_0, its nibble mask in
// Y15) block of eight rows at register base: dword k of the eight rows in
// Yk, their scales in Y8.
func q80PackedLoad(a *asm, q4 bool, base string) {
	if q4 {
		q40PackedLoadAt(a, 15, base)
		return
	}
	for k := 0; k < 8; k++ {
		a.p("VMOVDQU %d(%s), Y%d", 32*k, base, k)
	}
	a.p("VCVTPH2PS 256(%s), Y8", base)
}

// q80PackedPrefetch says whether the T-token packed kernel prefetches: the
// hardware prefetcher keeps up with one stream of weights at one or two
// tokens (prefetching there too made batch 1 slower), not at more, where
// each block is followed by T tokens' arithmetic (without it, batch 16 was
// ~10% slower; SmolLM2-135M, 2 threads, 16 and 32 rows ahead alike).
func q80PackedPrefetch(T int) bool { return T > 2 }

// q80NaturalRowsKernel generates q80VNNIN_T, the 8-row × T-token kernel
// for T ≤ 2 (decode), which takes the same float steps as q80VNNIR_T but
// gets each row's block sum without the transpose: per row and token one
// vpdpbusd on the natural values (eight partial sums in the lanes), then a
// vphaddd tree takes the eight rows' vectors to one lane per row. For one
// or two tokens that is ~30 instructions a block where the transpose and
// its broadcasts took ~55, and a decode kernel streaming weights from DRAM
// keeps more of them in flight the fewer instructions it spends per byte.
//
// Registers (vphaddd and vperm2i128 reach only Y0-Y15): Y(8t+r) the
// integer sums of token t, row r, reduced in place; Y16-Y19 the unsigned
// weights of a row; Y20+t token t's activations; Y22 the 0x80 bytes; Y24+t
// token t's float accumulators; Y28 the rows' scales; Y29 scratch. GPRs as
// q80VNNIR_T, with R9 scratch.
func q80NaturalRowsKernel(a *asm, d *decl, T int) {
	name := fmt.Sprintf("q80VNNIN_%d", T)
	text(a, d, fmt.Sprintf("%s computes rows × %d tokens of Q8_0 weights × Q8_0 activations, eight rows at a time, without a transpose (VNNI).", name, T), name, q80RowsSig, "$0-72")
	sum := func(t, r int) int { return 8*t + r }
	q80RowsArgs(a)
	a.p("VPBROADCASTD q80Bias<>(SB), Y22")
	q80RowBlockStart(a, name, 24, T)

	a.label(name + "_block")
	for t := 0; t < T; t++ {
		a.p("VMOVDQU64 %d(R14), Y%d", q80BlockBytes*t, 20+t)
		for r := 0; r < 8; r++ {
			a.p("VPXOR Y%d, Y%d, Y%d", sum(t, r), sum(t, r), sum(t, r))
		}
	}
	a.p("VPXORD X28, X28, X28")
	// row adds row r's products and scale.
	row := func(r int) {
		w := 16 + r%4
		a.p("VPXORD %s, Y22, Y%d", q80RowAddr(2, r), w)
		a.p("VPINSRW $%d, %s, X28, X28", r, q80RowAddr(0, r))
		for t := 0; t < T; t++ {
			a.p("VPDPBUSD Y%d, Y%d, Y%d", 20+t, w, sum(t, r))
		}
	}
	q80EightRows(a, name, row)
	q80RowPrefetch(a)
	a.p("VCVTPH2PS X28, Y28")
	for t := 0; t < T; t++ {
		s := func(r int) int { return sum(t, r) }
		// Pairs, then quads, of rows: in each 128-bit half, lane i then
		// holds row i's (rows 0-3 in s(0), 4-7 in s(4)) partial sum of the
		// half's lanes.
		for p := 0; p < 4; p++ {
			a.p("VPHADDD Y%d, Y%d, Y%d", s(2*p+1), s(2*p), s(2*p))
		}
		a.p("VPHADDD Y%d, Y%d, Y%d", s(2), s(0), s(0))
		a.p("VPHADDD Y%d, Y%d, Y%d", s(6), s(4), s(4))
		// Low halves plus high halves: lane r = row r's block sum.
		a.p("VPERM2I128 $0x20, Y%d, Y%d, Y%d", s(4), s(0), s(1))
		a.p("VPERM2I128 $0x31, Y%d, Y%d, Y%d", s(4), s(0), s(3))
		a.p("VPADDD Y%d, Y%d, Y%d", s(3), s(1), s(1))
		a.p("VPADDD.BCST %d(R14), Y%d, Y%d", q80BlockBytes*t+q80BlockOffset, s(1), s(1))
		a.p("VCVTDQ2PS Y%d, Y%d", s(1), s(1))
		a.p("VMULPS.BCST %d(R14), Y28, Y29", q80BlockBytes*t+q80BlockScale)
		a.p("VFMADD231PS Y29, Y%d, Y%d", s(1), 24+t)
	}
	q80RowsClose(a, name, T, 24, 34)
}

// q80RowsArgs loads the row kernels' arguments kept in registers.
func q80RowsArgs(a *asm) {
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("LEAQ (R8)(R8*2), R13")
	a.p("MOVQ rows+24(FP), R15")
	a.p("MOVQ blockStride+40(FP), R11")
	a.p("MOVQ dst+56(FP), DX")
}

// q80RowBlockStart opens a row kernel's loop over blocks of eight rows:
// zeroes the float accumulators Y(acc)..Y(acc+T-1) and points DI, R12,
// R10, R14 and CX at the block's start.
func q80RowBlockStart(a *asm, name string, acc, T int) {
	a.label(name + "_rows")
	for t := 0; t < T; t++ {
		a.p("VPXORD Y%d, Y%d, Y%d", acc+t, acc+t, acc+t)
	}
	a.p("MOVQ SI, DI")
	a.p("LEAQ (SI)(R8*4), R12")
	a.p("MOVQ prefetch+16(FP), R10")
	a.p("MOVQ act+32(FP), R14")
	a.p("MOVQ blocks+48(FP), CX")
}

// q80RowsClose closes a row kernel's loop over blocks (the next block, or
// on after the last), stores the float accumulators Y(acc+t), token t's
// eight rows, at dst + t·ld (through lane mask K1 for a last block of fewer
// rows), then moves to the next row block or returns.
func q80RowsClose(a *asm, name string, T, acc, blockBytes int) {
	q80RowsCloseThen(a, name, T, acc, blockBytes, "R11", nil)
}

// q80RowsCloseThen is q80RowsClose with the activations' block stride
// read from strideOp, and end, if not nil, emitted after the last block,
// before the stores.
func q80RowsCloseThen(a *asm, name string, T, acc, blockBytes int, strideOp string, end func()) {
	a.p("ADDQ $%d, DI", blockBytes)
	a.p("ADDQ $%d, R12", blockBytes)
	a.p("ADDQ %s, R14", strideOp)
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
	if end != nil {
		end()
	}
	a.p("MOVQ DX, R10")
	a.p("MOVQ ldBytes+64(FP), R9")
	a.p("CMPQ R15, $8")
	a.p("JL %s_partstore", name)
	q80StoreTokens(a, T, acc, "", "R10")
	a.p("ADDQ $32, DX")
	a.p("LEAQ (SI)(R8*8), SI")
	a.p("SUBQ $8, R15")
	a.p("JNZ %s_rows", name)
	a.p("VZEROUPPER")
	a.p("RET")
	a.label(name + "_partstore")
	a.p("MOVQ R15, CX")
	a.p("MOVL $1, AX")
	a.p("SHLL CX, AX")
	a.p("DECL AX")
	a.p("KMOVW AX, K1")
	q80StoreTokens(a, T, acc, "K1, ", "R10")
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// q80StoreTokens stores Y(acc+t), token t's eight results, at ptr + t·R9
// (ld in bytes), advancing ptr; mask is "" or a mask operand ("K1, ").
func q80StoreTokens(a *asm, T, acc int, mask, ptr string) {
	for t := 0; t < T; t++ {
		a.p("VMOVUPS Y%d, %s(%s)", acc+t, mask, ptr)
		if t+1 < T {
			a.p("ADDQ R9, %s", ptr)
		}
	}
}

// q80BiasData emits the 0x80 bytes that make signed weights unsigned.
func q80BiasData(a *asm) {
	a.b.WriteString("DATA q80Bias<>+0(SB)/4, $0x80808080\nGLOBL q80Bias<>(SB), RODATA|NOPTR, $4\n\n")
}

// q80Transpose transposes the 8×8 dwords of Y8..Y15 (row i in Y8+i) into
// Y0..Y7 (dword k of the eight rows in Yk), through Y0-Y15.
func q80Transpose(a *asm) {
	for p := 0; p < 4; p++ {
		a.p("VPUNPCKLDQ Y%d, Y%d, Y%d", 9+2*p, 8+2*p, 2*p)
		a.p("VPUNPCKHDQ Y%d, Y%d, Y%d", 9+2*p, 8+2*p, 2*p+1)
	}
	for h := 0; h < 2; h++ { // blocks 0-3, then 4-7
		b := 4 * h
		a.p("VPUNPCKLQDQ Y%d, Y%d, Y%d", b+2, b, 8+b)
		a.p("VPUNPCKHQDQ Y%d, Y%d, Y%d", b+2, b, 9+b)
		a.p("VPUNPCKLQDQ Y%d, Y%d, Y%d", b+3, b+1, 10+b)
		a.p("VPUNPCKHQDQ Y%d, Y%d, Y%d", b+3, b+1, 11+b)
	}
	for k := 0; k < 4; k++ {
		a.p("VPERM2I128 $0x20, Y%d, Y%d, Y%d", 12+k, 8+k, k)
		a.p("VPERM2I128 $0x31, Y%d, Y%d, Y%d", 12+k, 8+k, k+4)
	}
}

// q80Scales converts the packed scales into f32 lanes of Y(dst).
func q80Scales(a *asm, dst int) {
	a.p("VMOVQ AX, X%d", dst)
	a.p("VPINSRQ $1, BX, X%d, X%d", dst, dst)
	a.p("VCVTPH2PS X%d, Y%d", dst, dst)
}

// q80EightRows emits row for each of a block's eight rows (R15 the rows
// left), straight through where all eight exist. In a last row block of
// fewer, the missing rows' sums, scales and minima stay zero, in lanes
// never stored.
func q80EightRows(a *asm, name string, row func(r int)) {
	a.p("CMPQ R15, $8")
	a.p("JL %s_part", name)
	for r := 0; r < 8; r++ {
		row(r)
	}
	a.p("JMP %s_loaded", name)
	a.label(name + "_part")
	for r := 0; r < 8; r++ {
		if r > 0 {
			a.p("CMPQ R15, $%d", r)
			a.p("JLE %s_loaded", name)
		}
		row(r)
	}
	a.label(name + "_loaded")
}
