package main

import (
	"fmt"
	"slices"
)

// The direct IQ kernels with AVX2's instructions (no mask registers, no
// byte permutes across lanes), for the AVX2 level and the VNNI level
// without VBMI: the same Q8_K16 bytes per 32 values as the VBMI kernels'
// (iqdirect.go), so the same products and float steps.
//
// Per block a prologue takes the sixteen scales (2s+1) to X14 and, for the
// types with signs, the block's 32 sign patterns to Y11 (for IQ1 its 32
// deltas): a pattern is eight bits, one per value of a group of eight (IQ2_S
// and IQ3_S store them; the others store seven bits, the eighth their
// parity, computed here by a table of nibble parities). Y11 holds groups 0
// and 1 of every chunk of 32 values in its low lane and groups 2 and 3 in
// its high lane, so one in-lane vpshufb spreads a chunk's four patterns to
// its 32 bytes. Per 32 values the grid points are loaded from the
// widening's tables into Y8 (indices through R14; R9 and R15 are scratch
// during a block, bsStride and its triple loaded again after it), each
// sign's byte set by vpcmpeqb against its bit, and the negative values'
// bytes 0x80 − (64+|v|) chosen by vpblendvb (Y15 the 0x80 bytes).

// iqDirectConstsAVX2 loads the block loop's constants: R8 the grid, Y15
// 0x80 bytes.
func iqDirectConstsAVX2(a *asm, typ string) {
	a.p("LEAQ ·%s(SB), R8", iqDirects[typ].grid)
	a.p("MOVL $0x80808080, R14")
	a.p("VMOVD R14, X15")
	a.p("VPBROADCASTD X15, Y15")
}

// iqChunkPos is where chunk p's patterns sit in Y11 for the types whose
// prologue gathers them out of order (IQ2_XXS, IQ2_XS).
var iqChunkPos = map[string][8]int{
	"iq2XXS": {0, 1, 4, 5, 2, 3, 6, 7},
	"iq2XS":  {0, 1, 4, 5, 2, 3, 6, 7},
}

// iqDirectBlockAVX2 emits the body of kKernel's block loop for a direct
// type at the AVX2 level.
func iqDirectBlockAVX2(a *asm, typ string, T int, yAddr func(off, t int) string, dAddr, bsAddr func(t int) string, facc, sumi func(t int) int) {
	q := iqDirects[typ]
	zeroPartials(a, T)
	iqPrologueAVX2(a, typ)
	pos, ok := iqChunkPos[typ]
	if !ok {
		pos = [8]int{0, 1, 2, 3, 4, 5, 6, 7}
	}
	for p := 0; p < 8; p++ {
		iqChunkAVX2(a, typ, p, pos[p])
		a.p("VPSHUFB q6kShuf<>+%d(SB), X14, X12", 16*p)
		a.p("VPMOVSXBW X12, Y12")
		for t := 0; t < T; t++ {
			a.p("VPMADDUBSW %s, Y8, Y13", yAddr(32*p, t))
			a.p("VPMADDWD Y12, Y13, Y13")
			s := partial(T, t, p)
			a.p("VPADDD Y13, Y%d, Y%d", s, s)
		}
	}
	sumPartials(a, T)
	if typ == "iq1M" {
		// d's f16 is the top nibbles of the four scale words (R9
		// scratch until bsStride is loaded again below).
		a.p("MOVWLZX 48(SI), R14")
		a.p("SHRL $12, R14")
		for j, sh := range []int{8, 4, 0} {
			a.p("MOVWLZX %d(SI), R9", 50+2*j)
			if sh > 0 {
				a.p("SHRL $%d, R9", sh)
			}
			a.p("ANDL $%#x, R9", 0xf0<<(4*j))
			a.p("ORL R9, R14")
		}
		a.p("VMOVD R14, X9")
		a.p("VPBROADCASTW X9, X9")
	}
	a.p("MOVQ bsStride+56(FP), R9")
	a.p("LEAQ (R9)(R9*2), R15")
	// The +64 taken off with the activations' 16-value sums.
	a.p("VPMOVSXBW X14, Y12")
	for t := 0; t < T; t++ {
		a.p("VPMADDWD %s, Y12, Y13", bsAddr(t))
		a.p("VPSLLD $6, Y13, Y13")
		a.p("VPSUBD Y13, Y%d, Y%d", sumi(t), sumi(t))
	}
	if typ != "iq1M" {
		a.p("VPBROADCASTW 0(SI), X9")
	}
	a.p("VCVTPH2PS X9, Y9")
	if q.dScale != "" {
		a.p("VMULPS iqDScaleAVX2<>+%d(SB), Y9, Y9", 32*slices.Index(iqDScales, q.dScale))
	}
	for t := 0; t < T; t++ {
		dSteps(a, t, 0, 13, 9, 12, true, dAddr, facc, sumi)
	}
}

// iqScales2s1AVX2 turns X14's sixteen scale fields s into 2s+1.
func iqScales2s1AVX2(a *asm) {
	a.p("VPADDB X14, X14, X14")
	a.p("VPOR iqConstAVX2<>+%d(SB), X14, X14", iqC01)
}

// iqScalesNibblesAVX2 emits X14 = 2s+1 of the sixteen scales from eight
// bytes at off of two 4-bit scales each (low nibble first), or with dup
// from four bytes, each scale for 32 values.
func iqScalesNibblesAVX2(a *asm, off int, dup bool) {
	if dup {
		a.p("VMOVD %d(SI), X14", off)
	} else {
		a.p("VMOVQ %d(SI), X14", off)
	}
	a.p("VPSRLW $4, X14, X13")
	a.p("VPUNPCKLBW X13, X14, X14")
	a.p("VPAND iqConstAVX2<>+%d(SB), X14, X14", iqC0F)
	if dup {
		a.p("VPUNPCKLBW X14, X14, X14")
	}
	iqScales2s1AVX2(a)
}

// iqScalesDwordsAVX2 emits X14 = 2s+1 of the sixteen scales from the eight
// dwords of Y13 (each s < 16, for 32 values), whose lanes hold chunks 0-3
// and 4-7 where natural, else IQ2_XXS's 0, 1, 4, 5 and 2, 3, 6, 7.
func iqScalesDwordsAVX2(a *asm, natural bool) {
	a.p("VEXTRACTI128 $1, Y13, X12")
	if natural {
		a.p("VPACKUSDW X12, X13, X14")
	} else {
		a.p("VPUNPCKLQDQ X12, X13, X14")
		a.p("VPUNPCKHQDQ X12, X13, X13")
		a.p("VPACKUSDW X13, X14, X14")
	}
	a.p("VPACKUSWB X14, X14, X14")
	a.p("VPUNPCKLBW X14, X14, X14")
	iqScales2s1AVX2(a)
}

// iqPatternsAVX2 turns Y10's bytes, seven stored sign bits each (bit 7
// anything), into their eight-bit patterns (the seventh bits' parity at bit
// 7), and lays them out in Y11 (see the file's comment).
func iqPatternsAVX2(a *asm) {
	a.p("VPAND iqConstAVX2<>+%d(SB), Y10, Y10", iqC7F)
	a.p("VPSRLW $4, Y10, Y13")
	a.p("VPXOR Y10, Y13, Y13")
	a.p("VPAND iqConstAVX2<>+%d(SB), Y13, Y13", iqC0F)
	a.p("VMOVDQU iqConstAVX2<>+%d(SB), Y12", iqParity)
	a.p("VPSHUFB Y13, Y12, Y13")
	a.p("VPOR Y13, Y10, Y10")
	iqArrangeAVX2(a)
}

// iqArrangeAVX2 lays out Y10's 32 bytes, four per chunk in dword order,
// in Y11: each lane's dwords' bytes 0-1 then 2-3, then the lanes' low
// halves together and their high halves together.
func iqArrangeAVX2(a *asm) {
	a.p("VPSHUFB iqConstAVX2<>+%d(SB), Y10, Y10", iqGroup)
	a.p("VPERMQ $0xd8, Y10, Y11")
}

// iqFieldsAVX2 spreads Y10's dwords' four 7-bit fields (bits 0, 7, 14, 21)
// to their four bytes (bit 7 of each anything).
func iqFieldsAVX2(a *asm) {
	a.p("VPSLLD $1, Y10, Y12")
	a.p("VPSLLD $2, Y10, Y13")
	a.p("VPSLLD $3, Y10, Y9")
	a.p("VPAND iqConstAVX2<>+%d(SB), Y10, Y10", iqByte0)
	a.p("VPAND iqConstAVX2<>+%d(SB), Y12, Y12", iqByte0+32)
	a.p("VPAND iqConstAVX2<>+%d(SB), Y13, Y13", iqByte0+64)
	a.p("VPAND iqConstAVX2<>+%d(SB), Y9, Y9", iqByte0+96)
	a.p("VPOR Y12, Y10, Y10")
	a.p("VPOR Y9, Y13, Y13")
	a.p("VPOR Y13, Y10, Y10")
}

// iqPrologueAVX2 emits a type's block prologue at the AVX2 level.
func iqPrologueAVX2(a *asm, typ string) {
	switch typ {
	case "iq2XXS":
		// Eight qwords: four grid indices, then aux (four 7-bit sign
		// indices at 7l, the scale at 28).
		a.p("VMOVDQU 2(SI), Y10")
		a.p("VMOVDQU 34(SI), Y12")
		a.p("VSHUFPS $0xdd, Y12, Y10, Y10") // the aux dwords: chunks 0, 1, 4, 5 | 2, 3, 6, 7
		a.p("VPSRLD $28, Y10, Y13")
		iqScalesDwordsAVX2(a, false)
		iqFieldsAVX2(a)
		iqPatternsAVX2(a)
	case "iq2XS":
		// 32 words: a 9-bit grid index, a 7-bit sign index.
		a.p("VMOVDQU 2(SI), Y10")
		a.p("VMOVDQU 34(SI), Y12")
		a.p("VPSRLW $9, Y10, Y10")
		a.p("VPSRLW $9, Y12, Y12")
		a.p("VPACKUSWB Y12, Y10, Y10") // chunks 0, 1, 4, 5 | 2, 3, 6, 7
		iqPatternsAVX2(a)
		iqScalesNibblesAVX2(a, 66, false)
	case "iq2S":
		a.p("VMOVDQU 34(SI), Y10") // the patterns, stored
		iqArrangeAVX2(a)
		iqScalesNibblesAVX2(a, 74, false)
	case "iq3XXS":
		// aux dwords at 66: four 7-bit sign indices and the scale at 28.
		a.p("VMOVDQU 66(SI), Y10")
		a.p("VPSRLD $28, Y10, Y13")
		iqScalesDwordsAVX2(a, true)
		iqFieldsAVX2(a)
		iqPatternsAVX2(a)
	case "iq3S":
		a.p("VMOVDQU 74(SI), Y10") // the patterns, stored
		iqArrangeAVX2(a)
		iqScalesNibblesAVX2(a, 106, true)
	case "iq1S":
		// qh words at 34: the scale at 12, the delta's sign at 15.
		a.p("VMOVDQU 34(SI), X13")
		a.p("VPSRLW $12, X13, X14")
		a.p("VPAND iqConstAVX2<>+%d(SB), X14, X14", iqW7)
		a.p("VPACKUSWB X14, X14, X14")
		a.p("VPUNPCKLBW X14, X14, X14")
		iqScales2s1AVX2(a)
		a.p("VPSRAW $15, X13, X10")
		a.p("VPOR iqConstAVX2<>+%d(SB), X10, X10", iqW1) // 1 or −1
		a.p("VPACKSSWB X10, X10, X10")
		a.p("VPBROADCASTQ X10, Y11") // deltas: byte p of each qword
	case "iq1M":
		// The scales: three bits each, in order, in the words at 48.
		a.p("VPMOVZXWD 48(SI), X13")
		a.p("VPSRLD $3, X13, X10")
		a.p("VPSRLD $6, X13, X12")
		a.p("VPSRLD $9, X13, X14")
		a.p("VPACKUSDW X10, X13, X13")
		a.p("VPACKUSDW X14, X12, X12")
		a.p("VPAND iqConstAVX2<>+%d(SB), X13, X13", iqW7)
		a.p("VPAND iqConstAVX2<>+%d(SB), X12, X12", iqW7)
		a.p("VPACKUSWB X12, X13, X14")                       // field k of word j at 4k+j
		a.p("VPSHUFB iqConstAVX2<>+%d(SB), X14, X14", iqTr4) // at 4j+k
		iqScales2s1AVX2(a)
		// qh's nibbles in order, h_g: the deltas 1 − (h_g & 8)/4.
		a.p("VMOVDQU 32(SI), X13")
		a.p("VPSRLW $4, X13, X12")
		a.p("VPUNPCKLBW X12, X13, X10")
		a.p("VPUNPCKHBW X12, X13, X12")
		a.p("VINSERTI128 $1, X12, Y10, Y10")
		a.p("VPAND iqConstAVX2<>+%d(SB), Y10, Y10", iqC08)
		a.p("VPCMPEQB iqConstAVX2<>+%d(SB), Y10, Y10", iqC08)
		a.p("VPADDB Y10, Y10, Y10")
		a.p("VPOR iqConstAVX2<>+%d(SB), Y10, Y10", iqC01)
		iqArrangeAVX2(a)
	default:
		panic("asmgen: no direct kernel for " + typ)
	}
}

// iqHighBits emits R14 |= (R9 shifted left by sh, or right by −sh) & mask:
// an index's high bits from the word in R9.
func iqHighBits(a *asm, sh int, mask int) {
	a.p("MOVL R9, R15")
	switch {
	case sh > 0:
		a.p("SHLL $%d, R15", sh)
	case sh < 0:
		a.p("SHRL $%d, R15", -sh)
	}
	a.p("ANDL $%#x, R15", mask)
	a.p("ORL R15, R14")
}

// iqHighAVX2 says where the types whose grid indices have high bits take
// them: chunk p's qh at qh+qhStep·p (a byte or a word, by load), index i's
// bits at step·i of it, as many as mask has; the low bytes (qs) at
// qs+n·p+i.
var iqHighAVX2 = map[string]struct {
	load                          string
	qh, qhStep, qs, n, step, mask int
}{
	"iq2S": {"MOVBLZX", 66, 1, 2, 4, 2, 0x300},
	"iq3S": {"MOVBLZX", 66, 1, 2, 8, 1, 0x100},
	"iq1S": {"MOVWLZX", 34, 2, 2, 4, 3, 0x700},
	"iq1M": {"MOVWLZX", 32, 2, 0, 4, 4, 0x700},
}

// iqChunkAVX2 emits values 32p to 32p+31 of a direct type's block, as
// Q8_K16 bytes, into Y8 (Y9, Y10 scratch); pos is where its patterns sit
// in Y11.
func iqChunkAVX2(a *asm, typ string, p, pos int) {
	q := iqDirects[typ]
	// idx emits R14 = grid index i of the 32 values.
	var idx func(i int)
	switch h, high := iqHighAVX2[typ]; {
	case high:
		// qs | bits of the chunk's qh (in R9) at 8.
		a.p("%s %d(SI), R9", h.load, h.qh+h.qhStep*p)
		idx = func(i int) {
			a.p("MOVBLZX %d(SI), R14", h.qs+h.n*p+i)
			iqHighBits(a, 8-h.step*i, h.mask)
		}
	case typ == "iq2XS":
		idx = func(i int) {
			a.p("MOVWLZX %d(SI), R14", 2+8*p+2*i)
			a.p("ANDL $511, R14")
		}
	default: // iq2XXS, iq3XXS
		idx = func(i int) { a.p("MOVBLZX %d(SI), R14", 2+8*p+i) }
	}
	iqPoints(a, q.point, idx)
	switch typ {
	case "iq1S":
		a.p("VPSHUFB iqConstAVX2<>+%d(SB), Y11, Y10", iqBcast+32*p)
		a.p("VPADDB Y10, Y8, Y8")
		return
	case "iq1M":
		a.p("VPSHUFB iqConstAVX2<>+%d(SB), Y11, Y10", iqSpread+32*pos)
		a.p("VPADDB Y10, Y8, Y8")
		return
	}
	a.p("VPSHUFB iqConstAVX2<>+%d(SB), Y11, Y10", iqSpread+32*pos)
	a.p("VPAND iqConstAVX2<>+%d(SB), Y10, Y10", iqBits)
	a.p("VPCMPEQB iqConstAVX2<>+%d(SB), Y10, Y10", iqBits)
	a.p("VPSUBB Y8, Y15, Y9")
	a.p("VPBLENDVB Y10, Y9, Y8, Y8")
}

// iqDScales are the factors of d (iqDirect.dScale), eight each in
// iqDScaleAVX2.
var iqDScales = []string{"0x3e000000", "0x3e800000"}

// Offsets in iqConstAVX2 (32 bytes each but the byte selectors' four).
const (
	iqC7F    = 0
	iqC0F    = 32
	iqC08    = 64
	iqC01    = 96
	iqW7     = 128
	iqW1     = 160
	iqParity = 192
	iqGroup  = 224
	iqBits   = 256
	iqTr4    = 288
	iqByte0  = 320 // four: bytes 0, 1, 2, 3 of each dword
	iqSpread = 448 // eight: chunk at position k
	iqBcast  = 704 // eight: byte p of each qword
	iqEnd    = 960
)

// iqDirectDataAVX2 emits the AVX2 direct kernels' tables.
func iqDirectDataAVX2(a *asm) {
	b := make([]byte, iqEnd)
	fill := func(off int, f func(i int) byte) {
		for i := range 32 {
			b[off+i] = f(i)
		}
	}
	fill(iqC7F, func(int) byte { return 0x7f })
	fill(iqC0F, func(int) byte { return 0x0f })
	fill(iqC08, func(int) byte { return 0x08 })
	fill(iqC01, func(int) byte { return 0x01 })
	fill(iqW7, func(i int) byte { return byte(7 * (1 - i%2)) })
	fill(iqW1, func(i int) byte { return byte(1 - i%2) })
	fill(iqParity, func(i int) byte {
		n := i % 16
		return byte((n^n>>1^n>>2^n>>3)&1) << 7
	})
	// Per lane: dword k's bytes 0-1 to 2k, 2k+1; its bytes 2-3 to 8+2k.
	fill(iqGroup, func(i int) byte {
		j := i % 16
		k, h := j%8/2, j/8
		return byte(4*k + 2*h + j%2)
	})
	fill(iqBits, func(i int) byte { return 1 << (i % 8) })
	fill(iqTr4, func(i int) byte {
		if i >= 16 {
			return 0x80
		}
		return byte(4*(i%4) + i/4)
	})
	for k := range 4 {
		fill(iqByte0+32*k, func(i int) byte {
			if i%4 == k {
				return 0xff
			}
			return 0
		})
	}
	for k := range 8 {
		// Lane bytes 0-7 group 2k's (low lane: group 0 of the chunk,
		// high: group 2), 8-15 group 2k+1's.
		fill(iqSpread+32*k, func(i int) byte { return byte(2*k + i%16/8) })
		fill(iqBcast+32*k, func(int) byte { return byte(k) })
	}
	dataBytes(a, "iqConstAVX2", b)
	for j, f := range iqDScales {
		for i := range 8 {
			fmt.Fprintf(&a.b, "DATA iqDScaleAVX2<>+%d(SB)/4, $%s\n", 32*j+4*i, f)
		}
	}
	fmt.Fprintf(&a.b, "GLOBL iqDScaleAVX2<>(SB), RODATA|NOPTR, $%d\n\n", 32*len(iqDScales))
}
