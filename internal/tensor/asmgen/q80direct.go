package main

import (
	"fmt"
	"strings"
)

// Direct decode kernels for the streamed types that widen to Q8_0 (Q5_0,
// IQ4_NL, Q4_1, Q5_1; tensor/stream.go): the natural-rows kernel of Q8_0
// (q80NaturalRowsKernel) on each block's 32 values unpacked in registers
// from the file's own bytes, for one or two tokens. Streamed decode
// otherwise widens every row to scratch for each token, which took longer
// than the product itself.
//
// The unpacked bytes u are unsigned, and the offset of the activations'
// row layout (−128·Σy) corrects them to the values the widening writes:
// Q5_0's q−16 as u = q (−16·Σy, the offset shifted right by 3, exact),
// IQ4_NL's table values as u = value+128 (−128·Σy), Q4_1's and Q5_1's q as
// they are (no offset). So each block's integer sum S equals the widened
// block's, and the float steps are Q8_0's: the results are the widened
// path's bit for bit. Q4_1's and Q5_1's minima add m·s1 per block (s1 the
// activations' Q8_1 block sums) in a second accumulator, a product then a
// sum, blocks in order, added to the first at the end: the steps of the
// widened path's addMins.
type q80DirectType struct {
	name   string // the kernels' prefix
	typ    string // ggml's name
	size   int    // bytes a block
	qs, qh int    // offsets of the 16 nibble bytes and of the fifth bits (qh < 0: none)
	// shift: the offset −128·Σy shifted right by this much corrects u
	// (−1: no offset).
	shift int
	mins  bool // an f16 minimum at byte 2
	table bool // IQ4_NL's values by vpshufb
}

var q80DirectTypes = []q80DirectType{
	{name: "q50", typ: "Q5_0", size: 22, qs: 6, qh: 2, shift: 3},
	{name: "iq4NL", typ: "IQ4_NL", size: 18, qs: 2, qh: -1, shift: 0, table: true},
	{name: "q41", typ: "Q4_1", size: 20, qs: 4, qh: -1, shift: -1, mins: true},
	{name: "q51", typ: "Q5_1", size: 24, qs: 8, qh: 4, shift: -1, mins: true},
}

// q80DirectSig is q80RowsSig with the activations' Q8_1 block sums s1 of
// the T tokens, block-major (block b's token t at b·T + t), read by the
// types with minima only.
const q80DirectSig = "(w *byte, rowBytes, prefetch, rows int, act *byte, blockStride, blocks int, dst *float32, ldBytes int, s1 *float32)"

// q80DirectKernel generates <name>VNNIN_T, T ≤ 2, for type y.
//
// Registers as q80NaturalRowsKernel's, with Y22 the 0x0f bytes, Y23 the
// 0x10 bytes (fifth bits) or IQ4_NL's values+128, Y26 unpacking scratch,
// Y27 the rows' minima, Y30+t token t's minima accumulators. GPRs as
// there, with BX the block's s1.
func q80DirectKernel(a *asm, d *decl, y q80DirectType, T int) {
	name := fmt.Sprintf("%sVNNIN_%d", y.name, T)
	text(a, d, fmt.Sprintf("%s computes rows × %d tokens of %s weights × Q8_0 activations, eight rows at a time, in the weights' own bytes (VNNI).", name, T, y.typ), name, q80DirectSig, "$0-80")
	sum := func(t, r int) int { return 8*t + r }
	q80RowsArgs(a)
	a.p("VPBROADCASTD q40Mask<>(SB), Y22")
	switch {
	case y.table:
		a.p("VBROADCASTI32X4 iq4UTable<>(SB), Y23")
	case y.qh >= 0:
		a.p("VPBROADCASTD q5Bit<>(SB), Y23")
	}
	q80RowBlockStart(a, name, 24, T)
	if y.mins {
		a.p("MOVQ s1+72(FP), BX")
		for t := 0; t < T; t++ {
			a.p("VPXORD Y%d, Y%d, Y%d", 30+t, 30+t, 30+t)
		}
	}

	a.label(name + "_block")
	for t := 0; t < T; t++ {
		a.p("VMOVDQU64 %d(R14), Y%d", q80BlockBytes*t, 20+t)
		for r := 0; r < 8; r++ {
			a.p("VPXOR Y%d, Y%d, Y%d", sum(t, r), sum(t, r), sum(t, r))
		}
	}
	a.p("VPXORD X28, X28, X28")
	if y.mins {
		a.p("VPXORD X27, X27, X27")
	}
	// row unpacks row r's values (low nibbles 0-15, high ones 16-31: the
	// order of the activations) and adds its products and scales.
	row := func(r int) {
		w := 16 + r%4
		q80DirectUnpack(a, y, r, w, 26, "Y22", 23)
		a.p("VPINSRW $%d, %s, X28, X28", r, q80RowAddr(0, r))
		if y.mins {
			a.p("VPINSRW $%d, %s, X27, X27", r, q80RowAddr(2, r))
		}
		for t := 0; t < T; t++ {
			a.p("VPDPBUSD Y%d, Y%d, Y%d", 20+t, w, sum(t, r))
		}
	}
	q80EightRows(a, name, row)
	// Blocks of fewer than 64 bytes: each row's line requested every
	// other block.
	a.p("TESTQ $1, CX")
	a.p("JZ %s_nopf", name)
	q80RowPrefetch(a)
	a.label(name + "_nopf")
	a.p("VCVTPH2PS X28, Y28")
	if y.mins {
		a.p("VCVTPH2PS X27, Y27")
	}
	for t := 0; t < T; t++ {
		s := func(r int) int { return sum(t, r) }
		for p := 0; p < 4; p++ {
			a.p("VPHADDD Y%d, Y%d, Y%d", s(2*p+1), s(2*p), s(2*p))
		}
		a.p("VPHADDD Y%d, Y%d, Y%d", s(2), s(0), s(0))
		a.p("VPHADDD Y%d, Y%d, Y%d", s(6), s(4), s(4))
		a.p("VPERM2I128 $0x20, Y%d, Y%d, Y%d", s(4), s(0), s(1))
		a.p("VPERM2I128 $0x31, Y%d, Y%d, Y%d", s(4), s(0), s(3))
		a.p("VPADDD Y%d, Y%d, Y%d", s(3), s(1), s(1))
		off := fmt.Sprintf("%d(R14)", q80BlockBytes*t+q80BlockOffset)
		switch y.shift {
		case 0:
			a.p("VPADDD.BCST %s, Y%d, Y%d", off, s(1), s(1))
		case -1:
		default:
			a.p("VPBROADCASTD %s, Y29", off)
			a.p("VPSRAD $%d, Y29, Y29", y.shift)
			a.p("VPADDD Y29, Y%d, Y%d", s(1), s(1))
		}
		a.p("VCVTDQ2PS Y%d, Y%d", s(1), s(1))
		a.p("VMULPS.BCST %d(R14), Y28, Y29", q80BlockBytes*t+q80BlockScale)
		a.p("VFMADD231PS Y29, Y%d, Y%d", s(1), 24+t)
		if y.mins {
			a.p("VMULPS.BCST %d(BX), Y27, Y29", 4*t)
			a.p("VADDPS Y29, Y%d, Y%d", 30+t, 30+t)
		}
	}
	var end func()
	if y.mins {
		a.p("ADDQ $%d, BX", 4*T)
		end = func() {
			for t := 0; t < T; t++ {
				a.p("VADDPS Y%d, Y%d, Y%d", 30+t, 24+t, 24+t)
			}
		}
	}
	q80RowsCloseThen(a, name, T, 24, y.size, "R11", end)
}

// q80DirectRowsKernel generates <name>VNNIR_T, 3 ≤ T ≤ 16 (8 for the
// types with minima), for type y: q80RowsKernel on the block's rows
// unpacked as q80DirectKernel unpacks them, the unpacking and transpose
// shared by T tokens (prompts), with the same integer sums and float
// steps.
//
// Registers as q80RowsKernel's, with Y1 the 0x10 bytes or IQ4_NL's
// values+128 during the load (set again each block: the transpose writes
// Y1), Y15 the rows' minima (gathered after the transpose through AX and
// BX, as the scales are), Y24+t token t's minima accumulators. GPRs as
// there, with R11 the block's s1 (the activations' block stride read from
// the frame).
func q80DirectRowsKernel(a *asm, d *decl, y q80DirectType, T int) {
	name := fmt.Sprintf("%sVNNIR_%d", y.name, T)
	text(a, d, fmt.Sprintf("%s computes rows × %d tokens of %s weights × Q8_0 activations, eight rows at a time, in the weights' own bytes (VNNI).", name, T, y.typ), name, q80DirectSig, "$0-80")
	q80RowsArgs(a)
	q80RowBlockStart(a, name, 16, T)
	strideOp := "R11"
	if y.mins {
		strideOp = "blockStride+40(FP)"
		a.p("MOVQ s1+72(FP), R11")
		for t := 0; t < T; t++ {
			a.p("VPXORD Y%d, Y%d, Y%d", 24+t, 24+t, 24+t)
		}
	}
	load := func(r int) { q80DirectLoad(a, y, r) }
	// rows emits, for each row that exists (all eight, or fewer in a
	// last row block, after part), each(r), then jumps to label done.
	rows := func(tag string, each func(r int), part func(), done string) {
		a.p("CMPQ R15, $8")
		a.p("JL %s_%spart", name, tag)
		for r := 0; r < 8; r++ {
			each(r)
		}
		a.p("JMP %s", done)
		a.label(fmt.Sprintf("%s_%spart", name, tag))
		if part != nil {
			part()
		}
		for r := 0; r < 8; r++ {
			if r > 0 {
				a.p("CMPQ R15, $%d", r)
				a.p("JLE %s", done)
			}
			each(r)
		}
	}

	a.label(name + "_block")
	q80DirectLoadConst(a, y)
	a.p("XORL BX, BX")
	// The missing rows of a last row block stay zero (with zero scales
	// and minima they add exactly zero, to lanes never stored).
	rows("", load, func() {
		for r := 1; r < 8; r++ {
			a.p("VPXOR Y%d, Y%d, Y%d", 8+r, 8+r, 8+r)
		}
	}, name+"_loaded")
	a.label(name + "_loaded")
	a.p("TESTQ $1, CX")
	a.p("JZ %s_nopf", name)
	q80RowPrefetch(a)
	a.label(name + "_nopf")
	q80Transpose(a)
	q80Scales(a, 8)
	var after func(t, td int)
	if y.mins {
		a.p("XORL BX, BX")
		rows("min", func(r int) { q80RowHalf(a, 2, r) }, nil, name+"_mins")
		a.label(name + "_mins")
		a.p("VMOVQ AX, X15")
		a.p("VPINSRQ $1, BX, X15, X15")
		a.p("VCVTPH2PS X15, Y15")
		after = func(t, td int) {
			a.p("VMULPS.BCST %d(R11), Y15, Y%d", 4*t, td)
			a.p("VADDPS Y%d, Y%d, Y%d", td, 24+t, 24+t)
		}
	}
	q80RowTokens(a, T, y.shift, after)
	var end func()
	if y.mins {
		a.p("ADDQ $%d, R11", 4*T)
		end = func() {
			for t := 0; t < T; t++ {
				a.p("VADDPS Y%d, Y%d, Y%d", 24+t, 16+t, 16+t)
			}
		}
	}
	q80RowsCloseThen(a, name, T, 16, y.size, strideOp, end)
}

// q80DirectLoad puts row r's 32 values, unpacked, in Y(8+r) (Y0 scratch,
// Y1 as q80DirectLoadConst sets it) and adds its scale to AX or BX
// (q80RowScale).
func q80DirectLoad(a *asm, y q80DirectType, r int) {
	q80DirectUnpack(a, y, r, 8+r, 0, "q40Mask<>(SB)", 1)
	q80RowScale(a, r)
}

// q80DirectUnpack puts row r's 32 values (low nibbles 0-15, high ones
// 16-31: the order of the activations) in Y(v) as u (q80DirectKernel), through
// scratch Y(tmp): the nibbles masked by mask (a register, or memory
// broadcast), then IQ4_NL's table or Q5's fifth bits (K2) from Y(konst).
// Registers from Y16 on take the EVEX forms of the load and insert.
func q80DirectUnpack(a *asm, y q80DirectType, r, v, tmp int, mask string, konst int) {
	load, insert, and := "VMOVDQU", "VINSERTI128", "VPANDD"
	if v >= 16 {
		load, insert = "VMOVDQU64", "VINSERTI32X4"
	}
	if strings.HasSuffix(mask, "(SB)") {
		and = "VPANDD.BCST"
	}
	a.p("%s %s, X%d", load, q80RowAddr(y.qs, r), v)
	a.p("VPSRLW $4, X%d, X%d", v, tmp)
	a.p("%s $1, X%d, Y%d, Y%d", insert, tmp, v, v)
	a.p("%s %s, Y%d, Y%d", and, mask, v, v)
	switch {
	case y.table:
		a.p("VPSHUFB Y%d, Y%d, Y%d", v, konst, v)
	case y.qh >= 0:
		a.p("KMOVD %s, K2", q80RowAddr(y.qh, r))
		a.p("VPADDB Y%d, Y%d, K2, Y%d", konst, v, v)
	}
}

// q80DirectLoadConst sets Y1 for q80DirectLoad: the 0x10 bytes or
// IQ4_NL's values+128 (again each block, as the transpose writes Y1).
func q80DirectLoadConst(a *asm, y q80DirectType) {
	switch {
	case y.table:
		a.p("VBROADCASTI32X4 iq4UTable<>(SB), Y1")
	case y.qh >= 0:
		a.p("VPBROADCASTD q5Bit<>(SB), Y1")
	}
}

// q80DirectPackKernel generates <name>VNNIW: rowBlocks blocks of eight
// rows of y, blocks blocks each, written to dst as Q8_0 rows widened and
// then packed (tensor.Pack's layout for the VNNI kernels: per block 272
// bytes, the vectors k = 0..7 holding dword k of the eight rows xor 0x80,
// then their eight f16 scales), and for the types with minima the eight
// rows' f16 minima of each block to mins, 32 bytes apart (rowBlocks must
// be 1 for those: minsAddKernel's layout puts row blocks in pairs, each
// pair's second 16 bytes on). A prompt's streamed rows are unpacked so once per work
// item, for the packed kernels to pass over them once per 16 tokens, where
// the rows kernels above unpack them again for every 16. The bytes are the
// widening's: u, as the load leaves it, is IQ4_NL's value xor 0x80
// already, Q5_0's q, whose value q−16 xor 0x80 is q+0x70, and Q4_1's and
// Q5_1's q, which xor 0x80 is q+0x80.
//
// Arguments: w *byte, rowBytes, prefetch, rowBlocks, blocks int, dst,
// mins *byte, prefetch as the rows kernels' (q80RowPrefetch: the source
// rows come from DRAM, eight streams the hardware prefetcher does not
// follow). Registers: Y8-Y15 the rows, then Y0-Y15 the transpose; Y1 the
// load's constant; Y16 the packed offset. GPRs as q80RowsKernel's, with
// DX the store cursor and R11 the minima's.
func q80DirectPackKernel(a *asm, d *decl, y q80DirectType) {
	name := y.name + "VNNIW"
	what := "as packed Q8_0 blocks"
	if y.mins {
		what += " and their minima"
	}
	text(a, d, fmt.Sprintf("%s writes rowBlocks × 8 rows of %s weights %s, unpacked in registers (VNNI).", name, y.typ, what), name,
		"(w *byte, rowBytes, prefetch, rowBlocks, blocks int, dst, mins *byte)", "$0-56")
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("LEAQ (R8)(R8*2), R13")
	a.p("MOVQ prefetch+16(FP), R10")
	a.p("MOVQ rowBlocks+24(FP), R15")
	a.p("MOVQ dst+40(FP), DX")
	offset := ""
	switch {
	case y.mins:
		offset = "q41Packed"
		a.p("MOVQ mins+48(FP), R11")
	case y.qh >= 0:
		offset = "q50Packed"
	}
	if offset != "" {
		a.p("VPBROADCASTD %s<>(SB), Y16", offset)
	}
	a.label(name + "_rows")
	a.p("MOVQ SI, DI")
	a.p("LEAQ (SI)(R8*4), R12")
	a.p("MOVQ blocks+32(FP), CX")
	a.label(name + "_block")
	q80DirectLoadConst(a, y)
	for r := 0; r < 8; r++ {
		q80DirectLoad(a, y, r)
	}
	a.p("TESTQ $1, CX")
	a.p("JZ %s_nopf", name)
	q80RowPrefetch(a)
	a.label(name + "_nopf")
	q80Transpose(a)
	for k := 0; k < 8; k++ {
		if offset != "" {
			a.p("VPADDB Y16, Y%d, Y%d", k, k)
		}
		a.p("VMOVDQU Y%d, %d(DX)", k, 32*k)
	}
	a.p("MOVQ AX, %d(DX)", q80PackedBlock-16)
	a.p("MOVQ BX, %d(DX)", q80PackedBlock-8)
	if y.mins {
		for r := 0; r < 8; r++ {
			q80RowHalf(a, 2, r)
		}
		a.p("MOVQ AX, (R11)")
		a.p("MOVQ BX, 8(R11)")
		a.p("ADDQ $32, R11")
	}
	a.p("ADDQ $%d, DX", q80PackedBlock)
	a.p("ADDQ $%d, DI", y.size)
	a.p("ADDQ $%d, R12", y.size)
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
	a.p("LEAQ (SI)(R8*8), SI")
	nextOrReturn(a, "R15", name+"_rows")
}

// minsAddKernel generates minsAddVNNI, the minima's part of a prompt's
// packed Q4_1 or Q5_1 product (q80DirectPackKernel's minima): for each
// row and token, per block in order the row's m·s1 summed into zero (the
// direct kernels' second accumulator), then added to the token's output,
// which holds the packed kernels' product: the direct kernels' steps, so
// their bits. The direct kernels round each m·s1 before the sum; here they
// are fused, which is the same: m and s1 are both f16 values, whose
// product (22 significant bits at most) a float32 holds exactly.
//
// The minima are q80DirectPackKernel's, row blocks in pairs: per pair and
// block 32 bytes, the first row block's eight f16 then the second's (in
// a last row block without a pair, the second half is not read). So a
// pair's 16 rows take one zmm, and a product one FMA per 16 rows, block
// and token.
//
// Arguments: mins *byte, blocks int, s1 *float32 (token t's block sums at
// t·s1Stride bytes), s1Stride, tokens int, dst *float32 (token t's row 0
// at t·ldBytes), ldBytes, rowBlocks int. Eight tokens at a time, then
// four, then one.
func minsAddKernel(a *asm, d *decl) {
	name := "minsAddVNNI"
	text(a, d, name+" adds to rowBlocks × 8 rows of tokens' outputs their minima's part, Σ m·s1 over the blocks in order (VNNI level).", name,
		"(mins *byte, blocks int, s1 *float32, s1Stride, tokens int, dst *float32, ldBytes, rowBlocks int)", "$0-64")
	a.p("MOVQ mins+0(FP), SI")
	a.p("MOVQ s1Stride+24(FP), R8")
	a.p("LEAQ (R8)(R8*2), R13")
	a.p("MOVQ dst+40(FP), DX")
	a.p("MOVQ ldBytes+48(FP), R10")
	a.p("MOVQ rowBlocks+56(FP), R15")
	// rows runs every token over the row blocks at SI (a pair in zmm, or
	// a last one in ymm), then moves SI and DX to the next pair.
	rows := func(name, v string, lanes int) {
		// chains runs T tokens (T ≤ 8: v0-v7, v8 the minima), token
		// t's block sums from AX + t·R8 (R9 = AX + 4·R8 past the
		// fourth).
		chains := func(label string, T int) {
			for t := 0; t < T; t++ {
				a.p("VXORPS %s%d, %s%d, %s%d", v, t, v, t, v, t)
			}
			a.p("MOVQ SI, DI")
			a.p("MOVQ R14, AX")
			a.p("LEAQ (AX)(R8*4), R9")
			a.p("MOVQ blocks+8(FP), CX")
			a.label(label)
			a.p("VCVTPH2PS (DI), %s8", v)
			for t := 0; t < T; t++ {
				base := "AX"
				if t >= 4 {
					base = "R9"
				}
				a.p("VFMADD231PS.BCST %s, %s8, %s%d", stride(0, base, "R8", "R13", t%4), v, v, t)
			}
			a.p("ADDQ $32, DI")
			a.p("ADDQ $4, AX")
			a.p("ADDQ $4, R9")
			a.p("DECQ CX")
			a.p("JNZ %s", label)
			for t := 0; t < T; t++ {
				a.p("VADDPS (R11), %s%d, %s%d", v, t, v, t)
				a.p("VMOVUPS %s%d, (R11)", v, t)
				a.p("ADDQ R10, R11")
			}
			a.p("LEAQ (R14)(R8*%d), R14", T)
			a.p("SUBQ $%d, BX", T)
		}
		a.p("MOVQ s1+16(FP), R14")
		a.p("MOVQ DX, R11")
		a.p("MOVQ tokens+32(FP), BX")
		for _, T := range []int{8, 4, 1} {
			label := fmt.Sprintf("%s_%d", name, T)
			a.label(label)
			a.p("CMPQ BX, $%d", T)
			a.p("JL %s_done", label)
			chains(label+"_block", T)
			a.p("JMP %s", label)
			a.label(label + "_done")
		}
		a.p("MOVQ blocks+8(FP), CX")
		a.p("SHLQ $5, CX")
		a.p("ADDQ CX, SI")
		a.p("ADDQ $%d, DX", 4*lanes)
	}
	a.label(name + "_pairs")
	a.p("CMPQ R15, $2")
	a.p("JL %s_last", name)
	rows(name+"_pair", "Z", 16)
	a.p("SUBQ $2, R15")
	a.p("JMP %s_pairs", name)
	a.label(name + "_last")
	a.p("TESTQ R15, R15")
	a.p("JZ %s_end", name)
	rows(name+"_one", "Y", 8)
	a.label(name + "_end")
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// q80DirectRowsTokens is the most tokens of type y's rows kernels: the
// minima's accumulators take half of the registers.
func q80DirectRowsTokens(y q80DirectType) int {
	if y.mins {
		return 8
	}
	return 16
}

// q80DirectData emits the direct kernels' constants: the fifth bits' 0x10
// bytes, Q5_0's and Q4_1's packed offsets (q80DirectPackKernel) and IQ4_NL's values
// plus 128 (unsigned, for vpdpbusd).
func q80DirectData(a *asm) {
	a.b.WriteString("DATA q5Bit<>+0(SB)/4, $0x10101010\nGLOBL q5Bit<>(SB), RODATA|NOPTR, $4\n\n")
	a.b.WriteString("DATA q50Packed<>+0(SB)/4, $0x70707070\nGLOBL q50Packed<>(SB), RODATA|NOPTR, $4\n\n")
	a.b.WriteString("DATA q41Packed<>+0(SB)/4, $0x80808080\nGLOBL q41Packed<>(SB), RODATA|NOPTR, $4\n\n")
	for h := 0; h < 2; h++ {
		var w uint64
		for i := 0; i < 8; i++ {
			w |= uint64(uint8(iq4Values[8*h+i])^0x80) << (8 * i)
		}
		fmt.Fprintf(&a.b, "DATA iq4UTable<>+%d(SB)/8, $0x%016x\n", 8*h, w)
	}
	a.b.WriteString("GLOBL iq4UTable<>(SB), RODATA|NOPTR, $16\n\n")
}
