//go:build amd64 && !purego

#include "textflag.h"
#include "attn_amd64.h"

// func dotsF16PagedAVX2(dst *float32, n int, q *float32, hd int, blocks *[]uint16, off, bs, strideBytes int)
// dst[j] = sum_d q[d] * f16(row j), row j at blocks[j/bs] + off + (j%bs)·stride
// (bytes): a paged KV cache's rows, one call for many blocks (a contiguous
// run of rows is one block of n rows); hd % 8 == 0.
// Four rows at a time with independent accumulators, then single rows,
// each single row's lanes added in the four rows' order: a row's sum does
// not depend on which rows share its call or its block.
TEXT ·dotsF16PagedAVX2(SB), NOSPLIT, $0-64
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
	JZ    block
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

// func axpysF16PagedAVX2(out *float32, hd int, p *float32, n int, blocks *[]uint16, off, bs, strideBytes int)
// out[d] += sum_j p[j] * f16(row j), row j at blocks[j/bs] + off + (j%bs)·stride
// as in dotsF16PagedAVX2; hd % 64 == 0. For each 64-wide slice of out, eight
// YMM accumulators stay in registers, over all the blocks, while every row
// is streamed through.
TEXT ·axpysF16PagedAVX2(SB), NOSPLIT, $0-64
	MOVQ out+0(FP), DI
	MOVQ hd+8(FP), R8
	MOVQ off+40(FP), DX           // this slice's offset in a row
	MOVQ strideBytes+56(FP), R9

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
	MOVQ p+16(FP), R11            // weight cursor
	MOVQ blocks+32(FP), R13       // block table cursor
	MOVQ n+24(FP), AX             // rows left in all

ablock:
	NEXT_BLOCK(R13, DX, R10, bs+48(FP), R12, AX)

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
	TESTQ AX, AX
	JNZ   ablock

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

// func prefetchRows(b *byte, rows, rowBytes, strideBytes int)
// One PREFETCHT1 per 64 bytes of each row, and one for its last byte (a
// row that does not start on a line boundary spans one more line).
// T1, into L2 rather than L1: the core tracks many more outstanding L2
// misses than L1 ones, so a whole KV block's lines are in flight at once
// instead of the prefetches stalling the loop as the L1 miss buffers fill
// (SmolLM2-135M batch 16 decode, f16 KV, EPYC: +10% tokens/s, batch 1 +4%;
// the loads then hit L2).
TEXT ·prefetchRows(SB), NOSPLIT, $0-32
	MOVQ b+0(FP), DI
	MOVQ rows+8(FP), CX
	MOVQ rowBytes+16(FP), R8
	MOVQ strideBytes+24(FP), R9
	DECQ R8                       // offset of a row's last byte

prow:
	XORQ AX, AX

pline:
	PREFETCHT1 (DI)(AX*1)
	ADDQ $64, AX
	CMPQ AX, R8
	JBE  pline
	PREFETCHT1 (DI)(R8*1)
	ADDQ R9, DI
	DECQ CX
	JNZ  prow
	RET

// func dotsF16x3PagedAVX2(dst *float32, dstStride, n int, q *float32, qStride, hd int, blocks *[]uint16, off, bs, strideBytes int)
// dotsF16PagedAVX2 for the three queries at q, q+qStride, q+2·qStride
// (bytes), each key row converted once for the three; hd % 8 == 0. Every
// (query, row) sum is added in the same order as dotsF16PagedAVX2 (same
// accumulator lanes, same reductions), so the results are identical.
TEXT ·dotsF16x3PagedAVX2(SB), NOSPLIT, $0-80
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
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11
	MOVQ DX, R10                  // row 0 cursor
	MOVQ SI, R11                  // q cursor
	XORQ AX, AX

quad3loop:
	VMOVUPS (R11), Y12
	VMOVUPS (R11)(R14*1), Y13
	VMOVUPS (R11)(R14*2), Y14
	VCVTPH2PS (R10), Y15
	VFMADD231PS Y12, Y15, Y0
	VFMADD231PS Y13, Y15, Y4
	VFMADD231PS Y14, Y15, Y8
	VCVTPH2PS (R10)(R9*1), Y15
	VFMADD231PS Y12, Y15, Y1
	VFMADD231PS Y13, Y15, Y5
	VFMADD231PS Y14, Y15, Y9
	VCVTPH2PS (R10)(R9*2), Y15
	VFMADD231PS Y12, Y15, Y2
	VFMADD231PS Y13, Y15, Y6
	VFMADD231PS Y14, Y15, Y10
	VCVTPH2PS (R10)(R13*1), Y15
	VFMADD231PS Y12, Y15, Y3
	VFMADD231PS Y13, Y15, Y7
	VFMADD231PS Y14, Y15, Y11
	ADDQ $16, R10
	ADDQ $32, R11
	ADDQ $8, AX
	CMPQ AX, R8
	JB   quad3loop

	// Reduce each query's four accumulators as dotsF16AVX2 does.
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
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	MOVQ DX, R10
	MOVQ SI, R11
	XORQ AX, AX

single3loop:
	VCVTPH2PS (R10), Y5
	VFMADD231PS (R11), Y5, Y0
	VFMADD231PS (R11)(R14*1), Y5, Y1
	VFMADD231PS (R11)(R14*2), Y5, Y2
	ADDQ $16, R10
	ADDQ $32, R11
	ADDQ $8, AX
	CMPQ AX, R8
	JB   single3loop

	VHADDPS Y0, Y0, Y0
	VHADDPS Y0, Y0, Y0
	VEXTRACTF128 $1, Y0, X3
	VADDPS X3, X0, X0
	VMOVSS X0, (DI)
	VHADDPS Y1, Y1, Y1
	VHADDPS Y1, Y1, Y1
	VEXTRACTF128 $1, Y1, X3
	VADDPS X3, X1, X1
	VMOVSS X1, (DI)(BX*1)
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

// func axpysF16x3PagedAVX2(out *float32, outStride, hd int, p *float32, pStride, n int, blocks *[]uint16, off, bs, strideBytes int)
// The three weighted sums out_g[d] += sum_j p_g[j] * f16(row j) of one value
// row set (out_g at out+g·outStride, p_g at p+g·pStride, bytes), row j as in
// dotsF16PagedAVX2; hd % 32 == 0. For each 32-wide slice, the twelve
// accumulators of the three outputs stay in registers, over all the blocks,
// while every row is converted once. Each output element gets the same FMAs
// in the same order as with axpysF16PagedAVX2.
TEXT ·axpysF16x3PagedAVX2(SB), NOSPLIT, $0-80
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
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	VMOVUPS 0(R15), Y4
	VMOVUPS 32(R15), Y5
	VMOVUPS 64(R15), Y6
	VMOVUPS 96(R15), Y7
	VMOVUPS 0(BX), Y8
	VMOVUPS 32(BX), Y9
	VMOVUPS 64(BX), Y10
	VMOVUPS 96(BX), Y11
	MOVQ p+24(FP), R11            // weight cursor
	MOVQ blocks+48(FP), R13       // block table cursor
	MOVQ n+40(FP), AX             // rows left in all

ablock3:
	NEXT_BLOCK(R13, DX, R10, bs+64(FP), R12, AX)

rows3:
	VBROADCASTSS (R11), Y12
	VBROADCASTSS (R11)(R14*1), Y13
	VBROADCASTSS (R11)(R14*2), Y14
	VCVTPH2PS 0(R10), Y15
	VFMADD231PS Y12, Y15, Y0
	VFMADD231PS Y13, Y15, Y4
	VFMADD231PS Y14, Y15, Y8
	VCVTPH2PS 16(R10), Y15
	VFMADD231PS Y12, Y15, Y1
	VFMADD231PS Y13, Y15, Y5
	VFMADD231PS Y14, Y15, Y9
	VCVTPH2PS 32(R10), Y15
	VFMADD231PS Y12, Y15, Y2
	VFMADD231PS Y13, Y15, Y6
	VFMADD231PS Y14, Y15, Y10
	VCVTPH2PS 48(R10), Y15
	VFMADD231PS Y12, Y15, Y3
	VFMADD231PS Y13, Y15, Y7
	VFMADD231PS Y14, Y15, Y11
	ADDQ R9, R10
	ADDQ $4, R11
	DECQ R12
	JNZ  rows3
	TESTQ AX, AX
	JNZ   ablock3

	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	VMOVUPS Y4, 0(R15)
	VMOVUPS Y5, 32(R15)
	VMOVUPS Y6, 64(R15)
	VMOVUPS Y7, 96(R15)
	VMOVUPS Y8, 0(BX)
	VMOVUPS Y9, 32(BX)
	VMOVUPS Y10, 64(BX)
	VMOVUPS Y11, 96(BX)
	ADDQ $128, DI                 // next 32 outputs
	ADDQ $128, R15
	ADDQ $128, BX
	ADDQ $64, DX                  // next 32 halves of each row
	SUBQ $32, R8
	JMP  chunk3

adone3:
	VZEROUPPER
	RET
