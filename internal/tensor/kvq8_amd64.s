//go:build amd64 && !purego

#include "textflag.h"

// func dotsQ80AVX2(dst *float32, n int, q *byte, nb int, k *byte, stride int)
//
// For n keys (a multiple of 8), eight at a time: dst[j] = Σ_b float(isum_jb)·(dq_b·dk_jb),
// the blocks added in order, isum_jb the exact integer dot product of block b
// of q and of the key row at k + j·stride (bytes). The integer products use
// the sign trick (|k| unsigned times q·sign(k) signed, vpmaddubsw), exact for
// values in [-127, 127]: pair sums stay below 2^15. The eight keys' partial
// sums are reduced to one vector, key j in lane j, by a tree of vphaddd.
TEXT ·dotsQ80AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ n+8(FP), CX
	MOVQ q+16(FP), SI
	MOVQ nb+24(FP), R9
	MOVQ k+32(FP), DX
	MOVQ stride+40(FP), R8
	LEAQ (R8)(R8*2), R13         // 3·stride
	MOVL $0x00010001, AX
	VMOVD AX, X9
	VPBROADCASTD X9, Y9          // int16 ones

dq80keys:
	TESTQ CX, CX
	JZ    dq80done
	VXORPS Y12, Y12, Y12         // the eight sums
	MOVQ DX, R10                 // keys 0-3, block cursor
	LEAQ (DX)(R8*4), R12         // keys 4-7
	MOVQ SI, R11                 // q block cursor
	MOVQ R9, BX                  // blocks left

dq80block:
	VMOVDQU 2(R11), Y8
	VMOVDQU 2(R10), Y11
	VPABSB Y11, Y10
	VPSIGNB Y11, Y8, Y11
	VPMADDUBSW Y11, Y10, Y0
	VPMADDWD Y9, Y0, Y0
	VMOVDQU 2(R10)(R8*1), Y11
	VPABSB Y11, Y10
	VPSIGNB Y11, Y8, Y11
	VPMADDUBSW Y11, Y10, Y1
	VPMADDWD Y9, Y1, Y1
	VMOVDQU 2(R10)(R8*2), Y11
	VPABSB Y11, Y10
	VPSIGNB Y11, Y8, Y11
	VPMADDUBSW Y11, Y10, Y2
	VPMADDWD Y9, Y2, Y2
	VMOVDQU 2(R10)(R13*1), Y11
	VPABSB Y11, Y10
	VPSIGNB Y11, Y8, Y11
	VPMADDUBSW Y11, Y10, Y3
	VPMADDWD Y9, Y3, Y3
	VMOVDQU 2(R12), Y11
	VPABSB Y11, Y10
	VPSIGNB Y11, Y8, Y11
	VPMADDUBSW Y11, Y10, Y4
	VPMADDWD Y9, Y4, Y4
	VMOVDQU 2(R12)(R8*1), Y11
	VPABSB Y11, Y10
	VPSIGNB Y11, Y8, Y11
	VPMADDUBSW Y11, Y10, Y5
	VPMADDWD Y9, Y5, Y5
	VMOVDQU 2(R12)(R8*2), Y11
	VPABSB Y11, Y10
	VPSIGNB Y11, Y8, Y11
	VPMADDUBSW Y11, Y10, Y6
	VPMADDWD Y9, Y6, Y6
	VMOVDQU 2(R12)(R13*1), Y11
	VPABSB Y11, Y10
	VPSIGNB Y11, Y8, Y11
	VPMADDUBSW Y11, Y10, Y7
	VPMADDWD Y9, Y7, Y7
	// The keys' scales, times q's.
	VPXOR X13, X13, X13
	VPINSRW $0, (R10), X13, X13
	VPINSRW $1, (R10)(R8*1), X13, X13
	VPINSRW $2, (R10)(R8*2), X13, X13
	VPINSRW $3, (R10)(R13*1), X13, X13
	VPINSRW $4, (R12), X13, X13
	VPINSRW $5, (R12)(R8*1), X13, X13
	VPINSRW $6, (R12)(R8*2), X13, X13
	VPINSRW $7, (R12)(R13*1), X13, X13
	VCVTPH2PS X13, Y13
	VPBROADCASTW (R11), X14
	VCVTPH2PS X14, Y14
	VMULPS Y13, Y14, Y13
	// Key j's eight partial sums to lane j.
	VPHADDD Y1, Y0, Y0
	VPHADDD Y3, Y2, Y2
	VPHADDD Y5, Y4, Y4
	VPHADDD Y7, Y6, Y6
	VPHADDD Y2, Y0, Y0
	VPHADDD Y6, Y4, Y4
	VPERM2I128 $0x20, Y4, Y0, Y1
	VPERM2I128 $0x31, Y4, Y0, Y3
	VPADDD Y3, Y1, Y1
	VCVTDQ2PS Y1, Y1
	VMULPS Y13, Y1, Y1
	VADDPS Y1, Y12, Y12
	ADDQ $34, R10
	ADDQ $34, R12
	ADDQ $34, R11
	DECQ BX
	JNZ  dq80block

	VMOVUPS Y12, (DI)
	ADDQ $32, DI
	LEAQ (DX)(R8*8), DX
	SUBQ $8, CX
	JMP  dq80keys

dq80done:
	VZEROUPPER
	RET

// func axpysQ80AVX2(out *float32, nb int, p *float32, n int, v *byte, stride int)
//
// For each block b of nb (32 outputs) and row j < n in order: out[32b+i] +=
// (p[j]·dv_jb)·v_jbi, the product rounded before the add, as the portable
// code; v_jb is block b of the row at v + j·stride (bytes).
TEXT ·axpysQ80AVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ nb+8(FP), R9
	MOVQ p+16(FP), SI
	MOVQ n+24(FP), CX
	MOVQ v+32(FP), DX
	MOVQ stride+40(FP), R8

aq80block:
	TESTQ R9, R9
	JZ    aq80done
	VMOVUPS 0(DI), Y0
	VMOVUPS 32(DI), Y1
	VMOVUPS 64(DI), Y2
	VMOVUPS 96(DI), Y3
	MOVQ DX, R10                 // row cursor
	MOVQ SI, R11                 // weight cursor
	MOVQ CX, BX                  // rows left

aq80row:
	VPBROADCASTW (R10), X4
	VCVTPH2PS X4, Y4
	VBROADCASTSS (R11), Y5
	VMULPS Y4, Y5, Y5            // p[j]·dv
	VPMOVSXBD 2(R10), Y6
	VCVTDQ2PS Y6, Y6
	VMULPS Y5, Y6, Y6
	VADDPS Y6, Y0, Y0
	VPMOVSXBD 10(R10), Y6
	VCVTDQ2PS Y6, Y6
	VMULPS Y5, Y6, Y6
	VADDPS Y6, Y1, Y1
	VPMOVSXBD 18(R10), Y6
	VCVTDQ2PS Y6, Y6
	VMULPS Y5, Y6, Y6
	VADDPS Y6, Y2, Y2
	VPMOVSXBD 26(R10), Y6
	VCVTDQ2PS Y6, Y6
	VMULPS Y5, Y6, Y6
	VADDPS Y6, Y3, Y3
	ADDQ R8, R10
	ADDQ $4, R11
	DECQ BX
	JNZ  aq80row

	VMOVUPS Y0, 0(DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $34, DX
	DECQ R9
	JMP  aq80block

aq80done:
	VZEROUPPER
	RET
