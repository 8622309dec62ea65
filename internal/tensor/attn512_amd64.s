//go:build amd64 && !purego

#include "textflag.h"
#include "attn_amd64.h"

// The AVX-512 attention kernels: sixteen halves per conversion, twice the
// AVX2 kernels' work per instruction. The dot products fold each 16-lane
// accumulator into eight lanes (lane i plus lane i+8) and then reduce as
// the AVX2 kernels do, a single row's lanes in the four rows' order, in both
// kernels below: one query gets the same bits from either, whichever rows
// share its call or block. The weighted
// sums give every output element the FMAs of the AVX2 kernels in the same
// order, so they are bit-identical to them.

// func dotsF16PagedAVX512(dst *float32, n int, q *float32, hd int, blocks *[]uint16, off, bs, strideBytes int)
// dst[j] = sum_d q[d] * f16(row j), row j at blocks[j/bs] + off + (j%bs)·stride
// (bytes): a paged KV cache's rows, one call for many blocks (a contiguous
// run of rows is one block of n rows); hd % 16 == 0.
TEXT ·dotsF16PagedAVX512(SB), NOSPLIT, $0-64
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), R15             // rows left in all
	MOVQ q+16(FP), SI
	MOVQ hd+24(FP), R8
	MOVQ blocks+32(FP), R12       // block table cursor
	MOVQ strideBytes+56(FP), R9
	LEAQ (R9)(R9*2), R13          // 3*stride

block:
	TESTQ R15, R15
	JZ    done
	NEXT_BLOCK(R12, off+40(FP), DX, bs+48(FP), CX, R15)

quad:
	CMPQ CX, $4
	JL   single
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	MOVQ DX, R10                  // row 0 cursor
	MOVQ SI, R11                  // q cursor
	XORQ AX, AX

quadloop:
	VMOVUPS (R11), Z4
	VCVTPH2PS (R10), Z5
	VFMADD231PS Z4, Z5, Z0
	VCVTPH2PS (R10)(R9*1), Z6
	VFMADD231PS Z4, Z6, Z1
	VCVTPH2PS (R10)(R9*2), Z7
	VFMADD231PS Z4, Z7, Z2
	VCVTPH2PS (R10)(R13*1), Z8
	VFMADD231PS Z4, Z8, Z3
	ADDQ $32, R10
	ADDQ $64, R11
	ADDQ $16, AX
	CMPQ AX, R8
	JB   quadloop

	VEXTRACTF64X4 $1, Z0, Y4
	VADDPS Y4, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y4
	VADDPS Y4, Y1, Y1
	VEXTRACTF64X4 $1, Z2, Y4
	VADDPS Y4, Y2, Y2
	VEXTRACTF64X4 $1, Z3, Y4
	VADDPS Y4, Y3, Y3
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, DI
	LEAQ (DX)(R9*4), DX
	SUBQ $4, CX
	JMP  quad

single:
	TESTQ CX, CX
	JZ    block
	VXORPS Z0, Z0, Z0
	MOVQ DX, R10
	MOVQ SI, R11
	XORQ AX, AX

singleloop:
	VCVTPH2PS (R10), Z5
	VFMADD231PS (R11), Z5, Z0
	ADDQ $32, R10
	ADDQ $64, R11
	ADDQ $16, AX
	CMPQ AX, R8
	JB   singleloop

	VEXTRACTF64X4 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVSS X0, (DI)
	ADDQ $4, DI
	ADDQ R9, DX
	DECQ CX
	JMP  single

done:
	VZEROUPPER
	RET

// func dotsF16x3PagedAVX512(dst *float32, dstStride, n int, q *float32, qStride, hd int, blocks *[]uint16, off, bs, strideBytes int)
// dotsF16PagedAVX512 for the three queries at q, q+qStride, q+2·qStride
// (bytes), each key row converted once for the three; hd % 16 == 0.
TEXT ·dotsF16x3PagedAVX512(SB), NOSPLIT, $0-80
	MOVQ dst+0(FP), DI
	MOVQ dstStride+8(FP), BX
	MOVQ n+16(FP), R15            // rows left in all
	MOVQ q+24(FP), SI
	MOVQ qStride+32(FP), R14
	MOVQ hd+40(FP), R8
	MOVQ blocks+48(FP), R12       // block table cursor
	MOVQ strideBytes+72(FP), R9
	LEAQ (R9)(R9*2), R13          // 3*stride

block3:
	TESTQ R15, R15
	JZ    done3
	NEXT_BLOCK(R12, off+56(FP), DX, bs+64(FP), CX, R15)

quad3:
	CMPQ CX, $4
	JL   single3
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	MOVQ DX, R10                  // row 0 cursor
	MOVQ SI, R11                  // q cursor
	XORQ AX, AX

quad3loop:
	VMOVUPS (R11), Z12
	VMOVUPS (R11)(R14*1), Z13
	VMOVUPS (R11)(R14*2), Z14
	VCVTPH2PS (R10), Z16
	VCVTPH2PS (R10)(R9*1), Z17
	VCVTPH2PS (R10)(R9*2), Z18
	VCVTPH2PS (R10)(R13*1), Z19
	VFMADD231PS Z12, Z16, Z0
	VFMADD231PS Z13, Z16, Z4
	VFMADD231PS Z14, Z16, Z8
	VFMADD231PS Z12, Z17, Z1
	VFMADD231PS Z13, Z17, Z5
	VFMADD231PS Z14, Z17, Z9
	VFMADD231PS Z12, Z18, Z2
	VFMADD231PS Z13, Z18, Z6
	VFMADD231PS Z14, Z18, Z10
	VFMADD231PS Z12, Z19, Z3
	VFMADD231PS Z13, Z19, Z7
	VFMADD231PS Z14, Z19, Z11
	ADDQ $32, R10
	ADDQ $64, R11
	ADDQ $16, AX
	CMPQ AX, R8
	JB   quad3loop

	VEXTRACTF64X4 $1, Z0, Y12
	VADDPS Y12, Y0, Y0
	VEXTRACTF64X4 $1, Z1, Y12
	VADDPS Y12, Y1, Y1
	VEXTRACTF64X4 $1, Z2, Y12
	VADDPS Y12, Y2, Y2
	VEXTRACTF64X4 $1, Z3, Y12
	VADDPS Y12, Y3, Y3
	VEXTRACTF64X4 $1, Z4, Y12
	VADDPS Y12, Y4, Y4
	VEXTRACTF64X4 $1, Z5, Y12
	VADDPS Y12, Y5, Y5
	VEXTRACTF64X4 $1, Z6, Y12
	VADDPS Y12, Y6, Y6
	VEXTRACTF64X4 $1, Z7, Y12
	VADDPS Y12, Y7, Y7
	VEXTRACTF64X4 $1, Z8, Y12
	VADDPS Y12, Y8, Y8
	VEXTRACTF64X4 $1, Z9, Y12
	VADDPS Y12, Y9, Y9
	VEXTRACTF64X4 $1, Z10, Y12
	VADDPS Y12, Y10, Y10
	VEXTRACTF64X4 $1, Z11, Y12
	VADDPS Y12, Y11, Y11
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DI)
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X5
	VADDPS X5, X4, X4
	VMOVUPS X4, (DI)(BX*1)
	VHADDPS Y9, Y8, Y8
	VHADDPS Y11, Y10, Y10
	VHADDPS Y10, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPS X9, X8, X8
	VMOVUPS X8, (DI)(BX*2)
	ADDQ $16, DI
	LEAQ (DX)(R9*4), DX
	SUBQ $4, CX
	JMP  quad3

single3:
	TESTQ CX, CX
	JZ    block3
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	MOVQ DX, R10
	MOVQ SI, R11
	XORQ AX, AX

single3loop:
	VCVTPH2PS (R10), Z5
	VFMADD231PS (R11), Z5, Z0
	VFMADD231PS (R11)(R14*1), Z5, Z1
	VFMADD231PS (R11)(R14*2), Z5, Z2
	ADDQ $32, R10
	ADDQ $64, R11
	ADDQ $16, AX
	CMPQ AX, R8
	JB   single3loop

	VEXTRACTF64X4 $1, Z0, Y3
	VADDPS Y3, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X3
	VADDPS X3, X0, X0
	VMOVSS X0, (DI)
	VEXTRACTF64X4 $1, Z1, Y3
	VADDPS Y3, Y1, Y1
	VHADDPS Y1, Y1, Y1
	VHADDPS Y1, Y1, Y1
	VEXTRACTF128 $1, Y1, X3
	VADDPS X3, X1, X1
	VMOVSS X1, (DI)(BX*1)
	VEXTRACTF64X4 $1, Z2, Y3
	VADDPS Y3, Y2, Y2
	VHADDPS Y2, Y2, Y2
	VHADDPS Y2, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VADDPS X3, X2, X2
	VMOVSS X2, (DI)(BX*2)
	ADDQ $4, DI
	ADDQ R9, DX
	DECQ CX
	JMP  single3

done3:
	VZEROUPPER
	RET

// func axpysF16x3PagedAVX512(out *float32, outStride, hd int, p *float32, pStride, n int, blocks *[]uint16, off, bs, strideBytes int)
// The three weighted sums out_g[d] += sum_j p_g[j] * f16(row j) (out_g at
// out+g·outStride, p_g at p+g·pStride, bytes), row j at blocks[j/bs] + off +
// (j%bs)·stride as in dotsF16PagedAVX512; hd % 64 == 0. For each 64-wide
// slice the twelve accumulators stay in registers, over all the blocks,
// while every row is converted once.
TEXT ·axpysF16x3PagedAVX512(SB), NOSPLIT, $0-80
	MOVQ out+0(FP), DI
	MOVQ outStride+8(FP), BX
	MOVQ hd+16(FP), R8
	MOVQ pStride+32(FP), R14
	MOVQ off+56(FP), DX           // this slice's offset in a row
	MOVQ strideBytes+72(FP), R9
	LEAQ (DI)(BX*1), R15          // out_1
	LEAQ (DI)(BX*2), BX           // out_2

chunk3:
	TESTQ R8, R8
	JZ    adone3
	VMOVUPS 0(DI), Z0
	VMOVUPS 64(DI), Z1
	VMOVUPS 128(DI), Z2
	VMOVUPS 192(DI), Z3
	VMOVUPS 0(R15), Z4
	VMOVUPS 64(R15), Z5
	VMOVUPS 128(R15), Z6
	VMOVUPS 192(R15), Z7
	VMOVUPS 0(BX), Z8
	VMOVUPS 64(BX), Z9
	VMOVUPS 128(BX), Z10
	VMOVUPS 192(BX), Z11
	MOVQ p+24(FP), R11            // weight cursor
	MOVQ blocks+48(FP), R13       // block table cursor
	MOVQ n+40(FP), AX             // rows left in all

ablock3:
	NEXT_BLOCK(R13, DX, R10, bs+64(FP), R12, AX)

rows3:
	VBROADCASTSS (R11), Z12
	VBROADCASTSS (R11)(R14*1), Z13
	VBROADCASTSS (R11)(R14*2), Z14
	VCVTPH2PS 0(R10), Z16
	VCVTPH2PS 32(R10), Z17
	VCVTPH2PS 64(R10), Z18
	VCVTPH2PS 96(R10), Z19
	VFMADD231PS Z12, Z16, Z0
	VFMADD231PS Z13, Z16, Z4
	VFMADD231PS Z14, Z16, Z8
	VFMADD231PS Z12, Z17, Z1
	VFMADD231PS Z13, Z17, Z5
	VFMADD231PS Z14, Z17, Z9
	VFMADD231PS Z12, Z18, Z2
	VFMADD231PS Z13, Z18, Z6
	VFMADD231PS Z14, Z18, Z10
	VFMADD231PS Z12, Z19, Z3
	VFMADD231PS Z13, Z19, Z7
	VFMADD231PS Z14, Z19, Z11
	ADDQ R9, R10
	ADDQ $4, R11
	DECQ R12
	JNZ  rows3
	TESTQ AX, AX
	JNZ   ablock3

	VMOVUPS Z0, 0(DI)
	VMOVUPS Z1, 64(DI)
	VMOVUPS Z2, 128(DI)
	VMOVUPS Z3, 192(DI)
	VMOVUPS Z4, 0(R15)
	VMOVUPS Z5, 64(R15)
	VMOVUPS Z6, 128(R15)
	VMOVUPS Z7, 192(R15)
	VMOVUPS Z8, 0(BX)
	VMOVUPS Z9, 64(BX)
	VMOVUPS Z10, 128(BX)
	VMOVUPS Z11, 192(BX)
	ADDQ $256, DI                 // next 64 outputs
	ADDQ $256, R15
	ADDQ $256, BX
	ADDQ $128, DX                 // next 64 halves of each row
	SUBQ $64, R8
	JMP  chunk3

adone3:
	VZEROUPPER
	RET
