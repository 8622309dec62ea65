//go:build amd64 && !purego

#include "textflag.h"

// Vector helpers for the element-wise kernels (AVX2 + FMA + F16C, VEX only):
// a vectorized expf, max, scale, SwiGLU and half-precision conversions.
// Lengths are multiples of 8; the Go wrappers handle the tails.
//
// expf is Cephes' single-precision algorithm: n = round(x·log2 e), r = x −
// n·ln2 (ln2 in two parts), e^r = 1 + r + r²·P(r) with a degree-5
// polynomial, times 2^n built in the exponent bits. Constants are stored as
// whole vectors so the VEX instructions can take them from memory.

DATA expC<>+0(SB)/4, $0x3fb8aa3b
DATA expC<>+4(SB)/4, $0x3fb8aa3b
DATA expC<>+8(SB)/4, $0x3fb8aa3b
DATA expC<>+12(SB)/4, $0x3fb8aa3b
DATA expC<>+16(SB)/4, $0x3fb8aa3b
DATA expC<>+20(SB)/4, $0x3fb8aa3b
DATA expC<>+24(SB)/4, $0x3fb8aa3b
DATA expC<>+28(SB)/4, $0x3fb8aa3b
DATA expC<>+32(SB)/4, $0x3f318000
DATA expC<>+36(SB)/4, $0x3f318000
DATA expC<>+40(SB)/4, $0x3f318000
DATA expC<>+44(SB)/4, $0x3f318000
DATA expC<>+48(SB)/4, $0x3f318000
DATA expC<>+52(SB)/4, $0x3f318000
DATA expC<>+56(SB)/4, $0x3f318000
DATA expC<>+60(SB)/4, $0x3f318000
DATA expC<>+64(SB)/4, $0xb95e8083
DATA expC<>+68(SB)/4, $0xb95e8083
DATA expC<>+72(SB)/4, $0xb95e8083
DATA expC<>+76(SB)/4, $0xb95e8083
DATA expC<>+80(SB)/4, $0xb95e8083
DATA expC<>+84(SB)/4, $0xb95e8083
DATA expC<>+88(SB)/4, $0xb95e8083
DATA expC<>+92(SB)/4, $0xb95e8083
DATA expC<>+96(SB)/4, $0x39506967
DATA expC<>+100(SB)/4, $0x39506967
DATA expC<>+104(SB)/4, $0x39506967
DATA expC<>+108(SB)/4, $0x39506967
DATA expC<>+112(SB)/4, $0x39506967
DATA expC<>+116(SB)/4, $0x39506967
DATA expC<>+120(SB)/4, $0x39506967
DATA expC<>+124(SB)/4, $0x39506967
DATA expC<>+128(SB)/4, $0x3ab743ce
DATA expC<>+132(SB)/4, $0x3ab743ce
DATA expC<>+136(SB)/4, $0x3ab743ce
DATA expC<>+140(SB)/4, $0x3ab743ce
DATA expC<>+144(SB)/4, $0x3ab743ce
DATA expC<>+148(SB)/4, $0x3ab743ce
DATA expC<>+152(SB)/4, $0x3ab743ce
DATA expC<>+156(SB)/4, $0x3ab743ce
DATA expC<>+160(SB)/4, $0x3c088908
DATA expC<>+164(SB)/4, $0x3c088908
DATA expC<>+168(SB)/4, $0x3c088908
DATA expC<>+172(SB)/4, $0x3c088908
DATA expC<>+176(SB)/4, $0x3c088908
DATA expC<>+180(SB)/4, $0x3c088908
DATA expC<>+184(SB)/4, $0x3c088908
DATA expC<>+188(SB)/4, $0x3c088908
DATA expC<>+192(SB)/4, $0x3d2aa9c1
DATA expC<>+196(SB)/4, $0x3d2aa9c1
DATA expC<>+200(SB)/4, $0x3d2aa9c1
DATA expC<>+204(SB)/4, $0x3d2aa9c1
DATA expC<>+208(SB)/4, $0x3d2aa9c1
DATA expC<>+212(SB)/4, $0x3d2aa9c1
DATA expC<>+216(SB)/4, $0x3d2aa9c1
DATA expC<>+220(SB)/4, $0x3d2aa9c1
DATA expC<>+224(SB)/4, $0x3e2aaaaa
DATA expC<>+228(SB)/4, $0x3e2aaaaa
DATA expC<>+232(SB)/4, $0x3e2aaaaa
DATA expC<>+236(SB)/4, $0x3e2aaaaa
DATA expC<>+240(SB)/4, $0x3e2aaaaa
DATA expC<>+244(SB)/4, $0x3e2aaaaa
DATA expC<>+248(SB)/4, $0x3e2aaaaa
DATA expC<>+252(SB)/4, $0x3e2aaaaa
DATA expC<>+256(SB)/4, $0x3f000000
DATA expC<>+260(SB)/4, $0x3f000000
DATA expC<>+264(SB)/4, $0x3f000000
DATA expC<>+268(SB)/4, $0x3f000000
DATA expC<>+272(SB)/4, $0x3f000000
DATA expC<>+276(SB)/4, $0x3f000000
DATA expC<>+280(SB)/4, $0x3f000000
DATA expC<>+284(SB)/4, $0x3f000000
DATA expC<>+288(SB)/4, $0x3f800000
DATA expC<>+292(SB)/4, $0x3f800000
DATA expC<>+296(SB)/4, $0x3f800000
DATA expC<>+300(SB)/4, $0x3f800000
DATA expC<>+304(SB)/4, $0x3f800000
DATA expC<>+308(SB)/4, $0x3f800000
DATA expC<>+312(SB)/4, $0x3f800000
DATA expC<>+316(SB)/4, $0x3f800000
DATA expC<>+320(SB)/4, $0x42b17218
DATA expC<>+324(SB)/4, $0x42b17218
DATA expC<>+328(SB)/4, $0x42b17218
DATA expC<>+332(SB)/4, $0x42b17218
DATA expC<>+336(SB)/4, $0x42b17218
DATA expC<>+340(SB)/4, $0x42b17218
DATA expC<>+344(SB)/4, $0x42b17218
DATA expC<>+348(SB)/4, $0x42b17218
DATA expC<>+352(SB)/4, $0xc2aeac50
DATA expC<>+356(SB)/4, $0xc2aeac50
DATA expC<>+360(SB)/4, $0xc2aeac50
DATA expC<>+364(SB)/4, $0xc2aeac50
DATA expC<>+368(SB)/4, $0xc2aeac50
DATA expC<>+372(SB)/4, $0xc2aeac50
DATA expC<>+376(SB)/4, $0xc2aeac50
DATA expC<>+380(SB)/4, $0xc2aeac50
DATA expC<>+384(SB)/4, $0x42b17218
DATA expC<>+388(SB)/4, $0x42b17218
DATA expC<>+392(SB)/4, $0x42b17218
DATA expC<>+396(SB)/4, $0x42b17218
DATA expC<>+400(SB)/4, $0x42b17218
DATA expC<>+404(SB)/4, $0x42b17218
DATA expC<>+408(SB)/4, $0x42b17218
DATA expC<>+412(SB)/4, $0x42b17218
DATA expC<>+416(SB)/4, $0x7f800000
DATA expC<>+420(SB)/4, $0x7f800000
DATA expC<>+424(SB)/4, $0x7f800000
DATA expC<>+428(SB)/4, $0x7f800000
DATA expC<>+432(SB)/4, $0x7f800000
DATA expC<>+436(SB)/4, $0x7f800000
DATA expC<>+440(SB)/4, $0x7f800000
DATA expC<>+444(SB)/4, $0x7f800000
GLOBL expC<>(SB), RODATA|NOPTR, $448

// EXPF sets Y0 = exp(Y0) (max error about 2 ulp; 0 below −87.34, +Inf above
// 88.72, NaN stays NaN) using Y1-Y5. 2^n is applied as 2^(n>>1)·2^(n−n>>1)
// so that both factors stay normal for n in [−126, 128].
#define EXPF \
	VMOVAPS Y0, Y5; \
	VMOVUPS expC<>+320(SB), Y1; \
	VMINPS Y0, Y1, Y0; \
	VMOVUPS expC<>+352(SB), Y1; \
	VMAXPS Y0, Y1, Y0; \
	VMULPS expC<>+0(SB), Y0, Y1; \
	VROUNDPS $0, Y1, Y1; \
	VFNMADD231PS expC<>+32(SB), Y1, Y0; \
	VFNMADD231PS expC<>+64(SB), Y1, Y0; \
	VMULPS Y0, Y0, Y2; \
	VMOVUPS expC<>+96(SB), Y3; \
	VFMADD213PS expC<>+128(SB), Y0, Y3; \
	VFMADD213PS expC<>+160(SB), Y0, Y3; \
	VFMADD213PS expC<>+192(SB), Y0, Y3; \
	VFMADD213PS expC<>+224(SB), Y0, Y3; \
	VFMADD213PS expC<>+256(SB), Y0, Y3; \
	VFMADD213PS Y0, Y2, Y3; \
	VADDPS expC<>+288(SB), Y3, Y3; \
	VCVTPS2DQ Y1, Y1; \
	VPSRAD $1, Y1, Y4; \
	VPSUBD Y4, Y1, Y1; \
	VPSLLD $23, Y1, Y1; \
	VPADDD expC<>+288(SB), Y1, Y1; \
	VPSLLD $23, Y4, Y4; \
	VPADDD expC<>+288(SB), Y4, Y4; \
	VMULPS Y1, Y3, Y0; \
	VMULPS Y4, Y0, Y0; \
	VCMPPS $1, expC<>+352(SB), Y5, Y2; \
	VANDNPS Y0, Y2, Y0; \
	VCMPPS $14, expC<>+384(SB), Y5, Y2; \
	VMOVUPS expC<>+416(SB), Y1; \
	VBLENDVPS Y2, Y1, Y0, Y0

// EXPSUBSUM8 sets the eight floats at (SI) to exp(x − m), m in Y8, and adds
// their float64 halves to Y9 and Y10 (Y0–Y5 clobbered, as by EXPF): one
// step of expSubSumAVX2, and the last eight of expSubSumAVX512.
#define EXPSUBSUM8 \
	VMOVUPS (SI), Y0; \
	VSUBPS Y8, Y0, Y0; \
	EXPF; \
	VMOVUPS Y0, (SI); \
	VCVTPS2PD X0, Y1; \
	VADDPD Y1, Y9, Y9; \
	VEXTRACTF128 $1, Y0, X0; \
	VCVTPS2PD X0, Y1; \
	VADDPD Y1, Y10, Y10

// EXPF16CONST broadcasts EXPF's constants into Z16–Z29, once per call, for
// EXPF16.
#define EXPF16CONST \
	VBROADCASTSS expC<>+0(SB), Z16; \
	VBROADCASTSS expC<>+32(SB), Z17; \
	VBROADCASTSS expC<>+64(SB), Z18; \
	VBROADCASTSS expC<>+96(SB), Z19; \
	VBROADCASTSS expC<>+128(SB), Z20; \
	VBROADCASTSS expC<>+160(SB), Z21; \
	VBROADCASTSS expC<>+192(SB), Z22; \
	VBROADCASTSS expC<>+224(SB), Z23; \
	VBROADCASTSS expC<>+256(SB), Z24; \
	VBROADCASTSS expC<>+288(SB), Z25; \
	VBROADCASTSS expC<>+320(SB), Z26; \
	VBROADCASTSS expC<>+352(SB), Z27; \
	VBROADCASTSS expC<>+384(SB), Z28; \
	VBROADCASTSS expC<>+416(SB), Z29

// EXPF16 is EXPF on the sixteen lanes of Z0 (Z1–Z5, K1, K2 clobbered; the
// constants in Z16–Z29 from EXPF16CONST), step for step with the same
// operand order (so a NaN stays NaN through the clamps), so each lane gets
// EXPF's bits: VRNDSCALEPS $0 for VROUNDPS $0, masks for the
// compare-and-select.
#define EXPF16 \
	VMOVAPS Z0, Z5; \
	VMINPS Z0, Z26, Z0; \
	VMAXPS Z0, Z27, Z0; \
	VMULPS Z16, Z0, Z1; \
	VRNDSCALEPS $0, Z1, Z1; \
	VFNMADD231PS Z17, Z1, Z0; \
	VFNMADD231PS Z18, Z1, Z0; \
	VMULPS Z0, Z0, Z2; \
	VMOVAPS Z19, Z3; \
	VFMADD213PS Z20, Z0, Z3; \
	VFMADD213PS Z21, Z0, Z3; \
	VFMADD213PS Z22, Z0, Z3; \
	VFMADD213PS Z23, Z0, Z3; \
	VFMADD213PS Z24, Z0, Z3; \
	VFMADD213PS Z0, Z2, Z3; \
	VADDPS Z25, Z3, Z3; \
	VCVTPS2DQ Z1, Z1; \
	VPSRAD $1, Z1, Z4; \
	VPSUBD Z4, Z1, Z1; \
	VPSLLD $23, Z1, Z1; \
	VPADDD Z25, Z1, Z1; \
	VPSLLD $23, Z4, Z4; \
	VPADDD Z25, Z4, Z4; \
	VMULPS Z1, Z3, Z0; \
	VMULPS Z4, Z0, Z0; \
	VCMPPS $5, Z27, Z5, K1; \
	VMOVAPS.Z Z0, K1, Z0; \
	VCMPPS $14, Z28, Z5, K2; \
	VMOVAPS Z29, K2, Z0

// func expSubSumAVX512(x *float32, n int, m float32) float64
//
// expSubSumAVX2 sixteen lanes at a time (n a multiple of 8; a last eight
// take EXPF): the same values, and the same float64 sum, each eight lanes'
// halves added to the two accumulators in the AVX2 kernel's order.
TEXT ·expSubSumAVX512(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Z8
	EXPF16CONST
	VXORPD Y9, Y9, Y9
	VXORPD Y10, Y10, Y10
	MOVQ CX, DX
	SHRQ $4, CX
	JZ expsum16tail

expsum16loop:
	VMOVUPS (SI), Z0
	VSUBPS Z8, Z0, Z0
	EXPF16
	VMOVUPS Z0, (SI)
	VCVTPS2PD X0, Y1
	VADDPD Y1, Y9, Y9
	VEXTRACTF128 $1, Y0, X1
	VCVTPS2PD X1, Y1
	VADDPD Y1, Y10, Y10
	VEXTRACTF64X4 $1, Z0, Y6
	VCVTPS2PD X6, Y1
	VADDPD Y1, Y9, Y9
	VEXTRACTF128 $1, Y6, X1
	VCVTPS2PD X1, Y1
	VADDPD Y1, Y10, Y10
	ADDQ $64, SI
	DECQ CX
	JNZ expsum16loop

expsum16tail:
	TESTQ $8, DX
	JZ expsum16done
	EXPSUBSUM8

expsum16done:
	VADDPD Y10, Y9, Y9
	VEXTRACTF128 $1, Y9, X10
	VADDPD X10, X9, X9
	VHADDPD X9, X9, X9
	VMOVSD X9, ret+24(FP)
	VZEROUPPER
	RET

// func expSubSumAVX2(x *float32, n int, m float32) float64
//
// x[i] = exp(x[i] − m); returns Σ x[i] accumulated in float64.
TEXT ·expSubSumAVX2(SB), NOSPLIT, $0-32
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Y8
	VXORPD Y9, Y9, Y9
	VXORPD Y10, Y10, Y10
	SHRQ $3, CX
	JZ expsumdone

expsumloop:
	EXPSUBSUM8
	ADDQ $32, SI
	DECQ CX
	JNZ expsumloop

expsumdone:
	VADDPD Y10, Y9, Y9
	VEXTRACTF128 $1, Y9, X10
	VADDPD X10, X9, X9
	VHADDPD X9, X9, X9
	VMOVSD X9, ret+24(FP)
	VZEROUPPER
	RET

// func expAVX2(x *float32, n int)
//
// x[i] = exp(x[i]).
TEXT ·expAVX2(SB), NOSPLIT, $0-16
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $3, CX
	JZ expdone

exploop:
	VMOVUPS (SI), Y0
	EXPF
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	DECQ CX
	JNZ exploop

expdone:
	VZEROUPPER
	RET

// func swigluAVX2(dst, gate, up *float32, n int)
//
// dst[i] = gate[i]/(1+exp(−gate[i]))·up[i].
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ swiglydone
	VXORPS Y8, Y8, Y8

swigluloop:
	VMOVUPS (SI), Y9
	VSUBPS Y9, Y8, Y0
	EXPF
	VADDPS expC<>+288(SB), Y0, Y0
	VDIVPS Y0, Y9, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ swigluloop

swiglydone:
	VZEROUPPER
	RET

// MAXREDUCE leaves in X0 the largest of Y0's eight lanes (halves, then
// pairs, then the last two; X1 scratch).
#define MAXREDUCE \
	VEXTRACTF128 $1, Y0, X1; \
	VMAXPS X1, X0, X0; \
	VMOVHLPS X0, X0, X1; \
	VMAXPS X1, X0, X0; \
	VMOVSHDUP X0, X1; \
	VMAXSS X1, X0, X0

// func maxAVX2(x *float32, n int) float32
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y0
	ADDQ $32, SI
	SHRQ $3, CX
	DECQ CX
	JZ maxreduce

maxloop:
	VMAXPS (SI), Y0, Y0
	ADDQ $32, SI
	DECQ CX
	JNZ maxloop

maxreduce:
	MAXREDUCE
	VMOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleMaxAVX2(x *float32, n int, s float32) float32
// scaleAVX2 and then maxAVX2 in one pass: x[i] *= s, and the largest of the
// products, taken in maxAVX2's order (so the same value, sign of zero and
// NaN included). n is a multiple of 8, at least 8.
TEXT ·scaleMaxAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y1
	VMULPS (SI), Y1, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	SHRQ $3, CX
	DECQ CX
	JZ scalemaxreduce

scalemaxloop:
	VMULPS (SI), Y1, Y2
	VMOVUPS Y2, (SI)
	VMAXPS Y2, Y0, Y0
	ADDQ $32, SI
	DECQ CX
	JNZ scalemaxloop

scalemaxreduce:
	MAXREDUCE
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func scaleRoundF16AVX2(x *float32, n int, s float32)
// x[i] = f32(f16(x[i]·s)), round to nearest even: scaleAVX2 and the
// rounding to f16 in one pass (s = 1 rounds alone); n a multiple of 8.
TEXT ·scaleRoundF16AVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y1
	SHRQ $3, CX
	JZ scaleroundf16done

scaleroundf16loop:
	VMULPS (SI), Y1, Y0
	VCVTPS2PH $0, Y0, X2
	VCVTPH2PS X2, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	DECQ CX
	JNZ scaleroundf16loop

scaleroundf16done:
	VZEROUPPER
	RET

// func scaleAVX2(x *float32, n int, s float32)
TEXT ·scaleAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS s+16(FP), Y1
	SHRQ $3, CX
	JZ scaledone

scaleloop:
	VMULPS (SI), Y1, Y0
	VMOVUPS Y0, (SI)
	ADDQ $32, SI
	DECQ CX
	JNZ scaleloop

scaledone:
	VZEROUPPER
	RET

// func f32ToF16AVX2(dst *uint16, src *float32, n int)
TEXT ·f32ToF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ tof16done

tof16loop:
	VMOVUPS (SI), Y0
	VCVTPS2PH $0, Y0, X1
	VMOVDQU X1, (DI)
	ADDQ $32, SI
	ADDQ $16, DI
	DECQ CX
	JNZ tof16loop

tof16done:
	VZEROUPPER
	RET

// func f16ToF32AVX2(dst *float32, src *uint16, n int)
TEXT ·f16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ fromf16done

fromf16loop:
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ fromf16loop

fromf16done:
	VZEROUPPER
	RET

// func sumSquaresAVX2(x *float32, n int) float64
//
// Σ float64(x[i]·x[i]) for n a multiple of 16, in sumSquaresGeneric's
// order: the products in float32, then element i is added in float64 to
// partial sum i mod 16 (Y0 holds sums 0-3, Y1 4-7, Y2 8-11, Y3 12-15),
// and the partial sums are combined as t[k] = (s[k]+s[4+k]) +
// (s[8+k]+s[12+k]), (t0+t2) + (t1+t3).
TEXT ·sumSquaresAVX2(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3
	SHRQ $4, CX
	JZ sumsqdone

sumsqloop:
	VMOVUPS (SI), Y4
	VMULPS Y4, Y4, Y4
	VCVTPS2PD X4, Y5
	VEXTRACTF128 $1, Y4, X4
	VCVTPS2PD X4, Y4
	VADDPD Y5, Y0, Y0
	VADDPD Y4, Y1, Y1
	VMOVUPS 32(SI), Y6
	VMULPS Y6, Y6, Y6
	VCVTPS2PD X6, Y7
	VEXTRACTF128 $1, Y6, X6
	VCVTPS2PD X6, Y6
	VADDPD Y7, Y2, Y2
	VADDPD Y6, Y3, Y3
	ADDQ $64, SI
	DECQ CX
	JNZ sumsqloop

sumsqdone:
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VADDPD Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VMOVSD X0, ret+16(FP)
	VZEROUPPER
	RET

// func scaleMulAVX2(dst, x, w *float32, n int, s float32)
//
// dst[i] = (x[i]·s)·w[i] for n a multiple of 8; dst may be x.
TEXT ·scaleMulAVX2(SB), NOSPLIT, $0-36
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS s+32(FP), Y1
	SHRQ $3, CX
	JZ scalemuldone

scalemulloop:
	VMULPS (SI), Y1, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ scalemulloop

scalemuldone:
	VZEROUPPER
	RET
