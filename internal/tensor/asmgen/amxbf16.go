package main

import "fmt"

// The AMX-BF16 kernels (bf16AMXR_16, bf16AMXR_32): BF16 weights as the file
// has them × BF16 activations on the tile unit, for every token count.
//
// They are a family of their own, not a drop-in for the AVX512-BF16
// kernels: TDPBF16PS adds a K-chunk's products in its own order before
// adding them to C, which no layout makes the vdpbf16ps lanes' order. So
// where package tensor puts a BF16 matrix on the tiles it computes all its
// products there, one token or many, from the file's layout or a private
// copy of it (the same bytes), and each output depends only on its row and
// its token: batch invariance holds within the family.
//
// The weights are tile A: 16 rows of a 32-column chunk, rowBytes apart.
// The activations are tile B, from the pair layout package tensor fills
// for them (fillBF16Tiles): for an n-token conversion, chunk c at 64n·c
// bytes, 16 rows of n dwords (row p, dword t: token t's values 32c+2p and
// 32c+2p+1); 16 tokens from token t are a tile of 16 rows of 64 bytes, 4n
// apart, from 4t. C (row r, token t) then sums row r's chunk with token
// t's. A row tile's C is stored to scratch after its last chunk and its
// rows scattered to dst[t·ld + r], tokens past the call's masked off
// (their columns read whatever follows in the layout, and are dropped).

// amxBF16CfgData emits the configuration of the BF16 kernels: all eight
// tiles 16 rows × 64 bytes.
func amxBF16CfgData(a *asm) {
	var cfg [64]byte
	cfg[0] = 1
	for t := 0; t < 8; t++ {
		cfg[16+2*t] = 64
		cfg[48+t] = 16
	}
	for i := 0; i < 64; i += 8 {
		var q uint64
		for j := 7; j >= 0; j-- {
			q = q<<8 | uint64(cfg[i+j])
		}
		fmt.Fprintf(&a.b, "DATA amxBF16Cfg<>+%d(SB)/8, $0x%016x\n", i, q)
	}
	a.b.WriteString("GLOBL amxBF16Cfg<>(SB), RODATA|NOPTR, $64\n\n")
}

// tdpbf16psBytes: TDPBF16PS dst, a, b (VEX.128.F3.0F38.W0 5C 11:rrr:bbb, b
// in vvvv): dst's float (m, n) += Σ a's bf16 pairs of row m × b's of
// column n.
func tdpbf16psBytes(dst, a, b byte) []byte {
	return append(vex3(false, false, false, b, ppF3), 0x5C, 0xC0|dst<<3|a)
}

// amxBF16Sig: the BF16 kernels' arguments; act is the pair layout at the
// first token, tokBytes 4n; tokens (1-16, or 17-32 for bf16AMXR_32) the
// tokens of this call.
const amxBF16Sig = "(w *byte, rowBytes, rowTiles int, act *byte, tokBytes, chunks int, dst *float32, ldBytes, tokens int, scratch *byte)"

// amxBF16ScratchBytes: the C tiles of two row tiles × two token groups.
const amxBF16ScratchBytes = 4 * 16 * 64

// The tiles of a pass of rows row tiles × groups token groups: C (row
// tile r, group g) is tile r·groups+g, A of row tile r follows the Cs, B
// of group g the As.
func bf16TileC(r, g, groups int) byte    { return byte(r*groups + g) }
func bf16TileA(r, rows, groups int) byte { return byte(rows*groups + r) }
func bf16TileB(g, rows, groups int) byte { return byte(rows*groups + rows + g) }

// bf16AMXKernel generates bf16AMXR_16 (groups 1: up to 16 tokens) or
// bf16AMXR_32 (groups 2: 17 to 32 tokens): rowTiles × 16 rows of BF16
// weights × the tokens, two row tiles a pass and a last one alone.
//
// Registers: Z10 the scatter indices (t·ldBytes), Z0 scratch; K1 (K2) the
// first (second) group's tokens, K3 the scatter's copy. GPRs: R12 the
// pass's weights, DI its current chunk, AX the second row tile's; R8
// rowBytes, R13 16·rowBytes; R14 the activations' current chunk, R10
// tokBytes, R11 16·tokBytes (a chunk); CX chunks left; DX the pass's
// outputs, R9 the second group's; R15 row tiles left; SI scratch, BX 64
// (C's stride in it).
func bf16AMXKernel(a *asm, d *decl, groups int) {
	name := fmt.Sprintf("bf16AMXR_%d", 16*groups)
	text(a, d, fmt.Sprintf("%s computes rowTiles × 16 rows of BF16 weights (rows rowBytes apart) × tokens BF16 activations in the pair layout on the AMX tiles; the tiles must be permitted (requestAMX).", name), name, amxBF16Sig, "$0-80")
	a.p("MOVQ w+0(FP), R12")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("MOVQ rowTiles+16(FP), R15")
	a.p("MOVQ tokBytes+32(FP), R10")
	a.p("MOVQ dst+48(FP), DX")
	a.p("MOVQ scratch+72(FP), SI")
	a.p("MOVQ R8, R13")
	a.p("SHLQ $4, R13")
	a.p("MOVQ R10, R11")
	a.p("SHLQ $4, R11")
	a.p("VMOVDQU32 amxIota<>(SB), Z10")
	a.p("VPBROADCASTD ldBytes+56(FP), Z0")
	a.p("VPMULLD Z0, Z10, Z10")
	// The groups' masks: the last group has tokens − 16·(groups−1).
	a.p("MOVQ tokens+64(FP), CX")
	if groups == 2 {
		a.p("SUBQ $16, CX")
		a.p("MOVL $0xffff, AX")
		a.p("KMOVW AX, K1")
	}
	a.p("MOVL $1, AX")
	a.p("SHLL CX, AX")
	a.p("DECL AX")
	a.p("KMOVW AX, K%d", groups)
	a.p("LEAQ amxBF16Cfg<>(SB), AX")
	amxInst(a, "ldtilecfg [rax]", ldtilecfgBytes("AX"))
	a.p("MOVL $64, BX")
	a.p("CMPQ R15, $2")
	a.p("JL %s_last", name)
	a.label(name + "_pair")
	bf16AMXPass(a, name+"_pairchunk", 2, groups)
	a.p("ADDQ $128, DX")
	a.p("LEAQ (R12)(R13*2), R12")
	a.p("SUBQ $2, R15")
	a.p("CMPQ R15, $2")
	a.p("JGE %s_pair", name)
	a.label(name + "_last")
	a.p("TESTQ R15, R15")
	a.p("JZ %s_done", name)
	bf16AMXPass(a, name+"_lastchunk", 1, groups)
	a.label(name + "_done")
	amxReturn(a)
}

// bf16AMXPass emits one pass of rows row tiles from R12 over all chunks,
// its outputs scattered from DX.
func bf16AMXPass(a *asm, loop string, rows, groups int) {
	for r := 0; r < rows; r++ {
		for g := 0; g < groups; g++ {
			c := bf16TileC(r, g, groups)
			amxInst(a, fmt.Sprintf("tilezero tmm%d", c), tilezeroBytes(c))
		}
	}
	a.p("MOVQ R12, DI")
	a.p("MOVQ act+24(FP), R14")
	a.p("MOVQ chunks+40(FP), CX")
	a.label(loop)
	for g := 0; g < groups; g++ {
		b := bf16TileB(g, rows, groups)
		amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", b, amxMem("R14", "R10", 64*g)), tileloaddBytes(b, "R14", "R10", 64*g))
	}
	for r := 0; r < rows; r++ {
		base := "DI"
		if r == 1 {
			a.p("LEAQ (DI)(R13*1), AX")
			base = "AX"
		}
		ta := bf16TileA(r, rows, groups)
		amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", ta, amxMem(base, "R8", 0)), tileloaddBytes(ta, base, "R8", 0))
		for g := 0; g < groups; g++ {
			c, b := bf16TileC(r, g, groups), bf16TileB(g, rows, groups)
			amxInst(a, fmt.Sprintf("tdpbf16ps tmm%d, tmm%d, tmm%d", c, ta, b), tdpbf16psBytes(c, ta, b))
		}
	}
	a.p("ADDQ $64, DI")
	a.p("ADDQ R11, R14")
	a.p("DECQ CX")
	a.p("JNZ %s", loop)
	if groups == 2 {
		a.p("MOVQ ldBytes+56(FP), R9")
		a.p("SHLQ $4, R9")
		a.p("ADDQ DX, R9")
	}
	for r := 0; r < rows; r++ {
		for g := 0; g < groups; g++ {
			c := bf16TileC(r, g, groups)
			off := 1024 * int(c)
			amxInst(a, fmt.Sprintf("tilestored %s, tmm%d", amxMem("SI", "BX", off), c), tilestoredBytes(c, "SI", "BX", off))
			out := "DX"
			if g == 1 {
				out = "R9"
			}
			for i := 0; i < 16; i++ {
				a.p("VMOVUPS %d(SI), Z0", off+64*i)
				a.p("KMOVW K%d, K3", g+1)
				a.p("VSCATTERDPS Z0, K3, %d(%s)(Z10*1)", 4*(16*r+i), out)
			}
		}
	}
}
