package main

import "fmt"

// The packed Q4_K layout (matrix.go, packQ4K): per block of eight rows and
// block b of 256 columns, q4KPackedBytes at b·q4KPackedBytes, the bytes of
// the eight rows' blocks rearranged so that a vector lane is a row:
// vector 8c+k (c = 0..3, k = 0..7) holds bytes 4k..4k+3 of the rows' qs
// chunk c (row r at 4r: values 4k..4k+3 of sub-block 2c in the low
// nibbles, of sub-block 2c+1 in the high ones), then three vectors of the
// rows' 12 scale bytes (dword i of each row at 4r), then the rows' f16 d
// and dmin.
const (
	q4KPackedBytes  = 8 * 144
	q4KPackedScales = 1024
	q4KPackedD      = 1120
	q4KPackedDmin   = 1136
)

// q4KPackedKernel generates q4KVNNIP, packed Q4_K weights × Q8_K
// activations at the VNNI level, for groups of eight rows (a lane each)
// and up to 16 tokens, whose count is an argument: the weights of a
// sub-block are unpacked once for all tokens, then each token's 32
// activation bytes meet them in eight vpdpbusd (its dwords broadcast), the
// product times the rows' scales (vpmulld) adds to the token's block sum
// (in the frame), and after the block the mins' products with the
// activations' 16-value sums (vpdpwssd) and the float steps of
// q4KExactSteps, per row, into the outputs. The integer sums are exact, so
// the results are the row kernels' and the portable kernel's bits.
func q4KPackedKernel(a *asm, d *decl) {
	const name = "q4KVNNIP"
	text(a, d, name+" computes groups × 8 rows × tokens (at most 16) of packed Q4_K weights × Q8_K activations (VNNI).", name,
		"(w *byte, groups int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int, tokens int)",
		"$512-96")
	// Y28: 0x0f bytes, Y29: 0x3f dwords; Y16-Y23 the sub-block's weights,
	// then the mins; Y24 the sub-block's scales; Y30, Y31 d, dmin.
	a.p("MOVL $0x0f0f0f0f, CX")
	a.p("VPBROADCASTD CX, Y28")
	a.p("MOVL $0x3f, CX")
	a.p("VPBROADCASTD CX, Y29")
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ dst+72(FP), AX")
	a.label(name + "_group")
	// The outputs start at zero, as the portable kernel's sums do.
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
	for j := 0; j < 8; j++ {
		c, high := j/2, j%2 == 1
		for k := 0; k < 8; k++ {
			off := 32 * (8*c + k)
			if high {
				a.p("VPSRLW $4, %d(SI), Y%d", off, 16+k)
				a.p("VPANDD Y%d, Y28, Y%d", 16+k, 16+k)
			} else {
				a.p("VPANDD %d(SI), Y28, Y%d", off, 16+k)
			}
		}
		q4KPackedScale(a, j, false, 24, 25)
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
	// The mins as int16 pairs (m, m) against the dwords of bs, which hold
	// the two 16-value sums of a sub-block.
	for j := 0; j < 8; j++ {
		q4KPackedScale(a, j, true, 16+j, 25)
		a.p("VPSLLD $16, Y%d, Y25", 16+j)
		a.p("VPORD Y25, Y%d, Y%d", 16+j, 16+j)
	}
	a.p("VCVTPH2PS %d(SI), Y30", q4KPackedD)
	a.p("VCVTPH2PS %d(SI), Y31", q4KPackedDmin)
	tokenLoop(a, name+"_steps", func() {
		a.p("MOVQ DX, R11")
		a.p("MOVQ R8, R12")
		a.p("LEAQ 0(SP), R13")
		a.p("MOVQ AX, R14")
	}, func() {
		a.p("VPXORD Y25, Y25, Y25")
		for j := 0; j < 8; j++ {
			a.p("VPDPWSSD.BCST %d(R11), Y%d, Y25", 4*j, 16+j)
		}
		a.p("VCVTDQ2PS Y25, Y25")
		a.p("VMULPS.BCST (R12), Y31, Y26") // dmin·dy
		a.p("VMULPS Y26, Y25, Y25")        // (dmin·dy)·M
		a.p("VCVTDQ2PS (R13), Y27")
		a.p("VMULPS.BCST (R12), Y30, Y26") // d·dy
		a.p("VMULPS Y26, Y27, Y27")        // (d·dy)·S
		a.p("VSUBPS Y25, Y27, Y27")
		a.p("VADDPS (R14), Y27, Y27")
		a.p("VMOVUPS Y27, (R14)")
	}, func() {
		a.p("ADDQ bsStride+56(FP), R11")
		a.p("ADDQ dStride+40(FP), R12")
		a.p("ADDQ $32, R13")
		a.p("ADDQ ldBytes+80(FP), R14")
	})
	a.p("ADDQ $%d, SI", q4KPackedBytes)
	a.p("ADDQ $256, BX")
	a.p("ADDQ $4, R8")
	a.p("ADDQ $32, DX")
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
	a.p("ADDQ $32, AX")
	a.p("DECQ groups+8(FP)")
	a.p("JNZ %s_group", name)
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
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
func q4KPackedScale(a *asm, j int, min bool, dst, tmp int) {
	u01, u2Shift := q4KPackedScales, 0
	if min {
		u01, u2Shift = q4KPackedScales+32, 4
	}
	u2 := q4KPackedScales + 64
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
