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

// reduceStore sums the 8 lanes of each of the R accumulators of token t
// (registers Y(t*R+r), all in Y0-Y15) and stores the R results at (CX).
// It clobbers the accumulators.
func reduceStore(a *asm, R, t int) {
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
	for r := 0; r < R; r++ {
		x := acc(r)
		a.p("VEXTRACTF128 $1, Y%d, X15", x)
		a.p("VADDPS X15, X%d, X%d", x, x)
		a.p("VHADDPS X%d, X%d, X%d", x, x, x)
		a.p("VHADDPS X%d, X%d, X%d", x, x, x)
		a.p("VMOVSS X%d, %d(CX)", x, 4*r)
	}
}

// q8Kernel generates a Q8_0 or Q4_0 weight × Q8_0 activation tile.
//
// Arguments: w *byte, rowBytes, groups int, y *int8, yStride int,
// d *float32, s *int32, dStride, nb int, dst *float32, ldBytes int.
//
// y holds T tokens' int8 values (yStride bytes apart), d their per-block
// scales and s the negated per-block sums −Σy. vpdpbusd and vpmaddubsw need
// one unsigned operand, so the weights are made unsigned by an offset (Q8_0
// bytes xor 0x80 = q+128 with VNNI; Q4_0 nibbles are q+8 already) and each
// of the 8 int32 lanes of a block's dot product starts from a bias that
// removes the offset: 16·(−Σy) for Q8_0 (the 8 lanes sum to −128·Σy) and
// −Σy for Q4_0 (the lanes sum to −8·Σy). AVX2's Q8_0
// kernel uses the sign trick instead (|w| × sign(w)·y) and needs no bias.
//
// vnni selects AVX512-VNNI (vpdpbusd on ymm with EVEX registers) or AVX2
// (vpmaddubsw + vpmaddwd; R must be 1).
func q8Kernel(a *asm, d *decl, q4 bool, vnni bool, R, T int) {
	typ, bsz := "q80", 34
	if q4 {
		typ, bsz = "q40", 18
	}
	isa := "AVX2"
	if vnni {
		isa = "VNNI"
	}
	name := fmt.Sprintf("%s%s_%dx%d", typ, isa, R, T)
	d.fn(fmt.Sprintf("%s computes a %d-row × %d-token tile of %s weights × Q8_0 activations (%s).", name, R, T, strings.ToUpper(typ[:2])+"_"+typ[2:], isa),
		name, "(w *byte, rowBytes, groups int, y *int8, yStride int, d *float32, s *int32, dStride, nb int, dst *float32, ldBytes int)")
	fmt.Fprintf(&a.b, "// func %s(w *byte, rowBytes, groups int, y *int8, yStride int, d *float32, s *int32, dStride, nb int, dst *float32, ldBytes int)\n", name)
	fmt.Fprintf(&a.b, "TEXT ·%s(SB), NOSPLIT, $0-88\n", name)
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("LEAQ (R8)(R8*2), R9")
	a.p("MOVQ yStride+32(FP), R10")
	a.p("LEAQ (R10)(R10*2), R11")
	a.p("MOVQ dStride+56(FP), R12")
	a.p("LEAQ (R12)(R12*2), R13")
	a.p("MOVQ dst+72(FP), AX")
	a.p("MOVQ groups+16(FP), R15")
	// Constants.
	if vnni {
		if q4 {
			a.p("MOVL $0x0f0f0f0f, CX")
			a.p("VPBROADCASTD CX, Y30")
		} else {
			a.p("MOVL $0x80808080, CX")
			a.p("VPBROADCASTD CX, Y31")
		}
	} else {
		a.p("MOVL $0x00010001, CX")
		a.p("VMOVD CX, X13")
		a.p("VPBROADCASTD X13, Y13") // int16 ones for vpmaddwd
		if q4 {
			a.p("MOVL $0x0f0f0f0f, CX")
			a.p("VMOVD CX, X14")
			a.p("VPBROADCASTD X14, Y14")
		}
	}
	a.label(name + "_group")
	a.p("MOVQ y+24(FP), DI")
	a.p("MOVQ d+40(FP), BX")
	a.p("MOVQ s+48(FP), DX")
	a.p("MOVQ nb+64(FP), CX")
	// R14 runs R rows ahead of SI: the next group, prefetched.
	if R == 4 {
		a.p("LEAQ (SI)(R8*4), R14")
	} else {
		a.p("LEAQ (SI)(R8*1), R14")
	}
	for i := 0; i < R*T; i++ {
		a.p("VPXOR Y%d, Y%d, Y%d", i, i, i)
	}
	a.label(name + "_block")
	for r := 0; r < R; r++ {
		a.p("PREFETCHT0 %s", stride(0, "R14", "R8", "R9", r))
	}
	rowAddr := func(off, r int) string { return stride(off, "SI", "R8", "R9", r) }
	tokAddr := func(t int) string { return stride(0, "DI", "R10", "R11", t) }
	dAddr := func(t int) string { return stride(0, "BX", "R12", "R13", t) }
	sAddr := func(t int) string { return stride(0, "DX", "R12", "R13", t) }
	acc := func(r, t int) int { return t*R + r }
	if vnni {
		// Weights to unsigned bytes in Y16+r, scales in Y20+r.
		for r := 0; r < R; r++ {
			if q4 {
				a.p("VMOVDQU32 %s, X%d", rowAddr(2, r), 16+r)
				a.p("VPSRLW $4, X%d, X24", 16+r)
				a.p("VINSERTI32X4 $1, X24, Y%d, Y%d", 16+r, 16+r)
				a.p("VPANDD Y30, Y%d, Y%d", 16+r, 16+r)
			} else {
				a.p("VMOVDQU32 %s, Y%d", rowAddr(2, r), 16+r)
				a.p("VPXORD Y31, Y%d, Y%d", 16+r, 16+r)
			}
			a.p("VPBROADCASTW %s, X%d", rowAddr(0, r), 20+r)
			a.p("VCVTPH2PS X%d, Y%d", 20+r, 20+r)
		}
		for t := 0; t < T; t++ {
			a.p("VPBROADCASTD %s, Y24", sAddr(t))
			if !q4 {
				a.p("VPSLLD $4, Y24, Y24")
			}
			a.p("VBROADCASTSS %s, Y25", dAddr(t))
			for r := 0; r < R; r++ {
				tmp, sc := 26+2*(r%2), 27+2*(r%2)
				a.p("VMOVDQA32 Y24, Y%d", tmp)
				a.p("VPDPBUSD %s, Y%d, Y%d", tokAddr(t), 16+r, tmp)
				a.p("VCVTDQ2PS Y%d, Y%d", tmp, tmp)
				a.p("VMULPS Y25, Y%d, Y%d", 20+r, sc)
				a.p("VFMADD231PS Y%d, Y%d, Y%d", sc, tmp, acc(r, t))
			}
		}
	} else {
		if R != 1 {
			log.Fatal("AVX2 q8 kernels have R = 1")
		}
		// Y4: |w| (Q8_0) or nibbles (Q4_0); Y5: w; Y6: dx; Y7 y; Y8 tmp; Y9 dy; Y10 bias.
		if q4 {
			a.p("VMOVDQU %s, X4", rowAddr(2, 0))
			a.p("VPSRLW $4, X4, X5")
			a.p("VINSERTI128 $1, X5, Y4, Y4")
			a.p("VPAND Y14, Y4, Y4")
		} else {
			a.p("VMOVDQU %s, Y5", rowAddr(2, 0))
			a.p("VPABSB Y5, Y4")
		}
		a.p("VPBROADCASTW %s, X6", rowAddr(0, 0))
		a.p("VCVTPH2PS X6, Y6")
		for t := 0; t < T; t++ {
			a.p("VMOVDQU %s, Y7", tokAddr(t))
			if !q4 {
				a.p("VPSIGNB Y5, Y7, Y7")
			}
			a.p("VPMADDUBSW Y7, Y4, Y8")
			a.p("VPMADDWD Y13, Y8, Y8")
			if q4 {
				a.p("VPBROADCASTD %s, Y10", sAddr(t))
				a.p("VPADDD Y10, Y8, Y8")
			}
			a.p("VCVTDQ2PS Y8, Y8")
			a.p("VBROADCASTSS %s, Y9", dAddr(t))
			a.p("VMULPS Y9, Y6, Y9")
			a.p("VFMADD231PS Y9, Y8, Y%d", acc(0, t))
		}
	}
	a.p("ADDQ $%d, SI", bsz)
	a.p("ADDQ $%d, R14", bsz)
	a.p("ADDQ $32, DI")
	a.p("ADDQ $4, BX")
	a.p("ADDQ $4, DX")
	a.p("DECQ CX")
	a.p("JNZ %s_block", name)
	// Store: token t's R results at dst + t*ld.
	a.p("MOVQ ldBytes+80(FP), R14")
	a.p("MOVQ AX, CX")
	for t := 0; t < T; t++ {
		reduceStore(a, R, t)
		if t+1 < T {
			a.p("ADDQ R14, CX")
		}
	}
	a.p("ADDQ $%d, AX", 4*R)
	// SI is now one row past the group's first row.
	for r := 1; r < R; r++ {
		a.p("ADDQ R8, SI")
	}
	a.p("DECQ R15")
	a.p("JNZ %s_group", name)
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

// floatKernel generates an F32, F16 or BF16 weight × f32 activation tile
// (AVX2 + FMA + F16C; VEX only).
//
// Arguments: w *byte, rowBytes, groups int, y *float32, yStride int,
// steps int (columns / 8), dst *float32, ldBytes int.
func floatKernel(a *asm, d *decl, typ string, R, T int) {
	name := fmt.Sprintf("%sFMA_%dx%d", typ, R, T)
	esz := map[string]int{"f32": 4, "f16": 2, "bf16": 2}[typ]
	d.fn(fmt.Sprintf("%s computes a %d-row × %d-token tile of %s weights × f32 activations over steps×8 columns.", name, R, T, strings.ToUpper(typ)),
		name, "(w *byte, rowBytes, groups int, y *float32, yStride int, steps int, dst *float32, ldBytes int)")
	fmt.Fprintf(&a.b, "// func %s(w *byte, rowBytes, groups int, y *float32, yStride int, steps int, dst *float32, ldBytes int)\n", name)
	fmt.Fprintf(&a.b, "TEXT ·%s(SB), NOSPLIT, $0-64\n", name)
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("LEAQ (R8)(R8*2), R9")
	a.p("MOVQ yStride+32(FP), R10")
	a.p("LEAQ (R10)(R10*2), R11")
	a.p("MOVQ dst+48(FP), AX")
	a.p("MOVQ ldBytes+56(FP), R14")
	a.p("MOVQ groups+16(FP), R15")
	a.label(name + "_group")
	a.p("MOVQ y+24(FP), DI")
	a.p("MOVQ steps+40(FP), CX")
	a.p("MOVQ SI, BX") // group start
	for i := 0; i < R*T; i++ {
		a.p("VXORPS Y%d, Y%d, Y%d", i, i, i)
	}
	a.label(name + "_step")
	rowAddr := func(r int) string { return stride(0, "SI", "R8", "R9", r) }
	tokAddr := func(t int) string { return stride(0, "DI", "R10", "R11", t) }
	wreg := func(r int) int { return R*T + r }
	for r := 0; r < R; r++ {
		switch typ {
		case "f32":
			a.p("VMOVUPS %s, Y%d", rowAddr(r), wreg(r))
		case "f16":
			a.p("VCVTPH2PS %s, Y%d", rowAddr(r), wreg(r))
		case "bf16":
			a.p("VPMOVZXWD %s, Y%d", rowAddr(r), wreg(r))
			a.p("VPSLLD $16, Y%d, Y%d", wreg(r), wreg(r))
		}
	}
	for t := 0; t < T; t++ {
		for r := 0; r < R; r++ {
			a.p("VFMADD231PS %s, Y%d, Y%d", tokAddr(t), wreg(r), t*R+r)
		}
	}
	a.p("ADDQ $%d, SI", 8*esz)
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
	a.p("DECQ R15")
	a.p("JNZ %s_group", name)
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}

const header = "// Code generated by asmgen; DO NOT EDIT.\n\n"

func main() {
	var a asm
	var d decl
	a.b.WriteString(header + "//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	d.b.WriteString(header + "//go:build amd64 && !purego\n\npackage tensor\n\n")
	for _, q4 := range []bool{false, true} {
		for _, R := range []int{1, 4} {
			for T := 1; T <= 4; T++ {
				q8Kernel(&a, &d, q4, true, R, T)
			}
		}
		for T := 1; T <= 4; T++ {
			q8Kernel(&a, &d, q4, false, 1, T)
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
