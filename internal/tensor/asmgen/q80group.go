package main

import "fmt"

// Q8_0 weight × Q8_0 activation kernels of the AVX512-VNNI level, built
// around groups of eight blocks (256 columns).
//
// Why groups: a block's integer dot product (32 products, |Σ| < 2^24) is
// exact whichever way its partial sums are added, and so is its conversion
// to float. The float work per block — convert, scale by dw·dy, accumulate —
// is what bounds a tile kernel when the weights come from cache, and done
// on a vector holding one block's eight partial sums it is eight times the
// work needed. These kernels first make one int32 lane per block (lane i of
// a group holds block 8g+i) and then do the float work once per eight
// blocks:
//
//	x = float32(S_b)            exact
//	D = dw_b · dy_b             f32 product of the two scales
//	acc[b mod 8] = fma(x, D, acc[b mod 8])
//
// and finally sum the eight lanes as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
// Every kernel of the family follows exactly these float steps, so a
// token's results are bit-identical whatever the tile (batch invariance).
// Blocks missing from a row's last group are padded: zero activations,
// scales and offsets, which add exactly zero.
//
// A last group of at most four blocks is narrower (see q80TailWidth): with
// width w ∈ {1, 2, 4} its blocks take 8/w lanes each (lane l of vector k
// holds block l/m's dword m·k + l mod m, m = 8/w), so a token costs w
// vpdpbusd instead of eight. Lanes then hold partial sums of a block — still
// exact integers — and the float steps above run on the lanes as they are,
// the block's scale product in each of its lanes. Model widths like 576
// (18 blocks: 2 full groups + 2) spend a quarter of their work on such a
// group. All kernels take the same steps there, so batch invariance holds.
//
// Two ways to get one lane per block:
//   - transposed (T ≥ 3 tokens): the activations are stored transposed per
//     group by the conversion (dword k of block 8g+i at lane i of vector k),
//     the kernel transposes each group of eight weight blocks the same way
//     (24 shuffles, shared by all T tokens), and eight vpdpbusd accumulate
//     all eight blocks of a token at once;
//   - natural (T ≤ 2, decode): the activations keep their natural layout,
//     each block gets its own vpdpbusd and the eight results are reduced
//     horizontally (vphaddd), cheaper than a transpose for one or two
//     tokens.
//
// Activations: g holds, per token and group, 320 bytes: the transposed
// quantized values (256), the offsets −128·Σy of the eight blocks (int32,
// for the weights made unsigned by xor 0x80) and their scales dy (f32).
// The natural kernels read y (natural quantized values) and the offsets and
// scales from g, and a narrow last group wholly from g.
//
// Arguments: w *byte, rowBytes, rows int, y *int8, yStride int, grp *byte,
// gStride, groups, last int, dst *float32, ldBytes int. groups = ⌈nb/8⌉,
// last = blocks in the final group (1..8). Results: dst[t*ld + r].
const q80GroupSig = "(w *byte, rowBytes, rows int, y *int8, yStride int, grp *byte, gStride, groups, last int, dst *float32, ldBytes int)"

// q80GroupBytes is the bytes of one token's group in g; q80GroupOffset and
// q80GroupScale the offsets of its int32 offsets and f32 scales.
const (
	q80GroupBytes  = 320
	q80GroupOffset = 256
	q80GroupScale  = 288
)

// Software prefetch of the weights. A row's weights are read once per call
// and come from DRAM when the matrix does not fit in the caches (the
// feed-forward and output matrices), and the hardware prefetcher alone does
// not keep far enough ahead of the transposed kernels, where each group of
// weights is followed by T tokens' worth of arithmetic. So every group
// iteration asks for the lines q80PrefetchT bytes ahead of the group it
// loads (rows are contiguous, so this runs into the next rows; prefetches
// past the matrix are harmless hints). Measured on SmolLM2-135M Q8_0 batch
// 16 decode (2 threads, EPYC): ~59 → ~50 CPU-ms per pass (median of 10),
// with 1024, 2048 and 4096 bytes within noise of each other.
//
// The natural kernels (1-2 tokens) are bandwidth bound and the hardware
// prefetcher serves them well: prefetching there (q80PrefetchN 512 or 1024)
// made batch 1 decode 5-10% slower, so it is off. Zero disables.
const (
	q80PrefetchT = 2048
	q80PrefetchN = 0
)

// q80Prefetch emits the prefetches of the weight lines dist bytes ahead of
// the group at DI. A group is 272 bytes: lines at 0, 64, …, 256 past it,
// with the next group's from 272 on, touch every line of the matrix.
func q80Prefetch(a *asm, dist int) {
	if dist == 0 {
		return
	}
	for off := 0; off < 8*34; off += 64 {
		a.p("PREFETCHT0 %d(DI)", dist+off)
	}
}

func q80BiasData(a *asm) {
	a.b.WriteString("DATA q80Bias<>+0(SB)/4, $0x80808080\nGLOBL q80Bias<>(SB), RODATA|NOPTR, $4\n\n")
	// vpermps indices spreading the scales of a narrow last group over
	// their lanes: widths 1, 2 and 4, 32 bytes each.
	off := 0
	for _, w := range []int{1, 2, 4} {
		for l := 0; l < 8; l++ {
			fmt.Fprintf(&a.b, "DATA q80TailIdx<>+%d(SB)/4, $%d\n", off, l/(8/w))
			off += 4
		}
	}
	fmt.Fprintf(&a.b, "GLOBL q80TailIdx<>(SB), RODATA|NOPTR, $%d\n\n", off)
}

// q80TailWidths are the widths of the narrow last groups; a last group of n
// blocks has width 1 (n = 1), 2 (n = 2), 4 (n = 3, 4) or 8 (the full path).
var q80TailWidths = []int{1, 2, 4}

// q80TailDispatch jumps to the narrow last-group sections when the group is
// the row's last (CX = 1) and holds at most four blocks (R9).
func q80TailDispatch(a *asm, name string) {
	a.p("CMPQ CX, $1")
	a.p("JNE %s_full", name)
	a.p("CMPQ R9, $1")
	a.p("JEQ %s_tail1", name)
	a.p("CMPQ R9, $2")
	a.p("JEQ %s_tail2", name)
	a.p("CMPQ R9, $4")
	a.p("JLE %s_tail4", name)
	a.label(name + "_full")
}

// q80Tail generates the narrow last-group sections of a kernel for T tokens:
// each loads the group's blocks in the lane order of its width into Y0..Y(w-1)
// (unsigned), their scales spread over their lanes into Y8, then runs the
// tokens exactly as the full group does, and jumps to the row's store.
// R13 walks the tokens' groups (it is free in both kernel kinds there); R9
// holds the group's block count; Y9-Y15 are scratch.
func q80Tail(a *asm, name string, T int) {
	for i, w := range q80TailWidths {
		a.label(fmt.Sprintf("%s_tail%d", name, w))
		a.p("XORL AX, AX")
		switch w {
		case 1:
			a.p("VMOVDQU 2(DI), Y0")
			q80Scale(a, 0)
		case 2:
			a.p("VMOVDQU 2(DI), Y9")
			a.p("VMOVDQU 36(DI), Y10")
			a.p("VPERM2I128 $0x20, Y10, Y9, Y0") // [b0 dwords 0-3 | b1 dwords 0-3]
			a.p("VPERM2I128 $0x31, Y10, Y9, Y1") // [b0 dwords 4-7 | b1 dwords 4-7]
			q80Scale(a, 0)
			q80Scale(a, 1)
		case 4:
			a.p("VPXOR Y12, Y12, Y12")
			for b := 0; b < 4; b++ {
				if b == 3 {
					a.p("CMPQ R9, $3")
					a.p("JEQ %s_tail4_loaded", name)
				}
				a.p("VMOVDQU %d(DI), Y%d", 34*b+2, 9+b)
				q80Scale(a, b)
			}
			a.label(name + "_tail4_loaded")
			// Transpose the 4×4 qwords: vector k = qword k of blocks 0-3.
			a.p("VPUNPCKLQDQ Y10, Y9, Y4")
			a.p("VPUNPCKHQDQ Y10, Y9, Y5")
			a.p("VPUNPCKLQDQ Y12, Y11, Y6")
			a.p("VPUNPCKHQDQ Y12, Y11, Y7")
			a.p("VPERM2I128 $0x20, Y6, Y4, Y0")
			a.p("VPERM2I128 $0x20, Y7, Y5, Y1")
			a.p("VPERM2I128 $0x31, Y6, Y4, Y2")
			a.p("VPERM2I128 $0x31, Y7, Y5, Y3")
		}
		a.p("VPBROADCASTD q80Bias<>(SB), Y15")
		for k := 0; k < w; k++ {
			a.p("VPXOR Y15, Y%d, Y%d", k, k)
		}
		a.p("VMOVQ AX, X8")
		a.p("VCVTPH2PS X8, Y8")
		a.p("VMOVDQU q80TailIdx<>+%d(SB), Y9", 32*i)
		a.p("VPERMPS Y8, Y9, Y8")
		a.p("MOVQ R14, R13")
		q80Tokens(a, "R13", w, T)
		a.p("JMP %s_store", name)
	}
}

// q80Tokens runs T tokens over the group's w weight vectors Y0..Y(w-1) and
// scales Y8, the tokens' groups at reg (advanced by gStride, R11). Y9-Y14
// are scratch.
//
// A token's vpdpbusd all add into one register, a chain of w dependent
// instructions of ~4 cycles each; keeping the two vpdpbusd ports busy then
// needs many tokens' chains waiting in the scheduler at once, more than it
// holds. Alternate vpdpbusd go to a second register, added to the first at
// the end (an exact integer sum, so results do not change): the 16-token
// kernel takes ~6% less time on SmolLM2's layer shapes (one thread, fastest
// of many layers; four chains were no better than two).
func q80Tokens(a *asm, reg string, w, T int) {
	for t := 0; t < T; t++ {
		ti := 9 + 3*(t%2)
		tj, td := ti+1, ti+2
		a.p("VMOVDQU %d(%s), Y%d", q80GroupOffset, reg, ti)
		if w < 4 {
			for k := 0; k < w; k++ {
				a.p("VPDPBUSD %d(%s), Y%d, Y%d", 32*k, reg, k, ti)
			}
		} else {
			a.p("VPXOR Y%d, Y%d, Y%d", tj, tj, tj)
			for k := 0; k < w; k++ {
				acc := ti
				if k%2 == 1 {
					acc = tj
				}
				a.p("VPDPBUSD %d(%s), Y%d, Y%d", 32*k, reg, k, acc)
			}
			a.p("VPADDD Y%d, Y%d, Y%d", tj, ti, ti)
		}
		a.p("VCVTDQ2PS Y%d, Y%d", ti, ti)
		a.p("VMULPS %d(%s), Y8, Y%d", q80GroupScale, reg, td)
		a.p("VFMADD231PS Y%d, Y%d, Y%d", td, ti, 16+t)
		if t+1 < T {
			a.p("ADDQ R11, %s", reg)
		}
	}
}

// q80GroupProlog opens the function with frame bytes of locals and loads
// the arguments shared by both kernel kinds.
func q80GroupProlog(a *asm, d *decl, name, doc string, frame int) {
	text(a, d, doc, name, q80GroupSig, fmt.Sprintf("$%d-88", frame))
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("MOVQ rows+16(FP), R15")
	a.p("MOVQ yStride+32(FP), R10")
	a.p("MOVQ gStride+48(FP), R11")
	a.p("MOVQ dst+72(FP), DX")
}

// q80GroupCount sets R9 to the number of blocks in the current group: 8, or
// last when CX (groups left) is 1.
func q80GroupCount(a *asm) {
	a.p("MOVQ $8, R9")
	a.p("MOVQ last+64(FP), R12")
	a.p("CMPQ CX, $1")
	a.p("CMOVQEQ R12, R9")
}

// q80Scale adds the f16 scale of block i of the group at DI to the packed
// scales: blocks 0-3 in AX, 4-7 in BX (BX must start at zero). R12 is
// scratch.
func q80Scale(a *asm, i int) {
	reg := "AX"
	if i >= 4 {
		reg = "BX"
	}
	if i%4 == 0 {
		a.p("MOVWLZX %d(DI), %s", 34*i, reg)
		return
	}
	a.p("MOVWLZX %d(DI), R12", 34*i)
	a.p("SHLQ $%d, R12", 16*(i%4))
	a.p("ORQ R12, %s", reg)
}

// q80Scales converts the packed scales into f32 lanes of Y(dst).
func q80Scales(a *asm, dst int) {
	a.p("VMOVQ AX, X%d", dst)
	a.p("VPINSRQ $1, BX, X%d, X%d", dst, dst)
	a.p("VCVTPH2PS X%d, Y%d", dst, dst)
}

// q80Sum4 sums the lanes of Y0..Y3 (tokens t..t+3) in the family's order
// into the four lanes of X0.
func q80Sum4(a *asm) {
	a.p("VHADDPS Y1, Y0, Y0")
	a.p("VHADDPS Y3, Y2, Y2")
	a.p("VHADDPS Y2, Y0, Y0")
	a.p("VEXTRACTF128 $1, Y0, X1")
	a.p("VADDPS X1, X0, X0")
}

// q80Sum1 sums the lanes of Y0 in the same order into lane 0 of X0.
func q80Sum1(a *asm) {
	a.p("VHADDPS Y0, Y0, Y0")
	a.p("VHADDPS Y0, Y0, Y0")
	a.p("VEXTRACTF128 $1, Y0, X1")
	a.p("VADDSS X1, X0, X0")
}

// q80Store reduces the float accumulators Y16..Y16+T-1 and stores them for
// the current row (DX), then moves to the next row.
func q80Store(a *asm, name string, T int) {
	a.label(name + "_store")
	q80RowStore(a, T)
	q80NextRow(a, name)
}

// q80RowStore reduces the float accumulators Y16..Y16+T-1 and stores them
// for the current row (DX), one token at a time.
func q80RowStore(a *asm, T int) {
	a.p("MOVQ DX, R12")
	// Each result at (R12), then R12 moves on by ld.
	q80SumRow(a, T, func(int) {
		a.p("VMOVSS X0, (R12)")
		a.p("ADDQ ldBytes+80(FP), R12")
		for j := 1; j < 4; j++ {
			a.p("VEXTRACTPS $%d, X0, (R12)", j)
			a.p("ADDQ ldBytes+80(FP), R12")
		}
	}, func(int) {
		a.p("VMOVSS X0, (R12)")
		a.p("ADDQ ldBytes+80(FP), R12")
	})
}

// q80SumRow sums the row's float accumulators Y16..Y16+T-1 in the family's
// order, four tokens at a time (q80Sum4) and the rest one by one (q80Sum1),
// and has store4(t) or store1(t) store tokens t.. from X0.
func q80SumRow(a *asm, T int, store4, store1 func(t int)) {
	t := 0
	for ; t+4 <= T; t += 4 {
		for j := 0; j < 4; j++ {
			a.p("VMOVAPS Y%d, Y%d", 16+t+j, j)
		}
		q80Sum4(a)
		store4(t)
	}
	for ; t < T; t++ {
		a.p("VMOVAPS Y%d, Y0", 16+t)
		q80Sum1(a)
		store1(t)
	}
}

// q80NextRow moves to the next row and loops, or returns after the last.
func q80NextRow(a *asm, name string) {
	a.p("ADDQ $4, DX")
	a.p("ADDQ R8, SI")
	a.p("DECQ R15")
	a.p("JNZ %s_row", name)
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// q80TransposedKernel generates the 1-row × T-token kernel on transposed
// activations (3 ≤ T ≤ 16).
//
// Registers: Y0-Y7 the group's weights transposed (lane i = block i, vector
// k = dword k), made unsigned; Y8 the weight scales; Y9-Y14 per-token
// scratch; Y15 the 0x80 bytes; Y16+t token t's float accumulator. During the
// transpose Y8-Y15 hold the loaded blocks and Y0-Y15 the stages; the row's
// store (q80TileStore) uses Y0-Y15.
// GPRs: SI row, DI group weights, R14 group activations, R10 token cursor,
// R11 gStride, CX groups left, R9 blocks in group, AX/BX/R12 scales.
// Frame: the store's tile of eight rows' results (q80TileFrame).
func q80TransposedKernel(a *asm, d *decl, T int) {
	name := fmt.Sprintf("q80VNNIT_%d", T)
	q80GroupProlog(a, d, name, fmt.Sprintf("%s computes rows × %d tokens of Q8_0 weights × Q8_0 activations in groups of 8 blocks, on transposed activations (VNNI).", name, T), q80TileFrame)
	q80TileRows(a)
	a.label(name + "_row")
	for t := 0; t < T; t++ {
		a.p("VPXORD Y%d, Y%d, Y%d", 16+t, 16+t, 16+t)
	}
	a.p("MOVQ SI, DI")
	a.p("MOVQ grp+40(FP), R14")
	a.p("MOVQ groups+56(FP), CX")
	a.label(name + "_group")
	q80GroupCount(a)
	q80TailDispatch(a, name)
	// Load the group's blocks (missing ones stay zero) and scales.
	for i := 1; i < 8; i++ {
		a.p("VPXOR Y%d, Y%d, Y%d", 8+i, 8+i, 8+i)
	}
	a.p("XORL BX, BX")
	for i := 0; i < 8; i++ {
		if i > 0 {
			a.p("CMPQ R9, $%d", i)
			a.p("JLE %s_loaded", name)
		}
		a.p("VMOVDQU %d(DI), Y%d", 34*i+2, 8+i)
		q80Scale(a, i)
	}
	a.label(name + "_loaded")
	q80Prefetch(a, q80PrefetchT)
	q80Transpose(a)
	a.p("VPBROADCASTD q80Bias<>(SB), Y15")
	for k := 0; k < 8; k++ {
		a.p("VPXOR Y15, Y%d, Y%d", k, k)
	}
	q80Scales(a, 8)
	// Tokens.
	a.p("MOVQ R14, R10")
	q80Tokens(a, "R10", 8, T)
	a.p("ADDQ $%d, DI", 8*34)
	a.p("ADDQ $%d, R14", q80GroupBytes)
	a.p("DECQ CX")
	a.p("JNZ %s_group", name)
	a.p("JMP %s_store", name)
	q80Tail(a, name, T)
	q80TileStore(a, name, T)
}

// q80NaturalKernel generates the 1-row × T-token kernel on natural
// activations (T ≤ 2): per block and token one vpdpbusd into its own
// register, then each half group of four blocks is reduced with vphaddd to
// [lo sums of blocks 0-3 | hi sums of blocks 0-3], and the two halves are
// recombined into one lane per block.
//
// Registers: Y(4t+j) the integer sums of token t, block j of the current
// half; Y8+t / Y10+t token t's reduced halves; Y12, Y13 scratch; Y14 the
// unsigned weights, then the scales; Y15 the 0x80 bytes; Y16+t the float
// accumulators. GPRs: as the transposed kernel, plus R13 the natural
// activations of the group and R10 yStride.
func q80NaturalKernel(a *asm, d *decl, T int) {
	name := fmt.Sprintf("q80VNNIN_%d", T)
	q80GroupProlog(a, d, name, fmt.Sprintf("%s computes rows × %d tokens of Q8_0 weights × Q8_0 activations in groups of 8 blocks, on natural activations (VNNI).", name, T), 0)
	a.p("VPBROADCASTD q80Bias<>(SB), Y15")
	a.label(name + "_row")
	for t := 0; t < T; t++ {
		a.p("VPXORD Y%d, Y%d, Y%d", 16+t, 16+t, 16+t)
	}
	a.p("MOVQ SI, DI")
	a.p("MOVQ y+24(FP), R13")
	a.p("MOVQ grp+40(FP), R14")
	a.p("MOVQ groups+56(FP), CX")
	sum := func(t, j int) int { return 4*t + j }
	yAddr := func(off, t int) string {
		if t == 0 {
			return fmt.Sprintf("%d(R13)", off)
		}
		return fmt.Sprintf("%d(R13)(R10*1)", off)
	}
	gAddr := func(off, t int) string {
		if t == 0 {
			return fmt.Sprintf("%d(R14)", off)
		}
		return fmt.Sprintf("%d(R14)(R11*1)", off)
	}
	zeroSums := func() {
		for t := 0; t < T; t++ {
			for j := 0; j < 4; j++ {
				a.p("VPXOR Y%d, Y%d, Y%d", sum(t, j), sum(t, j), sum(t, j))
			}
		}
	}
	reduceHalf := func(h int) {
		for t := 0; t < T; t++ {
			a.p("VPHADDD Y%d, Y%d, Y%d", sum(t, 1), sum(t, 0), sum(t, 0))
			a.p("VPHADDD Y%d, Y%d, Y%d", sum(t, 3), sum(t, 2), sum(t, 2))
			a.p("VPHADDD Y%d, Y%d, Y%d", sum(t, 2), sum(t, 0), 8+2*h+t)
		}
	}
	a.label(name + "_group")
	q80GroupCount(a)
	q80TailDispatch(a, name)
	q80Prefetch(a, q80PrefetchN)
	a.p("XORL BX, BX")
	zeroSums()
	for i := 0; i < 8; i++ {
		if i == 4 {
			a.label(name + "_halfa")
			reduceHalf(0)
			zeroSums()
			a.p("CMPQ R9, $4")
			a.p("JLE %s_halfb", name)
		} else if i > 0 {
			a.p("CMPQ R9, $%d", i)
			if i < 4 {
				a.p("JLE %s_halfa", name)
			} else {
				a.p("JLE %s_halfb", name)
			}
		}
		a.p("VPXOR %d(DI), Y15, Y14", 34*i+2)
		q80Scale(a, i)
		for t := 0; t < T; t++ {
			a.p("VPDPBUSD %s, Y14, Y%d", yAddr(32*i, t), sum(t, i%4))
		}
	}
	a.label(name + "_halfb")
	reduceHalf(1)
	q80Scales(a, 14)
	for t := 0; t < T; t++ {
		a.p("VPERM2I128 $0x20, Y%d, Y%d, Y12", 10+t, 8+t)
		a.p("VPERM2I128 $0x31, Y%d, Y%d, Y13", 10+t, 8+t)
		a.p("VPADDD Y13, Y12, Y12")
		a.p("VPADDD %s, Y12, Y12", gAddr(q80GroupOffset, t))
		a.p("VCVTDQ2PS Y12, Y12")
		a.p("VMULPS %s, Y14, Y13", gAddr(q80GroupScale, t))
		a.p("VFMADD231PS Y13, Y12, Y%d", 16+t)
	}
	a.p("ADDQ $%d, DI", 8*34)
	a.p("ADDQ $256, R13")
	a.p("ADDQ $%d, R14", q80GroupBytes)
	a.p("DECQ CX")
	a.p("JNZ %s_group", name)
	a.p("JMP %s_store", name)
	q80Tail(a, name, T)
	q80Store(a, name, T)
}

// q80Transpose transposes the 8×8 dwords of Y8..Y15 (block i in Y8+i) into
// Y0..Y7 (dword k of the eight blocks in Yk), through Y0-Y15.
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

// q80GroupsKernel generates q80GroupsAVX2, the activations' group layout of
// full groups (matmul.go, fillQ80Groups) with the kernels' own transpose:
// per group the eight blocks' dwords transposed, the offsets 128·s and the
// scales d. AVX2 only (it runs at the AVX2 level too).
func q80GroupsKernel(a *asm, d *decl) {
	const name, sig = "q80GroupsAVX2", "(grp *byte, q *int8, d *float32, s *int32, groups int)"
	text(a, d, name+" writes the Q8_0 group layout of groups full groups of eight blocks.", name, sig, "$0-40")
	a.p("MOVQ grp+0(FP), DI")
	a.p("MOVQ q+8(FP), SI")
	a.p("MOVQ d+16(FP), BX")
	a.p("MOVQ s+24(FP), DX")
	a.p("MOVQ groups+32(FP), CX")
	a.p("TESTQ CX, CX")
	a.p("JZ %s_done", name)
	a.label(name + "_group")
	for i := 0; i < 8; i++ {
		a.p("VMOVDQU %d(SI), Y%d", 32*i, 8+i)
	}
	q80Transpose(a)
	for k := 0; k < 8; k++ {
		a.p("VMOVDQU Y%d, %d(DI)", k, 32*k)
	}
	a.p("VMOVDQU (DX), Y0")
	a.p("VPSLLD $7, Y0, Y0")
	a.p("VMOVDQU Y0, %d(DI)", q80GroupOffset)
	a.p("VMOVDQU (BX), Y1")
	a.p("VMOVDQU Y1, %d(DI)", q80GroupScale)
	a.p("ADDQ $%d, DI", q80GroupBytes)
	a.p("ADDQ $256, SI")
	a.p("ADDQ $32, BX")
	a.p("ADDQ $32, DX")
	a.p("DECQ CX")
	a.p("JNZ %s_group", name)
	a.label(name + "_done")
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// A row's results belong to T different outputs dst[t*ld + r], T cache
// lines apart, and storing them one by one, T scattered 4-byte stores per
// row, cost the 16-token kernel ~4% of its time (a SmolLM2-135M layer's
// seven products, one thread, fastest of many: 479-485 µs; with the same
// stores all going to one line, wrong results, 462). So the transposed
// kernels collect the results of eight rows in a tile in their frame, a
// row's T results side by side (64 bytes a row), and then transpose it, 8×8
// floats at a time, into one 32-byte store per token of eight consecutive
// outputs (467-476 µs). Each result is summed exactly as before (q80Sum4,
// q80Sum1); only where it is stored changes. Rows after the last full block
// of eight are stored one at a time (q80RowStore).

// q80TileFrame is the transposed kernels' frame: the 8×16 float tile and,
// after it, the number of rows stored through it (rows &^ 7).
const (
	q80TileFrame  = 8*64 + 8
	q80TileRowsAt = 8 * 64
)

// q80TileRows stores rows &^ 7 in the frame.
func q80TileRows(a *asm) {
	a.p("MOVQ R15, R12")
	a.p("ANDQ $-8, R12")
	a.p("MOVQ R12, %d(SP)", q80TileRowsAt)
}

// q80TileStore stores the current row's results through the tile, or by
// itself when it is past the last full block of eight rows, then moves to
// the next row.
func q80TileStore(a *asm, name string, T int) {
	a.label(name + "_store")
	// R12 = the row's index in the call.
	a.p("MOVQ rows+16(FP), R12")
	a.p("SUBQ R15, R12")
	a.p("CMPQ R12, %d(SP)", q80TileRowsAt)
	a.p("JAE %s_single", name)
	a.p("ANDQ $7, R12")
	a.p("MOVQ R12, R13")
	a.p("SHLQ $6, R12")
	a.p("ADDQ SP, R12")
	q80SumRow(a, T, func(t int) {
		a.p("VMOVUPS X0, %d(R12)", 4*t)
	}, func(t int) {
		a.p("VMOVSS X0, %d(R12)", 4*t)
	})
	a.p("CMPQ R13, $7")
	a.p("JNE %s_next", name)
	// The tile is full: token t's results for the block's eight rows go to
	// dst from the block's first row (seven rows back) on.
	a.p("LEAQ -28(DX), R12")
	a.p("MOVQ ldBytes+80(FP), R13")
	for h := 0; 8*h < T; h++ {
		for i := 0; i < 8; i++ {
			a.p("VMOVUPS %d(SP), Y%d", 64*i+32*h, 8+i)
		}
		q80Transpose(a)
		for k := 0; k < 8 && 8*h+k < T; k++ {
			a.p("VMOVUPS Y%d, (R12)", k)
			if 8*h+k+1 < T {
				a.p("ADDQ R13, R12")
			}
		}
	}
	a.p("JMP %s_next", name)
	a.label(name + "_single")
	q80RowStore(a, T)
	a.label(name + "_next")
	q80NextRow(a, name)
}
