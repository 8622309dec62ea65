package main

import "fmt"

// The packed Q6_K layout (matrix.go, packQ6K): per block of eight rows and
// block b of 256 columns, 8·210 bytes at b times that, the bytes of the
// eight rows' blocks rearranged so that a vector lane is a row: 32 vectors
// of the rows' ql dwords, 16 of their qh dwords, four of their int8 scales
// (four a dword), then the rows' f16 d.
const (
	q6KPackedBytes  = 8 * 210
	q6KPackedQh     = 1024
	q6KPackedScales = 1536
	q6KPackedD      = 1664
)

// sub16Type describes a packed k-quant type of 16-value sub-blocks (Q6_K,
// Q3_K, Q2_K) for the kernels below: the kernels' name prefix and the
// type's name, a packed block's bytes and where its rows' f16 d are, and
// the code that builds its values, scales and offset or mins.
type sub16Type struct {
	prefix, typ string
	bytes, dOff int
	// consts loads the constants steps, scales and pairs use.
	consts func(a *asm)
	// steps builds the values of the block at SI, unsigned, two
	// sub-blocks at a time (sa's four dwords of the eight rows in
	// Y16-Y19, sb's in Y20-Y23; Y14 scratch), and calls step(sa, sb)
	// after each pair, for all sixteen sub-blocks.
	steps func(a *asm, step func(sa, sb int))
	// scales sets Y24 and Y25 to the rows' signed scales of sub-blocks sa
	// and sb, a dword each.
	scales func(a *asm, sa, sb int)
	// pairs sets Y16-Y23 to the rows' scales of sub-blocks 2p and 2p+1 as
	// int16 pairs, against the dwords of bs.
	pairs func(a *asm)
	// offset: the values are q + 2^offset, so 2^offset·Σ sc_k·bs_k comes
	// off the block's sum. With mins instead (dminOff > 0), pairs gives
	// the rows' mins, and the float steps are dotQ2KRow's:
	// (d·dy)·S − (dmin·dy)·Σ m_k·bs_k.
	offset  int
	dminOff int
}

// q6KPacked is Q6_K's sub16Type: values ql's nibble and qh's two bits
// (q+32), int8 scales.
var q6KPacked = sub16Type{
	prefix: "q6K", typ: "Q6_K", bytes: q6KPackedBytes, dOff: q6KPackedD,
	consts: func(a *asm) { // Y28 0x0f bytes, Y29 0x30 bytes
		a.p("MOVL $0x0f0f0f0f, CX")
		a.p("VPBROADCASTD CX, Y28")
		a.p("MOVL $0x30303030, CX")
		a.p("VPBROADCASTD CX, Y29")
	},
	steps: q6KSteps, scales: q6KScales, pairs: q6KPairs, offset: 5,
}

// sub16PackedKernel generates t's q6KVNNIP (up to 16 tokens, their count
// an argument) or, one, q6KVNNIP1 (one token, sums in registers, a
// prefetch ahead) — q3KVNNIP, q2KVNNIP and their one-token kernels for
// Q3_K and Q2_K: packed weights × Q8_K activations at the VNNI level for
// groups of eight rows, a lane each. Per block, the values of two 16-value
// sub-blocks at a time are built once for all tokens, and each token's
// activation dwords meet them in vpdpbusd, times the rows' scales
// (vpmulld); after the block the offset, 2^offset·Σ sc_k·bs_k, from the
// scales as int16 pairs against the activations' 16-value sums (vpdpwssd)
// and dotQ6KRow's float step, or Q2_K's mins the same way and dotQ2KRow's
// two. The integer sums are exact, so the results are the row kernels' and
// the portable kernel's bits.
func sub16PackedKernel(a *asm, d *decl, t sub16Type, one bool) {
	name := t.prefix + "VNNIP"
	if one {
		name += "1"
		text(a, d, name+" computes groups × 8 rows × one token of packed "+t.typ+" weights × Q8_K activations (VNNI).", name,
			"(w *byte, groups int, y *int8, d *float32, bs *int16, nb int, dst *float32)", "$0-56")
	} else {
		text(a, d, name+" computes groups × 8 rows × tokens (at most 16) of packed "+t.typ+" weights × Q8_K activations (VNNI).", name,
			"(w *byte, groups int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int, tokens int)",
			"$512-96")
	}
	arg := func(multi, single string) string {
		if one {
			return single
		}
		return multi
	}
	// Y16-Y23 two sub-blocks' values, then the scale (min) pairs; Y24, Y25
	// their scales; Y30 d, Y31 dmin; Y14 scratch; t's constants. One
	// token: Y0 the outputs, Y1 the block's sum.
	t.consts(a)
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ %s, AX", arg("dst+72(FP)", "dst+48(FP)"))
	a.label(name + "_group")
	a.p("VPXORD Y0, Y0, Y0")
	if !one {
		tokenLoop(a, name+"_zero", func() { a.p("MOVQ AX, R14") },
			func() { a.p("VMOVUPS Y0, (R14)") },
			func() { a.p("ADDQ ldBytes+80(FP), R14") })
	}
	a.p("MOVQ y+16(FP), BX")
	a.p("MOVQ %s, R8", arg("d+32(FP)", "d+24(FP)"))
	a.p("MOVQ %s, DX", arg("bs+48(FP)", "bs+32(FP)"))
	a.p("MOVQ %s, CX", arg("nb+64(FP)", "nb+40(FP)"))
	a.label(name + "_block")
	if one {
		for off := 0; off < t.bytes; off += 64 {
			a.p("PREFETCHT0 %d(SI)", k45PrefetchBytes+off)
		}
	}
	first := true
	t.steps(a, func(sa, sb int) {
		t.scales(a, sa, sb)
		isFirst := first
		first = false
		sub := func(ptr string, sA, sB int) {
			a.p("VPXORD Y%d, Y%d, Y%d", sA, sA, sA)
			a.p("VPXORD Y%d, Y%d, Y%d", sB, sB, sB)
			for e := 0; e < 4; e++ {
				a.p("VPDPBUSD.BCST %d(%s), Y%d, Y%d", 16*sa+4*e, ptr, 16+e, sA)
				a.p("VPDPBUSD.BCST %d(%s), Y%d, Y%d", 16*sb+4*e, ptr, 20+e, sB)
			}
			a.p("VPMULLD Y24, Y%d, Y%d", sA, sA)
			a.p("VPMULLD Y25, Y%d, Y%d", sB, sB)
			a.p("VPADDD Y%d, Y%d, Y%d", sB, sA, sA)
		}
		if one {
			sub("BX", 2, 3)
			if isFirst {
				a.p("VMOVDQA32 Y2, Y1")
			} else {
				a.p("VPADDD Y2, Y1, Y1")
			}
			return
		}
		tokenLoop(a, fmt.Sprintf("%s_sub%d", name, sa), func() {
			a.p("MOVQ BX, R11")
			a.p("LEAQ 0(SP), R13")
		}, func() {
			sub("R11", 26, 27)
			if !isFirst {
				a.p("VPADDD (R13), Y26, Y26")
			}
			a.p("VMOVDQU32 Y26, (R13)")
		}, func() {
			a.p("ADDQ yStride+24(FP), R11")
			a.p("ADDQ $32, R13")
		})
	})
	sub16BlockSteps(a, t, name, one)
	if one {
		a.p("VMOVUPS Y0, (AX)")
	}
	packedGroupEnd(a, name)
}

// q6kPairCtlData emits the vpshufb controls that spread bytes 0, 1 (then 2,
// 3) of each dword to the high bytes of its two words, for vpsraw to
// sign-extend: the Q6_K scale pairs of q6KPairs.
func q6kPairCtlData(a *asm) {
	for half := 0; half < 2; half++ {
		var b [32]byte
		for d := 0; d < 8; d++ {
			base := 4 * (d % 4)
			b[4*d], b[4*d+1], b[4*d+2], b[4*d+3] = 0x80, byte(base+2*half), 0x80, byte(base+2*half+1)
		}
		for i := 0; i < 4; i++ {
			var v uint64
			for k := 7; k >= 0; k-- {
				v = v<<8 | uint64(b[8*i+k])
			}
			fmt.Fprintf(&a.b, "DATA q6kPairCtl<>+%d(SB)/8, $0x%016x\n", 32*half+8*i, v)
		}
	}
	a.b.WriteString("GLOBL q6kPairCtl<>(SB), RODATA|NOPTR, $64\n\n")
}

// q6KSteps emits the building of a packed Q6_K block's values (at SI),
// two 16-value sub-blocks a step: sub-block sa's four dwords of the eight
// rows in Y16-Y19, sa+2's (sb) in Y20-Y23 (Y28 0x0f bytes, Y29 0x30
// bytes, Y14 scratch), then step(sa, sb), for the eight steps in order.
func q6KSteps(a *asm, step func(sa, sb int)) {
	for h := 0; h < 2; h++ {
		for q := 0; q < 2; q++ {
			for part := 0; part < 2; part++ {
				for e := 0; e < 4; e++ {
					m := 4*q + e
					A, B, H := 32*(16*h+m), 32*(16*h+8+m), q6KPackedQh+32*(8*h+m)
					va, vb := 16+e, 20+e
					if part == 0 { // values 128h+4m.. (ql low, qh bits 0-1) and +32 (bits 2-3)
						a.p("VPANDD %d(SI), Y28, Y%d", A, va)
						a.p("VPSLLW $4, %d(SI), Y14", H)
						a.p("VPTERNLOGD $0xf8, Y29, Y14, Y%d", va)
						a.p("VPANDD %d(SI), Y28, Y%d", B, vb)
						a.p("VPSLLW $2, %d(SI), Y14", H)
						a.p("VPTERNLOGD $0xf8, Y29, Y14, Y%d", vb)
						continue
					}
					// values +64 (ql high, qh bits 4-5) and +96 (bits 6-7)
					a.p("VPSRLW $4, %d(SI), Y%d", A, va)
					a.p("VPANDD Y%d, Y28, Y%d", va, va)
					a.p("VPTERNLOGD $0xf8, %d(SI), Y29, Y%d", H, va)
					a.p("VPSRLW $4, %d(SI), Y%d", B, vb)
					a.p("VPANDD Y%d, Y28, Y%d", vb, vb)
					a.p("VPSRLW $2, %d(SI), Y14", H)
					a.p("VPTERNLOGD $0xf8, Y29, Y14, Y%d", vb)
				}
				sa := 8*h + q + 4*part
				step(sa, sa+2)
			}
		}
	}
}

// q6KScales sets Y24 and Y25 to the eight rows' int8 scales of sub-blocks
// sa and sb, sign-extended to dwords.
func q6KScales(a *asm, sa, sb int) {
	for i, s := range []int{sa, sb} {
		if sh := 24 - 8*(s%4); sh > 0 {
			a.p("VPSLLD $%d, %d(SI), Y%d", sh, q6KPackedScales+32*(s/4), 24+i)
			a.p("VPSRAD $24, Y%d, Y%d", 24+i, 24+i)
		} else {
			a.p("VPSRAD $24, %d(SI), Y%d", q6KPackedScales+32*(s/4), 24+i)
		}
	}
}

// q6KPairs sets Y16-Y23 to the Q6_K scales of sub-blocks 2p and 2p+1 as
// int16 pairs (sc_2p, sc_2p+1), against the dwords of bs.
func q6KPairs(a *asm) {
	for p := 0; p < 8; p++ {
		a.p("VMOVDQU32 %d(SI), Y%d", q6KPackedScales+32*(p/2), 16+p)
		a.p("VPSHUFB q6kPairCtl<>+%d(SB), Y%d, Y%d", 32*(p%2), 16+p, 16+p)
		a.p("VPSRAW $8, Y%d, Y%d", 16+p, 16+p)
	}
}

// sub16BlockSteps emits the end of a packed block of type t: the offset
// and float step per token (one: the block's sum in Y1, the outputs in Y0;
// else each token's sum in the frame, as stepsLoop walks them), and the
// move to the next block.
func sub16BlockSteps(a *asm, t sub16Type, name string, one bool) {
	t.pairs(a)
	a.p("VCVTPH2PS %d(SI), Y30", t.dOff)
	if t.dminOff > 0 {
		a.p("VCVTPH2PS %d(SI), Y31", t.dminOff)
	}
	steps := func(bs, dy, sum string, acc string) {
		if t.dminOff > 0 { // M = Σ m_k·bs_k in Y24, then k45Steps
			a.p("VPXORD Y24, Y24, Y24")
			a.p("VPXORD Y25, Y25, Y25")
			for p := 0; p < 8; p++ {
				a.p("VPDPWSSD.BCST %d%s, Y%d, Y%d", 4*p, bs, 16+p, 24+p%2)
			}
			a.p("VPADDD Y25, Y24, Y24")
			k45Steps(a, 24, sum, dy, 27)
			a.p("VADDPS %s, Y27, Y27", acc)
			return
		}
		a.p("VPXORD Y26, Y26, Y26")
		a.p("VPXORD Y27, Y27, Y27")
		for p := 0; p < 8; p++ {
			a.p("VPDPWSSD.BCST %d%s, Y%d, Y%d", 4*p, bs, 16+p, 26+p%2)
		}
		a.p("VPADDD Y27, Y26, Y26")
		a.p("VPSLLD $%d, Y26, Y26", t.offset)
		a.p("VPSUBD Y26, %s, Y27", sum) // Σ sc_k·(q·y)_k
		a.p("VCVTDQ2PS Y27, Y27")
		a.p("VMULPS.BCST %s, Y30, Y26", dy) // d·dy
		a.p("VMULPS Y26, Y27, Y27")
		a.p("VADDPS %s, Y27, Y27", acc)
	}
	if one {
		steps("(DX)", "(R8)", "Y1", "Y0")
		a.p("VMOVAPS Y27, Y0")
	} else {
		stepsLoop(a, name, func() {
			a.p("VMOVDQU32 (R13), Y1")
			steps("(R11)", "(R12)", "Y1", "(R14)")
			a.p("VMOVUPS Y27, (R14)")
		})
	}
	k45NextBlock(a, k45Layout{bytes: t.bytes}, name)
}
