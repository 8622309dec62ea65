package main

// The packed IQ4_XS layout (matrix.go, kPackedOffset): per block of eight
// rows and block b of 256 columns, 8·136 bytes at b times that, the bytes
// of the eight rows' blocks rearranged so that a vector lane is a row: 32
// vectors of qs dwords (vector 4j+k holds bytes 4k..4k+3 of each row's 16
// index bytes of sub-block j, row r at 4r: values 4k..4k+3 of the
// sub-block in the low nibbles, 16+4k..16+4k+3 in the high ones), one of
// the rows' scales_l dwords (sub-block j's low four scale bits at bit 4j),
// then the rows' scales_h (two bits a sub-block) and f16 d, eight of each.
const (
	iq4XSPackedBytes   = 8 * 136
	iq4XSPackedScalesL = 1024
	iq4XSPackedScalesH = 1056
	iq4XSPackedD       = 1072
)

// The products take the table's values plus 128 (iq4UTable of
// q80DirectData: unsigned, as vpdpbusd and TDPBSUD want their weights), so
// a sub-block's sum is Σ (v+128)·y = Σ v·y + 128·Σ y; after the block,
// 128·Σ_j ls_j·Σ y_j comes off, from the scales as int16 pairs against the
// activations' 16-value sums (vpdpwssd). Every sum is an exact integer, so
// the block's is dotIQ4XSRow's Σ ls_j·(v·y)_j, and its float step
// (d·dy)·S is taken as kExactSteps takes it: the results are the row
// kernels' and the portable kernel's bits.

// iq4XSConsts loads the packed kernels' constants: Y28 0x0f bytes, Y29
// 0x3f dwords, Y31 the unsigned table in both lanes, Y15 32 dwords, Y14 32
// words.
func iq4XSConsts(a *asm) {
	a.p("MOVL $0x0f0f0f0f, CX")
	a.p("VPBROADCASTD CX, Y28")
	a.p("MOVL $0x3f, CX")
	a.p("VPBROADCASTD CX, Y29")
	a.p("MOVL $32, CX")
	a.p("VPBROADCASTD CX, Y15")
	a.p("MOVL $0x00200020, CX")
	a.p("VPBROADCASTD CX, Y14")
	a.p("VBROADCASTI32X4 iq4UTable<>(SB), Y31")
}

// iq4XSBlockStart sets Y27 to the eight rows' scales_h as dwords shifted
// left by 4, so that sub-block j's two high scale bits are at bits 4-5 of
// Y27 shifted right by 2j.
func iq4XSBlockStart(a *asm) {
	a.p("VPMOVZXWD %d(SI), Y27", iq4XSPackedScalesH)
	a.p("VPSLLD $4, Y27, Y27")
}

// iq4XSWeights sets Y16-Y23 to the values plus 128 of sub-block j of the
// eight rows at SI: Y16+k values 4k..4k+3 (the low nibbles of qs vector
// 4j+k), Y20+k values 16+4k..16+4k+3 (its high nibbles), the order of the
// activation dwords 32j+4k (k = 0..7).
func iq4XSWeights(a *asm, j int) {
	for k := 0; k < 4; k++ {
		off := 32 * (4*j + k)
		a.p("VPANDD %d(SI), Y28, Y%d", off, 16+k)
		a.p("VPSRLW $4, %d(SI), Y%d", off, 20+k)
		a.p("VPANDD Y%d, Y28, Y%d", 20+k, 20+k)
		a.p("VPSHUFB Y%d, Y31, Y%d", 16+k, 16+k)
		a.p("VPSHUFB Y%d, Y31, Y%d", 20+k, 20+k)
	}
}

// iq4XSScale sets Y[dst] to the 6-bit scale ls+32 (0..63) of sub-block j of
// each of the eight rows, a dword each: bits 4j.. of scales_l and two bits
// of scales_h (Y27, iq4XSBlockStart); Y[tmp] is scratch.
func iq4XSScale(a *asm, j, dst, tmp int) {
	if j == 0 {
		a.p("VMOVDQU32 %d(SI), Y%d", iq4XSPackedScalesL, dst)
		tmp = 27
	} else {
		a.p("VPSRLD $%d, %d(SI), Y%d", 4*j, iq4XSPackedScalesL, dst)
		a.p("VPSRLD $%d, Y27, Y%d", 2*j, tmp)
	}
	a.p("VPTERNLOGD $0xe4, Y28, Y%d, Y%d", tmp, dst) // low nibble from dst, high from tmp
	a.p("VPANDD Y%d, Y29, Y%d", dst, dst)
}

// iq4XSSignedScale sets Y24 to sub-block j's signed scales ls (−32..31).
func iq4XSSignedScale(a *asm, j int) {
	iq4XSScale(a, j, 24, 13)
	a.p("VPSUBD Y15, Y24, Y24")
}

// iq4XSPairs sets Y16-Y23 to the eight rows' scales of sub-blocks 0-7 as
// int16 pairs (ls, ls), for vpdpwssd against the dwords of bs, which hold
// the two 16-value sums of a sub-block; Y25 is scratch.
func iq4XSPairs(a *asm) {
	for j := 0; j < 8; j++ {
		iq4XSScale(a, j, 16+j, 25)
		a.p("VPSLLD $16, Y%d, Y25", 16+j)
		a.p("VPORD Y25, Y%d, Y%d", 16+j, 16+j)
		a.p("VPSUBW Y14, Y%d, Y%d", 16+j, 16+j)
	}
}

// iq4XSSteps turns a block's sums into its float step for the eight rows:
// Y[s] = (d·dy)·(S − 128·M), from the integer sums S in Y[s] and M in
// Y[m] (clobbered), dy at dy and the rows' d in Y30; Y26 is scratch.
func iq4XSSteps(a *asm, m, s int, dy string) {
	a.p("VPSLLD $7, Y%d, Y%d", m, m)
	a.p("VPSUBD Y%d, Y%d, Y%d", m, s, s)
	a.p("VCVTDQ2PS Y%d, Y%d", s, s)
	a.p("VMULPS.BCST %s, Y30, Y26", dy) // d·dy
	a.p("VMULPS Y26, Y%d, Y%d", s, s)
}

// iq4XSPackedKernel generates iq4XSVNNIP, packed IQ4_XS weights × Q8_K
// activations at the VNNI level, for groups of eight rows (a lane each) and
// up to 16 tokens, whose count is an argument: a sub-block's values are
// looked up once for all tokens, then each token's 32 activation bytes meet
// them in eight vpdpbusd (its dwords broadcast), and the product times the
// rows' scales (vpmulld) adds to the token's block sum (in the frame:
// sub32TokenLoop, as q4KVNNIP's).
func iq4XSPackedKernel(a *asm, d *decl) {
	const name = "iq4XSVNNIP"
	text(a, d, name+" computes groups × 8 rows × tokens (at most 16) of packed IQ4_XS weights × Q8_K activations (VNNI).", name,
		"(w *byte, groups int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int, tokens int)",
		"$512-96")
	// Y16-Y23 the sub-block's values, then the scale pairs; Y24 the
	// sub-block's scales; Y25 a token's products; Y27 scales_h; Y13, Y26
	// scratch; Y30 d; the constants of iq4XSConsts.
	iq4XSConsts(a)
	packedGroupStart(a, name)
	iq4XSBlockStart(a)
	for j := 0; j < 8; j++ {
		iq4XSWeights(a, j)
		iq4XSSignedScale(a, j)
		sub32TokenLoop(a, name, j)
	}
	iq4XSBlockSteps(a, name)
	packedGroupEnd(a, name)
}

// iq4XSBlockSteps emits the end of a block of the multi-token packed
// IQ4_XS kernels (the VNNI one and the AMX one): per token, the offset's
// products with its activations' sums and the float step over its block
// sum in the frame, added to its outputs; then the move to the next block.
func iq4XSBlockSteps(a *asm, name string) {
	iq4XSPairs(a)
	a.p("VCVTPH2PS %d(SI), Y30", iq4XSPackedD)
	stepsLoop(a, name, func() {
		a.p("VPXORD Y25, Y25, Y25")
		for j := 0; j < 8; j++ {
			a.p("VPDPWSSD.BCST %d(R11), Y%d, Y25", 4*j, 16+j)
		}
		a.p("VMOVDQU32 (R13), Y27")
		iq4XSSteps(a, 25, 27, "(R12)")
		a.p("VADDPS (R14), Y27, Y27")
		a.p("VMOVUPS Y27, (R14)")
	})
	k45NextBlock(a, k45Layout{bytes: iq4XSPackedBytes}, name)
}

// iq4XSPackedKernel1 generates iq4XSVNNIP1: iq4XSVNNIP for one token
// (decode), the sums in registers, each sub-block's eight vpdpbusd in two
// chains, and a prefetch ahead as q4KVNNIP1's. The same integer sums and
// float steps, so the same bits.
func iq4XSPackedKernel1(a *asm, d *decl) {
	const name = "iq4XSVNNIP1"
	text(a, d, name+" computes groups × 8 rows × one token of packed IQ4_XS weights × Q8_K activations (VNNI).", name,
		"(w *byte, groups int, y *int8, d *float32, bs *int16, nb int, dst *float32)", "$0-56")
	// Y0 the outputs, Y1 the block's sum, Y2-Y5 partial sums; the rest as
	// in iq4XSVNNIP.
	iq4XSConsts(a)
	oneTokenGroupStart(a, name, iq4XSPackedBytes)
	iq4XSBlockStart(a)
	for j := 0; j < 8; j++ {
		iq4XSWeights(a, j)
		iq4XSSignedScale(a, j)
		sub32OneToken(a, j)
	}
	iq4XSPairs(a)
	a.p("VCVTPH2PS %d(SI), Y30", iq4XSPackedD)
	a.p("VPXORD Y4, Y4, Y4")
	a.p("VPXORD Y5, Y5, Y5")
	for j := 0; j < 8; j++ {
		a.p("VPDPWSSD.BCST %d(DX), Y%d, Y%d", 4*j, 16+j, 4+j%2)
	}
	a.p("VPADDD Y5, Y4, Y4")
	iq4XSSteps(a, 4, 1, "(R8)")
	a.p("VADDPS Y1, Y0, Y0")
	k45NextBlock(a, k45Layout{bytes: iq4XSPackedBytes}, name)
	a.p("VMOVUPS Y0, (AX)")
	packedGroupEnd(a, name)
}

// iq4XSAMXPackedKernel generates iq4XSAMXP_16: iq4XSVNNIP for 16 tokens
// with each sub-block's 16 × 8 integer dot products taken by the tile unit
// (one TDPBSUD of K = 32, as q4KAMXP_16's: A the tokens' activations, B the
// rows' values plus 128 as iq4XSWeights leaves them), two sub-blocks in
// flight on the two tile sets; the offset and float steps after the block
// are iq4XSVNNIP's, so are the bits. Its arguments are iq4XSVNNIP's, with
// tokens 16, and the scratch. Registers: Z0-Z7 the block's integer sums of
// tokens 2p, 2p+1; Z8-Z11 products; the rest as in iq4XSVNNIP. GPRs as in
// iq4XSVNNIP, and DI the scratch, R10 yStride, R15 32.
func iq4XSAMXPackedKernel(a *asm, d *decl) {
	const name = "iq4XSAMXP_16"
	text(a, d, name+" computes groups × 8 rows × 16 tokens of packed IQ4_XS weights × Q8_K activations on the AMX tiles (tokens must be 16); the tiles must be permitted (requestAMX).", name,
		"(w *byte, groups int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int, tokens int, scratch *byte)",
		"$512-104")
	iq4XSConsts(a)
	amxKStart(a, "amxQ80Cfg")
	packedGroupStart(a, name)
	iq4XSBlockStart(a)
	weights := func(j int) { iq4XSWeights(a, j) }
	amxK45Products(a, weights, 0, 0)
	for j := 0; j < 8; j++ {
		if j < 7 {
			amxK45Products(a, weights, j+1, amxTiles*byte((j+1)%2))
		}
		amxK45Scale(a, func(j int) { iq4XSSignedScale(a, j) }, j, amxTiles*byte(j%2))
	}
	amxKGroupEnd(a, name, func() { iq4XSBlockSteps(a, name) })
}
