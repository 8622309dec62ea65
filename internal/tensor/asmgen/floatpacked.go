package main

import (
	"fmt"
	"strings"
)

// F16 and BF16 weight × f32 activation kernels of the AVX2 level on the
// packed layout (tensor.Pack, weights in private memory): per block of
// eight rows, rows 0-3 in the block's first half and rows 4-7 in its
// second, each half a sequence of 64-byte steps holding its four rows'
// values of eight columns. F16: row r's eight values at 16·(r mod 4), which
// vcvtph2ps widens in one instruction. BF16: rows 2p and 2p+1 at
// 32·(p mod 2), dword k holding column k of both (row 2p's in the low
// half), so that one 32-byte load gives both rows: a shift left by 16 makes
// row 2p's eight f32, a mask of the high halves row 2p+1's.
//
// The vectors hold a row's eight consecutive columns exactly as the
// unpacked kernels' (floatKernel) do, and each output has one accumulator,
// its steps added in order and its lanes reduced in the same tree: results
// are bit-identical to theirs, whatever the tile shape (batch invariance)
// and whether the weights are packed.
//
// What the layout buys: decode (R = 8, one token) computes eight rows at
// once, eight independent accumulator chains fed by two sequential streams
// of weights (the halves) and one load of the token's values per eight
// FMAs, where the unpacked one-row kernel has one chain, bound by the FMA's
// latency once the weights come from cache, and four-row tiles on unpacked
// rows read four streams. Prefill tiles (R = 4, T ≤ 3) read one half, a
// contiguous stream, with the same loads as on unpacked rows (BF16 widens
// two rows per load there). An interleaved layout (all eight rows of a
// step together: one stream for decode) was tried first and was slower
// per CPU second for both decode and prefill.
//
// Arguments (as floatKernel's, rows grouped by blocks of eight): w *byte,
// blockBytes (8·rowBytes), blocks int, y unsafe.Pointer (F16: the
// activations' F16 conversion; BF16: their f32 values), yStride (bytes),
// steps int, dst *float32, ldBytes int.
func floatPackedKernel(a *asm, d *decl, typ string, R, T int) {
	name := fmt.Sprintf("%sPacked_%dx%d", typ, R, T)
	text(a, d, fmt.Sprintf("%s computes %d-row × %d-token tiles of packed %s weights × f32 activations over steps×8 columns, blocks of eight rows.", name, R, T, strings.ToUpper(typ)),
		name, "(w *byte, blockBytes, blocks int, y unsafe.Pointer, yStride int, steps int, dst *float32, ldBytes int)", "$0-64")
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ blockBytes+8(FP), R8")
	a.p("MOVQ yStride+32(FP), R10")
	a.p("LEAQ (R10)(R10*2), R11")
	a.p("MOVQ dst+48(FP), AX")
	a.p("MOVQ ldBytes+56(FP), R14")
	a.p("MOVQ blocks+16(FP), R15")
	a.p("MOVQ R8, R9")
	a.p("SHRQ $1, R9") // the block's second half
	tokAddr := func(off, t int) string { return stride(off, "DI", "R10", "R11", t) }
	acc := func(r, t int) int { return t*R + r }
	bf16 := typ == "bf16"
	// BF16's high-half mask: in Y15 where a register is free, else read
	// from memory.
	maskReg := bf16 && R*T+T+2 <= 16
	mask := "bf16HiMask<>(SB)"
	if maskReg {
		a.p("VMOVDQU bf16HiMask<>(SB), Y15")
		mask = "Y15"
	}

	// tokLoad puts a token's eight values at addr into Y(reg): F16
	// widens the activations' F16 conversion (a.h), the same values as the
	// f32 copy in half the bytes, so that prefill tiles take more tokens
	// per pass over the weights in the same cache; BF16 reads the f32 copy
	// (widening BF16 takes two instructions, and was slower).
	tokBytes := 16
	if bf16 {
		tokBytes = 32
	}
	tokLoad := func(addr string, reg int) {
		if bf16 {
			a.p("VMOVUPS %s, Y%d", addr, reg)
		} else {
			a.p("VCVTPH2PS %s, Y%d", addr, reg)
		}
	}
	// rows emits the FMAs of step k (0 or 1 of an iteration) for the R
	// rows at SI: fma(r, reg) consumes row r's eight f32 in Y(reg), tmp
	// lists scratch registers.
	rows := func(k int, tmp []int, fma func(r, reg int)) {
		// addr is where the 32 bytes of row r's (F16: 16 bytes) or pair
		// r/2's (BF16) values of step k are: rows 4-7 of an eight-row
		// tile in the block's second half, R9 bytes on.
		addr := func(r int) string {
			off := k*64 + 16*(r%4)
			if r >= 4 && R == 8 {
				return fmt.Sprintf("%d(SI)(R9*1)", off)
			}
			return fmt.Sprintf("%d(SI)", off)
		}
		if !bf16 {
			for r := 0; r < R; r++ {
				reg := tmp[r%len(tmp)]
				a.p("VCVTPH2PS %s, Y%d", addr(r), reg)
				fma(r, reg)
			}
			return
		}
		for p := 0; p < R/2; p++ {
			if len(tmp) >= 2 {
				lo, hi := tmp[(2*p)%len(tmp)], tmp[(2*p+1)%len(tmp)]
				a.p("VMOVDQU %s, Y%d", addr(2*p), lo)
				a.p("VPAND %s, Y%d, Y%d", mask, lo, hi)
				a.p("VPSLLD $16, Y%d, Y%d", lo, lo)
				fma(2*p, lo)
				fma(2*p+1, hi)
				continue
			}
			// One scratch register: load the pair twice (the second
			// time from L1).
			x := tmp[0]
			a.p("VMOVDQU %s, Y%d", addr(2*p), x)
			a.p("VPSLLD $16, Y%d, Y%d", x, x)
			fma(2*p, x)
			a.p("VMOVDQU %s, Y%d", addr(2*p), x)
			a.p("VPAND %s, Y%d, Y%d", mask, x, x)
			fma(2*p+1, x)
		}
	}

	// pass emits the loop over all steps for the R rows at SI (rows
	// off/16 on of the block in either layout), their results stored at
	// DX + off/4 (+ t·ldBytes).
	pass := func(label string, off int) {
		a.p("MOVQ y+24(FP), DI")
		a.p("MOVQ steps+40(FP), CX")
		for i := 0; i < R*T; i++ {
			a.p("VXORPS Y%d, Y%d, Y%d", i, i, i)
		}
		var body func(k int)
		if R == 8 {
			// One token: its eight values in Y8, rows widened in turn
			// into Y9-Y14.
			body = func(k int) {
				tokLoad(fmt.Sprintf("%d(DI)", tokBytes*k), 8)
				rows(k, []int{9, 10, 11, 12, 13, 14}, func(r, reg int) {
					a.p("VFMADD231PS Y8, Y%d, Y%d", reg, acc(r, 0))
				})
			}
		} else {
			// The tokens' values in Y(R·T+1+t), each row in Y(R·T)
			// (and Y(R·T+T+1) for BF16 where free).
			tok := func(t int) int { return R*T + 1 + t }
			tmp := []int{R * T}
			if bf16 && maskReg {
				tmp = append(tmp, R*T+T+1)
			}
			body = func(k int) {
				for t := 0; t < T; t++ {
					tokLoad(tokAddr(tokBytes*k, t), tok(t))
				}
				rows(k, tmp, func(r, reg int) {
					for t := 0; t < T; t++ {
						a.p("VFMADD231PS Y%d, Y%d, Y%d", tok(t), reg, acc(r, t))
					}
				})
			}
		}
		stepPairs(a, label, body, func() {
			a.p("ADDQ $128, SI")
			a.p("ADDQ $%d, DI", 2*tokBytes)
		}, nil)
		for t := 0; t < T; t++ {
			for q := 0; q < R/4; q++ {
				reduce4(a, [4]int{acc(4*q, t), acc(4*q+1, t), acc(4*q+2, t), acc(4*q+3, t)}, fmt.Sprintf("%d(DX)", off/16*4+16*q))
			}
			if t+1 < T {
				a.p("ADDQ R14, DX")
			}
		}
	}

	a.label(name + "_block")
	a.p("MOVQ SI, BX") // the block's start
	a.p("MOVQ AX, DX")
	pass(name+"_lo", 0)
	if R == 4 {
		// Rows 4-7 of the block, while it is in cache.
		a.p("LEAQ (BX)(R9*1), SI")
		a.p("MOVQ AX, DX")
		pass(name+"_hi", 64)
	}
	a.p("ADDQ $32, AX")
	a.p("LEAQ (BX)(R8*1), SI")
	nextOrReturn(a, "R15", name+"_block")
}

// reduce4 sums the eight lanes of each of the four accumulators acc as
// reduceStore does for four rows, ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)),
// and stores the four results at addr. It clobbers the accumulators.
func reduce4(a *asm, acc [4]int, addr string) {
	a.p("VHADDPS Y%d, Y%d, Y%d", acc[1], acc[0], acc[0])
	a.p("VHADDPS Y%d, Y%d, Y%d", acc[3], acc[2], acc[2])
	a.p("VHADDPS Y%d, Y%d, Y%d", acc[2], acc[0], acc[0])
	a.p("VEXTRACTF128 $1, Y%d, X%d", acc[0], acc[1])
	a.p("VADDPS X%d, X%d, X%d", acc[1], acc[0], acc[0])
	a.p("VMOVUPS X%d, %s", acc[0], addr)
}

// bf16HiMaskData emits the mask of each dword's high half.
func bf16HiMaskData(a *asm) {
	for i := 0; i < 4; i++ {
		fmt.Fprintf(&a.b, "DATA bf16HiMask<>+%d(SB)/8, $0xffff0000ffff0000\n", 8*i)
	}
	a.b.WriteString("GLOBL bf16HiMask<>(SB), RODATA|NOPTR, $32\n\n")
}

// f16PackedZKernel generates f16PackedZ_T, eight rows × T ≤ 6 tokens of
// packed F16 weights for the AVX-512 level, on that level's own layout:
// per block of eight rows, steps of eight columns, 128 bytes each, row r's
// 16 bytes at 16r — one stream, rows 2p and 2p+1 side by side, 32 bytes
// that vcvtph2ps widens into one zmm register. Each token's eight f32
// values are broadcast to both halves. Every output keeps its eight lanes,
// its steps added in order and the lanes reduced in reduce4's tree: results
// are bit-identical to the AVX2 kernels' (packed or not), with half the
// instructions per FMA. Decode's tokens take one pass over the weights;
// prefill runs tiles of six tokens (eight rows × six was faster than × four
// for F16, not for BF16, and four rows × eight slower: eight tokens' f32
// values outgrow L1). The
// hardware prefetcher follows the one stream. Software prefetches did not
// pay: F16 decode gained a little from non-temporal ones 2 KiB ahead on
// one day, and lost 4-16% with them on another on the same CPU model (Zen
// 5); BF16's gained nothing, nor did prefetcht0 or prefetcht1 for either.
//
// Registers: Z0-Z5 the tokens (0-3 read from DI, 4-5 from R12), the row
// pairs in Z8-Z11 (more than five tokens: Z6, Z7 in turn), the
// accumulators in the last 4T registers (pair p of token t in
// Z(32 − 4T + 4t + p)). Arguments as floatPackedKernel's,
// y the activations' f32 values.
//
// With bf16 it generates bf16PackedZ_T, the same for the vdpbf16ps kernels
// (bf16DPKernel) on their packed layout: steps of 16 columns, 256 bytes,
// row r's 32 bytes at 32r (rows 2p and 2p+1 one zmm load), y the
// activations' BF16 values (32 bytes a step, broadcast to both halves),
// steps = columns / 16. Each lane adds its dword's two products as
// bf16DPKernel's does, so results are bit-identical to it.
func f16PackedZKernel(a *asm, d *decl, T int, bf16 bool) {
	name, typ, stepBytes := fmt.Sprintf("f16PackedZ_%d", T), "F16", 128
	if bf16 {
		name, typ, stepBytes = fmt.Sprintf("bf16PackedZ_%d", T), "BF16", 256
	}
	text(a, d, fmt.Sprintf("%s computes eight rows × %d tokens of packed %s weights over steps, blocks of eight rows (AVX-512).", name, T, typ),
		name, "(w *byte, blockBytes, blocks int, y unsafe.Pointer, yStride int, steps int, dst *float32, ldBytes int)", "$0-64")
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ yStride+32(FP), R10")
	a.p("LEAQ (R10)(R10*2), R11")
	a.p("MOVQ dst+48(FP), AX")
	a.p("MOVQ ldBytes+56(FP), R14")
	a.p("MOVQ blocks+16(FP), R15")
	// The accumulators take the last 4T registers; the row pairs Z8-Z11,
	// or with more than five tokens Z6 and Z7 in turn.
	acc := func(p, t int) int { return 32 - 4*T + 4*t + p }
	wreg := func(p int) int {
		if T > 5 {
			return 6 + p%2
		}
		return 8 + p
	}
	body := func(k int) {
		for t := 0; t < T; t++ {
			if t >= 4 { // tokens 4 and 5 from R12
				a.p("VBROADCASTF64X4 %s, Z%d", stride(32*k, "R12", "R10", "R11", t-4), t)
				continue
			}
			a.p("VBROADCASTF64X4 %s, Z%d", stride(32*k, "DI", "R10", "R11", t), t)
		}
		for p := 0; p < 4; p++ {
			if bf16 {
				a.p("VMOVDQU64 %d(SI), Z%d", stepBytes*k+64*p, wreg(p))
			} else {
				a.p("VCVTPH2PS %d(SI), Z%d", stepBytes*k+32*p, wreg(p))
			}
			for t := 0; t < T; t++ {
				if bf16 {
					vdpbf16psZ(a, acc(p, t), wreg(p), t)
				} else {
					a.p("VFMADD231PS Z%d, Z%d, Z%d", t, wreg(p), acc(p, t))
				}
			}
		}
	}
	a.label(name + "_block")
	a.p("MOVQ AX, DX")
	a.p("MOVQ y+24(FP), DI")
	if T > 4 {
		a.p("LEAQ (DI)(R10*4), R12")
	}
	a.p("MOVQ steps+40(FP), CX")
	for t := 0; t < T; t++ {
		for p := 0; p < 4; p++ {
			a.p("VPXORD Z%d, Z%d, Z%d", acc(p, t), acc(p, t), acc(p, t))
		}
	}
	stepPairs(a, name, body, func() {
		a.p("ADDQ $%d, SI", 2*stepBytes)
		a.p("ADDQ $64, DI")
		if T > 4 {
			a.p("ADDQ $64, R12")
		}
	}, func() { a.p("ADDQ $%d, SI", stepBytes) })
	// Per token and four rows: the pairs' halves to Y0-Y3 (where vhaddps
	// reaches), then reduce4.
	for t := 0; t < T; t++ {
		for q := 0; q < 2; q++ {
			for i, p := range []int{2 * q, 2*q + 1} {
				a.p("VMOVAPS Y%d, Y%d", acc(p, t), 2*i)
				a.p("VEXTRACTF64X4 $1, Z%d, Y%d", acc(p, t), 2*i+1)
			}
			reduce4(a, [4]int{0, 1, 2, 3}, fmt.Sprintf("%d(DX)", 16*q))
		}
		if t+1 < T {
			a.p("ADDQ R14, DX")
		}
	}
	// SI is at the next block (the steps cover it).
	a.p("ADDQ $32, AX")
	nextOrReturn(a, "R15", name+"_block")
}

// f16PackedSplitKernel generates f16PackedS_1 (with bf16, bf16PackedS_1):
// f16PackedZ_1 (bf16PackedZ_1) on two ranges of blocks at once, the
// second half bytes after the first, each step reading both: eight
// accumulators, two streams of weights. One token's product is bound by
// how fast one core pulls the weights from memory, and a core streamed
// two distant ranges faster than one (F16 more than BF16, whose kernel has
// half the instructions a byte) — but not two neighbouring blocks, which
// read slower than one stream. Each output's FMAs are
// f16PackedZ_1's in its order, so results are its bits.
//
// Arguments: w *byte, half (bytes from the first range to the second),
// blocks (per range) int, y unsafe.Pointer (the token's f32 values; BF16:
// its BF16 values), halfOut (bytes from the first range's outputs to the
// second's), steps int, dst *float32 (the first range's outputs).
func f16PackedSplitKernel(a *asm, d *decl, bf16 bool) {
	name, typ, stepBytes := "f16PackedS_1", "F16", 128
	if bf16 {
		name, typ, stepBytes = "bf16PackedS_1", "BF16", 256
	}
	text(a, d, fmt.Sprintf("%s computes eight rows × one token of packed %s weights over steps, blocks of eight rows, on two ranges of blocks half bytes apart (AVX-512).", name, typ),
		name, "(w *byte, half, blocks int, y unsafe.Pointer, halfOut int, steps int, dst *float32)", "$0-56")
	a.p("MOVQ w+0(FP), SI")
	a.p("MOVQ half+8(FP), R8")
	a.p("MOVQ blocks+16(FP), R15")
	a.p("MOVQ dst+48(FP), AX")
	a.p("MOVQ halfOut+32(FP), R14")
	// Z0 the token's values, Z8-Z15 the rows (range s in Z(8+4s+p)), the
	// accumulators in Z24-Z31.
	acc := func(s, p int) int { return 24 + 4*s + p }
	wreg := func(s, p int) int { return 8 + 4*s + p }
	body := func(k int) {
		a.p("VBROADCASTF64X4 %d(DI), Z0", 32*k)
		for p := 0; p < 4; p++ {
			for s := 0; s < 2; s++ {
				addr := fmt.Sprintf("%d(SI)", stepBytes*k+32*p)
				if bf16 {
					addr = fmt.Sprintf("%d(SI)", stepBytes*k+64*p)
				}
				if s == 1 {
					addr += "(R8*1)"
				}
				if bf16 {
					a.p("VMOVDQU64 %s, Z%d", addr, wreg(s, p))
					vdpbf16psZ(a, acc(s, p), wreg(s, p), 0)
				} else {
					a.p("VCVTPH2PS %s, Z%d", addr, wreg(s, p))
					a.p("VFMADD231PS Z0, Z%d, Z%d", wreg(s, p), acc(s, p))
				}
			}
		}
	}
	a.label(name + "_block")
	a.p("MOVQ y+24(FP), DI")
	a.p("MOVQ steps+40(FP), CX")
	for s := 0; s < 2; s++ {
		for p := 0; p < 4; p++ {
			a.p("VPXORD Z%d, Z%d, Z%d", acc(s, p), acc(s, p), acc(s, p))
		}
	}
	stepPairs(a, name, body, func() {
		a.p("ADDQ $%d, SI", 2*stepBytes)
		a.p("ADDQ $64, DI")
	}, func() { a.p("ADDQ $%d, SI", stepBytes) })
	// As f16PackedZKernel's: per range and four rows, the pairs' halves
	// to Y0-Y3, then reduce4.
	for s := 0; s < 2; s++ {
		for q := 0; q < 2; q++ {
			for i, p := range []int{2 * q, 2*q + 1} {
				a.p("VMOVAPS Y%d, Y%d", acc(s, p), 2*i)
				a.p("VEXTRACTF64X4 $1, Z%d, Y%d", acc(s, p), 2*i+1)
			}
			out := fmt.Sprintf("%d(AX)", 16*q)
			if s == 1 {
				out += "(R14*1)"
			}
			reduce4(a, [4]int{0, 1, 2, 3}, out)
		}
	}
	// SI is at the first range's next block (the steps cover it).
	a.p("ADDQ $32, AX")
	nextOrReturn(a, "R15", name+"_block")
}
