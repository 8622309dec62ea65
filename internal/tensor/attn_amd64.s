//go:build amd64 && !purego

#include "textflag.h"

// func dotsF16AVX2(dst *float32, n int, q *float32, hd int, k *uint16, strideBytes int)
// dst[j] = sum_d q[d] * f16(k[j*stride + d]); hd % 8 == 0.
// Four rows at a time with independent accumulators, then single rows.
TEXT ·dotsF16AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ q+16(FP), SI
	MOVQ hd+24(FP), R8
	MOVQ k+32(FP), DX
	MOVQ strideBytes+40(FP), R9
	LEAQ (R9)(R9*2), R13          // 3*stride

quad:
	CMPQ CX, $4
	JL   single
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ DX, R10                  // row 0 cursor
	MOVQ SI, R11                  // q cursor
	XORQ AX, AX

quadloop:
	VMOVUPS (R11), Y4
	VCVTPH2PS (R10), Y5
	VFMADD231PS Y4, Y5, Y0
	VCVTPH2PS (R10)(R9*1), Y6
	VFMADD231PS Y4, Y6, Y1
	VCVTPH2PS (R10)(R9*2), Y7
	VFMADD231PS Y4, Y7, Y2
	VCVTPH2PS (R10)(R13*1), Y8
	VFMADD231PS Y4, Y8, Y3
	ADDQ $16, R10
	ADDQ $32, R11
	ADDQ $8, AX
	CMPQ AX, R8
	JB   quadloop

	// Reduce the four accumulators to four sums.
	VHADDPS Y1, Y0, Y0            // [a0+a1 a2+a3 b0+b1 b2+b3 | ...]
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0            // [A B C D | A' B' C' D']
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, DI
	LEAQ (DX)(R9*4), DX
	SUBQ $4, CX
	JMP  quad

single:
	TESTQ CX, CX
	JZ    done
	VXORPS Y0, Y0, Y0
	MOVQ DX, R10
	MOVQ SI, R11
	XORQ AX, AX

singleloop:
	VCVTPH2PS (R10), Y5
	VFMADD231PS (R11), Y5, Y0
	ADDQ $16, R10
	ADDQ $32, R11
	ADDQ $8, AX
	CMPQ AX, R8
	JB   singleloop

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R9, DX
	DECQ CX
	JMP  single

done:
	VZEROUPPER
	RET

// func axpysF16AVX2(out *float32, hd int, p *float32, n int, v *uint16, strideBytes int)
// out[d] += sum_j p[j] * f16(v[j*stride + d]); hd % 64 == 0.
// For each 64-wide slice of out, eight YMM accumulators stay in registers
// while every row is streamed through.
TEXT ·axpysF16AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ hd+8(FP), R8
	MOVQ p+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ v+32(FP), DX
	MOVQ strideBytes+40(FP), R9

chunk:
	TESTQ R8, R8
	JZ    adone
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 128(DI), Y4
	VMOVUPS 160(DI), Y5
	VMOVUPS 192(DI), Y6
	VMOVUPS 224(DI), Y7
	MOVQ DX, R10                  // row cursor
	MOVQ SI, R11                  // weight cursor
	MOVQ CX, R12                  // rows left

rows:
	VBROADCASTSS (R11), Y8
	VCVTPH2PS 0(R10), Y9
	VFMADD231PS Y8, Y9, Y0
	VCVTPH2PS 16(R10), Y10
	VFMADD231PS Y8, Y10, Y1
	VCVTPH2PS 32(R10), Y11
	VFMADD231PS Y8, Y11, Y2
	VCVTPH2PS 48(R10), Y12
	VFMADD231PS Y8, Y12, Y3
	VCVTPH2PS 64(R10), Y9
	VFMADD231PS Y8, Y9, Y4
	VCVTPH2PS 80(R10), Y10
	VFMADD231PS Y8, Y10, Y5
	VCVTPH2PS 96(R10), Y11
	VFMADD231PS Y8, Y11, Y6
	VCVTPH2PS 112(R10), Y12
	VFMADD231PS Y8, Y12, Y7
	ADDQ R9, R10
	ADDQ $4, R11
	DECQ R12
	JNZ  rows

	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 128(DI)
	VMOVUPS Y5, 160(DI)
	VMOVUPS Y6, 192(DI)
	VMOVUPS Y7, 224(DI)
	ADDQ $256, DI                 // next 64 outputs
	ADDQ $128, DX                 // next 64 halves of each row
	SUBQ $64, R8
	JMP  chunk

adone:
	VZEROUPPER
	RET
