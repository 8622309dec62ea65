package main

import (
	"fmt"
	"math/bits"
)

// The IQ2_XXS kernel computes the type in its own bytes, for streamed
// matrices at few tokens (decode), where widening every row again to Q8_K16
// first costs several times the products. Each 32 values' bytes are built
// in a register exactly as the widening writes them (64+|v|, a negative
// value 0x80−(64+|v|)), so that the products and their order are those of
// Q8_K16's kernel on the widened rows, bit for bit. It needs AVX512-VBMI
// (vpmultishiftqb, vpermb, vpermi2b) beyond the VNNI level.
//
// Per block: its 64 bytes after d are eight sub-blocks of four grid indices
// and a word aux (four 7-bit sign indices, a 4-bit scale). vpmultishiftqb
// takes each sub-block's sign indices and scale to bytes, vpermi2b looks the
// indices up in the 128 sign patterns (seven stored bits and their parity),
// stored to the frame, each sub-block's 32 bits then a mask register; vpermb
// lines the scales up as Q8_K16's sixteen, 2s+1. Per sub-block the four grid
// points are loaded from the Go table q8GridIQ2XXS (Q8_K16 bytes already)
// and the negative values' bytes subtracted from 0x80 under the mask.

// iq2XXSConsts loads the block loop's constants: Z29 vpmultishiftqb's bit
// offsets (each sub-block's qword: the four sign indices at 32+7l, the
// scale at 60), X27 the scales' byte positions, Z30:Z31 the sign patterns,
// Y28 0x80 bytes, Y21 1/8 (d is the f16 over 8), R8 the grid.
func iq2XXSConsts(a *asm) {
	a.p("VPBROADCASTQ iq2xxsShift<>(SB), Z29")
	a.p("VMOVDQU8 iq2xxsScalePos<>(SB), X27")
	a.p("VMOVDQU64 iqSignPatterns<>+0(SB), Z30")
	a.p("VMOVDQU64 iqSignPatterns<>+64(SB), Z31")
	a.p("MOVL $0x80808080, CX")
	a.p("VPBROADCASTD CX, Y28")
	a.p("MOVL $0x3e000000, CX") // 0.125
	a.p("VPBROADCASTD CX, Y21")
	a.p("LEAQ ·q8GridIQ2XXS(SB), R8")
}

// iq2XXSBlock emits the body of kKernel's block loop for IQ2_XXS (VNNI
// level with VBMI): the sub-blocks' bytes into Y8 in turn, then Q8_K16's
// products (q8K16Block) on them. R14 and the frame's 64 bytes are scratch.
func iq2XXSBlock(a *asm, T int, yAddr func(off, t int) string, dAddr, bsAddr func(t int) string, facc, sumi func(t int) int) {
	zeroPartials(a, T)
	a.p("VMOVDQU8 2(SI), Z16")
	a.p("VPMULTISHIFTQB Z16, Z29, Z17")
	a.p("VPERMB Z17, Z27, Z18")                // the scales' nibbles in X18
	a.p("VPERMB iq2xxsScales<>(SB), X18, X18") // 2s+1
	a.p("VPERMI2B Z31, Z30, Z17")              // sign patterns, bytes 0-3 of each qword
	a.p("VMOVDQU64 Z17, 0(SP)")
	a.p("VPMOVSXBW X18, Y19")
	a.p("VMOVDQU32 Y19, 64(SP)") // as dwords s | s<<16, one a sub-block
	a.p("VPBROADCASTW 0(SI), X20")
	a.p("VCVTPH2PS X20, Y20")
	a.p("VMULPS Y21, Y20, Y20")
	for p := 0; p < 8; p++ {
		g := 2 + 8*p
		a.p("MOVBLZX %d(SI), R14", g)
		a.p("VMOVQ (R8)(R14*8), X8")
		a.p("MOVBLZX %d(SI), R14", g+1)
		a.p("VPINSRQ $1, (R8)(R14*8), X8, X8")
		a.p("MOVBLZX %d(SI), R14", g+2)
		a.p("VMOVQ (R8)(R14*8), X9")
		a.p("MOVBLZX %d(SI), R14", g+3)
		a.p("VPINSRQ $1, (R8)(R14*8), X9, X9")
		a.p("VINSERTI128 $1, X9, Y8, Y8")
		a.p("KMOVD %d(SP), K1", 8*p)
		a.p("VPSUBB Y8, Y28, K1, Y8")
		a.p("VPBROADCASTD %d(SP), Y26", 64+4*p) // the sub-block's scale, both words
		for t := 0; t < T; t++ {
			a.p("VPMADDUBSW %s, Y8, Y25", yAddr(32*p, t))
			a.p("VPDPWSSD Y26, Y25, Y%d", partial(T, t, p))
		}
	}
	sumPartials(a, T, sumi)
	q8K16Finish(a, T, dAddr, bsAddr, facc, sumi)
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
func sumPartials(a *asm, T int, sumi func(t int) int) {
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

// iq2XXSData emits iq2XXSBlock's tables.
func iq2XXSData(a *asm) {
	var shift uint64
	for l, off := range []int{32, 39, 46, 53, 60} {
		shift |= uint64(off) << (8 * l)
	}
	fmt.Fprintf(&a.b, "DATA iq2xxsShift<>+0(SB)/8, $0x%016x\n", shift)
	a.b.WriteString("GLOBL iq2xxsShift<>(SB), RODATA|NOPTR, $8\n\n")
	var pos [16]byte
	for i := range pos {
		pos[i] = byte(8*(i/2) + 4) // sub-block i/2's scale byte
	}
	dataBytes(a, "iq2xxsScalePos", pos[:])
	var sc [16]byte
	for i := range sc {
		sc[i] = byte(2*i + 1)
	}
	dataBytes(a, "iq2xxsScales", sc[:])
	var signs [128]byte
	for s := range signs {
		signs[s] = byte(s) | byte(bits.OnesCount8(uint8(s))&1)<<7
	}
	dataBytes(a, "iqSignPatterns", signs[:])
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
