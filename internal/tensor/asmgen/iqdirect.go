package main

import (
	"fmt"
	"math/bits"
)

// The direct IQ kernels compute the IQ1, IQ2 and IQ3 types in their own
// bytes, for streamed matrices at few tokens (decode), where widening every
// row again to Q8_K16 first costs several times the products. Each 32
// values' bytes are built in a register exactly as the widening writes them
// (64+v; a negative value's 0x80−(64+|v|)), so that the products and their
// order are those of Q8_K16's kernel on the widened rows, bit for bit. They
// need AVX512-VBMI (vpmultishiftqb, vpermb, vpermi2b) beyond the VNNI level.
//
// Per block, a prologue takes the block's scales to Q8_K16's sixteen (X18),
// its d to Y20, and lays out in registers what each 32 values need: the
// grid indices (as words where they have more than eight bits), the sign
// patterns (vpermi2b looks the 7-bit indices up in the 128 patterns of
// seven stored bits and their parity; IQ2_S and IQ3_S store theirs), IQ1's
// deltas. Per 32 values the grid points are loaded from the Go tables of
// the widening (q8Grid*, Q8_K16 bytes already), put together in Y8, and
// the negative values' bytes subtracted from 0x80 under a mask register
// (IQ1: the delta added).

// iqDirect describes a type with a direct kernel.
type iqDirect struct {
	typeName string
	size     int    // bytes of a block
	grid     string // the Go table of its grid points
	point    int    // bytes of a grid point: 8 values (8) or 4 (4)
	dScale   string // d is the f16 times this (hex f32 bits), "" for 1
}

var iqDirects = map[string]iqDirect{
	"iq2XXS": {"IQ2_XXS", 66, "q8GridIQ2XXS", 8, "0x3e000000"},
	"iq2XS":  {"IQ2_XS", 74, "q8GridIQ2XS", 8, "0x3e000000"},
	"iq2S":   {"IQ2_S", 82, "q8GridIQ2S", 8, "0x3e000000"},
	"iq3XXS": {"IQ3_XXS", 98, "q8GridIQ3XXS", 4, "0x3e800000"},
	"iq3S":   {"IQ3_S", 110, "q8GridIQ3S", 4, ""},
	"iq1S":   {"IQ1_S", 50, "q8GridIQ1", 8, "0x3e000000"},
	"iq1M":   {"IQ1_M", 56, "q8GridIQ1", 8, "0x3e000000"},
}

// iqDirectOrder is the order the kernels are emitted in.
var iqDirectOrder = []string{"iq2XXS", "iq2XS", "iq2S", "iq3XXS", "iq3S", "iq1S", "iq1M"}

// iqFrame is a direct kernel's frame: none (what the prologue lays out
// stays in registers: loading part of a vector just stored waits for the
// store to retire).
const iqFrame = "$0-88"

// iqDirectConsts loads the block loop's constants: Y21 d's factor, R8 the
// grid, Y28 0x80 bytes, Z30:Z31 the sign patterns, and per type (Z22,
// Z23, Z27, Z29) what its prologue uses.
func iqDirectConsts(a *asm, typ string) {
	q := iqDirects[typ]
	if q.dScale != "" {
		a.p("MOVL $%s, CX", q.dScale)
		a.p("VPBROADCASTD CX, Y21")
	}
	a.p("LEAQ ·%s(SB), R8", q.grid)
	a.p("MOVL $0x80808080, CX")
	a.p("VPBROADCASTD CX, Y28")
	a.p("VMOVDQU64 iqSignPatterns<>+0(SB), Z30")
	a.p("VMOVDQU64 iqSignPatterns<>+64(SB), Z31")
	words := func(reg int, w uint16) {
		a.p("MOVL $%#x, CX", uint32(w)|uint32(w)<<16)
		a.p("VPBROADCASTD CX, Z%d", reg)
	}
	switch typ {
	case "iq2XXS":
		a.p("VPBROADCASTQ iqShift2XXS<>(SB), Z29")
		a.p("VMOVDQU8 iqScalePos2XXS<>(SB), X27")
	case "iq2S":
		a.p("VMOVDQU8 iqRepeat4<>(SB), Y27")
		words(29, 0x0300)
	case "iq3XXS":
		a.p("VPBROADCASTQ iqShift3XXS<>(SB), Y29")
		a.p("VPBROADCASTQ iqScaleShift3XXS<>(SB), Y27")
	case "iq3S":
		a.p("VMOVDQU8 iqRepeat8<>+0(SB), Y22")
		a.p("VMOVDQU8 iqRepeat8<>+32(SB), Y23")
		words(29, 0x0100)
	case "iq1S":
		a.p("VMOVDQU16 iqWordRepeat4<>(SB), Z22")
		words(29, 0x0007)
		words(23, 0x0001)
	case "iq1M":
		a.p("VMOVDQU8 iqScaleShift1M<>(SB), X27")
		words(29, 0x0007)
		a.p("MOVL $0x08080808, CX")
		a.p("VPBROADCASTD CX, Y22")
		a.p("MOVL $0x01010101, CX")
		a.p("VPBROADCASTD CX, Y23")
	}
}

// iqDirectBlock emits the body of kKernel's block loop for a direct type:
// its prologue, the 32 values' bytes into Y8 in turn, Q8_K16's products on
// them. R14, R9 (bsStride, loaded again after), Z10-Z13 are scratch.
func iqDirectBlock(a *asm, typ string, T int, yAddr func(off, t int) string, dAddr, bsAddr func(t int) string, facc, sumi func(t int) int) {
	q := iqDirects[typ]
	zeroPartials(a, T)
	iqPrologue(a, typ)
	a.p("VPMOVSXBW X18, Y19")
	if typ == "iq1M" {
		// d's f16 is the top nibbles of the four scale words.
		a.p("MOVQ 48(SI), R14")
		a.p("PEXTQ iqDMask1M<>(SB), R14, R14")
		a.p("VMOVD R14, X20")
		a.p("VPBROADCASTW X20, X20")
	} else {
		a.p("VPBROADCASTW 0(SI), X20")
	}
	a.p("VCVTPH2PS X20, Y20")
	if q.dScale != "" {
		a.p("VMULPS Y21, Y20, Y20")
	}
	for p := 0; p < 8; p++ {
		iqChunk(a, typ, p)
		q8K16Products(a, p, T, yAddr, func(t int) int { return partial(T, t, p) })
	}
	sumPartials(a, T)
	a.p("MOVQ bsStride+56(FP), R9") // the chunks' scratch
	q8K16Finish(a, T, dAddr, bsAddr, facc, sumi)
}

// iqScalesNibbles emits X18 = 2s+1 of the sixteen scales, from eight bytes
// at off of two 4-bit scales each (low nibble first), or with dup of four
// bytes, each scale for 32 values.
func iqScalesNibbles(a *asm, off int, dup bool) {
	if dup {
		a.p("VMOVD %d(SI), X18", off)
	} else {
		a.p("VMOVQ %d(SI), X18", off)
	}
	a.p("VPSRLW $4, X18, X17")
	a.p("VPUNPCKLBW X17, X18, X18")
	if dup {
		a.p("VPUNPCKLBW X18, X18, X18")
	}
	a.p("VPERMB iqScales<>(SB), X18, X18")
}

// iqPrologue emits a type's block prologue (see iqDirect).
func iqPrologue(a *asm, typ string) {
	switch typ {
	case "iq2XXS":
		// Eight qwords: four grid indices, then aux (four 7-bit sign
		// indices at 7l, the scale at 28). Sign patterns to Z11.
		a.p("VMOVDQU8 2(SI), Z16")
		a.p("VPMULTISHIFTQB Z16, Z29, Z17")
		a.p("VPERMB Z17, Z27, Z18") // the scales' nibbles in X18
		a.p("VPERMB iqScales<>(SB), X18, X18")
		a.p("VPERMI2B Z31, Z30, Z17")
		a.p("VMOVDQA64 Z17, Z11") // signs: bytes 0-3 of qword p
	case "iq2XS":
		// 32 words: a 9-bit grid index, a 7-bit sign index. Sign
		// patterns to Z11.
		a.p("VMOVDQU16 2(SI), Z16")
		a.p("VPSRLW $9, Z16, Z17")
		a.p("VPMOVWB Z17, Y17")
		a.p("VPERMI2B Z31, Z30, Z17")
		a.p("VMOVDQA64 Z17, Z11") // signs: dword p
		iqScalesNibbles(a, 66, false)
	case "iq2S":
		// Grid indices: qs | two bits of qh[k/4] at 8, as words in Z12.
		a.p("VMOVQ 66(SI), X17")
		a.p("VPERMB Y17, Y27, Y16") // qh[k/4]
		a.p("VPMOVZXBW Y16, Z16")
		a.p("VPSLLVW iqShift2S<>(SB), Z16, Z16")
		a.p("VPANDD Z29, Z16, Z16")
		a.p("VPMOVZXBW 2(SI), Z17")
		a.p("VPORD Z17, Z16, Z12")
		iqScalesNibbles(a, 74, false)
	case "iq3XXS":
		// aux words: four 7-bit sign indices and the scale at 28. Sign
		// patterns to Z11.
		a.p("VMOVDQU8 66(SI), Y16")
		a.p("VPMULTISHIFTQB Y16, Y29, Y17")
		a.p("VPERMI2B Z31, Z30, Z17")
		a.p("VMOVDQA64 Z17, Z11")           // signs: dword p
		a.p("VPMULTISHIFTQB Y16, Y27, Y18") // each aux's scale twice
		a.p("VPMOVQD Y18, X18")
		a.p("VPERMB iqScales<>(SB), X18, X18")
	case "iq3S":
		// Grid indices: qs | bit k%8 of qh[k/8] at 8, as words in Z12:Z13.
		a.p("VMOVQ 66(SI), X17")
		for h := 0; h < 2; h++ {
			a.p("VPERMB Y17, Y%d, Y16", 22+h) // qh[k/8]
			a.p("VPMOVZXBW Y16, Z16")
			a.p("VPSLLVW iqShift3S<>(SB), Z16, Z16")
			a.p("VPANDD Z29, Z16, Z16")
			a.p("VPMOVZXBW %d(SI), Z10", 2+32*h)
			a.p("VPORD Z10, Z16, Z%d", 12+h)
		}
		iqScalesNibbles(a, 106, true)
	case "iq1S":
		// Grid indices: qs | three bits of qh[k/4] at 8, as words in Z12;
		// the scale at 12 of qh, the delta's sign at 15: ±1 bytes in X11.
		a.p("VMOVDQU8 34(SI), X17")
		a.p("VPERMW Z17, Z22, Z16") // qh[k/4]
		a.p("VPSRLVW iqShift1S<>(SB), Z16, Z16")
		a.p("VPANDD Z29, Z16, Z16")
		a.p("VPSLLW $8, Z16, Z16")
		a.p("VPMOVZXBW 2(SI), Z10")
		a.p("VPORD Z10, Z16, Z12")
		a.p("VPSRAW $15, X17, X16")
		a.p("VPORD X23, X16, X16") // 1 or −1
		a.p("VPMOVWB X16, X16")
		a.p("VMOVDQA64 X16, X11") // deltas: byte p
		a.p("VPSRLW $12, X17, X18")
		a.p("VPMOVWB X18, X18")
		a.p("VPUNPCKLBW X18, X18, X18")
		a.p("VPERMB iqScales1<>(SB), X18, X18")
	case "iq1M":
		// qh's nibbles in order, h_k: grid indices qs | (h_k & 7) at 8 as
		// words in Z12, the deltas 1 − (h_k & 8)/4 as bytes in Y11; the
		// scales three bits each, in order, in the words at 48.
		a.p("VMOVDQU8 32(SI), X17")
		a.p("VPSRLW $4, X17, X16")
		a.p("VPUNPCKLBW X16, X17, X10")
		a.p("VPUNPCKHBW X16, X17, X11")
		a.p("VINSERTI128 $1, X11, Y10, Y10")
		a.p("VPMOVZXBW Y10, Z16")
		a.p("VPANDD Z29, Z16, Z16")
		a.p("VPSLLW $8, Z16, Z16")
		a.p("VPMOVZXBW 0(SI), Z17")
		a.p("VPORD Z17, Z16, Z12")
		a.p("VPANDD Y22, Y10, Y11")
		a.p("VPSRLW $2, Y11, Y11")
		a.p("VPSUBB Y11, Y23, Y11")
		// deltas: byte k of Y11
		a.p("VPBROADCASTQ 48(SI), X16")
		a.p("VPMULTISHIFTQB X16, X27, X18")
		a.p("VPERMB iqScales1<>(SB), X18, X18")
	default:
		panic("asmgen: no direct kernel for " + typ)
	}
}

// iqChunk emits values 32p to 32p+31 of a direct type's block, as Q8_K16
// bytes, into Y8 (Y9 scratch).
func iqChunk(a *asm, typ string, p int) {
	q := iqDirects[typ]
	// idx emits R14 = grid index i of the 32 values.
	var idx func(i int)
	switch typ {
	case "iq2XXS":
		idx = func(i int) { a.p("MOVBLZX %d(SI), R14", 2+8*p+i) }
	case "iq2XS":
		idx = func(i int) {
			a.p("MOVWLZX %d(SI), R14", 2+8*p+2*i)
			a.p("ANDL $511, R14")
		}
	case "iq3XXS":
		idx = func(i int) { a.p("MOVBLZX %d(SI), R14", 2+8*p+i) }
	case "iq3S":
		idx = wordIndex(a, 12+p/4, p%4, 0)
	default: // iq2S, iq1S, iq1M
		idx = wordIndex(a, 12, p/2, p%2)
	}
	iqPoints(a, q.point, idx)
	switch typ {
	case "iq1S":
		if p == 0 {
			a.p("VPBROADCASTB X11, Y9")
		} else {
			a.p("VPSRLDQ $%d, X11, X9", p)
			a.p("VPBROADCASTB X9, Y9")
		}
		a.p("VPADDB Y9, Y8, Y8")
		return
	case "iq1M":
		a.p("VMOVDQU8 iqSpread1M<>+%d(SB), Y9", 32*p)
		a.p("VPERMB Y11, Y9, Y9")
		a.p("VPADDB Y9, Y8, Y8")
		return
	case "iq2XXS":
		signsQword(a, p/2, p%2)
	case "iq2S":
		a.p("KMOVD %d(SI), K1", 34+4*p)
	case "iq3S":
		a.p("KMOVD %d(SI), K1", 74+4*p)
	default: // iq2XS, iq3XXS
		if p%2 == 0 {
			signsQword(a, p/4, p/2%2)
		} else {
			a.p("SHRQ $32, R9")
			a.p("KMOVD R9, K1")
		}
	}
	a.p("VPSUBB Y8, Y28, K1, Y8")
}

// iqPoints emits the 32 values' grid points into Y8 (X9 scratch), loaded
// from the table at R8 by the indices idx(i) puts in R14: four of eight
// bytes (point 8) or eight of four.
func iqPoints(a *asm, point int, idx func(i int)) {
	for h := 0; h < 2; h++ {
		x := 8 + h
		if point == 8 {
			idx(2 * h)
			a.p("VMOVQ (R8)(R14*8), X%d", x)
			idx(2*h + 1)
			a.p("VPINSRQ $1, (R8)(R14*8), X%d, X%d", x, x)
			continue
		}
		for j := 0; j < 4; j++ {
			idx(4*h + j)
			if j == 0 {
				a.p("VMOVD (R8)(R14*4), X%d", x)
			} else {
				a.p("VPINSRD $%d, (R8)(R14*4), X%d, X%d", j, x, x)
			}
		}
	}
	a.p("VINSERTI128 $1, X9, Y8, Y8")
}

// signsQword moves qword q of 128-bit lane lane of the sign patterns (Z11)
// to R9 and its low half to K1.
func signsQword(a *asm, lane, q int) {
	src := 11
	if lane > 0 {
		src = 10
		a.p("VEXTRACTI32X4 $%d, Z11, X10", lane)
	}
	if q == 0 {
		a.p("VMOVQ X%d, R9", src)
	} else {
		a.p("VPEXTRQ $1, X%d, R9", src)
	}
	a.p("KMOVD R9, K1")
}

// wordIndex returns a chunk's idx for grid indices held as words in
// register Z[reg], from qword q0 of its 128-bit lane lane on: each qword
// moved to R9 and its words taken in turn. (From a register, not the frame:
// loading words of a vector just stored waits for the store to retire.)
func wordIndex(a *asm, reg, lane, q0 int) func(i int) {
	return func(i int) {
		if i%4 != 0 {
			a.p("SHRQ $16, R9")
			a.p("MOVWLZX R9, R14")
			return
		}
		src := reg
		if lane > 0 {
			src = 10
			if i == 0 {
				a.p("VEXTRACTI32X4 $%d, Z%d, X10", lane, reg)
			}
		}
		if q := q0 + i/4; q == 0 {
			a.p("VMOVQ X%d, R9", src)
		} else {
			a.p("VPEXTRQ $1, X%d, R9", src)
		}
		a.p("MOVWLZX R9, R14")
	}
}

// partial returns the register of token t's integer sums that sub-block p
// adds to. At one and two tokens the sumi registers of the tokens not
// computed hold further partial sums, so that consecutive sub-blocks'
// products do not wait for each other's; integer sums, exact in any order,
// so the results stay Q8_K16's kernel's.
func partial(T, t, p int) int {
	switch T {
	case 1:
		return 4 + p%4
	case 2:
		return 4 + t + 2*(p%2)
	}
	return 4 + t
}

// zeroPartials clears the partial sums beyond each token's own register.
func zeroPartials(a *asm, T int) {
	for r := 4 + T; T <= 2 && r < 8; r++ {
		a.p("VPXOR Y%d, Y%d, Y%d", r, r, r)
	}
}

// sumPartials adds the partial sums into each token's sumi.
func sumPartials(a *asm, T int) {
	switch T {
	case 1:
		a.p("VPADDD Y5, Y4, Y4")
		a.p("VPADDD Y7, Y6, Y6")
		a.p("VPADDD Y6, Y4, Y4")
	case 2:
		a.p("VPADDD Y6, Y4, Y4")
		a.p("VPADDD Y7, Y5, Y5")
	}
}

// iqDirectData emits the direct kernels' tables.
func iqDirectData(a *asm) {
	qword := func(name string, offs ...int) {
		var w uint64
		for l, off := range offs {
			w |= uint64(off) << (8 * l)
		}
		fmt.Fprintf(&a.b, "DATA %s<>+0(SB)/8, $0x%016x\n", name, w)
		fmt.Fprintf(&a.b, "GLOBL %s<>(SB), RODATA|NOPTR, $8\n\n", name)
	}
	qword("iqShift2XXS", 32, 39, 46, 53, 60)
	qword("iqShift3XXS", 0, 7, 14, 21, 32, 39, 46, 53)
	qword("iqScaleShift3XXS", 28, 28, 60, 60)
	qword("iqDMask1M", 0, 0xf0, 0, 0xf0, 0, 0xf0, 0, 0xf0)
	var b []byte
	for i := range 16 {
		b = append(b, byte(8*(i/2)+4)) // IQ2_XXS: sub-block i/2's scale byte
	}
	dataBytes(a, "iqScalePos2XXS", b)
	b = nil
	for i := range 16 {
		b = append(b, byte(2*i+1))
	}
	dataBytes(a, "iqScales", b)
	b = nil
	for i := range 16 {
		b = append(b, byte(2*(i&7)+1))
	}
	dataBytes(a, "iqScales1", b)
	b = nil
	for s := range 128 {
		b = append(b, byte(s)|byte(bits.OnesCount8(uint8(s))&1)<<7)
	}
	dataBytes(a, "iqSignPatterns", b)
	b = nil
	for k := range 32 {
		b = append(b, byte(k/4))
	}
	dataBytes(a, "iqRepeat4", b)
	b = nil
	for k := range 64 {
		b = append(b, byte(k/8))
	}
	dataBytes(a, "iqRepeat8", b)
	var w []uint16
	for k := range 32 {
		w = append(w, uint16(k/4))
	}
	dataWords(a, "iqWordRepeat4", w)
	w = nil
	for k := range 32 {
		w = append(w, uint16(8-2*(k%4)))
	}
	dataWords(a, "iqShift2S", w)
	w = nil
	for k := range 32 {
		w = append(w, uint16(8-k%8))
	}
	dataWords(a, "iqShift3S", w)
	w = nil
	for k := range 32 {
		w = append(w, uint16(3*(k%4)))
	}
	dataWords(a, "iqShift1S", w)
	b = nil
	for j := range 16 {
		b = append(b, byte(16*(j/4)+3*(j%4))) // both qwords hold the four words
	}
	dataBytes(a, "iqScaleShift1M", b)
	b = nil
	for p := range 8 {
		for i := range 32 {
			b = append(b, byte(4*p+i/8)) // chunk p's byte i: group 4p+i/8's delta
		}
	}
	dataBytes(a, "iqSpread1M", b)
}

// dataBytes emits read-only data name<> holding b (a multiple of 8 bytes).
func dataBytes(a *asm, name string, b []byte) {
	for i := 0; i < len(b); i += 8 {
		var w uint64
		for j := 0; j < 8; j++ {
			w |= uint64(b[i+j]) << (8 * j)
		}
		fmt.Fprintf(&a.b, "DATA %s<>+%d(SB)/8, $0x%016x\n", name, i, w)
	}
	fmt.Fprintf(&a.b, "GLOBL %s<>(SB), RODATA|NOPTR, $%d\n\n", name, len(b))
}

// dataWords emits read-only data name<> holding w as little-endian words.
func dataWords(a *asm, name string, w []uint16) {
	b := make([]byte, 0, 2*len(w))
	for _, v := range w {
		b = append(b, byte(v), byte(v>>8))
	}
	dataBytes(a, name, b)
}
