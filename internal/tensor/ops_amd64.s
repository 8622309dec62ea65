//go:build amd64 && !purego

#include "textflag.h"

// Row conversions and attention helpers for CPUs with AVX2, FMA and F16C
// (VEX encoding, Y0-Y15). Each reproduces its Go reference in
// matmul.go / ops.go operation for operation where the reference is exact
// (quantization), or differs only in float summation order (dot products).

// Lane order fix after vpacksswb of four vectors packed in 128-bit halves.
DATA packPerm<>+0(SB)/4, $0
DATA packPerm<>+4(SB)/4, $4
DATA packPerm<>+8(SB)/4, $1
DATA packPerm<>+12(SB)/4, $5
DATA packPerm<>+16(SB)/4, $2
DATA packPerm<>+20(SB)/4, $6
DATA packPerm<>+24(SB)/4, $3
DATA packPerm<>+28(SB)/4, $7
GLOBL packPerm<>(SB), RODATA|NOPTR, $32

// func quantQ80AVX2(x *float32, q *int8, d *float32, s *int32, nb int, smul int32)
//
// Per block of 32: amax = max|x|, d = f16(amax/127), values x·(127/amax)
// rounded to nearest even (MXCSR default), s = smul·Σq.
TEXT ·quantQ80AVX2(SB), NOSPLIT, $0-44
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ d+16(FP), BX
	MOVQ s+24(FP), DX
	MOVQ nb+32(FP), CX
	MOVL smul+40(FP), R8
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15 // abs mask
	MOVL $0x42fe0000, AX  // 127.0
	VMOVD AX, X14
	VMOVDQU packPerm<>(SB), Y13
	TESTQ CX, CX
	JZ q80done

q80loop:
	VMOVUPS 0(SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VANDPS Y15, Y0, Y4
	VANDPS Y15, Y1, Y5
	VMAXPS Y5, Y4, Y4
	VANDPS Y15, Y2, Y5
	VMAXPS Y5, Y4, Y4
	VANDPS Y15, Y3, Y5
	VMAXPS Y5, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VMOVHLPS X4, X4, X5
	VMAXPS X5, X4, X4
	VMOVSHDUP X4, X5
	VMAXSS X5, X4, X4 // X4 = amax

	VDIVSS X14, X4, X5 // amax/127
	VCVTPS2PH $0, X5, X6
	VCVTPH2PS X6, X6
	VMOVSS X6, (BX)

	VDIVSS X4, X14, X7 // 127/amax
	VXORPS X8, X8, X8
	VCMPSS $4, X8, X4, X9 // amax != 0
	VANDPS X9, X7, X7
	VBROADCASTSS X7, Y7

	VMULPS Y7, Y0, Y0
	VMULPS Y7, Y1, Y1
	VMULPS Y7, Y2, Y2
	VMULPS Y7, Y3, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3

	VPADDD Y1, Y0, Y8
	VPADDD Y3, Y2, Y9
	VPADDD Y9, Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPADDD X9, X8, X8
	VPSHUFD $0x4e, X8, X9
	VPADDD X9, X8, X8
	VPSHUFD $0xb1, X8, X9
	VPADDD X9, X8, X8
	VMOVD X8, AX
	IMULL R8, AX
	MOVL AX, (DX)

	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, (DI)

	ADDQ $128, SI
	ADDQ $32, DI
	ADDQ $4, BX
	ADDQ $4, DX
	DECQ CX
	JNZ q80loop

q80done:
	VZEROUPPER
	RET

// func quantQ8KAVX2(x *float32, q *int8, d *float32, nb int)
//
// Per block of 256 (quantize_row_q8_K_ref): the first value of largest
// magnitude m, iscale = −127/m, values nearest(iscale·x) capped at 127,
// d = 1/iscale; an all-zero block gets d = 0 and zero values. The block sums
// are left to the caller.
TEXT ·quantQ8KAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ q+8(FP), DI
	MOVQ d+16(FP), BX
	MOVQ nb+24(FP), CX
	MOVL $0x7fffffff, AX
	VMOVD AX, X15
	VPBROADCASTD X15, Y15 // abs mask
	MOVL $0xc2fe0000, AX  // -127.0
	VMOVD AX, X14
	MOVL $127, AX
	VMOVD AX, X12
	VPBROADCASTD X12, Y12
	VMOVDQU packPerm<>(SB), Y13
	TESTQ CX, CX
	JZ q8kdone

q8kblock:
	// amax over 32 vectors.
	VXORPS Y4, Y4, Y4
	MOVQ $0, R8

q8kmax:
	VANDPS (SI)(R8*1), Y15, Y5
	VMAXPS Y5, Y4, Y4
	VANDPS 32(SI)(R8*1), Y15, Y5
	VMAXPS Y5, Y4, Y4
	ADDQ $64, R8
	CMPQ R8, $1024
	JNE q8kmax
	VEXTRACTF128 $1, Y4, X5
	VMAXPS X5, X4, X4
	VMOVHLPS X4, X4, X5
	VMAXPS X5, X4, X4
	VMOVSHDUP X4, X5
	VMAXSS X5, X4, X4 // X4 = amax
	VXORPS X5, X5, X5
	VUCOMISS X5, X4
	JNE q8knonzero
	JP q8knonzero
	// All zero.
	MOVL $0, (BX)
	VPXOR Y0, Y0, Y0
	MOVQ $0, R8

q8kzero:
	VMOVDQU Y0, (DI)(R8*1)
	ADDQ $32, R8
	CMPQ R8, $256
	JNE q8kzero
	JMP q8knext

q8knonzero:
	// First index whose magnitude equals amax.
	VBROADCASTSS X4, Y6
	MOVQ $0, R8

q8kfind:
	VANDPS (SI)(R8*4), Y15, Y5
	VCMPPS $0, Y6, Y5, Y5
	VMOVMSKPS Y5, AX
	TESTL AX, AX
	JNZ q8kfound
	ADDQ $8, R8
	CMPQ R8, $256
	JLT q8kfind
	MOVQ $0, R8 // not found (NaN inputs): any value will do
	JMP q8kmaxval

q8kfound:
	BSFL AX, AX
	ADDQ AX, R8

q8kmaxval:
	VMOVSS (SI)(R8*4), X5 // signed max
	VDIVSS X5, X14, X7    // iscale = -127/max
	MOVL $0x3f800000, AX
	VMOVD AX, X8
	VDIVSS X7, X8, X8     // d = 1/iscale
	VMOVSS X8, (BX)
	VBROADCASTSS X7, Y7
	MOVQ $0, R8
	MOVQ $0, R9

q8kquant:
	VMULPS (SI)(R8*1), Y7, Y0
	VMULPS 32(SI)(R8*1), Y7, Y1
	VMULPS 64(SI)(R8*1), Y7, Y2
	VMULPS 96(SI)(R8*1), Y7, Y3
	VCVTPS2DQ Y0, Y0
	VCVTPS2DQ Y1, Y1
	VCVTPS2DQ Y2, Y2
	VCVTPS2DQ Y3, Y3
	VPMINSD Y12, Y0, Y0
	VPMINSD Y12, Y1, Y1
	VPMINSD Y12, Y2, Y2
	VPMINSD Y12, Y3, Y3
	VPACKSSDW Y1, Y0, Y0
	VPACKSSDW Y3, Y2, Y2
	VPACKSSWB Y2, Y0, Y0
	VPERMD Y0, Y13, Y0
	VMOVDQU Y0, (DI)(R9*1)
	ADDQ $128, R8
	ADDQ $32, R9
	CMPQ R9, $256
	JNE q8kquant

q8knext:
	ADDQ $1024, SI
	ADDQ $256, DI
	ADDQ $4, BX
	DECQ CX
	JNZ q8kblock

q8kdone:
	VZEROUPPER
	RET

// func roundF16AVX2(x *float32, h *uint16, f *float32, n int)
//
// h = f16(x) (round to nearest even), f = f32(h), for n a multiple of 8.
TEXT ·roundF16AVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ h+8(FP), DI
	MOVQ f+16(FP), BX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ f16done

f16loop:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU X1, (DI)
	VCVTPH2PS X1, Y2
	VMOVUPS Y2, (BX)
	ADDQ $32, SI
	ADDQ $16, DI
	ADDQ $32, BX
	DECQ CX
	JNZ f16loop

f16done:
	VZEROUPPER
	RET

// func dotF16AVX2(a, b *uint16, n int) float32
//
// Σ a[i]·b[i] in float32 for n a multiple of 8.
TEXT ·dotF16AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ CX, $32
	JLT dotf16tail

dotf16loop32:
	VCVTPH2PS 0(SI), Y4
	VCVTPH2PS 0(DI), Y5
	VFMADD231PS Y5, Y4, Y0
	VCVTPH2PS 16(SI), Y6
	VCVTPH2PS 16(DI), Y7
	VFMADD231PS Y7, Y6, Y1
	VCVTPH2PS 32(SI), Y8
	VCVTPH2PS 32(DI), Y9
	VFMADD231PS Y9, Y8, Y2
	VCVTPH2PS 48(SI), Y10
	VCVTPH2PS 48(DI), Y11
	VFMADD231PS Y11, Y10, Y3
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $32, CX
	CMPQ CX, $32
	JGE dotf16loop32

dotf16tail:
	CMPQ CX, $8
	JLT dotf16sum
	VCVTPH2PS 0(SI), Y4
	VCVTPH2PS 0(DI), Y5
	VFMADD231PS Y5, Y4, Y0
	ADDQ $16, SI
	ADDQ $16, DI
	SUBQ $8, CX
	JMP dotf16tail

dotf16sum:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyF16AVX2(dst *float32, a float32, x *uint16, n int)
//
// dst[i] += a·x[i] for n a multiple of 8.
TEXT ·axpyF16AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ axpyf16done

axpyf16loop:
	VCVTPH2PS (SI), Y1
	VMOVUPS (DI), Y2
	VFMADD231PS Y1, Y0, Y2
	VMOVUPS Y2, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ axpyf16loop

axpyf16done:
	VZEROUPPER
	RET

// func dotF32AVX2(a, b *float32, n int) float32
//
// Σ a[i]·b[i] in float32 for n a multiple of 8.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	CMPQ CX, $32
	JLT dotf32tail

dotf32loop32:
	VMOVUPS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	VMOVUPS 32(SI), Y5
	VFMADD231PS 32(DI), Y5, Y1
	VMOVUPS 64(SI), Y6
	VFMADD231PS 64(DI), Y6, Y2
	VMOVUPS 96(SI), Y7
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	CMPQ CX, $32
	JGE dotf32loop32

dotf32tail:
	CMPQ CX, $8
	JLT dotf32sum
	VMOVUPS 0(SI), Y4
	VFMADD231PS 0(DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP dotf32tail

dotf32sum:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func axpyF32AVX2(dst *float32, a float32, x *float32, n int)
//
// dst[i] += a·x[i] for n a multiple of 8.
TEXT ·axpyF32AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ axpyf32done

axpyf32loop:
	VMOVUPS (DI), Y2
	VFMADD231PS (SI), Y0, Y2
	VMOVUPS Y2, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ axpyf32loop

axpyf32done:
	VZEROUPPER
	RET

