package main

import "fmt"

// The packed Q4_K and Q5_K layouts (matrix.go, packK45): per block of
// eight rows and block b of 256 columns, 8·144 (8·176) bytes at b times
// that, the bytes of the eight rows' blocks rearranged so that a vector
// lane is a row: vector 8c+k (c = 0..3, k = 0..7) holds bytes 4k..4k+3 of
// the rows' qs chunk c (row r at 4r: values 4k..4k+3 of sub-block 2c in
// the low nibbles, of sub-block 2c+1 in the high ones); for Q5_K then
// eight vectors of the rows' qh dwords (bit j of a byte the fifth bit of
// sub-block j's value); then three vectors of the rows' 12 scale bytes
// (dword i of each row at 4r), then the rows' f16 d and dmin.
// k45PrefetchBytes is how far ahead of its block the one-token kernel
// prefetches the weights.
const k45PrefetchBytes = 8192

type k45Layout struct {
	bytes, qh, scales, d, dmin int
}

func k45PackedLayout(q5 bool) k45Layout {
	if q5 {
		return k45Layout{bytes: 8 * 176, qh: 1024, scales: 1280, d: 1376, dmin: 1392}
	}
	return k45Layout{bytes: 8 * 144, scales: 1024, d: 1120, dmin: 1136}
}

// k45Name is the packed Q4_K (or Q5_K) kernel's name with suffix, and
// its type's name.
func k45Name(suffix string, q5 bool) (name, typ string) {
	if q5 {
		return "q5K" + suffix, "Q5_K"
	}
	return "q4K" + suffix, "Q4_K"
}

// q4KPackedKernel generates q4KVNNIP (q5KVNNIP), packed Q4_K (Q5_K)
// weights × Q8_K activations at the VNNI level, for groups of eight rows
// (a lane each) and up to 16 tokens, whose count is an argument: the
// weights of a sub-block are unpacked once for all tokens (Q5_K's fifth
// bits ORed in), then each token's 32 activation bytes meet them in eight
// vpdpbusd (its dwords broadcast), the product times the rows' scales
// (vpmulld) adds to the token's block sum (in the frame), and after the
// block the mins' products with the activations' 16-value sums (vpdpwssd)
// and the float steps of kExactSteps, per row, into the outputs. The
// integer sums are exact, so the results are the row kernels' and the
// portable kernel's bits.
func q4KPackedKernel(a *asm, d *decl, q5 bool) {
	name, typ := k45Name("VNNIP", q5)
	l := k45PackedLayout(q5)
	text(a, d, name+" computes groups × 8 rows × tokens (at most 16) of packed "+typ+" weights × Q8_K activations (VNNI).", name,
		"(w *byte, groups int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int, tokens int)",
		"$512-96")
	// Y28: 0x0f bytes, Y29: 0x3f dwords, Y15: 0x10 bytes (Q5_K); Y16-Y23
	// the sub-block's weights, then the mins; Y24 the sub-block's scales;
	// Y30, Y31 d, dmin; Y14 scratch.
	k45Consts(a, q5)
	packedGroupStart(a, name)
	for j := 0; j < 8; j++ {
		k45Weights(a, l, q5, j)
		q4KPackedScale(a, l, j, false, 24, 25)
		sub32TokenLoop(a, name, j)
	}
	k45BlockSteps(a, l, name)
	packedGroupEnd(a, name)
}

// sub32TokenLoop emits the multi-token packed kernels' loop over the
// tokens for 32-value sub-block j: each token's 32 activation bytes meet
// the eight rows' values in Y16-Y23 in eight vpdpbusd (its dwords
// broadcast), and the product times the rows' scales in Y24 adds to the
// token's block sum in the frame (sets it, for the first sub-block).
func sub32TokenLoop(a *asm, name string, j int) {
	tokenLoop(a, fmt.Sprintf("%s_sub%d", name, j), func() {
		a.p("MOVQ BX, R11")
		a.p("LEAQ 0(SP), R13")
	}, func() {
		a.p("VPXORD Y25, Y25, Y25")
		for k := 0; k < 8; k++ {
			a.p("VPDPBUSD.BCST %d(R11), Y%d, Y25", 32*j+4*k, 16+k)
		}
		a.p("VPMULLD Y24, Y25, Y25")
		if j > 0 {
			a.p("VPADDD (R13), Y25, Y25")
		}
		a.p("VMOVDQU32 Y25, (R13)")
	}, func() {
		a.p("ADDQ yStride+24(FP), R11")
		a.p("ADDQ $32, R13")
	})
}

// k45Weights sets Y16-Y23 to the eight dwords of sub-block j's values of
// the eight rows at SI (Q5_K's fifth bits from its qh vectors, with 0x10
// bytes in Y15 and Y14 scratch); Y28 holds 0x0f bytes.
func k45Weights(a *asm, l k45Layout, q5 bool, j int) {
	c, high := j/2, j%2 == 1
	for k := 0; k < 8; k++ {
		off := 32 * (8*c + k)
		if high {
			a.p("VPSRLW $4, %d(SI), Y%d", off, 16+k)
			a.p("VPANDD Y%d, Y28, Y%d", 16+k, 16+k)
		} else {
			a.p("VPANDD %d(SI), Y28, Y%d", off, 16+k)
		}
		if q5 { // bit j of the qh bytes to bit 4 (16-bit shifts move no other bit there)
			switch qh := l.qh + 32*k; {
			case j < 4:
				a.p("VPSLLW $%d, %d(SI), Y14", 4-j, qh)
			case j > 4:
				a.p("VPSRLW $%d, %d(SI), Y14", j-4, qh)
			default:
				a.p("VMOVDQU32 %d(SI), Y14", qh)
			}
			a.p("VPTERNLOGD $0xf8, Y15, Y14, Y%d", 16+k) // |= Y14 & 0x10
		}
	}
}

// k45Consts loads the packed kernels' constants: Y28 0x0f bytes, Y29 0x3f
// dwords, for Q5_K Y15 0x10 bytes.
func k45Consts(a *asm, q5 bool) {
	if q5 {
		a.p("MOVL $0x10101010, CX")
		a.p("VPBROADCASTD CX, Y15")
	}
	a.p("MOVL $0x0f0f0f0f, CX")
	a.p("VPBROADCASTD CX, Y28")
	a.p("MOVL $0x3f, CX")
	a.p("VPBROADCASTD CX, Y29")
}

// k45MinPairs sets Y16-Y23 to the eight rows' mins of sub-blocks 0-7 as
// int16 pairs (m, m), for vpdpwssd against the dwords of bs, which hold the
// two 16-value sums of a sub-block.
func k45MinPairs(a *asm, l k45Layout) {
	for j := 0; j < 8; j++ {
		q4KPackedScale(a, l, j, true, 16+j, 25)
		a.p("VPSLLD $16, Y%d, Y25", 16+j)
		a.p("VPORD Y25, Y%d, Y%d", 16+j, 16+j)
	}
}

// q4KPackedKernel1 generates q4KVNNIP1 (q5KVNNIP1): q4KVNNIP for one token
// (decode), the sums in registers and each sub-block's eight vpdpbusd in
// two chains, so that a block's latency does not hold up the stream. The
// same integer sums and float steps, so the same bits.
func q4KPackedKernel1(a *asm, d *decl, q5 bool) {
	name, typ := k45Name("VNNIP1", q5)
	l := k45PackedLayout(q5)
	text(a, d, name+" computes groups × 8 rows × one token of packed "+typ+" weights × Q8_K activations (VNNI).", name,
		"(w *byte, groups int, y *int8, d *float32, bs *int16, nb int, dst *float32)", "$0-56")
	// Y0 the outputs, Y1 the block's sum, Y2-Y5 partial sums; Y24 scales,
	// Y26, Y27 scratch; Y30, Y31 d, dmin.
	k45Consts(a, q5)
	oneTokenGroupStart(a, name, l.bytes)
	for j := 0; j < 8; j++ {
		k45Weights(a, l, q5, j)
		q4KPackedScale(a, l, j, false, 24, 25)
		sub32OneToken(a, j)
	}
	k45MinPairs(a, l)
	a.p("VCVTPH2PS %d(SI), Y30", l.d)
	a.p("VCVTPH2PS %d(SI), Y31", l.dmin)
	a.p("VPXORD Y4, Y4, Y4")
	a.p("VPXORD Y5, Y5, Y5")
	for j := 0; j < 8; j++ {
		a.p("VPDPWSSD.BCST %d(DX), Y%d, Y%d", 4*j, 16+j, 4+j%2)
	}
	a.p("VPADDD Y5, Y4, Y4")
	k45Steps(a, 4, "Y1", "(R8)", 1)
	a.p("VADDPS Y1, Y0, Y0")
	k45NextBlock(a, l, name)
	a.p("VMOVUPS Y0, (AX)")
	packedGroupEnd(a, name)
}

// oneTokenGroupStart begins the one-token packed kernels of 32-value
// sub-blocks (the arguments of kPacked1Fn): SI the weights, AX the
// outputs, then per group of eight rows Y0 zeroed and BX, R8, DX, CX set
// to the activations, their scales, their sums and the blocks, at the
// block loop's label, where a block of bytes is prefetched ahead.
func oneTokenGroupStart(a *asm, name string, bytes int) {
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ dst+48(FP), AX")
	a.label(name + "_group")
	a.p("VPXORD Y0, Y0, Y0")
	a.p("MOVQ y+16(FP), BX")
	a.p("MOVQ d+24(FP), R8")
	a.p("MOVQ bs+32(FP), DX")
	a.p("MOVQ nb+40(FP), CX")
	a.label(name + "_block")
	for off := 0; off < bytes; off += 64 {
		a.p("PREFETCHT0 %d(SI)", k45PrefetchBytes+off)
	}
}

// sub32OneToken adds to the block's sum in Y1 (sets it, for the first
// sub-block) 32-value sub-block j's products for one token: its activation
// dwords at BX against the rows' values in Y16-Y23 in two vpdpbusd chains
// (Y2, Y3), times the rows' scales in Y24.
func sub32OneToken(a *asm, j int) {
	a.p("VPXORD Y2, Y2, Y2")
	a.p("VPXORD Y3, Y3, Y3")
	for k := 0; k < 8; k++ {
		a.p("VPDPBUSD.BCST %d(BX), Y%d, Y%d", 32*j+4*k, 16+k, 2+k%2)
	}
	a.p("VPADDD Y3, Y2, Y2")
	if j == 0 {
		a.p("VPMULLD Y24, Y2, Y1")
		return
	}
	a.p("VPMULLD Y24, Y2, Y2")
	a.p("VPADDD Y2, Y1, Y1")
}

// k45BlockSteps emits the end of a block of the multi-token packed
// Q4_K/Q5_K kernels: per token, the mins' products with its activations'
// sums and the float steps over its block sum in the frame, added to its
// outputs; then the move to the next block.
func k45BlockSteps(a *asm, l k45Layout, name string) {
	k45MinPairs(a, l)
	a.p("VCVTPH2PS %d(SI), Y30", l.d)
	a.p("VCVTPH2PS %d(SI), Y31", l.dmin)
	stepsLoop(a, name, func() {
		a.p("VPXORD Y25, Y25, Y25")
		for j := 0; j < 8; j++ {
			a.p("VPDPWSSD.BCST %d(R11), Y%d, Y25", 4*j, 16+j)
		}
		k45Steps(a, 25, "(R13)", "(R12)", 27)
		a.p("VADDPS (R14), Y27, Y27")
		a.p("VMOVUPS Y27, (R14)")
	})
	k45NextBlock(a, l, name)
}

// k45Steps emits a block's float steps for the eight rows, as
// kExactSteps takes them: Y[out] = (d·dy)·S − (dmin·dy)·M, each product
// rounded, from the integer sums M in Y[m] (clobbered) and S in s (a
// register or memory), dy at dy and the rows' d and dmin in Y30 and Y31;
// Y26 is scratch.
func k45Steps(a *asm, m int, s, dy string, out int) {
	a.p("VCVTDQ2PS Y%d, Y%d", m, m)
	a.p("VMULPS.BCST %s, Y31, Y26", dy) // dmin·dy
	a.p("VMULPS Y26, Y%d, Y%d", m, m)   // (dmin·dy)·M
	a.p("VCVTDQ2PS %s, Y%d", s, out)
	a.p("VMULPS.BCST %s, Y30, Y26", dy) // d·dy
	a.p("VMULPS Y26, Y%d, Y%d", out, out)
	a.p("VSUBPS Y%d, Y%d, Y%d", m, out, out)
}

// k45NextBlock moves the packed kernels' pointers on to the next block
// (weights SI, activations BX, their scales R8 and sums DX) and loops.
func k45NextBlock(a *asm, l k45Layout, name string) {
	a.p("ADDQ $%d, SI", l.bytes)
	a.p("ADDQ $256, BX")
	a.p("ADDQ $4, R8")
	a.p("ADDQ $32, DX")
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
}

// packedGroupStart begins the multi-token packed kernels (the arguments
// of kPackedFn): SI the weights, AX the outputs, then per group of eight
// rows the tokens' outputs zeroed (as the portable kernel's sums start)
// and BX, R8, DX, CX set to the activations, their scales, their sums
// and the blocks, at the block loop's label.
func packedGroupStart(a *asm, name string) {
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ dst+72(FP), AX")
	a.label(name + "_group")
	a.p("VPXORD Y0, Y0, Y0")
	tokenLoop(a, name+"_zero", func() {
		a.p("MOVQ AX, R14")
	}, func() {
		a.p("VMOVUPS Y0, (R14)")
	}, func() {
		a.p("ADDQ ldBytes+80(FP), R14")
	})
	a.p("MOVQ y+16(FP), BX")
	a.p("MOVQ d+32(FP), R8")
	a.p("MOVQ bs+48(FP), DX")
	a.p("MOVQ nb+64(FP), CX")
	a.label(name + "_block")
}

// packedGroupEnd moves the packed kernels' outputs on to the next group of
// eight rows, loops, and returns.
func packedGroupEnd(a *asm, name string) {
	a.p("ADDQ $32, AX")
	a.p("DECQ groups+8(FP)")
	a.p("JNZ %s_group", name)
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// stepsLoop emits the multi-token packed kernels' loop over the tokens
// after a block: R11 at the token's activation sums (bs), R12 its scales
// (d), R13 its block sum in the frame, R14 its outputs.
func stepsLoop(a *asm, name string, body func()) {
	tokenLoop(a, name+"_steps", func() {
		a.p("MOVQ DX, R11")
		a.p("MOVQ R8, R12")
		a.p("LEAQ 0(SP), R13")
		a.p("MOVQ AX, R14")
	}, body, func() {
		a.p("ADDQ bsStride+56(FP), R11")
		a.p("ADDQ dStride+40(FP), R12")
		a.p("ADDQ $32, R13")
		a.p("ADDQ ldBytes+80(FP), R14")
	})
}

// tokenLoop emits a loop over the tokens (R9 counts them down): setup
// before it, body and advance in it.
func tokenLoop(a *asm, label string, setup, body, advance func()) {
	setup()
	a.p("MOVQ tokens+88(FP), R9")
	a.label(label)
	body()
	advance()
	a.p("DECQ R9")
	a.p("JNZ %s", label)
}

// q4KPackedScale sets Y[dst] to the 6-bit scale (or min) of sub-block j of
// each of the eight rows, a dword each, from the packed scale vectors U0,
// U1 (scale and min bytes 0-3, their top two bits those of 4-7) and U2
// (the low four bits of scales and mins 4-7), as get_scale_min_k4 reads
// them; Y[tmp] is scratch.
func q4KPackedScale(a *asm, l k45Layout, j int, min bool, dst, tmp int) {
	u01, u2Shift := l.scales, 0
	if min {
		u01, u2Shift = l.scales+32, 4
	}
	u2 := l.scales + 64
	if j < 4 {
		if j == 0 {
			a.p("VPANDD %d(SI), Y29, Y%d", u01, dst)
			return
		}
		a.p("VPSRLD $%d, %d(SI), Y%d", 8*j, u01, dst)
		a.p("VPANDD Y%d, Y29, Y%d", dst, dst)
		return
	}
	i := j - 4
	if s := 8*i + u2Shift; s > 0 {
		a.p("VPSRLD $%d, %d(SI), Y%d", s, u2, dst)
	} else {
		a.p("VMOVDQU32 %d(SI), Y%d", u2, dst)
	}
	a.p("VPSRLD $%d, %d(SI), Y%d", 8*i+2, u01, tmp)  // top bits to 4-5
	a.p("VPTERNLOGD $0xe4, Y28, Y%d, Y%d", tmp, dst) // low nibble from dst, high from tmp
	a.p("VPANDD Y%d, Y29, Y%d", dst, dst)
}
