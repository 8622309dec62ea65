// Command asmgen writes the amd64 assembly kernels of package tensor
// (kernels_amd64.s) and their Go declarations (kernels_amd64_decl.go).
//
// The kernels are register-blocked tiles: each call computes R rows × T
// tokens of a matrix product for `groups` consecutive groups of R rows,
// reading every weight block once per T tokens. The many (R, T) variants
// differ only in loop bodies, so they are generated here from one
// description instead of being written out by hand.
//
// Run it with `go generate` in internal/tensor.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"log"
	"os"
	"path/filepath"
	"strings"
)

// asm accumulates the assembly text of one file.
type asm struct{ b bytes.Buffer }

func (a *asm) p(format string, args ...any) { fmt.Fprintf(&a.b, "\t"+format+"\n", args...) }
func (a *asm) label(l string)               { fmt.Fprintf(&a.b, "%s:\n", l) }
func (a *asm) comment(format string, args ...any) {
	fmt.Fprintf(&a.b, "\t// "+format+"\n", args...)
}

// decl accumulates the Go declarations.
type decl struct{ b bytes.Buffer }

func (d *decl) fn(doc, name, sig string) {
	fmt.Fprintf(&d.b, "// %s\n//\n//go:noescape\nfunc %s%s\n\n", doc, name, sig)
}

// text opens assembly function name with signature sig and frame (as
// "$0-88"): its Go declaration, documented by doc, goes to d, and its
// header comment and TEXT line to a.
func text(a *asm, d *decl, doc, name, sig, frame string) {
	d.fn(doc, name, sig)
	fmt.Fprintf(&a.b, "// func %s%s\nTEXT ·%s(SB), NOSPLIT, %s\n", name, sig, name, frame)
}

// stride returns the addressing of item i (0..3) given a base register and
// registers holding 1× and 3× the stride.
func stride(off int, base, s1, s3 string, i int) string {
	o := ""
	if off != 0 {
		o = fmt.Sprint(off)
	}
	switch i {
	case 0:
		return fmt.Sprintf("%s(%s)", o, base)
	case 1:
		return fmt.Sprintf("%s(%s)(%s*1)", o, base, s1)
	case 2:
		return fmt.Sprintf("%s(%s)(%s*2)", o, base, s1)
	case 3:
		return fmt.Sprintf("%s(%s)(%s*1)", o, base, s3)
	}
	panic("stride index")
}

// stepPairs emits a loop over the CX steps (CX = steps+40(FP)) two at a
// time, then the odd one: body(k) emits step k (0 or 1) of an iteration,
// advance moves the pointers on by two steps, and tail, if not nil, after
// the odd step.
func stepPairs(a *asm, label string, body func(k int), advance, tail func()) {
	a.p("SHRQ $1, CX")
	a.p("JZ %s_tail", label)
	a.label(label + "_pair")
	body(0)
	body(1)
	advance()
	a.p("DECQ CX")
	a.p("JNZ %s_pair", label)
	a.label(label + "_tail")
	a.p("TESTQ $1, steps+40(FP)")
	a.p("JZ %s_done", label)
	body(0)
	if tail != nil {
		tail()
	}
	a.label(label + "_done")
}

// nextOrReturn closes a kernel's outer loop: it decrements counter, goes
// back to label while it is not zero, then returns.
func nextOrReturn(a *asm, counter, label string) {
	a.p("DECQ %s", counter)
	a.p("JNZ %s", label)
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// reduceStore sums the 8 lanes of each of the R accumulators of token t
// (registers Y(t*R+r), all in Y0-Y15) and stores the R results at (CX).
// It clobbers the accumulators.
func reduceStore(a *asm, R, t int) { reduceStoreTmp(a, R, t, 15) }

// reduceStoreTmp is reduceStore with scratch register X(tmp) for R < 4.
func reduceStoreTmp(a *asm, R, t, tmp int) {
	acc := func(r int) int { return t*R + r }
	if R == 4 {
		a.p("VHADDPS Y%d, Y%d, Y%d", acc(1), acc(0), acc(0))
		a.p("VHADDPS Y%d, Y%d, Y%d", acc(3), acc(2), acc(2))
		a.p("VHADDPS Y%d, Y%d, Y%d", acc(2), acc(0), acc(0))
		a.p("VEXTRACTF128 $1, Y%d, X%d", acc(0), acc(1))
		a.p("VADDPS X%d, X%d, X%d", acc(1), acc(0), acc(0))
		a.p("VMOVUPS X%d, (CX)", acc(0))
		return
	}
	// Fewer than four rows: the same order of additions per accumulator as
	// above, ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)), so that a result does
	// not depend on which tile computed it.
	for r := 0; r < R; r++ {
		x := acc(r)
		a.p("VHADDPS Y%d, Y%d, Y%d", x, x, x)
		a.p("VHADDPS Y%d, Y%d, Y%d", x, x, x)
		a.p("VEXTRACTF128 $1, Y%d, X%d", x, tmp)
		a.p("VADDSS X%d, X%d, X%d", tmp, x, x)
		a.p("VMOVSS X%d, %d(CX)", x, 4*r)
	}
}

// floatKernel generates an F32, F16 or BF16 weight × f32 activation tile
// (AVX2 + FMA + F16C; VEX only).
//
// Arguments: w *byte, rowBytes, groups int, y *float32, yStride int,
// steps int (columns / 8), dst *float32, ldBytes int.
//
// Single-row kernels process two 8-column steps per iteration. Every kernel
// keeps one accumulator per output and adds the steps in order, so results
// do not depend on the tile shape (batch invariance).
func floatKernel(a *asm, d *decl, typ string, R, T int) {
	name := fmt.Sprintf("%sFMA_%dx%d", typ, R, T)
	esz := map[string]int{"f32": 4, "f16": 2, "bf16": 2}[typ]
	text(a, d, fmt.Sprintf("%s computes a %d-row × %d-token tile of %s weights × f32 activations over steps×8 columns.", name, R, T, strings.ToUpper(typ)),
		name, "(w *byte, rowBytes, groups int, y *float32, yStride int, steps int, dst *float32, ldBytes int)", "$0-64")
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("LEAQ (R8)(R8*2), R9")
	a.p("MOVQ yStride+32(FP), R10")
	a.p("LEAQ (R10)(R10*2), R11")
	a.p("MOVQ dst+48(FP), AX")
	a.p("MOVQ ldBytes+56(FP), R14")
	a.p("MOVQ groups+16(FP), R15")
	unroll := R == 1
	acc := func(r, t int) int { return t*R + r }
	wreg := func(r int) int { return R*T + r }
	rowAddr := func(off, r int) string { return stride(off, "SI", "R8", "R9", r) }
	tokAddr := func(off, t int) string { return stride(off, "DI", "R10", "R11", t) }
	// load puts row r's 8 weights of step k, widened to f32, in Y(reg).
	load := func(k, r, reg int) {
		switch typ {
		case "f32":
			a.p("VMOVUPS %s, Y%d", rowAddr(k*8*esz, r), reg)
		case "f16":
			a.p("VCVTPH2PS %s, Y%d", rowAddr(k*8*esz, r), reg)
		case "bf16":
			a.p("VPMOVZXWD %s, Y%d", rowAddr(k*8*esz, r), reg)
			a.p("VPSLLD $16, Y%d, Y%d", reg, reg)
		}
	}
	body := func(k int) {
		if R == 4 {
			// The tokens' values in Y13+t, then one row at a time in
			// Y12: 7 loads a step where memory operands took 16, which
			// bounded the tile below the FMA units' rate. The same
			// FMAs into the same accumulators in the same order.
			for t := 0; t < T; t++ {
				a.p("VMOVUPS %s, Y%d", tokAddr(32*k, t), 13+t)
			}
			for r := 0; r < R; r++ {
				load(k, r, 12)
				for t := 0; t < T; t++ {
					a.p("VFMADD231PS Y%d, Y12, Y%d", 13+t, acc(r, t))
				}
			}
			return
		}
		for r := 0; r < R; r++ {
			load(k, r, wreg(r))
		}
		for t := 0; t < T; t++ {
			for r := 0; r < R; r++ {
				a.p("VFMADD231PS %s, Y%d, Y%d", tokAddr(32*k, t), wreg(r), acc(r, t))
			}
		}
	}
	a.label(name + "_group")
	a.p("MOVQ y+24(FP), DI")
	a.p("MOVQ steps+40(FP), CX")
	a.p("MOVQ SI, BX") // group start
	for i := 0; i < R*T; i++ {
		a.p("VXORPS Y%d, Y%d, Y%d", i, i, i)
	}
	if unroll {
		stepPairs(a, name, body, func() {
			a.p("ADDQ $%d, SI", 16*esz)
			a.p("ADDQ $64, DI")
		}, nil)
	} else {
		a.label(name + "_step")
		body(0)
		a.p("ADDQ $%d, SI", 8*esz)
		a.p("ADDQ $32, DI")
		a.p("DECQ CX")
		a.p("JNZ %s_step", name)
	}
	a.p("MOVQ AX, CX")
	for t := 0; t < T; t++ {
		reduceStore(a, R, t)
		if t+1 < T {
			a.p("ADDQ R14, CX")
		}
	}
	a.p("ADDQ $%d, AX", 4*R)
	// Next group: R rows past the group start.
	a.p("MOVQ BX, SI")
	switch R {
	case 1:
		a.p("ADDQ R8, SI")
	case 4:
		a.p("LEAQ (SI)(R8*4), SI")
	default:
		for r := 0; r < R; r++ {
			a.p("ADDQ R8, SI")
		}
	}
	nextOrReturn(a, "R15", name+"_group")
}

// kKernel generates a Q2_K, Q3_K, Q4_K, Q5_K or Q6_K (typ "q2K", "q3K",
// "q4K", "q5K", "q6K") weight
// × Q8_K activation kernel for one row at a time (rows are looped) and T
// tokens.
//
// Arguments: w *byte, rows int, y *int8, yStride int, d *float32,
// dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int.
//
// Per 256-value block and token the integer sum Σ_j sc_j·(q·y)_j is built
// with vpmaddubsw (unsigned 4/5/6-bit values × int8 activations, pairs in
// int16 without saturation: 2·63·127 < 2^15) and vpmaddwd/vpdpwssd against
// the sub-block scales, then scaled once by d·dy. The offsets (Q2_K's,
// Q4_K's and Q5_K's mins, Q6_K's −32) come from the activations' 16-value
// sums bs. Q5_K is Q4_K with each value's fifth bit moved from qh into bit
// 4; Q2_K has Q6_K's sub-blocks of 16 (scales spread by the same shuffle;
// at the AVX2 level widened first, q2KBlockAVX2) with unsigned 4-bit
// scales and mins, one min per 16-value sum; Q3_K is Q2_K's values with a
// third bit from hmask and Q6_K's signed scales and offset (−4).
//
// The weight unpacking is shared by the T tokens; with one row per pass a
// tile needs only 2·T accumulators, so the same loop serves AVX2 (16
// registers) and AVX-512 (VNNI's vpdpwssd, embedded broadcasts, ternlog).
func kKernel(a *asm, d *decl, typ string, vnni bool, T int) {
	q6, q5, q2, q3, iq4, q8 := typ == "q6K", typ == "q5K", typ == "q2K", typ == "q3K", typ == "iq4XS", typ == "q8K16"
	// exact: Q4_K's and Q5_K's float steps are dotQ4KRow's, per block
	// (kExactSteps), Q2_K's dotQ2KRow's, Q6_K's dotQ6KRow's, Q3_K's
	// dotQ3KRow's and IQ4_XS's dotIQ4XSRow's; dOff is where a block keeps
	// its f16 d (and dmin after it).
	exact := typ == "q4K" || q5 || q6 || q3 || q2 || iq4
	mins := typ == "q4K" || q5 || q2 // exact steps with dmin beside d
	dOff := map[string]int{"q6K": 208, "q3K": 108, "q2K": 80}[typ]
	iqd, direct := iqDirects[typ] // iqdirect.go (VNNI with VBMI), iqdirectavx2.go
	bsz := map[string]int{"q2K": 84, "q3K": 110, "q4K": 144, "q5K": 176, "q6K": 210, "iq4XS": 136, "q8K16": 276}[typ]
	typeName := map[string]string{"q2K": "Q2_K", "q3K": "Q3_K", "q4K": "Q4_K", "q5K": "Q5_K", "q6K": "Q6_K", "iq4XS": "IQ4_XS", "q8K16": "Q8_K16"}[typ]
	if direct {
		bsz, typeName = iqd.size, iqd.typeName
	}
	qsOff := 16 // Q4_K's and Q5_K's 4-bit halves
	if q5 {
		qsOff = 48
	}
	isa := "AVX2"
	if vnni {
		isa = "VNNI"
	}
	name := fmt.Sprintf("%s%s_%d", typ, isa, T)
	frame := "$64-88"
	if direct {
		frame = iqFrame
	}
	sig := "(w *byte, rows int, y *int8, yStride int, d *float32, dStride int, bs *int16, bsStride, nb int, dst *float32, ldBytes int)"
	text(a, d, fmt.Sprintf("%s computes rows × %d tokens of %s weights × Q8_K activations (%s).", name, T, typeName, isa), name, sig, frame)
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ yStride+24(FP), R10")
	a.p("LEAQ (R10)(R10*2), R11")
	a.p("MOVQ dStride+40(FP), R12")
	a.p("LEAQ (R12)(R12*2), R13")
	a.p("MOVQ bsStride+56(FP), R9")
	a.p("LEAQ (R9)(R9*2), R15")
	a.p("MOVQ dst+72(FP), AX")
	// Register plan. Y0..: float accumulators facc_t; Y4..: int sums (t).
	facc := func(t int) int { return t }
	sumiBase := 4 // the second block of a pair (kBlockPair): 5
	sumi := func(t int) int { return sumiBase + t }
	yAddr := func(off, t int) string { return stride(off, "DI", "R10", "R11", t) }
	dAddr := func(t int) string { return stride(0, "BX", "R12", "R13", t) }
	bsAddr := func(t int) string { return stride(0, "DX", "R9", "R15", t) }
	mov := "VMOVDQU"
	and := "VPAND"
	if vnni {
		mov = "VMOVDQU32"
		and = "VPANDD"
	}
	// Constants. VNNI: Y28 0x0f bytes, Y29 0x30 bytes (Q5_K: 0x10), X30 3f,
	// X31 03 masks, X27 shift counts. AVX2: Y15 0x0f bytes (Q2_K: 0x0c,
	// Q3_K: 0x04), Y14 0x30 bytes (Q5_K: 0x10, Q2_K and Q3_K: 0x03).
	// IQ4_XS, both levels: Y14 0x0f bytes, Y15 its table.
	if q8 {
		// Q8_K16's values need no masks.
	} else if direct && vnni {
		iqDirectConsts(a, typ)
	} else if direct {
		iqDirectConstsAVX2(a, typ)
	} else if iq4 {
		a.p("MOVL $0x0f0f0f0f, CX")
		a.p("VMOVD CX, X14")
		a.p("VPBROADCASTD X14, Y14")
		a.p("VBROADCASTI128 iq4Table<>(SB), Y15")
	} else if vnni {
		a.p("MOVL $0x0f0f0f0f, CX")
		a.p("VPBROADCASTD CX, Y28")
		switch {
		case q6:
			a.p("MOVL $0x30303030, CX")
			a.p("VPBROADCASTD CX, Y29")
		case q2:
			a.p("MOVL $0x03030303, CX")
			a.p("VPBROADCASTD CX, Y29")
		case q3:
			a.p("MOVL $0x03030303, CX")
			a.p("VPBROADCASTD CX, Y29")
			a.p("MOVL $0x04040404, CX")
			a.p("VPBROADCASTD CX, Y30")
			a.p("MOVL $0x20202020, CX")
			a.p("VPBROADCASTD CX, X31")
			a.p("VMOVDQU32 k3Const<>+16(SB), X27") // shift counts [0, 2, 4, 6]
		default:
			a.p("MOVL $0x3f3f3f3f, CX")
			a.p("VPBROADCASTD CX, X30")
			a.p("MOVL $0x03030303, CX")
			a.p("VPBROADCASTD CX, X31")
			a.p("MOVL $4, CX")
			a.p("VMOVD CX, X27")
			a.p("VPSLLDQ $4, X27, X27") // dwords [0, 4, 0, 0]
			if q5 {
				a.p("MOVL $0x10101010, CX")
				a.p("VPBROADCASTD CX, Y29")
			}
		}
	} else {
		if q3 {
			a.p("MOVL $0x04040404, CX") // Q3_K: 0x04 bytes, the third bit
		} else if q2 {
			a.p("MOVL $0x0c0c0c0c, CX") // Q2_K: 0x0c bytes (q2KBlockAVX2)
		} else {
			a.p("MOVL $0x0f0f0f0f, CX")
		}
		a.p("VMOVD CX, X15")
		a.p("VPBROADCASTD X15, Y15")
		if q6 || q5 || q2 || q3 {
			// Q6_K: 0x30 bytes; Q5_K: 0x10 bytes, the fifth bit; Q2_K:
			// 0x03 bytes.
			a.p("MOVL $%#x, CX", map[string]int{"q6K": 0x30303030, "q5K": 0x10101010, "q2K": 0x03030303, "q3K": 0x03030303}[typ])
			a.p("VMOVD CX, X14")
			a.p("VPBROADCASTD X14, Y14")
		}
	}
	a.label(name + "_row")
	a.p("MOVQ y+16(FP), DI")
	a.p("MOVQ d+32(FP), BX")
	a.p("MOVQ bs+48(FP), DX")
	a.p("MOVQ nb+64(FP), CX")
	for t := 0; t < T; t++ {
		a.p("VXORPS Y%d, Y%d, Y%d", facc(t), facc(t), facc(t))
	}
	// pairing: a Q4_K, Q5_K or Q6_K block whose float steps wait for the
	// next block's (kBlockPair).
	pairing := false
	block := func() {
		if !vnni {
			for off := 0; off < bsz; off += 64 {
				a.p("PREFETCHT1 %d(SI)", kPrefetch+off)
			}
		}
		for t := 0; t < T && !((q2 || q3) && !vnni); t++ { // AVX2 Q2_K and Q3_K set sumi themselves
			a.p("VPXOR Y%d, Y%d, Y%d", sumi(t), sumi(t), sumi(t))
		}
		// scaleAcc adds (pairs of int16 in Yp) × (int16 scales) to sumi(t):
		// VNNI: vpdpwssd with the scale from mem (broadcast if bcst);
		// AVX2: vpmaddwd + vpaddd, scale loaded into Y13 first by the caller.
		if q8 {
			q8K16Block(a, vnni, T, yAddr, dAddr, bsAddr, facc, sumi)
		} else if direct && vnni {
			iqDirectBlock(a, typ, T, yAddr, dAddr, bsAddr, facc, sumi)
		} else if direct {
			iqDirectBlockAVX2(a, typ, T, yAddr, dAddr, bsAddr, facc, sumi)
		} else if iq4 {
			iq4XSBlock(a, vnni, T, yAddr, sumi)
			if !pairing {
				kExactSteps(a, vnni, false, dOff, T, dAddr, bsAddr, facc, sumi)
			}
		} else if q2 {
			q2KBlock(a, vnni, T, !pairing, yAddr, sumi)
			if !pairing {
				kExactSteps(a, vnni, true, dOff, T, dAddr, bsAddr, facc, sumi)
			}
		} else if q3 {
			q3KBlock(a, vnni, T, yAddr, bsAddr, sumi)
			if !pairing {
				kExactSteps(a, vnni, false, dOff, T, dAddr, bsAddr, facc, sumi)
			}
		} else if !q6 {
			// --- Q4_K, Q5_K ---
			// Unpack the 6-bit scales and mins: bytes 0-7 scales, 8-15 mins.
			if vnni {
				a.p("VMOVDQU32 4(SI), X16")
				a.p("VPANDD X30, X16, X17")      // [sc_lo, m_lo, ..]
				a.p("VPSHUFD $0x0a, X16, X18")   // [u2, u2, ..]
				a.p("VPSRLVD X27, X18, X18")     // [u2, u2>>4]
				a.p("VPANDD X28, X18, X18")      // & 0x0f
				a.p("VPSRLD $6, X16, X19")       // [u0>>6, u1>>6]
				a.p("VPANDD X31, X19, X19")      // & 0x03
				a.p("VPSLLD $4, X19, X19")       // << 4
				a.p("VPORD X19, X18, X18")       // [sc_hi, m_hi]
				a.p("VPUNPCKLQDQ X18, X17, X17") // [sc_lo, m_lo, sc_hi, m_hi]
				a.p("VPSHUFD $0xd8, X17, X17")   // [sc_lo, sc_hi, m_lo, m_hi]
				a.p("VPMOVZXBD X17, Y18")        // scales as dwords
				a.p("VPSLLD $16, Y18, Y16")
				a.p("VPORD Y16, Y18, Y18") // sc | sc<<16
				a.p("VMOVDQU32 Y18, 0(SP)")
				a.p("VPUNPCKHBW X17, X17, X19") // m0 m0 m1 m1 ...
				a.p("VPMOVZXBW X19, Y19")       // mins16
				if !exact {                     // kExactSteps reads d and dmin itself
					a.p("VPBROADCASTW 0(SI), X20")
					a.p("VCVTPH2PS X20, Y20") // d
					a.p("VPBROADCASTW 2(SI), X21")
					a.p("VCVTPH2PS X21, Y21") // dmin
				}
			} else {
				// The VNNI level's unpacking with VEX registers and the
				// masks and shift counts from memory (k4Const): 0(SP) the
				// scale dwords, 32(SP) mins16. (Scalar unpacking took about
				// twice the instructions, a third of a decoded block's.)
				a.p("VMOVDQU 4(SI), X8")
				a.p("VPAND k4Const<>+0(SB), X8, X9")      // [sc_lo, m_lo, ..]
				a.p("VPSHUFD $0x0a, X8, X10")             // [u2, u2, ..]
				a.p("VPSRLVD k4Const<>+32(SB), X10, X10") // [u2, u2>>4]
				a.p("VPAND X15, X10, X10")                // & 0x0f
				a.p("VPSRLD $6, X8, X11")                 // [u0>>6, u1>>6]
				a.p("VPAND k4Const<>+16(SB), X11, X11")   // & 0x03
				a.p("VPSLLD $4, X11, X11")                // << 4
				a.p("VPOR X11, X10, X10")                 // [sc_hi, m_hi]
				a.p("VPUNPCKLQDQ X10, X9, X9")            // [sc_lo, m_lo, sc_hi, m_hi]
				a.p("VPSHUFD $0xd8, X9, X9")              // [sc_lo, sc_hi, m_lo, m_hi]
				a.p("VPMOVZXBD X9, Y10")                  // scales as dwords
				a.p("VPSLLD $16, Y10, Y11")
				a.p("VPOR Y11, Y10, Y10") // sc | sc<<16
				a.p("VMOVDQU Y10, 0(SP)")
				a.p("VPUNPCKHBW X9, X9, X11") // m0 m0 m1 m1 ...
				a.p("VPMOVZXBW X11, Y11")
				a.p("VMOVDQU Y11, 32(SP)") // mins16
			}
			// Q5_K's fifth bits: H (Y16, AVX2 Y13) holds qh, whose bit s of
			// byte l is that of value l of sub-block s; fifth(s, v) ORs it
			// into bit 4 of v's bytes, shifting by 4−s within 16-bit words
			// (a byte's bit 4 only ever comes from the same byte).
			H, hTmp, bit4 := 13, 10, 14
			if vnni {
				H, hTmp, bit4 = 16, 17, 29
			}
			fifth := func(sub, v int) { orBit(a, vnni, H, hTmp, bit4, v, sub, 4) }
			if q5 {
				a.p("%s 16(SI), Y%d", mov, H)
			}
			for c := 0; c < 4; c++ {
				lo, hi := 8, 9
				if vnni {
					lo, hi = 22, 23
				}
				mask := 15
				if vnni {
					mask = 28
				}
				a.p("%s %d(SI), Y%d", mov, qsOff+32*c, lo)
				a.p("VPSRLW $4, Y%d, Y%d", lo, hi)
				a.p("%s Y%d, Y%d, Y%d", and, mask, lo, lo)
				a.p("%s Y%d, Y%d, Y%d", and, mask, hi, hi)
				if q5 {
					fifth(2*c, lo)
					fifth(2*c+1, hi)
				}
				for t := 0; t < T; t++ {
					for k, q := range []int{lo, hi} {
						sub := 2*c + k
						tmp := 10 + k
						if vnni {
							tmp = 24 + k
						}
						a.p("VPMADDUBSW %s, Y%d, Y%d", yAddr(64*c+32*k, t), q, tmp)
						if vnni {
							a.p("VPDPWSSD.BCST %d(SP), Y%d, Y%d", 4*sub, tmp, sumi(t))
						} else {
							a.p("VPBROADCASTD %d(SP), Y12", 4*sub)
							a.p("VPMADDWD Y12, Y%d, Y%d", tmp, tmp)
							a.p("VPADDD Y%d, Y%d, Y%d", tmp, sumi(t), sumi(t))
						}
					}
				}
			}
			if !pairing {
				kExactSteps(a, vnni, true, 0, T, dAddr, bsAddr, facc, sumi)
			}
		} else {
			// --- Q6_K ---
			// Scales: X18 the 16 int8 scales, Y19 the same as int16 (for the
			// −32 offset); kExactSteps reads d itself.
			if vnni {
				a.p("VMOVDQU32 192(SI), X18")
				a.p("VPMOVSXBW X18, Y19")
			}
			for h := 0; h < 2; h++ {
				// v0..v3: the 4 vectors of 32 6-bit values of this half.
				A, B, H := 21, 22, 23
				v := []int{8, 9, 10, 11}
				tmp := 24
				mask0f, mask30 := 28, 29
				if !vnni {
					A, B, H = 12, 13, 11
					v = []int{8, 9, 10, 11} // v3 reuses H's register last
					tmp = 10
					mask0f, mask30 = 15, 14
				}
				if vnni {
					a.p("VMOVDQU32 %d(SI), Y%d", 64*h, A)
					a.p("VMOVDQU32 %d(SI), Y%d", 64*h+32, B)
					a.p("VMOVDQU32 %d(SI), Y%d", 128+32*h, H)
					// v0 = A&0f | (H<<4)&30
					a.p("VPANDD Y%d, Y%d, Y%d", mask0f, A, v[0])
					a.p("VPSLLW $4, Y%d, Y%d", H, tmp)
					a.p("VPTERNLOGD $0xf8, Y%d, Y%d, Y%d", mask30, tmp, v[0])
					// v1 = B&0f | (H<<2)&30
					a.p("VPANDD Y%d, Y%d, Y%d", mask0f, B, v[1])
					a.p("VPSLLW $2, Y%d, Y%d", H, tmp)
					a.p("VPTERNLOGD $0xf8, Y%d, Y%d, Y%d", mask30, tmp, v[1])
					// v2 = (A>>4)&0f | H&30
					a.p("VPSRLW $4, Y%d, Y%d", A, v[2])
					a.p("VPANDD Y%d, Y%d, Y%d", mask0f, v[2], v[2])
					a.p("VPTERNLOGD $0xf8, Y%d, Y%d, Y%d", mask30, H, v[2])
					// v3 = (B>>4)&0f | (H>>2)&30
					a.p("VPSRLW $4, Y%d, Y%d", B, v[3])
					a.p("VPANDD Y%d, Y%d, Y%d", mask0f, v[3], v[3])
					a.p("VPSRLW $2, Y%d, Y%d", H, tmp)
					a.p("VPTERNLOGD $0xf8, Y%d, Y%d, Y%d", mask30, tmp, v[3])
				} else {
					// 16 registers: build the four vectors one at a time
					// into v[i] (Y8..Y11), using Y12/Y13 as scratch.
					type part struct {
						src, shiftQ, shiftH int // shiftH > 0: left, < 0: right
					}
					parts := []part{{64 * h, 0, 4}, {64*h + 32, 0, 2}, {64 * h, 4, 0}, {64*h + 32, 4, -2}}
					for i, pt := range parts {
						a.p("VMOVDQU %d(SI), Y12", pt.src)
						if pt.shiftQ > 0 {
							a.p("VPSRLW $%d, Y12, Y12", pt.shiftQ)
						}
						a.p("VPAND Y15, Y12, Y12")
						a.p("VMOVDQU %d(SI), Y13", 128+32*h)
						switch {
						case pt.shiftH > 0:
							a.p("VPSLLW $%d, Y13, Y13", pt.shiftH)
						case pt.shiftH < 0:
							a.p("VPSRLW $%d, Y13, Y13", -pt.shiftH)
						}
						a.p("VPAND Y14, Y13, Y13")
						a.p("VPOR Y13, Y12, Y%d", v[i])
					}
				}
				for i := 0; i < 4; i++ {
					p := 4*h + i // pair of 16-value sub-blocks 2p, 2p+1
					// Scale vector [sc_2p ×8 | sc_2p+1 ×8] as int16.
					if vnni {
						a.p("VPSHUFB q6kShuf<>+%d(SB), X18, X26", 16*p)
						a.p("VPMOVSXBW X26, Y26")
					} else {
						a.p("VMOVDQU 192(SI), X12")
						a.p("VPSHUFB q6kShuf<>+%d(SB), X12, X12", 16*p)
						a.p("VPMOVSXBW X12, Y12")
					}
					for t := 0; t < T; t++ {
						if vnni {
							a.p("VPMADDUBSW %s, Y%d, Y%d", yAddr(128*h+32*i, t), v[i], 25)
							a.p("VPDPWSSD Y26, Y25, Y%d", sumi(t))
						} else {
							a.p("VPMADDUBSW %s, Y%d, Y13", yAddr(128*h+32*i, t), v[i])
							a.p("VPMADDWD Y12, Y13, Y13")
							a.p("VPADDD Y13, Y%d, Y%d", sumi(t), sumi(t))
						}
					}
				}
			}
			for t := 0; t < T; t++ {
				if vnni {
					a.p("VPMADDWD %s, Y19, Y24", bsAddr(t))
					a.p("VPSLLD $5, Y24, Y24")
					a.p("VPSUBD Y24, Y%d, Y%d", sumi(t), sumi(t))
				} else {
					a.p("VPMOVSXBW 192(SI), Y12")
					a.p("VPMADDWD %s, Y12, Y12", bsAddr(t))
					a.p("VPSLLD $5, Y12, Y12")
					a.p("VPSUBD Y12, Y%d, Y%d", sumi(t), sumi(t))
				}
			}
			if !pairing {
				kExactSteps(a, vnni, false, dOff, T, dAddr, bsAddr, facc, sumi)
			}
		}
	}
	advance := func() {
		a.p("ADDQ $%d, SI", bsz)
		a.p("ADDQ $256, DI")
		a.p("ADDQ $4, BX")
		a.p("ADDQ $32, DX")
	}
	if exact && T == 1 {
		// IQ4_XS's block holds its mask and table in Y14, Y15 and
		// takes Y8-Y13: the first block's d and dy wait in X1, X2 (free
		// with one token), as at the AVX2 level.
		dd, dy := 13, 14
		if !vnni || iq4 {
			dd, dy = 1, 2
		}
		minsReg := -1
		if q2 && !vnni {
			minsReg = 8 // q2KBlock leaves the mins in Y8
		}
		kBlockPair(a, vnni, mins, dOff, dd, dy, minsReg, name, func(second bool) {
			pairing, sumiBase = true, 4
			if second {
				sumiBase = 5
			}
			block()
		}, func() {
			pairing, sumiBase = false, 4
			block()
		}, advance, bsAddr)
	} else {
		a.label(name + "_block")
		block()
		advance()
		a.p("DECQ CX")
		a.p("JNZ %s_block", name)
	}
	a.p("MOVQ ldBytes+80(FP), R14")
	a.p("MOVQ AX, CX")
	for t := 0; t < T; t++ {
		switch {
		case exact && T >= 3 && t > 0: // kExactSteps: token t in lane t of facc(0)
			a.p("VEXTRACTPS $%d, X%d, (CX)", t, facc(0))
		case exact && t%2 == 0: // kExactSteps: a pair of tokens' sums in lanes 0 and 1
			a.p("VMOVSS X%d, (CX)", facc(t))
		case exact:
			a.p("VEXTRACTPS $1, X%d, (CX)", facc(t-1))
		default:
			reduceStoreTmp(a, 1, t, 12)
		}
		if t+1 < T {
			a.p("ADDQ R14, CX")
		}
	}
	a.p("ADDQ $4, AX")
	a.p("DECQ rows+8(FP)")
	a.p("JNZ %s_row", name)
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// q2KBlock emits the body of kKernel's block loop for Q2_K: the sums of
// the 2-bit values (four shifts of each 32 bytes of qs) times the
// activations with Q6_K's spread scales, and the mins as int16 for
// kExactSteps, which takes the block's float steps (d·dy times the sums
// less dmin·dy times the mins' products with the 16-value sums bs).
// store: the AVX2 mins go to 32(SP) as well as Y8 (kExactSteps reads them
// there; a pair of blocks, kBlockPair, takes them from Y8).
func q2KBlock(a *asm, vnni bool, T int, store bool, yAddr func(off, t int) string, sumi func(t int) int) {
	if !vnni {
		q2KBlockAVX2(a, T, store, yAddr, sumi)
		return
	}
	// Registers: X18 scales, Y19 mins16, Y24 a chunk of qs, Y25 its
	// values, Y26 their scales, Y27 products; Y28 0x0f, Y29 0x03.
	sc, chunk, vals, scv, prod, mask3, mask0f := 18, 24, 25, 26, 27, 29, 28
	a.p("VMOVDQU32 0(SI), X%d", sc)
	a.p("VPANDD X%d, X%d, X%d", mask0f, sc, sc)
	for n := 0; n < 2; n++ {
		a.p("VMOVDQU32 %d(SI), Y%d", 16+32*n, chunk)
		for j := 0; j < 4; j++ {
			twoBits(a, "VPANDD", mask3, chunk, vals, j)
			sub16Products(a, true, T, n, j, vals, sc, scv, prod, false, yAddr, sumi)
		}
	}
	// mins16 where kExactSteps takes them.
	a.p("VMOVDQU32 0(SI), X19")
	a.p("VPSRLW $4, X19, X19")
	a.p("VPANDD X28, X19, X19")
	a.p("VPMOVZXBW X19, Y19")
}

// q2KBlockAVX2 is q2KBlock at the AVX2 level. The 16 scales are widened
// to int16 once a block, the even sub-blocks' in the low 128-bit lane and
// the odd ones' in the high lane (k16Spread), so that one in-lane VPSHUFB
// spreads a pair's scales where sub16Products takes a byte shuffle and a
// widening. The values come with fewer shifts: of each byte of qs, bits
// 2-3 and, after one shift by 4, bits 6-7 are taken in place, four times
// the value, and the other values' scales are taken four times instead;
// sumi, 4·S, is shifted back at the end (exact: every product is a
// multiple of 4). The first products set sumi rather than adding to
// zeros. Y9 the scales, Y8 four times them, Y10 a chunk of qs, Y11 its
// values, Y12 their scales, Y13 products; Y14 0x03, Y15 0x0c.
func q2KBlockAVX2(a *asm, T int, store bool, yAddr func(off, t int) string, sumi func(t int) int) {
	a.p("VMOVDQU 0(SI), X3")
	a.p("VPAND k3Const<>+0(SB), X3, X9") // & 0x0f
	a.p("VPSHUFB k16Spread<>+256(SB), X9, X9")
	a.p("VPMOVZXBW X9, Y9")
	a.p("VPSLLW $2, Y9, Y8")
	for n := 0; n < 2; n++ {
		a.p("VMOVDQU %d(SI), Y10", 16+32*n)
		for j := 0; j < 4; j++ {
			p := 4*n + j
			src, mask, sc := 10, 14, 8 // bits 0-1 (4-5 after the shift): scales ×4
			if j%2 == 1 {
				mask, sc = 15, 9 // bits 2-3 (6-7): the values ×4
			}
			if j == 2 {
				a.p("VPSRLW $4, Y10, Y10")
			}
			a.p("VPAND Y%d, Y%d, Y11", mask, src)
			a.p("VPSHUFB k16Spread<>+%d(SB), Y%d, Y12", 32*p, sc)
			for t := 0; t < T; t++ {
				a.p("VPMADDUBSW %s, Y11, Y13", yAddr(128*n+32*j, t))
				if p == 0 {
					a.p("VPMADDWD Y12, Y13, Y%d", sumi(t))
					continue
				}
				a.p("VPMADDWD Y12, Y13, Y13")
				a.p("VPADDD Y13, Y%d, Y%d", sumi(t), sumi(t))
			}
		}
	}
	for t := 0; t < T; t++ {
		a.p("VPSRAD $2, Y%d, Y%d", sumi(t), sumi(t))
	}
	a.p("VPSRLW $4, X3, X8")
	a.p("VPAND k3Const<>+0(SB), X8, X8")
	a.p("VPMOVZXBW X8, Y8") // mins16
	if store {
		a.p("VMOVDQU Y8, 32(SP)")
	}
}

// k16SpreadData is the AVX2 Q2_K and Q3_K kernels' VPSHUFB table
// (q2KBlockAVX2, q3KBlockAVX2): for p = 0..7, 32 bytes that spread int16 p
// of each 128-bit lane over the lane; then 16 bytes that put the even
// bytes before the odd ones; then 32 bytes of 0x0c and 32 of 0x10 (Q3_K's
// masks).
func k16SpreadData(a *asm) {
	for p := 0; p < 8; p++ {
		v := uint64(0)
		for i := 0; i < 4; i++ {
			v |= uint64(2*p)<<(16*i) | uint64(2*p+1)<<(16*i+8)
		}
		for h := 0; h < 4; h++ {
			fmt.Fprintf(&a.b, "DATA k16Spread<>+%d(SB)/8, $0x%016x\n", 32*p+8*h, v)
		}
	}
	fmt.Fprintf(&a.b, "DATA k16Spread<>+256(SB)/8, $0x%016x\n", uint64(0x0e0c0a0806040200))
	fmt.Fprintf(&a.b, "DATA k16Spread<>+264(SB)/8, $0x%016x\n", uint64(0x0f0d0b0907050301))
	for i := 0; i < 8; i++ {
		v := uint64(0x0c0c0c0c0c0c0c0c)
		if i >= 4 {
			v = 0x1010101010101010
		}
		fmt.Fprintf(&a.b, "DATA k16Spread<>+%d(SB)/8, $0x%016x\n", 272+8*i, v)
	}
	a.b.WriteString("GLOBL k16Spread<>(SB), RODATA|NOPTR, $336\n\n")
}

// orBit ORs bit `from` of each byte of Y[src] into bit `to` of Y[v]'s
// bytes: Y[mask] holds 1<<to in every byte, Y[tmp] is scratch. The 16-bit
// shifts move no bit of one byte into the other's bit `to`.
func orBit(a *asm, vnni bool, src, tmp, mask, v, from, to int) {
	s := src
	switch {
	case from < to:
		a.p("VPSLLW $%d, Y%d, Y%d", to-from, src, tmp)
		s = tmp
	case from > to:
		a.p("VPSRLW $%d, Y%d, Y%d", from-to, src, tmp)
		s = tmp
	}
	if vnni {
		a.p("VPTERNLOGD $0xf8, Y%d, Y%d, Y%d", mask, s, v) // v |= s & mask
		return
	}
	a.p("VPAND Y%d, Y%d, Y%d", mask, s, tmp)
	a.p("VPOR Y%d, Y%d, Y%d", tmp, v, v)
}

// twoBits sets Y[vals] to the 2-bit values at bits 2j of Y[chunk]'s bytes.
func twoBits(a *asm, and string, mask3, chunk, vals, j int) {
	if j == 0 {
		a.p("%s Y%d, Y%d, Y%d", and, mask3, chunk, vals)
		return
	}
	a.p("VPSRLW $%d, Y%d, Y%d", 2*j, chunk, vals)
	a.p("%s Y%d, Y%d, Y%d", and, mask3, vals, vals)
}

// sub16Products adds to each token's sumi the products of the 32 unsigned
// values in Y[vals], sub-blocks 2p and 2p+1 (p = 4n+j) of a block of 16-value
// sub-blocks, with the activations at 128n+32j, times the sub-blocks'
// scales: bytes 2p and 2p+1 of X[sc] (signed or not), spread over the two
// halves by q6kShuf into Y[scv].
func sub16Products(a *asm, vnni bool, T, n, j, vals, sc, scv, prod int, signed bool, yAddr func(off, t int) string, sumi func(t int) int) {
	a.p("VPSHUFB q6kShuf<>+%d(SB), X%d, X%d", 16*(4*n+j), sc, scv)
	if signed {
		a.p("VPMOVSXBW X%d, Y%d", scv, scv)
	} else {
		a.p("VPMOVZXBW X%d, Y%d", scv, scv)
	}
	for t := 0; t < T; t++ {
		a.p("VPMADDUBSW %s, Y%d, Y%d", yAddr(128*n+32*j, t), vals, prod)
		if vnni {
			a.p("VPDPWSSD Y%d, Y%d, Y%d", scv, prod, sumi(t))
		} else {
			a.p("VPMADDWD Y%d, Y%d, Y%d", scv, prod, prod)
			a.p("VPADDD Y%d, Y%d, Y%d", prod, sumi(t), sumi(t))
		}
	}
}

// dSteps emits one token's float step of the k-quants without mins (Q3_K,
// Q6_K) and of IQ4_XS: facc += d·dy·sumi, with dy broadcast into Y[dy], the
// block's f16 d at dOff(SI) converted into Y[dd] (unless dLoaded: it is
// there already) and d·dy into Y[prod].
func dSteps(a *asm, t, dOff, dy, dd, prod int, dLoaded bool, dAddr func(t int) string, facc, sumi func(t int) int) {
	a.p("VCVTDQ2PS Y%d, Y%d", sumi(t), sumi(t))
	a.p("VBROADCASTSS %s, Y%d", dAddr(t), dy)
	if !dLoaded {
		a.p("VPBROADCASTW %d(SI), X%d", dOff, dd)
		a.p("VCVTPH2PS X%d, Y%d", dd, dd)
	}
	a.p("VMULPS Y%d, Y%d, Y%d", dy, dd, prod)
	a.p("VFMADD231PS Y%d, Y%d, Y%d", prod, sumi(t), facc(t))
}

// kBlockPair emits the block loop of a one-token Q4_K, Q5_K (mins) or
// Q6_K row kernel two blocks a pass: body(false) and body(true) the two
// blocks' integer sums (into Y4 and Y5), then both blocks' float steps of
// kExactSteps in one go, their two results added to the sum in block
// order; an odd last block by single. advance moves the pointers on by a
// block.
func kBlockPair(a *asm, vnni, mins bool, dOff, dd, dy, minsReg int, name string, body func(second bool), single, advance func(), bsAddr func(t int) string) {
	// Registers: VNNI Y10, Y11 the blocks' mins products; AVX2 Y6, Y7
	// (free with one token); X[dd] the first block's d (and dmin), X[dy]
	// its dy. d is the f16 at dOff, dmin the one after it.
	m0, m1 := 10, 11
	if !vnni {
		m0, m1 = 6, 7
	}
	minsOf := func(reg int) {
		switch {
		case vnni:
			a.p("VPMADDWD %s, Y19, Y%d", bsAddr(0), reg)
		case minsReg >= 0:
			a.p("VPMADDWD %s, Y%d, Y%d", bsAddr(0), minsReg, reg)
		default:
			a.p("VMOVDQU %s, Y%d", bsAddr(0), reg)
			a.p("VPMADDWD 32(SP), Y%d, Y%d", reg, reg)
		}
	}
	a.p("SHRQ $1, CX")
	a.p("JZ %s_tail", name)
	a.label(name + "_pair")
	body(false)
	if mins {
		minsOf(m0)
		a.p("VMOVD %d(SI), X%d", dOff, dd) // d, dmin (f16)
	} else {
		a.p("VPBROADCASTW %d(SI), X%d", dOff, dd)
		a.p("VCVTPH2PS X%d, X%d", dd, dd)
	}
	a.p("VBROADCASTSS (BX), X%d", dy)
	advance()
	body(true)
	if mins {
		minsOf(m1)
		a.p("VPHADDD Y%d, Y4, Y8", m0)
		a.p("VPHADDD Y%d, Y5, Y9", m1)
		a.p("VPHADDD Y9, Y8, Y8") // [S, M, S', M'] in each half
	} else {
		a.p("VPHADDD Y5, Y4, Y8")
		a.p("VPHADDD Y8, Y8, Y8") // [S, S', S, S'] in each half
	}
	a.p("VEXTRACTI128 $1, Y8, X9")
	a.p("VPADDD X9, X8, X8")
	a.p("VCVTDQ2PS X8, X8")
	if mins {
		a.p("VMOVD %d(SI), X9", dOff)
		a.p("VPUNPCKLDQ X9, X%d, X%d", dd, dd)
		a.p("VCVTPH2PS X%d, X%d", dd, dd) // [d, dmin, d', dmin']
		a.p("VBROADCASTSS (BX), X9")
		a.p("VBLENDPS $0x0c, X9, X%d, X%d", dy, dy) // [dy, dy, dy', dy']
		a.p("VMULPS X%d, X%d, X%d", dd, dy, dy)
	} else {
		a.p("VMULPS X%d, X%d, X%d", dd, dy, dy) // d·dy
		a.p("VPBROADCASTW %d(SI), X9", dOff)
		a.p("VCVTPH2PS X9, X9")
		a.p("VBROADCASTSS (BX), X10")
		a.p("VMULPS X10, X9, X9")                   // d'·dy'
		a.p("VBLENDPS $0x02, X9, X%d, X%d", dy, dy) // [d·dy, d'·dy', ..]
	}
	a.p("VMULPS X%d, X8, X8", dy)
	if mins {
		a.p("VHSUBPS X8, X8, X8") // [A−B, A'−B', ..]
	}
	a.p("VADDSS X8, X0, X0")
	a.p("VMOVSHDUP X8, X8")
	a.p("VADDSS X8, X0, X0")
	advance()
	a.p("DECQ CX")
	a.p("JNZ %s_pair", name)
	a.label(name + "_tail")
	a.p("TESTQ $1, nb+64(FP)")
	a.p("JZ %s_done", name)
	single()
	advance()
	a.label(name + "_done")
}

// kExactSteps emits the float steps of a block of Q4_K, Q5_K or Q2_K
// (mins), Q6_K, Q3_K or IQ4_XS (d at dOff, dmin after it) as dotQ4KRow,
// dotQ2KRow, dotQ6KRow, dotQ3KRow and dotIQ4XSRow take them: per token the
// block's whole integer sums S = Σ sc_j·(q·y)_j (the lanes of sumi added;
// Q6_K's and Q3_K's with their offset taken) and, with mins, M = Σ
// m_j·(sum of y over sub-block j), then facc += (d·dy)·S − (dmin·dy)·M or
// facc += (d·dy)·S, each product rounded. Integer sums are exact in any
// order, so every kernel of the type that takes these steps (these, the
// packed ones of asmgen/q4kpacked.go, q6kpacked.go and iq4xspacked.go, and
// the portable one) gives the same bits.
// Tokens go in pairs, t and t+1 in lanes 0 and 1 of facc(t), or three or
// four at once, token t in lane t of facc(0). The mins are
// Y19 (VNNI) or at 32(SP) (AVX2) as int16 pairs against bs; Y8-Y12 are
// free at both levels.
func kExactSteps(a *asm, vnni, mins bool, dOff, T int, dAddr, bsAddr func(t int) string, facc, sumi func(t int) int) {
	if mins {
		a.p("VMOVD %d(SI), X12", dOff) // d, dmin (f16)
		a.p("VCVTPH2PS X12, X12")
		a.p("VMOVDDUP X12, X12") // [d, dmin, d, dmin]
	} else {
		a.p("VPBROADCASTW %d(SI), X12", dOff)
		a.p("VCVTPH2PS X12, X12") // d
	}
	minsOf := func(t, reg int) {
		if vnni {
			a.p("VPMADDWD %s, Y19, Y%d", bsAddr(t), reg)
		} else {
			a.p("VMOVDQU %s, Y%d", bsAddr(t), reg)
			a.p("VPMADDWD 32(SP), Y%d, Y%d", reg, reg)
		}
	}
	if T >= 3 {
		// Three or four tokens at once, token t in lane t of facc(0): one
		// reduction of the sums (and one of the mins'), one set of products.
		// The sums' registers are free once reduced.
		u := min(3, T-1)
		a.p("VPHADDD Y%d, Y%d, Y8", sumi(1), sumi(0)) // [t0 01, t0 23, t1 01, t1 23 | ..]
		a.p("VPHADDD Y%d, Y%d, Y9", sumi(u), sumi(2))
		a.p("VPHADDD Y9, Y8, Y8") // [S0, S1, S2, S3] in each half
		a.p("VEXTRACTI128 $1, Y8, X9")
		a.p("VPADDD X9, X8, X8")
		a.p("VCVTDQ2PS X8, X8")
		if mins {
			minsOf(0, 9)
			minsOf(1, 10)
			a.p("VPHADDD Y10, Y9, Y9")
			minsOf(2, 10)
			minsOf(u, 11)
			a.p("VPHADDD Y11, Y10, Y10")
			a.p("VPHADDD Y10, Y9, Y9") // [M0, M1, M2, M3] in each half
			a.p("VEXTRACTI128 $1, Y9, X10")
			a.p("VPADDD X10, X9, X9")
			a.p("VCVTDQ2PS X9, X9")
		}
		a.p("VMOVSS %s, X10", dAddr(0))
		for t := 1; t < T; t++ {
			a.p("VINSERTPS $%#x, %s, X10, X10", t<<4, dAddr(t)) // dy of token t in lane t
		}
		if mins {
			a.p("VPERMILPS $0x55, X12, X11") // dmin
			a.p("VMULPS X11, X10, X11")      // dmin·dy
			a.p("VMULPS X11, X9, X9")
		}
		a.p("VBROADCASTSS X12, X11") // d
		a.p("VMULPS X11, X10, X10")  // d·dy
		a.p("VMULPS X10, X8, X8")
		if mins {
			a.p("VSUBPS X9, X8, X8")
		}
		a.p("VADDPS X8, X%d, X%d", facc(0), facc(0))
		return
	}
	for t := 0; t < T; t += 2 {
		u := t + 1
		pair := u < T
		if !pair {
			u = t
		}
		if mins {
			minsOf(t, 10)
			a.p("VPHADDD Y10, Y%d, Y8", sumi(t)) // [s01, s23, m01, m23 | s45, s67, m45, m67]
			if pair {
				minsOf(u, 11)
				a.p("VPHADDD Y11, Y%d, Y9", sumi(u))
				a.p("VPHADDD Y9, Y8, Y8") // [St, Mt, Su, Mu] in each half
			} else {
				a.p("VPHADDD Y8, Y8, Y8")
			}
		} else {
			a.p("VPHADDD Y%d, Y%d, Y8", sumi(u), sumi(t)) // [t01, t23, u01, u23 | ..]
			a.p("VPHADDD Y8, Y8, Y8")                     // [St, Su, St, Su] in each half
		}
		a.p("VEXTRACTI128 $1, Y8, X9")
		a.p("VPADDD X9, X8, X8")
		a.p("VCVTDQ2PS X8, X8")
		if mins {
			a.p("VBROADCASTSS %s, X9", dAddr(t))
			if pair {
				a.p("VBROADCASTSS %s, X10", dAddr(u))
				a.p("VBLENDPS $0x0c, X10, X9, X9") // [dyt, dyt, dyu, dyu]
			}
		} else {
			a.p("VMOVSS %s, X9", dAddr(t))
			if pair {
				a.p("VINSERTPS $0x10, %s, X9, X9", dAddr(u)) // [dyt, dyu, 0, 0]
			}
		}
		a.p("VMULPS X12, X9, X9") // d·dy (and dmin·dy)
		a.p("VMULPS X9, X8, X8")
		if mins {
			a.p("VHSUBPS X8, X8, X8") // [At−Bt, Au−Bu, ..]
		}
		if pair {
			a.p("VADDPS X8, X%d, X%d", facc(t), facc(t))
		} else {
			a.p("VADDSS X8, X%d, X%d", facc(t), facc(t))
		}
	}
}

// iq4XSBlock emits the body of kKernel's block loop for IQ4_XS: the eight
// sub-blocks' scales ls−32 from scales_l and scales_h at once (dword lanes,
// variable shifts) to 0(SP); per pair of sub-blocks, the 32
// bytes of indices split into nibbles and looked up in the table
// (vpshufb), the halves put back in value order; per sub-block, its scale
// broadcast as int16, and for each token the signed products as ggml's
// AVX2 code takes them (|v| × y with v's sign, vpmaddubsw, no saturation:
// 2·127·127 < 2^15) times the scale into sumi; kExactSteps then takes the
// block's float step. Registers Y8-Y13 (vpsignb has no EVEX form), at both
// levels.
func iq4XSBlock(a *asm, vnni bool, T int, yAddr func(off, t int) string, sumi func(t int) int) {
	a.p("VPBROADCASTD 4(SI), Y8") // scales_l in every lane
	a.p("VPSRLVD iq4XSConst<>+0(SB), Y8, Y8")
	a.p("VPAND iq4XSConst<>+64(SB), Y8, Y8") // lane j: scales_l >> 4j & 0x0f
	a.p("VPBROADCASTD 2(SI), Y9")            // scales_h in the low half of every lane
	a.p("VPSLLD $4, Y9, Y9")
	a.p("VPSRLVD iq4XSConst<>+32(SB), Y9, Y9")
	a.p("VPAND iq4XSConst<>+96(SB), Y9, Y9") // lane j: (scales_h >> 2j & 3) << 4
	a.p("VPOR Y9, Y8, Y8")
	a.p("VPSUBD iq4XSConst<>+128(SB), Y8, Y8")
	a.p("VMOVDQU Y8, 0(SP)") // ls−32 of sub-block j in the low word of dword j
	for p := 0; p < 4; p++ {
		a.p("VMOVDQU %d(SI), Y8", 8+32*p) // indices of sub-blocks 2p, 2p+1
		a.p("VPAND Y14, Y8, Y9")
		a.p("VPSRLW $4, Y8, Y10")
		a.p("VPAND Y14, Y10, Y10")
		a.p("VPSHUFB Y9, Y15, Y9")            // values 0-15 of 2p | of 2p+1
		a.p("VPSHUFB Y10, Y15, Y10")          // values 16-31 of 2p | of 2p+1
		a.p("VPERM2I128 $0x20, Y10, Y9, Y11") // sub-block 2p
		a.p("VPERM2I128 $0x31, Y10, Y9, Y12") // sub-block 2p+1
		a.p("VPSIGNB Y11, Y11, Y9")           // |values|
		a.p("VPSIGNB Y12, Y12, Y10")
		for k, v := range []int{11, 12} {
			ib := 2*p + k
			abs := 9 + k
			a.p("VPBROADCASTW %d(SP), Y13", 4*ib)
			for t := 0; t < T; t++ {
				a.p("VMOVDQU %s, Y8", yAddr(32*ib, t))
				a.p("VPSIGNB Y%d, Y8, Y8", v) // y with the values' signs
				a.p("VPMADDUBSW Y8, Y%d, Y8", abs)
				if vnni {
					a.p("VPDPWSSD Y13, Y8, Y%d", sumi(t))
				} else {
					a.p("VPMADDWD Y13, Y8, Y8")
					a.p("VPADDD Y8, Y%d, Y%d", sumi(t), sumi(t))
				}
			}
		}
	}
}

// iq4XSConstData emits the IQ4_XS row kernels' constants (iq4XSBlock),
// 32 bytes each: dword shift counts 4j and 2j, then 0x0f, 0x30 and 32
// dwords.
func iq4XSConstData(a *asm) {
	vecs := [5][8]uint32{}
	for j := range 8 {
		vecs[0][j], vecs[1][j], vecs[2][j], vecs[3][j], vecs[4][j] = uint32(4*j), uint32(2*j), 0x0f, 0x30, 32
	}
	for v, vec := range vecs {
		for j := 0; j < 8; j += 2 {
			fmt.Fprintf(&a.b, "DATA iq4XSConst<>+%d(SB)/8, $0x%016x\n", 32*v+4*j, uint64(vec[j])|uint64(vec[j+1])<<32)
		}
	}
	a.b.WriteString("GLOBL iq4XSConst<>(SB), RODATA|NOPTR, $160\n\n")
}

// q8K16Block emits the body of kKernel's block loop for Q8_K16: Q6_K's
// products without the unpacking (the values are bytes q+64 already), per
// pair of 16-value sub-blocks the scales spread by q6kShuf, then the +64
// taken off with the activations' 16-value sums, and d, an f32 at 272,
// times dy.
func q8K16Block(a *asm, vnni bool, T int, yAddr func(off, t int) string, dAddr, bsAddr func(t int) string, facc, sumi func(t int) int) {
	if vnni {
		a.p("VMOVDQU32 256(SI), X18")
		a.p("VPMOVSXBW X18, Y19")
		a.p("VBROADCASTSS 272(SI), Y20")
		for p := 0; p < 8; p++ {
			a.p("VMOVDQU32 %d(SI), Y8", 32*p)
			q8K16Products(a, p, T, yAddr, sumi)
		}
		q8K16Finish(a, T, dAddr, bsAddr, facc, sumi)
		return
	}
	a.p("VMOVDQU 256(SI), X9")
	for p := 0; p < 8; p++ {
		a.p("VMOVDQU %d(SI), Y8", 32*p)
		a.p("VPSHUFB q6kShuf<>+%d(SB), X9, X12", 16*p)
		a.p("VPMOVSXBW X12, Y12")
		for t := 0; t < T; t++ {
			a.p("VPMADDUBSW %s, Y8, Y13", yAddr(32*p, t))
			a.p("VPMADDWD Y12, Y13, Y13")
			a.p("VPADDD Y13, Y%d, Y%d", sumi(t), sumi(t))
		}
	}
	a.p("VPMOVSXBW X9, Y12")
	for t := 0; t < T; t++ {
		a.p("VPMADDWD %s, Y12, Y13", bsAddr(t))
		a.p("VPSLLD $6, Y13, Y13")
		a.p("VPSUBD Y13, Y%d, Y%d", sumi(t), sumi(t))
	}
	a.p("VBROADCASTSS 272(SI), Y9")
	for t := 0; t < T; t++ {
		dSteps(a, t, 272, 13, 9, 12, true, dAddr, facc, sumi)
	}
}

// q8K16Products emits, at the VNNI level, the products of values 32p to
// 32p+31 of a Q8_K16 block, their bytes in Y8 and the block's scales in
// X18, for T tokens into sum(t) (sumi, or a partial sum's register).
func q8K16Products(a *asm, p, T int, yAddr func(off, t int) string, sum func(t int) int) {
	a.p("VPSHUFB q6kShuf<>+%d(SB), X18, X26", 16*p)
	a.p("VPMOVSXBW X26, Y26")
	for t := 0; t < T; t++ {
		a.p("VPMADDUBSW %s, Y8, Y25", yAddr(32*p, t))
		a.p("VPDPWSSD Y26, Y25, Y%d", sum(t))
	}
}

// q8K16Finish emits, at the VNNI level, the end of a Q8_K16 block: the +64
// taken off with the activations' 16-value sums (the scales as int16 in
// Y19), then d (Y20) times dy into facc.
func q8K16Finish(a *asm, T int, dAddr, bsAddr func(t int) string, facc, sumi func(t int) int) {
	for t := 0; t < T; t++ {
		a.p("VPMADDWD %s, Y19, Y24", bsAddr(t))
		a.p("VPSLLD $6, Y24, Y24")
		a.p("VPSUBD Y24, Y%d, Y%d", sumi(t), sumi(t))
		dSteps(a, t, 272, 25, 20, 26, true, dAddr, facc, sumi)
	}
}

// iq4Values are IQ4_NL's and IQ4_XS's sixteen values (ggml's
// kvalues_iq4nl).
var iq4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// iq4TableData emits IQ4_NL's and IQ4_XS's sixteen values (ggml's
// kvalues_iq4nl) for vpshufb.
func iq4TableData(a *asm) {
	for h := 0; h < 2; h++ {
		var w uint64
		for i := 0; i < 8; i++ {
			w |= uint64(uint8(iq4Values[8*h+i])) << (8 * i)
		}
		fmt.Fprintf(&a.b, "DATA iq4Table<>+%d(SB)/8, $0x%016x\n", 8*h, w)
	}
	a.b.WriteString("GLOBL iq4Table<>(SB), RODATA|NOPTR, $16\n\n")
}

// q3KBlock emits the body of kKernel's block loop for Q3_K: the twelve
// scale bytes unpacked to sixteen signed scales (Q6_K's int8 form), the
// values q+4 = two bits of qs | hmask's bit at bit 2 (unsigned, for
// vpmaddubsw) times the activations with the scales spread as Q6_K's, less
// 4·Σ sc·bs; kExactSteps then takes the block's float step. The AVX2
// level's is q3KBlockAVX2.
func q3KBlock(a *asm, vnni bool, T int, yAddr func(off, t int) string, bsAddr func(t int) string, sumi func(t int) int) {
	if !vnni {
		q3KBlockAVX2(a, T, yAddr, bsAddr, sumi)
		return
	}
	// Registers: X18 scales, Y16 hmask, Y24 a chunk of qs, Y25 its values,
	// Y26 their scales, Y17 products, Y21 hmask shifted; X20-X22
	// unpacking; Y29 0x03, Y30 0x04, X31 0x20, X28 0x0f, X27 shift counts.
	sc, hm, chunk, vals, scv, prod, hsh := 18, 16, 24, 25, 26, 17, 21
	ua, ut, uu := 20, 21, 22
	mask3, mask4 := 29, 30
	mov, and, or := "VMOVDQU32", "VPANDD", "VPORD"
	m0f, shifts, m20 := "X28", "X27", "X31"
	// Scales: bytes 96-107 as dwords a0 a1 a2; low nibbles of a0, a1, then
	// their high nibbles, each byte's two high bits from a2 (>> 0, 2, 4, 6).
	a.p("VMOVQ 96(SI), X%d", ua)
	a.p("VPINSRD $2, 104(SI), X%d, X%d", ua, ua)
	a.p("%s %s, X%d, X%d", and, m0f, ua, ut)
	a.p("VPSRLD $4, X%d, X%d", ua, uu)
	a.p("%s %s, X%d, X%d", and, m0f, uu, uu)
	a.p("VPUNPCKLQDQ X%d, X%d, X%d", uu, ut, ut)
	a.p("VPSHUFD $0xaa, X%d, X%d", ua, uu)
	a.p("VPSRLVD %s, X%d, X%d", shifts, uu, uu)
	a.p("%s X%d, X%d, X%d", and, mask3, uu, uu)
	a.p("VPSLLD $4, X%d, X%d", uu, uu)
	a.p("%s X%d, X%d, X%d", or, uu, ut, sc)
	a.p("VPSUBB %s, X%d, X%d", m20, sc, sc) // sc − 32
	a.p("%s 0(SI), Y%d", mov, hm)
	for n := 0; n < 2; n++ {
		a.p("%s %d(SI), Y%d", mov, 32+32*n, chunk)
		for j := 0; j < 4; j++ {
			p := 4*n + j // sub-blocks 2p and 2p+1; hmask bit p
			twoBits(a, and, mask3, chunk, vals, j)
			orBit(a, vnni, hm, hsh, mask4, vals, p, 2) // hmask's bit p
			sub16Products(a, vnni, T, n, j, vals, sc, scv, prod, true, yAddr, sumi)
		}
	}
	// The offset: the values were q+4, so subtract 4·Σ sc_k·bs_k;
	// kExactSteps then takes the block's float step.
	sc16, off := 19, 24
	a.p("VPMOVSXBW X%d, Y%d", sc, sc16)
	for t := 0; t < T; t++ {
		a.p("VPMADDWD %s, Y%d, Y%d", bsAddr(t), sc16, off)
		a.p("VPSLLD $2, Y%d, Y%d", off, off)
		a.p("VPSUBD Y%d, Y%d, Y%d", off, sumi(t), sumi(t))
	}
}

// q3KBlockAVX2 is q3KBlock at the AVX2 level, with q2KBlockAVX2's
// scales (one register, the even sub-blocks' in the low lane, the odd
// ones' in the high; a pair's spread by one in-lane VPSHUFB) and values
// (bits 2-3 and 6-7 of qs taken in place, four times the value, hmask's
// bit put in bit 4; the others' scales taken four times), sumi 4·S
// shifted back at the end. The offset is taken first: sumi starts as
// −16·Σ sc_k·bs_k. Registers: X8 the scale bytes, then Y8 the scales and
// Y3 four times them; Y9 hmask, Y10 a chunk of qs, Y11 values, Y12 their
// scales, Y13 products (and hmask shifted); Y14 0x03, Y15 0x04, 0x0c and
// 0x10 from k16Spread.
func q3KBlockAVX2(a *asm, T int, yAddr func(off, t int) string, bsAddr func(t int) string, sumi func(t int) int) {
	// Scales: bytes 96-107 as dwords a0 a1 a2; low nibbles of a0, a1, then
	// their high nibbles, each byte's two high bits from a2 (>> 0, 2, 4, 6).
	a.p("VMOVQ 96(SI), X10")
	a.p("VPINSRD $2, 104(SI), X10, X10")
	a.p("VPAND k3Const<>+0(SB), X10, X11")
	a.p("VPSRLD $4, X10, X12")
	a.p("VPAND k3Const<>+0(SB), X12, X12")
	a.p("VPUNPCKLQDQ X12, X11, X11")
	a.p("VPSHUFD $0xaa, X10, X12")
	a.p("VPSRLVD k3Const<>+16(SB), X12, X12")
	a.p("VPAND X14, X12, X12")
	a.p("VPSLLD $4, X12, X12")
	a.p("VPOR X12, X11, X8")
	a.p("VPSUBB k3Const<>+32(SB), X8, X8") // sc − 32
	// The offset: the values are q+4 (times 4), so sumi starts at
	// −16·Σ sc_k·bs_k (|16·sc| ≤ 512 in int16).
	a.p("VPMOVSXBW X8, Y10")
	a.p("VPSLLW $4, Y10, Y10")
	a.p("VPXOR Y11, Y11, Y11")
	a.p("VPSUBW Y10, Y11, Y10")
	for t := 0; t < T; t++ {
		a.p("VPMADDWD %s, Y10, Y%d", bsAddr(t), sumi(t))
	}
	a.p("VPSHUFB k16Spread<>+256(SB), X8, X8")
	a.p("VPMOVSXBW X8, Y8")
	a.p("VPSLLW $2, Y8, Y3")
	a.p("VMOVDQU 0(SI), Y9")
	for n := 0; n < 2; n++ {
		a.p("VMOVDQU %d(SI), Y10", 32+32*n)
		for j := 0; j < 4; j++ {
			p := 4*n + j // sub-blocks 2p and 2p+1; hmask bit p
			mask, to, hmask, sc := "Y14", 2, "Y15", 3
			if j%2 == 1 {
				mask, to, hmask, sc = "k16Spread<>+272(SB)", 4, "k16Spread<>+304(SB)", 8
			}
			if j == 2 {
				a.p("VPSRLW $4, Y10, Y10")
			}
			a.p("VPAND %s, Y10, Y11", mask)
			h := 9
			switch {
			case p < to:
				a.p("VPSLLW $%d, Y9, Y13", to-p)
				h = 13
			case p > to:
				a.p("VPSRLW $%d, Y9, Y13", p-to)
				h = 13
			}
			a.p("VPAND %s, Y%d, Y13", hmask, h)
			a.p("VPOR Y13, Y11, Y11")
			a.p("VPSHUFB k16Spread<>+%d(SB), Y%d, Y12", 32*p, sc)
			for t := 0; t < T; t++ {
				a.p("VPMADDUBSW %s, Y11, Y13", yAddr(128*n+32*j, t))
				a.p("VPMADDWD Y12, Y13, Y13")
				a.p("VPADDD Y13, Y%d, Y%d", sumi(t), sumi(t))
			}
		}
	}
	for t := 0; t < T; t++ {
		a.p("VPSRAD $2, Y%d, Y%d", sumi(t), sumi(t))
	}
}

// k3ConstData emits the Q3_K kernels' constants: 16 bytes of 0x0f, the
// dword shift counts [0, 2, 4, 6], 16 bytes of 0x20.
func k3ConstData(a *asm) {
	for i, v := range []uint64{0x0f0f0f0f0f0f0f0f, 0x0f0f0f0f0f0f0f0f, 2 << 32, 6<<32 | 4, 0x2020202020202020, 0x2020202020202020} {
		fmt.Fprintf(&a.b, "DATA k3Const<>+%d(SB)/8, $0x%016x\n", 8*i, v)
	}
	a.b.WriteString("GLOBL k3Const<>(SB), RODATA|NOPTR, $48\n\n")
}

// k4ConstData emits the AVX2 Q4_K kernels' constants: 16 bytes of 0x3f,
// 16 of 0x03, then the dword shift counts [0, 4, 0, 0].
func k4ConstData(a *asm) {
	for i, v := range []uint64{0x3f3f3f3f3f3f3f3f, 0x3f3f3f3f3f3f3f3f, 0x0303030303030303, 0x0303030303030303, 4 << 32, 0} {
		fmt.Fprintf(&a.b, "DATA k4Const<>+%d(SB)/8, $0x%016x\n", 8*i, v)
	}
	a.b.WriteString("GLOBL k4Const<>(SB), RODATA|NOPTR, $48\n\n")
}

// kPrefetch is how far ahead, in bytes, the AVX2 Q4_K and Q6_K kernels
// request the weights (into L2) each block. With one row streamed at a
// time the hardware prefetcher alone left decode of weights in DRAM well
// short of the same kernel on cached weights (Zen 3 EPYC); 4 KiB ahead
// did better than 1 and 2 KiB, L2 better than L1 for Q6_K. Not measured on
// the VNNI level, which keeps its kernels as they were.
const kPrefetch = 4096

// q6kShufData is the VPSHUFB table that spreads Q6_K scale bytes 2p and
// 2p+1 over the two halves of 16 bytes, for p = 0..7.
func q6kShufData(a *asm) {
	for p := 0; p < 8; p++ {
		var lo, hi uint64
		for i := 0; i < 8; i++ {
			lo |= uint64(2*p) << (8 * i)
			hi |= uint64(2*p+1) << (8 * i)
		}
		fmt.Fprintf(&a.b, "DATA q6kShuf<>+%d(SB)/8, $0x%016x\n", 16*p, lo)
		fmt.Fprintf(&a.b, "DATA q6kShuf<>+%d(SB)/8, $0x%016x\n", 16*p+8, hi)
	}
	a.b.WriteString("GLOBL q6kShuf<>(SB), RODATA|NOPTR, $128\n\n")
}

// vdpbf16ps emits VDPBF16PS Y(dst), Y(src1), Y(src2) (AVX512-BF16; dst +=
// pairwise products of the bf16 halves of src1 and src2) as raw bytes: the Go
// assembler has no mnemonic for it. EVEX.256.F3.0F38.W0 52 /r, register form.
func vdpbf16ps(a *asm, dst, src1, src2 int) { vdpbf16psLen(a, 0b01, "Y", dst, src1, src2) }

// vdpbf16psZ is vdpbf16ps on zmm registers (EVEX.512).
func vdpbf16psZ(a *asm, dst, src1, src2 int) { vdpbf16psLen(a, 0b10, "Z", dst, src1, src2) }

// vdpbf16psLen emits the instruction with vector length ll (EVEX L'L) on
// registers named reg.
func vdpbf16psLen(a *asm, ll int, reg string, dst, src1, src2 int) {
	inv := func(b int) int { return ^b & 1 }
	p0 := inv(dst>>3)<<7 | inv(src2>>4)<<6 | inv(src2>>3)<<5 | inv(dst>>4)<<4 | 0b10
	p1 := (^src1&0xf)<<3 | 1<<2 | 0b10
	p2 := ll<<5 | inv(src1>>4)<<3
	modrm := 0xc0 | (dst&7)<<3 | src2&7
	a.p("BYTE $0x62; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x52; BYTE $0x%02x // VDPBF16PS %s%d, %s%d, %s%d",
		p0, p1, p2, modrm, reg, src2, reg, src1, reg, dst)
}

// bf16DPKernel generates a BF16 weight × BF16 activation tile for CPUs with
// AVX512-BF16: each vdpbf16ps multiplies 16 pairs of halves and adds them
// to 8 float32 lanes, twice the work of an FMA on widened values.
//
// Arguments: w *byte, rowBytes, groups int, y *uint16, yStride int,
// steps int (columns / 16), dst *float32, ldBytes int.
//
// One accumulator per output in Y0-Y15 (for the VEX reduction), weights in
// Y16+r, activations in Y20+t; every tile shape adds a given output's
// products in the same order (batch invariance).
func bf16DPKernel(a *asm, d *decl, R, T int) {
	name := fmt.Sprintf("bf16DP_%dx%d", R, T)
	text(a, d, fmt.Sprintf("%s computes a %d-row × %d-token tile of BF16 weights × BF16 activations over steps×16 columns (AVX512-BF16).", name, R, T),
		name, "(w *byte, rowBytes, groups int, y *uint16, yStride int, steps int, dst *float32, ldBytes int)", "$0-64")
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("LEAQ (R8)(R8*2), R9")
	a.p("MOVQ yStride+32(FP), R10")
	a.p("LEAQ (R10)(R10*2), R11")
	a.p("MOVQ dst+48(FP), AX")
	a.p("MOVQ ldBytes+56(FP), R14")
	a.p("MOVQ groups+16(FP), R15")
	acc := func(r, t int) int { return t*R + r }
	rowAddr := func(r int) string { return stride(0, "SI", "R8", "R9", r) }
	tokAddr := func(t int) string { return stride(0, "DI", "R10", "R11", t) }
	a.label(name + "_group")
	a.p("MOVQ y+24(FP), DI")
	a.p("MOVQ steps+40(FP), CX")
	a.p("MOVQ SI, BX") // group start
	for i := 0; i < R*T; i++ {
		a.p("VXORPS Y%d, Y%d, Y%d", i, i, i)
	}
	a.label(name + "_step")
	for r := 0; r < R; r++ {
		a.p("VMOVDQU32 %s, Y%d", rowAddr(r), 16+r)
	}
	for t := 0; t < T; t++ {
		a.p("VMOVDQU32 %s, Y%d", tokAddr(t), 20+t)
	}
	for t := 0; t < T; t++ {
		for r := 0; r < R; r++ {
			vdpbf16ps(a, acc(r, t), 16+r, 20+t)
		}
	}
	a.p("ADDQ $32, SI")
	a.p("ADDQ $32, DI")
	a.p("DECQ CX")
	a.p("JNZ %s_step", name)
	a.p("MOVQ AX, CX")
	for t := 0; t < T; t++ {
		reduceStore(a, R, t)
		if t+1 < T {
			a.p("ADDQ R14, CX")
		}
	}
	a.p("ADDQ $%d, AX", 4*R)
	a.p("MOVQ BX, SI")
	if R == 4 {
		a.p("LEAQ (SI)(R8*4), SI")
	} else {
		a.p("ADDQ R8, SI")
	}
	nextOrReturn(a, "R15", name+"_group")
}

const header = "// Code generated by asmgen; DO NOT EDIT.\n\n"

func main() {
	var a asm
	var d decl
	a.b.WriteString(header + "//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	d.b.WriteString(header + "//go:build amd64 && !purego\n\npackage tensor\n\nimport \"unsafe\"\n\n")
	q80BiasData(&a)
	for T := 1; T <= 2; T++ {
		q80NaturalRowsKernel(&a, &d, T)
	}
	for _, q4 := range []bool{false, true} {
		for T := 3; T <= 16; T++ {
			q80RowsKernel(&a, &d, T, q4)
		}
	}
	for _, q4 := range []bool{false, true} {
		for T := 1; T <= 16; T++ {
			q80PackedKernel(&a, &d, T, q4)
		}
		q80PackedSplitKernel(&a, &d, q4)
	}
	amxQ80CfgData(&a)
	amxRowsCfgData(&a)
	q40AVX2Data(&a)
	amxScratchDecl(&d)
	for _, q4 := range []bool{false, true} {
		q80AMXPackedKernel(&a, &d, q4)
		q80AMXRowsKernel(&a, &d, q4)
	}
	for _, q8 := range []bool{false, true} {
		for T := 1; T <= 2; T++ {
			q40AVX2RowsKernel(&a, &d, T, q8, nil)
		}
		for T := 1; T <= 4; T++ {
			q40AVX2PackedKernel(&a, &d, T, q8, nil)
		}
	}
	q6kShufData(&a)
	k16SpreadData(&a)
	k4ConstData(&a)
	k3ConstData(&a)
	iq4TableData(&a)
	iq4XSConstData(&a)
	iqDirectData(&a)
	iqDirectDataAVX2(&a)
	q80DirectData(&a)
	for _, y := range q80DirectTypes {
		for T := 1; T <= 2; T++ {
			q80DirectKernel(&a, &d, y, T)
		}
		for T := 3; T <= q80DirectRowsTokens(y); T++ {
			q80DirectRowsKernel(&a, &d, y, T)
		}
		q80DirectPackKernel(&a, &d, y)
		// The AVX2 level's own-bytes kernels (q40avx2.go): Q4_1's on
		// the file's rows and packed, the others' packed.
		if y.typ == "Q4_1" {
			for T := 1; T <= 2; T++ {
				q40AVX2RowsKernel(&a, &d, T, false, &y)
			}
		}
		for T := 1; T <= 4; T++ {
			q40AVX2PackedKernel(&a, &d, T, false, &y)
		}
		if y.table {
			iq4NLAVX2UnpackKernel(&a, &d)
		}
	}
	minsAddKernel(&a, &d)
	for _, typ := range []string{"q4K", "q6K", "q5K", "q2K", "q3K", "iq4XS", "q8K16"} {
		for _, vnni := range []bool{true, false} {
			for T := 1; T <= 4; T++ {
				kKernel(&a, &d, typ, vnni, T)
			}
		}
	}
	for _, q5 := range []bool{false, true} {
		q4KPackedKernel(&a, &d, q5)
		q4KPackedKernel1(&a, &d, q5)
		q4KAMXPackedKernel(&a, &d, q5)
	}
	q6kPairCtlData(&a)
	for _, one := range []bool{false, true} {
		sub16PackedKernel(&a, &d, q6KPacked, one)
		sub16PackedKernel(&a, &d, q3KPacked, one)
		sub16PackedKernel(&a, &d, q2KPacked, one)
	}
	iq4XSPackedKernel(&a, &d)
	iq4XSPackedKernel1(&a, &d)
	iq4XSAMXPackedKernel(&a, &d)
	amxQ6KCfgData(&a)
	sub16AMXPackedKernel(&a, &d, q6KPacked)
	sub16AMXPackedKernel(&a, &d, q3KPacked)
	sub16AMXPackedKernel(&a, &d, q2KPacked)
	amxBF16CfgData(&a)
	for groups := 1; groups <= 2; groups++ {
		bf16AMXKernel(&a, &d, groups)
	}
	for _, typ := range iqDirectOrder {
		for _, vnni := range []bool{true, false} {
			for T := 1; T <= 4; T++ {
				kKernel(&a, &d, typ, vnni, T)
			}
		}
	}
	for _, R := range []int{1, 4} {
		for T := 1; T <= 4; T++ {
			bf16DPKernel(&a, &d, R, T)
		}
	}
	for _, typ := range []string{"f32", "f16", "bf16"} {
		for T := 1; T <= 3; T++ {
			floatKernel(&a, &d, typ, 4, T)
		}
		for T := 1; T <= 4; T++ {
			floatKernel(&a, &d, typ, 1, T)
		}
	}
	bf16HiMaskData(&a)
	for _, typ := range []string{"f16", "bf16"} {
		floatPackedKernel(&a, &d, typ, 8, 1)
		for T := 2; T <= 3; T++ {
			floatPackedKernel(&a, &d, typ, 4, T)
		}
	}
	for _, bf16 := range []bool{false, true} {
		maxT := 6 // F16's prefill tiles
		if bf16 {
			maxT = 4 // six tokens were no faster
		}
		for T := 1; T <= maxT; T++ {
			f16PackedZKernel(&a, &d, T, bf16)
		}
		f16PackedSplitKernel(&a, &d, bf16)
	}
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := os.WriteFile(filepath.Join(dir, "kernels_amd64.s"), a.b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
	src, err := format.Source(d.b.Bytes())
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kernels_amd64_decl.go"), src, 0o644); err != nil {
		log.Fatal(err)
	}
}
