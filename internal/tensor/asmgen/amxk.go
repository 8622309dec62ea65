package main

import "fmt"

// The AMX kernels of packed Q4_K and Q5_K weights (q4KAMXP_16,
// q5KAMXP_16): q4KVNNIP for 16 tokens with each sub-block's 16 × 8
// integer dot products taken by the tile unit instead of 128 vpdpbusd.
//
// A sub-block is 32 values, so its products are one tile product of
// K = 32: A the 16 tokens' 32 activation bytes of the sub-block (rows
// yStride apart in the Q8_K layout), B the eight rows' unpacked values as
// k45Weights leaves them in Y16-Y23 (vector k, lane r: values 4k..4k+3 of
// row r: the transposed operand AMX wants), stored to scratch; TDPBSUD
// gives C, token t's row r at dword (t, r): the sub-block's exact integer
// sum Σ y·q, which q4KVNNIP's eight vpdpbusd give too. Its product with
// the rows' scale adds to the block's integer sums, two tokens a zmm
// register; after the block the mins and float steps are q4KVNNIP's. The
// integer sums being exact, the results are its bits, so a token's output
// does not depend on the batch it ran in.
//
// Two sub-blocks are in flight on the two tile sets of amxQ80Cfg (the
// same shapes: A 16 × 32 bytes, B 8 × 32, C 16 × 32): the tile unit takes
// sub-block j+1 while the vector unit scales j.

// The scratch of the Q4_K/Q5_K AMX kernels: per tile set, its B operand
// (8 vectors of 32 bytes) and its stored C (16 tokens × 32 bytes).
const (
	amxK45B            = 0
	amxK45C            = 2 * amxUnpackedBytes
	amxK45ScratchBytes = 2 * (amxUnpackedBytes + amxSumsBytes)
)

func amxK45BOff(s byte) int { return amxK45B + amxUnpackedBytes*int(s/amxTiles) }
func amxK45COff(s byte) int { return amxK45C + amxSumsBytes*int(s/amxTiles) }

// q4KAMXPackedKernel generates q4KAMXP_16 (q5KAMXP_16). Its arguments are
// q4KVNNIP's, with tokens 16, and the scratch.
//
// Registers: Z0-Z7 the block's integer sums of tokens 2p, 2p+1 (low,
// high half); Y16-Y23 the sub-block's values, after the block the mins;
// Z24 the sub-block's scales in both halves; Z8-Z11 products; Y28, Y29,
// Y15, Y14 as in q4KVNNIP. GPRs as in q4KVNNIP, and DI the scratch, R10
// yStride (A's stride), R15 32 (B's and C's).
func q4KAMXPackedKernel(a *asm, d *decl, q5 bool) {
	name, typ := k45Name("AMXP_16", q5)
	l := k45PackedLayout(q5)
	text(a, d, fmt.Sprintf("%s computes groups × 8 rows × 16 tokens of packed %s weights × Q8_K activations on the AMX tiles (tokens must be 16); the tiles must be permitted (requestAMX).", name, typ), name,
		"(w *byte, groups int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int, tokens int, scratch *byte)",
		"$512-104")
	k45Consts(a, q5)
	amxKStart(a, "amxQ80Cfg")
	packedGroupStart(a, name)
	weights := func(j int) { k45Weights(a, l, q5, j) }
	scale := func(j int) { q4KPackedScale(a, l, j, false, 24, 25) }
	amxK45Products(a, weights, 0, 0)
	for j := 0; j < 8; j++ {
		if j < 7 {
			amxK45Products(a, weights, j+1, amxTiles*byte((j+1)%2))
		}
		amxK45Scale(a, scale, j, amxTiles*byte(j%2))
	}
	amxKGroupEnd(a, name, func() { k45BlockSteps(a, l, name) })
}

// amxK45Products unpacks sub-block j of the eight rows at SI into tile
// set s's B (through scratch; weights(j) leaves them in Y16-Y23), loads
// the 16 tokens' activations of the sub-block (BX: the block's) as its A
// and sums their products into its C.
func amxK45Products(a *asm, weights func(j int), j int, s byte) {
	weights(j)
	b := amxK45BOff(s)
	for k := 0; k < 8; k++ {
		a.p("VMOVDQU32 Y%d, %d(DI)", 16+k, b+32*k)
	}
	amxKProduct(a, s, b, 32*j)
}

// amxK45Scale stores tile set s's C to scratch and adds its sums times the
// rows' scales of sub-block j (scale(j) leaves them in Y24) to the block's
// sums in Z0-Z7 (sets them, for the first sub-block).
func amxK45Scale(a *asm, scale func(j int), j int, s byte) {
	tc := s + amxTileC
	c := amxK45COff(s)
	amxInst(a, fmt.Sprintf("tilestored %s, tmm%d", amxMem("DI", "R15", c), tc), tilestoredBytes(tc, "DI", "R15", c))
	scale(j)
	a.p("VINSERTI64X4 $1, Y24, Z24, Z24")
	for p := 0; p < 8; p++ {
		if j == 0 {
			a.p("VPMULLD %d(DI), Z24, Z%d", c+64*p, p)
			continue
		}
		t := 8 + p%4
		a.p("VPMULLD %d(DI), Z24, Z%d", c+64*p, t)
		a.p("VPADDD Z%d, Z%d, Z%d", t, p, p)
	}
}

// The AMX kernels of packed Q6_K, Q3_K and Q2_K weights (q6KAMXP_16,
// q3KAMXP_16, q2KAMXP_16): their VNNI kernels (sub16PackedKernel) for 16
// tokens with each 16-value sub-block's 16 × 8 integer dot products taken
// by the tile unit instead of 64 vpdpbusd. The VNNI kernels build the
// values of two sub-blocks a step; each is a tile product of K = 16 on its
// own tile set (amxQ6KCfg: A 16 tokens × 16 bytes, B 4 × 32, C 16 × 32),
// and their sums times the rows' scales add to the block's integer sums;
// the offset (or mins) and float steps after the block are the VNNI
// kernels', so are the bits.
const (
	amxQ6KB = 0   // per tile set, B: 4 vectors of 32 bytes
	amxQ6KC = 256 // per tile set, C: 16 tokens × 32 bytes
)

// amxQ6KCfgData emits the tile configuration of q6KAMXP_16.
func amxQ6KCfgData(a *asm) {
	amxCfgData(a, "amxQ6KCfg", [3][2]int{amxTileA: {16, 16}, amxTileB: {4, 32}, amxTileC: {16, 32}})
}

// sub16AMXPackedKernel generates t's q6KAMXP_16 (q3KAMXP_16, q2KAMXP_16).
// Its arguments are q6KVNNIP's, with tokens 16, and the scratch.
//
// Registers: Z0-Z7 the block's integer sums of tokens 2p, 2p+1; Y16-Y23
// the step's values (then the scale or min pairs); Z24, Z25 the step's
// scales in both halves; Z8, Z9 products; Y14 and t's constants as in its
// VNNI kernel. GPRs as there, and DI the scratch, R10 yStride, R15 32.
func sub16AMXPackedKernel(a *asm, d *decl, t sub16Type) {
	name := t.prefix + "AMXP_16"
	text(a, d, name+" computes groups × 8 rows × 16 tokens of packed "+t.typ+" weights × Q8_K activations on the AMX tiles (tokens must be 16); the tiles must be permitted (requestAMX).", name,
		"(w *byte, groups int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int, tokens int, scratch *byte)",
		"$512-104")
	t.consts(a)
	amxKStart(a, "amxQ6KCfg")
	packedGroupStart(a, name)
	first := true
	t.steps(a, func(sa, sb int) {
		for i, s := range []int{sa, sb} {
			set := amxTiles * byte(i)
			tc := set + amxTileC
			b, c := amxQ6KB+128*i, amxQ6KC+amxSumsBytes*i
			for e := 0; e < 4; e++ {
				a.p("VMOVDQU32 Y%d, %d(DI)", 16+4*i+e, b+32*e)
			}
			amxKProduct(a, set, b, 16*s)
			amxInst(a, fmt.Sprintf("tilestored %s, tmm%d", amxMem("DI", "R15", c), tc), tilestoredBytes(tc, "DI", "R15", c))
		}
		t.scales(a, sa, sb)
		a.p("VINSERTI64X4 $1, Y24, Z24, Z24")
		a.p("VINSERTI64X4 $1, Y25, Z25, Z25")
		for p := 0; p < 8; p++ {
			acc := "Z8"
			if first {
				acc = fmt.Sprintf("Z%d", p)
			}
			a.p("VPMULLD %d(DI), Z24, %s", amxQ6KC+64*p, acc)
			a.p("VPMULLD %d(DI), Z25, Z9", amxQ6KC+amxSumsBytes+64*p)
			a.p("VPADDD Z9, %s, %s", acc, acc)
			if !first {
				a.p("VPADDD Z8, Z%d, Z%d", p, p)
			}
		}
		first = false
	})
	amxKGroupEnd(a, name, func() { sub16BlockSteps(a, t, name, false) })
}

// amxKGroupEnd ends a k-quant AMX kernel's group of eight rows: the block's
// integer sums (Z0-Z7) to the stack, where the VNNI kernel's steps after the
// block (blockSteps) read them, then the next group or the return.
func amxKGroupEnd(a *asm, name string, blockSteps func()) {
	for p := 0; p < 8; p++ {
		a.p("VMOVDQU32 Z%d, %d(SP)", p, 64*p)
	}
	blockSteps()
	a.p("ADDQ $32, AX")
	a.p("DECQ groups+8(FP)")
	a.p("JNZ %s_group", name)
	amxReturn(a)
}

// amxKStart begins the k-quants' AMX kernels: the tile configuration cfg
// loaded, DI the scratch, R10 yStride (A's stride), R15 32 (B's and C's).
func amxKStart(a *asm, cfg string) {
	a.p("LEAQ %s<>(SB), R10", cfg)
	amxInst(a, "ldtilecfg [r10]", ldtilecfgBytes("R10"))
	a.p("MOVQ scratch+96(FP), DI")
	a.p("MOVQ yStride+24(FP), R10")
	a.p("MOVL $32, R15")
}

// amxKProduct loads tile set s's B from scratch at b(DI) and its A, the
// 16 tokens' activations at act(BX), and sums their products into its C.
func amxKProduct(a *asm, s byte, b, act int) {
	ta, tb, tc := s+amxTileA, s+amxTileB, s+amxTileC
	amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", tb, amxMem("DI", "R15", b)), tileloaddBytes(tb, "DI", "R15", b))
	amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", ta, amxMem("BX", "R10", act)), tileloaddBytes(ta, "BX", "R10", act))
	amxInst(a, fmt.Sprintf("tilezero tmm%d", tc), tilezeroBytes(tc))
	amxInst(a, fmt.Sprintf("tdpbsud tmm%d, tmm%d, tmm%d", tc, ta, tb), tdpbsudBytes(tc, ta, tb))
}
