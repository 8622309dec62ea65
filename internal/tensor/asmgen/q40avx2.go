package main

import "fmt"

// Q4_0 weight × Q8_0 activation kernels of the AVX2 level, eight rows at a
// time, one row per lane of the float accumulators.
//
// They take the float steps of the VNNI Q8_0 kernels (q80rows.go): per
// output and block, the exact integer sum S = Σ q·y, then
// acc = fma(float32(S), dw·dy, acc), blocks in order. The previous AVX2
// kernels kept eight partial sums of one row in a vector and converted,
// scaled and added all eight for every block: five float instructions per
// row, token and block, where these spend five per eight rows. The integer
// part per row and token is vpmaddubsw + vpmaddwd on the unpacked nibbles
// (q+8, unsigned) against the token's 32 values; a vphaddd tree takes the
// eight rows' vectors to one lane per row, and the offset −8·Σy (the Q8_0
// row layout's −128·Σy shifted right by 4, exact) removes the +8.
//
// Activations are the row layout of the Q8_0 conversion (q80BlockBytes per
// block and token). One kernel per T ≤ 2 tokens, which share each row's
// unpacking; more tokens go in pairs (the rows of a prefill tile are then
// read from cache).
//
// Registers (AVX2: Y0-Y15): Y(2p+t) the pair-p sums of token t (rows 2p,
// 2p+1), reduced in place; Y8 a row's weights, then the rows' scales; Y9
// scratch; Y10+t token t's float accumulators; Y12+t token t's values;
// Y14 int16 ones; Y15 the nibble mask. GPRs as the VNNI row kernels: SI the
// row block's first row, DI / R12 its rows 0-3 / 4-7 at the current block,
// R8 rowBytes, R13 3·rowBytes, R15 rows left, CX blocks left, R14 the
// block's activations, R11 blockStride, DX the row block's outputs, AX/BX
// the scales, R9 scratch, R10 the prefetch distance and then the store
// cursor.
//
// With q8 it generates q80AVX2N_T, the same for Q8_0 weights: per row and
// token vpsignb gives y·sign(w) (from memory: the row's weights are read
// again from L1) for vpmaddubsw against |w| in Y8 (each pair at most
// 2·127·127 < 2^15), and there is no offset.
//
// With y (not nil: Q4_1) it generates <y.name>AVX2N_T, the direct decode
// kernels of a type streamed to Q8_0 (q80DirectKernel's at the VNNI level)
// at this level: Q4_1's q as they are (no offset), Q8_0's float steps, and
// the minima's part — per block m·s1, s1 the activations' Q8_1 block
// sums, summed into zero and added at the end (exact products, so fused or
// not the same) — in the frame: the rows' eight f16 minima gathered at
// 32(SP), the block's s1 cursor at 48(SP), token t's minima accumulator at
// 64+32t(SP) (Y1 for one token, which leaves it free).
func q40AVX2RowsKernel(a *asm, d *decl, T int, q8 bool, y *q80DirectType) {
	name, typ, bsz, qs := fmt.Sprintf("q40AVX2N_%d", T), "Q4_0", 18, 2
	sig, frame := q80RowsSig, "$32-72"
	if q8 {
		name, typ, bsz = fmt.Sprintf("q80AVX2N_%d", T), "Q8_0", 34
	}
	own := ""
	if y != nil {
		name, typ, bsz, qs = fmt.Sprintf("%sAVX2N_%d", y.name, T), y.typ, y.size, y.qs
		sig, frame, own = q80DirectSig, "$128-80", ", in the weights' own bytes"
	}
	text(a, d, fmt.Sprintf("%s computes rows × %d tokens of %s weights × Q8_0 activations, eight rows at a time%s (AVX2).", name, T, typ, own), name, sig, frame)
	pair := func(p, t int) int { return 2*p + t }
	facc := func(t int) int { return 10 + t }
	// minsStep adds token t's m·s1 to its minima accumulator (Y(m) the
	// rows' minima, Y(s) scratch, R9 the block's s1).
	minsStep := func(t, m, s int) {
		a.p("VBROADCASTSS %d(R9), Y%d", 4*t, s)
		if T == 1 {
			a.p("VFMADD231PS Y%d, Y%d, Y1", s, m)
			return
		}
		a.p("VMULPS Y%d, Y%d, Y%d", s, m, s)
		a.p("VADDPS %d(SP), Y%d, Y%d", 64+32*t, s, s)
		a.p("VMOVUPS Y%d, %d(SP)", s, 64+32*t)
	}
	q80RowsArgs(a)
	a.p("MOVL $0x0f0f0f0f, CX")
	a.p("VMOVD CX, X15")
	a.p("VPBROADCASTD X15, Y15")
	a.p("MOVL $0x00010001, CX")
	a.p("VMOVD CX, X14")
	a.p("VPBROADCASTD X14, Y14")

	a.label(name + "_rows")
	for t := 0; t < T; t++ {
		a.p("VXORPS Y%d, Y%d, Y%d", facc(t), facc(t), facc(t))
	}
	a.p("MOVQ SI, DI")
	a.p("LEAQ (SI)(R8*4), R12")
	a.p("MOVQ prefetch+16(FP), R10")
	a.p("MOVQ act+32(FP), R14")
	a.p("MOVQ blocks+48(FP), CX")
	if y != nil {
		a.p("MOVQ s1+72(FP), R9")
		a.p("MOVQ R9, 48(SP)")
		a.p("VXORPS Y1, Y1, Y1")
		for t := 0; T > 1 && t < T; t++ {
			a.p("VMOVUPS Y1, %d(SP)", 64+32*t)
		}
	}

	a.label(name + "_block")
	for t := 0; t < T; t++ {
		a.p("VMOVDQU %d(R14), Y%d", q80BlockBytes*t, 12+t)
	}
	// row computes row r's products with the T tokens from its weights
	// in Y8: into the pair's register (even rows) or added to it by
	// vphaddd (odd rows). A missing row (zero weights) reads no memory.
	row := func(r int, missing bool) {
		p := r / 2
		for t := 0; t < T; t++ {
			dst := pair(p, t)
			if r%2 == 1 {
				dst = 9
			}
			y := 12 + t
			if q8 {
				if missing {
					a.p("VPXOR Y9, Y9, Y9")
				} else {
					a.p("VPSIGNB %s, Y%d, Y9", q80RowAddr(2, r), y)
				}
				y = 9
			}
			a.p("VPMADDUBSW Y%d, Y8, Y%d", y, dst)
			a.p("VPMADDWD Y14, Y%d, Y%d", dst, dst)
			if r%2 == 1 {
				a.p("VPHADDD Y9, Y%d, Y%d", pair(p, t), pair(p, t))
			}
		}
	}
	// load puts row r's weights in Y8 — Q4_0's nibbles unpacked (values
	// 0-15 in the low half, 16-31 in the high half: the order of y), Q8_0's
	// absolute values — and adds its scale.
	load := func(r int) {
		if q8 {
			a.p("VPABSB %s, Y8", q80RowAddr(2, r))
		} else {
			a.p("VMOVDQU %s, X8", q80RowAddr(qs, r))
			a.p("VPSRLW $4, X8, X9")
			a.p("VINSERTI128 $1, X9, Y8, Y8")
			a.p("VPAND Y15, Y8, Y8")
		}
		q80RowScale(a, r)
		if y != nil {
			a.p("MOVW %s, R9", q80RowAddr(2, r))
			a.p("MOVW R9, %d(SP)", 32+2*r)
		}
	}
	a.p("CMPQ R15, $8")
	a.p("JL %s_part", name)
	a.p("XORL BX, BX")
	for r := 0; r < 8; r++ {
		load(r)
		row(r, false)
	}
	a.p("JMP %s_loaded", name)
	// A last row block of fewer than eight rows: the missing rows'
	// weights and scales are zero, their lanes never stored.
	a.label(name + "_part")
	a.p("XORL AX, AX")
	a.p("XORL BX, BX")
	if y != nil {
		a.p("MOVQ AX, 32(SP)")
		a.p("MOVQ AX, 40(SP)")
	}
	for r := 0; r < 8; r++ {
		a.p("CMPQ R15, $%d", r)
		a.p("JLE %s_zero%d", name, r)
		load(r)
		row(r, false)
		a.p("JMP %s_row%d", name, r)
		a.label(fmt.Sprintf("%s_zero%d", name, r))
		a.p("VPXOR Y8, Y8, Y8")
		row(r, true)
		a.label(fmt.Sprintf("%s_row%d", name, r))
	}
	a.label(name + "_loaded")
	// Prefetch every other Q4_0 block (36 bytes a row: each line once or
	// twice), every Q8_0 block.
	if !q8 {
		a.p("TESTQ $1, CX")
		a.p("JZ %s_nopf", name)
	}
	q80RowPrefetch(a)
	a.label(name + "_nopf")
	a.p("VMOVQ AX, X8")
	a.p("VPINSRQ $1, BX, X8, X8")
	a.p("VCVTPH2PS X8, Y8")
	if y != nil {
		a.p("MOVQ 48(SP), R9")
	}
	for t := 0; t < T; t++ {
		q0, q1, q2, q3 := pair(0, t), pair(1, t), pair(2, t), pair(3, t)
		// Rows 0-3 (q0) and 4-7 (q2), each half of the lanes a partial
		// sum; then the halves added: lane r = row r's block sum.
		a.p("VPHADDD Y%d, Y%d, Y%d", q1, q0, q0)
		a.p("VPHADDD Y%d, Y%d, Y%d", q3, q2, q2)
		a.p("VPERM2I128 $0x20, Y%d, Y%d, Y%d", q2, q0, q1)
		a.p("VPERM2I128 $0x31, Y%d, Y%d, Y%d", q2, q0, q3)
		a.p("VPADDD Y%d, Y%d, Y%d", q3, q1, q1)
		if !q8 && y == nil {
			a.p("VPBROADCASTD %d(R14), Y%d", q80BlockBytes*t+q80BlockOffset, q3)
			a.p("VPSRAD $4, Y%d, Y%d", q3, q3)
			a.p("VPADDD Y%d, Y%d, Y%d", q3, q1, q1)
		}
		a.p("VCVTDQ2PS Y%d, Y%d", q1, q1)
		a.p("VBROADCASTSS %d(R14), Y9", q80BlockBytes*t+q80BlockScale)
		a.p("VMULPS Y9, Y8, Y9")
		a.p("VFMADD231PS Y9, Y%d, Y%d", q1, facc(t))
		if y != nil { // Y(q0) and Y(q2) are free after the tree
			a.p("VCVTPH2PS 32(SP), Y%d", q0)
			minsStep(t, q0, q2)
		}
	}
	if y != nil {
		a.p("ADDQ $%d, R9", 4*T)
		a.p("MOVQ R9, 48(SP)")
	}
	a.p("ADDQ $%d, DI", bsz)
	a.p("ADDQ $%d, R12", bsz)
	a.p("ADDQ R11, R14")
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
	for t := 0; y != nil && t < T; t++ {
		if T == 1 {
			a.p("VADDPS Y1, Y%d, Y%d", facc(t), facc(t))
		} else {
			a.p("VADDPS %d(SP), Y%d, Y%d", 64+32*t, facc(t), facc(t))
		}
	}

	// Store token t's eight results at dst + t·ld.
	a.p("MOVQ DX, R10")
	a.p("MOVQ ldBytes+64(FP), R9")
	a.p("CMPQ R15, $8")
	a.p("JL %s_partstore", name)
	q80StoreTokens(a, T, facc(0), "", "R10")
	a.p("ADDQ $32, DX")
	a.p("LEAQ (SI)(R8*8), SI")
	a.p("SUBQ $8, R15")
	a.p("JNZ %s_rows", name)
	a.p("VZEROUPPER")
	a.p("RET")
	// Fewer than eight rows: through the stack, R15 values per token.
	a.label(name + "_partstore")
	for t := 0; t < T; t++ {
		a.p("VMOVUPS Y%d, 0(SP)", facc(t))
		a.p("XORQ CX, CX")
		a.label(fmt.Sprintf("%s_partcopy%d", name, t))
		a.p("MOVL (SP)(CX*4), AX")
		a.p("MOVL AX, (R10)(CX*4)")
		a.p("INCQ CX")
		a.p("CMPQ CX, R15")
		a.p("JL %s_partcopy%d", name, t)
		if t+1 < T {
			a.p("ADDQ R9, R10")
		}
	}
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// The packed layout of Q4_0 weights (tensor.Pack, weights in private
// memory): per block of eight rows and block of 32 columns, 144 bytes —
// four 32-byte vectors, vector m holding bytes 4m..4m+3 of the eight rows'
// 16 nibble bytes (row r at 4r), then the eight rows' f16 scales. The
// nibbles stay packed in memory (decode streams the file's bytes, no
// more); a mask and a shift per vector give dword k = values 4k..4k+3 of
// the eight rows in Yk, so that a token's 4-byte groups multiply all eight
// rows at once, with no transpose, no scale gather and no vphaddd tree.
const q40PackedBlock = 8 * 18

// The packed layout of Q8_0 weights for the AVX2 kernels: per block of
// eight rows and block of 32 columns, 272 bytes — eight 32-byte vectors,
// vector k holding dword k (values 4k..4k+3) of the eight rows, as signed
// bytes (vpmaddubsw takes |w| and y·sign(w): the VNNI layout's unsigned
// q+128 would overflow its int16 pairs), then the eight rows' f16 scales.
const q80AVX2PackedBlock = 8 * 34

// q40AVX2PackedKernel generates q40AVX2P_T, T ≤ 4 tokens on packed Q4_0
// weights: rowBlocks blocks of eight rows from w, the float steps of
// q40AVX2N_T (so packed and unpacked products are bit-identical).
//
// Per token and block: eight vpmaddubsw of the weights Yk against the
// token's dword k broadcast, added as int16 (each pair sum is at most
// 2·15·127 in size, eight of them < 2^15), one vpmaddwd to int32 lanes —
// lane r row r's sum —, the offset −8·Σy, and the fma.
//
// Registers: Y0-Y7 the block's weights; Y8 their scales; Y9-Y11 scratch
// (Y9 the nibble mask while unpacking); Y12+t token t's float accumulators.
// GPRs: DI the weights, R10 the prefetch distance, R15 row blocks left, R11
// blockStride, DX the row block's outputs, R9 ldBytes, R14 the block's
// activations, CX blocks left, R12/R13 scratch.
//
// Arguments: w *byte, prefetch, rowBlocks int, act *byte, blockStride,
// blocks int, dst *float32, ldBytes int.
//
// With q8 it generates q80AVX2P_T, the same on packed Q8_0 weights
// (q80AVX2PackedBlock): Y0-Y7 hold |w|, and per token and k vpsignb
// applies w's signs, read again from the block in L1, to the broadcast
// dword; the pairs (at most 2·127·127) go to int32 at once.
//
// With y (not nil) it generates <y.name>AVX2P_T, the same on packed
// weights of a type the VNNI level streams to Q8_0 (Q4_1, Q5_0, Q5_1,
// IQ4_NL), in the layout avx2PackedLayout gives it and with the float
// steps of its rows widened to Q8_0 (so the same bits as streamed or
// widened):
//
//   - Q5_0's and Q5_1's fifth bits are stored as bit planes, byte i of the
//     32 after the nibbles holding in bit k the fifth bit of vector k's
//     byte i: a word shift takes bit k to bit 4 of every byte (at most
//     four places left or three right, so no bit crosses into the next
//     byte's bit 4), a mask and an or put it on the nibbles: u = q+16
//     (0-31). Pairs of vpmaddubsw are then at most 2·31·127, so the int16
//     sums go to int32 after every four vectors, not eight; Q5_0's offset
//     is −16·Σy (the row layout's −128·Σy shifted right by 3).
//   - IQ4_NL's nibbles become its signed values by vpshufb from its
//     table (the widened rows' q), and the products are taken as Q8_0's
//     (with q8): |w| (here from the register, vpabsb again per token)
//     against y·sign(w), to int32 per vector; no offset.
//   - With minima (Q4_1, Q5_1): no offset, and per token and block m·s1
//     (s1 the activations' Q8_1 block sums, block-major for the T tokens,
//     one more argument) summed into zero, added at the end, as
//     q41AVX2N_T does. Token t's minima accumulator is Y(12+T+t) while one
//     is left, else in the frame; R13 the block's s1.
func q40AVX2PackedKernel(a *asm, d *decl, T int, q8 bool, y *q80DirectType) {
	name, typ, blk := fmt.Sprintf("q40AVX2P_%d", T), "Q4_0", q40PackedBlock
	sig, frame := "(w *byte, prefetch, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, ldBytes int)", "$0-64"
	if q8 {
		name, typ, blk = fmt.Sprintf("q80AVX2P_%d", T), "Q8_0", q80AVX2PackedBlock
	}
	mins, fifth, table := y != nil && y.mins, y != nil && y.qh >= 0, y != nil && y.table
	scales, minsAt := 128, 0
	if y != nil {
		name, typ = fmt.Sprintf("%sAVX2P_%d", y.name, T), y.typ
		blk, scales, minsAt = avx2PackedLayout(*y)
	}
	minsAcc := func(t int) (reg int, slot string) {
		if 12+T+t <= 15 {
			return 12 + T + t, ""
		}
		return 0, fmt.Sprintf("%d(SP)", 32*(12+T+t-16))
	}
	if mins {
		sig, frame = sig[:len(sig)-1]+", s1 *float32)", fmt.Sprintf("$%d-72", 32*max(0, 2*T-4))
	}
	text(a, d, fmt.Sprintf("%s computes rowBlocks × 8 rows × %d tokens of packed %s weights × Q8_0 activations (AVX2).", name, T, typ), name, sig, frame)
	facc := func(t int) int { return 12 + t }
	a.p("MOVQ w+0(FP), DI")
	a.p("MOVQ prefetch+8(FP), R10")
	a.p("MOVQ rowBlocks+16(FP), R15")
	a.p("MOVQ blockStride+32(FP), R11")
	a.p("MOVQ dst+48(FP), DX")
	a.p("MOVQ ldBytes+56(FP), R9")
	a.label(name + "_rows")
	for t := 0; t < T; t++ {
		a.p("VXORPS Y%d, Y%d, Y%d", facc(t), facc(t), facc(t))
	}
	if mins {
		a.p("VXORPS Y9, Y9, Y9")
		for t := 0; t < T; t++ {
			if reg, slot := minsAcc(t); slot == "" {
				a.p("VXORPS Y%d, Y%d, Y%d", reg, reg, reg)
			} else {
				a.p("VMOVUPS Y9, %s", slot)
			}
		}
		a.p("MOVQ s1+64(FP), R13")
	}
	a.p("MOVQ act+24(FP), R14")
	a.p("MOVQ blocks+40(FP), CX")
	a.label(name + "_block")
	// Every T prefetches (unlike the VNNI kernels at one or two tokens):
	// here the hardware prefetcher did not keep up with the packed Q8_0
	// stream at one token, which then ran no faster than the unpacked
	// kernels; with Q4_0 prefetching costs nothing measurable.
	{
		a.p("TESTQ R10, R10")
		a.p("JZ %s_nopf", name)
		a.p("LEAQ (DI)(R10*1), R12")
		for off := 0; off < blk; off += 64 {
			a.p("PREFETCHT1 %d(R12)", off)
		}
		a.label(name + "_nopf")
	}
	if q8 {
		for k := 0; k < 8; k++ {
			a.p("VPABSB %d(DI), Y%d", 32*k, k)
		}
		a.p("VCVTPH2PS 256(DI), Y8")
	} else {
		a.p("VPBROADCASTD q40Mask<>(SB), Y9")
		q40PackedNibbles(a, 9, "DI")
		if fifth {
			a.p("VPBROADCASTD q50Bit<>(SB), Y10")
			a.p("VMOVDQU 128(DI), Y11")
			for k := 0; k < 8; k++ {
				src := 8
				switch {
				case k < 4:
					a.p("VPSLLW $%d, Y11, Y8", 4-k)
				case k > 4:
					a.p("VPSRLW $%d, Y11, Y8", k-4)
				default:
					src = 11
				}
				a.p("VPAND Y10, Y%d, Y8", src)
				a.p("VPOR Y8, Y%d, Y%d", k, k)
			}
		}
		if table {
			a.p("VBROADCASTI128 iq4Table<>(SB), Y10")
			for k := 0; k < 8; k++ {
				a.p("VPSHUFB Y%d, Y10, Y%d", k, k)
			}
		}
		a.p("VCVTPH2PS %d(DI), Y8", scales)
	}
	for t := 0; t < T; t++ {
		base := q80BlockBytes * t
		for k := 0; k < 8; k++ {
			if fifth { // two int16 sums of four vectors each, Y11 and Y10
				acc := 11 - k/4
				if k%4 == 0 {
					a.p("VPBROADCASTD %d(R14), Y%d", base+4*k, acc)
					a.p("VPMADDUBSW Y%d, Y%d, Y%d", acc, k, acc)
					continue
				}
				a.p("VPBROADCASTD %d(R14), Y9", base+4*k)
				a.p("VPMADDUBSW Y9, Y%d, Y9", k)
				a.p("VPADDW Y9, Y%d, Y%d", acc, acc)
				if k == 7 {
					a.p("VPMADDWD q40Ones<>(SB), Y11, Y11")
					a.p("VPMADDWD q40Ones<>(SB), Y10, Y10")
					a.p("VPADDD Y10, Y11, Y11")
				}
				continue
			}
			a.p("VPBROADCASTD %d(R14), Y9", base+4*k)
			if q8 || table {
				if table {
					a.p("VPABSB Y%d, Y10", k)
					a.p("VPSIGNB Y%d, Y9, Y9", k)
					a.p("VPMADDUBSW Y9, Y10, Y10")
				} else {
					a.p("VPSIGNB %d(DI), Y9, Y9", 32*k)
					a.p("VPMADDUBSW Y9, Y%d, Y10", k)
				}
				a.p("VPMADDWD q40Ones<>(SB), Y10, Y10")
				if k == 0 {
					a.p("VMOVDQA Y10, Y11")
				} else {
					a.p("VPADDD Y10, Y11, Y11")
				}
				continue
			}
			if k == 0 {
				a.p("VPMADDUBSW Y9, Y%d, Y11", k)
				continue
			}
			a.p("VPMADDUBSW Y9, Y%d, Y10", k)
			a.p("VPADDW Y10, Y11, Y11")
		}
		if !q8 && !fifth && !table {
			a.p("VPMADDWD q40Ones<>(SB), Y11, Y11")
		}
		if !q8 && !mins && !table {
			shift := 4 // −8·Σy
			if fifth {
				shift = 3 // −16·Σy
			}
			a.p("VPBROADCASTD %d(R14), Y9", base+q80BlockOffset)
			a.p("VPSRAD $%d, Y9, Y9", shift)
			a.p("VPADDD Y9, Y11, Y11")
		}
		a.p("VCVTDQ2PS Y11, Y11")
		a.p("VBROADCASTSS %d(R14), Y9", base+q80BlockScale)
		a.p("VMULPS Y9, Y8, Y9")
		a.p("VFMADD231PS Y9, Y11, Y%d", facc(t))
		if mins {
			a.p("VCVTPH2PS %d(DI), Y10", minsAt)
			a.p("VBROADCASTSS %d(R13), Y9", 4*t)
			if reg, slot := minsAcc(t); slot == "" {
				a.p("VFMADD231PS Y9, Y10, Y%d", reg)
			} else {
				a.p("VMULPS Y9, Y10, Y9")
				a.p("VADDPS %s, Y9, Y9", slot)
				a.p("VMOVUPS Y9, %s", slot)
			}
		}
	}
	if mins {
		a.p("ADDQ $%d, R13", 4*T)
	}
	a.p("ADDQ $%d, DI", blk)
	a.p("ADDQ R11, R14")
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
	for t := 0; mins && t < T; t++ {
		if reg, slot := minsAcc(t); slot == "" {
			a.p("VADDPS Y%d, Y%d, Y%d", reg, facc(t), facc(t))
		} else {
			a.p("VADDPS %s, Y%d, Y%d", slot, facc(t), facc(t))
		}
	}
	a.p("MOVQ DX, R13")
	q80StoreTokens(a, T, facc(0), "", "R13")
	a.p("ADDQ $32, DX")
	nextOrReturn(a, "R15", name+"_rows")
}

// q40PackedLoadAt loads a packed Q4_0 block of eight rows at register base
// (q40PackedBlock) with the nibble mask in Y(mask): dword k of the eight
// rows' unsigned nibbles in Yk, their scales in Y8.
func q40PackedLoadAt(a *asm, mask int, base string) {
	q40PackedNibbles(a, mask, base)
	a.p("VCVTPH2PS 128(%s), Y8", base)
}

// q40PackedNibbles loads the nibbles of a packed block of eight rows at
// register base with the nibble mask in Y(mask): dword k of the eight
// rows' values in Yk.
func q40PackedNibbles(a *asm, mask int, base string) {
	for m := 0; m < 4; m++ {
		a.p("VMOVDQU %d(%s), Y%d", 32*m, base, m+4)
		a.p("VPAND Y%d, Y%d, Y%d", mask, m+4, m)
		a.p("VPSRLW $4, Y%d, Y%d", m+4, m+4)
		a.p("VPAND Y%d, Y%d, Y%d", mask, m+4, m+4)
	}
}

// avx2PackedLayout is the packed layout of a block of eight rows of type y
// for the AVX2 level's kernels (tensor.Pack; the same size as the rows):
// Q4_0's 128 bytes of nibbles, then Q5_0's and Q5_1's 32 bytes of fifth
// bits as bit planes, the eight rows' f16 scales at scales, and Q4_1's and
// Q5_1's f16 minima at mins.
func avx2PackedLayout(y q80DirectType) (blk, scales, mins int) {
	scales = 128
	if y.qh >= 0 {
		scales += 32
	}
	if y.mins {
		mins = scales + 16
	}
	return 8 * y.size, scales, mins
}

// iq4NLAVX2UnpackKernel generates iq4NLAVX2U, which writes blocks packed
// IQ4_NL blocks of eight rows (src, the layout of iq4NLAVX2P_T) as the
// packed Q8_0 blocks of the AVX2 level (dst, q80AVX2PackedBlock): the
// nibbles through the table, vector k to vector k, and the scales. A
// prompt's products then pass over its rows with the Q8_0 kernels, whose
// per-token steps are fewer (w's signs from memory, |w| loaded once).
func iq4NLAVX2UnpackKernel(a *asm, d *decl) {
	const name = "iq4NLAVX2U"
	text(a, d, name+" writes blocks packed IQ4_NL blocks of eight rows from src as packed Q8_0 blocks of the AVX2 level to dst.", name, "(src *byte, blocks int, dst *byte)", "$0-24")
	a.p("MOVQ src+0(FP), DI")
	a.p("MOVQ blocks+8(FP), CX")
	a.p("MOVQ dst+16(FP), SI")
	a.p("VPBROADCASTD q40Mask<>(SB), Y9")
	a.p("VBROADCASTI128 iq4Table<>(SB), Y10")
	a.label(name + "_block")
	q40PackedNibbles(a, 9, "DI")
	for k := 0; k < 8; k++ {
		a.p("VPSHUFB Y%d, Y10, Y%d", k, k)
		a.p("VMOVDQU Y%d, %d(SI)", k, 32*k)
	}
	a.p("VMOVDQU 128(DI), X8")
	a.p("VMOVDQU X8, 256(SI)")
	a.p("ADDQ $%d, DI", q40PackedBlock)
	a.p("ADDQ $%d, SI", q80AVX2PackedBlock)
	nextOrReturn(a, "CX", name+"_block")
}

// q40AVX2Data emits the constants of the packed kernels: the nibble mask
// and int16 ones (a full vector: vpmaddwd's memory operand).
func q40AVX2Data(a *asm) {
	a.b.WriteString("DATA q40Mask<>+0(SB)/4, $0x0f0f0f0f\nGLOBL q40Mask<>(SB), RODATA|NOPTR, $4\n\n")
	a.b.WriteString("DATA q50Bit<>+0(SB)/4, $0x10101010\nGLOBL q50Bit<>(SB), RODATA|NOPTR, $4\n\n")
	for i := 0; i < 4; i++ {
		fmt.Fprintf(&a.b, "DATA q40Ones<>+%d(SB)/8, $0x0001000100010001\n", 8*i)
	}
	a.b.WriteString("GLOBL q40Ones<>(SB), RODATA|NOPTR, $32\n\n")
}
