package main

import "fmt"

// The AMX-BF16 kernels (bf16AMXR_16, bf16AMXR_32): BF16 weights, in the
// file's layout or the private copy's tile layout, × BF16 activations on
// the tile unit, for every token count.
//
// They are a family of their own, not a drop-in for the AVX512-BF16
// kernels: TDPBF16PS adds a K-chunk's products in its own order before
// adding them to C, which no layout makes the vdpbf16ps lanes' order. So
// where package tensor puts a BF16 matrix on the tiles it computes all its
// products there, one token or many, from either layout (the same sums
// in the same order), and each output depends only on its row and its
// token: batch invariance holds within the family.
//
// The weights are tile A: 16 rows of a 32-column chunk, rowStride apart,
// chunkStep from the chunk before, tileBytes from the row tile before — in
// the file's layout rowBytes, 64 and 16·rowBytes; in the tile layout of the
// private copy (Pack: per 16-row tile, chunk c's 16 rows of 64 bytes at
// 1024·c) 64, 1024 and 16·rowBytes, one stream a row tile.
// The activations are tile B, from the pair layout package tensor fills
// for them (fillBF16Tiles): for an n-token conversion, chunk c at 64n·c
// bytes, 16 rows of n dwords (row p, dword t: token t's values 32c+2p and
// 32c+2p+1); 16 tokens from token t are a tile of 16 rows of 64 bytes, 4n
// apart, from 4t. C (row r, token t) then sums row r's chunk with token
// t's. A row tile's C is stored to scratch after its last chunk,
// transposed in registers and stored a token at a time to dst[t·ld + r],
// the call's tokens only (the columns of the others read whatever follows
// in the layout, and are dropped).

// amxBF16CfgData emits the configuration of the BF16 kernels: all eight
// tiles 16 rows × 64 bytes.
func amxBF16CfgData(a *asm) {
	var cfg [64]byte
	cfg[0] = 1
	for t := 0; t < 8; t++ {
		cfg[16+2*t] = 64
		cfg[48+t] = 16
	}
	amxCfgBytes(a, "amxBF16Cfg", cfg)
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
const amxBF16Sig = "(w *byte, rowStride, chunkStep, tileBytes, rowTiles int, act *byte, tokBytes, chunks int, dst *float32, ldBytes, tokens int, scratch *byte)"

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
// Registers: Z0-Z31 the transposes of the stores. GPRs: R12 the pass's
// weights, DI its current chunk, AX the second row tile's; R8 rowStride,
// R9 chunkStep, R13 tileBytes; R14 the activations' current chunk, R10
// tokBytes, R11 16·tokBytes (a chunk); CX chunks left; DX the pass's
// outputs; R15 row tiles left; SI scratch, BX 64 (C's stride in it); in
// the stores AX the token's outputs and CX the tokens left.
func bf16AMXKernel(a *asm, d *decl, groups int) {
	name := fmt.Sprintf("bf16AMXR_%d", 16*groups)
	text(a, d, fmt.Sprintf("%s computes rowTiles × 16 rows of BF16 weights (the file's layout or the tile layout) × tokens BF16 activations in the pair layout on the AMX tiles; the tiles must be permitted (requestAMX).", name), name, amxBF16Sig, "$0-96")
	a.p("MOVQ w+0(FP), R12")
	a.p("MOVQ rowStride+8(FP), R8")
	a.p("MOVQ chunkStep+16(FP), R9")
	a.p("MOVQ tileBytes+24(FP), R13")
	a.p("MOVQ rowTiles+32(FP), R15")
	a.p("MOVQ tokBytes+48(FP), R10")
	a.p("MOVQ dst+64(FP), DX")
	a.p("MOVQ scratch+88(FP), SI")
	a.p("MOVQ R10, R11")
	a.p("SHLQ $4, R11")
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
// its outputs stored from DX.
func bf16AMXPass(a *asm, loop string, rows, groups int) {
	for r := 0; r < rows; r++ {
		for g := 0; g < groups; g++ {
			c := bf16TileC(r, g, groups)
			amxInst(a, fmt.Sprintf("tilezero tmm%d", c), tilezeroBytes(c))
		}
	}
	a.p("MOVQ R12, DI")
	a.p("MOVQ act+40(FP), R14")
	a.p("MOVQ chunks+56(FP), CX")
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
	a.p("ADDQ R9, DI")
	a.p("ADDQ R11, R14")
	a.p("DECQ CX")
	a.p("JNZ %s", loop)
	for r := 0; r < rows; r++ {
		for g := 0; g < groups; g++ {
			c := bf16TileC(r, g, groups)
			off := 1024 * int(c)
			amxInst(a, fmt.Sprintf("tilestored %s, tmm%d", amxMem("SI", "BX", off), c), tilestoredBytes(c, "SI", "BX", off))
			bf16StoreTransposed(a, fmt.Sprintf("%s_r%dg%d", loop, r, g), off, 64*r, g, groups)
		}
	}
}

// bf16StoreTransposed stores the C tile at off(SI) (16 rows of 16 tokens'
// floats, 64 bytes apart) to token group g's outputs, its 16 rows at
// rowOff(DX) of each token's: a 16 × 16 transpose in registers, then one
// 64-byte store a token, as many as the group has (CX counts them down,
// AX walks the tokens' outputs).
func bf16StoreTransposed(a *asm, label string, off, rowOff, g, groups int) {
	for r := 0; r < 16; r++ {
		a.p("VMOVUPS %d(SI), Z%d", off+64*r, r)
	}
	// Z0-Z15 rows; in each 128-bit lane L, after the unpacks, Z16+4i+j
	// holds column 4L+j of rows 4i..4i+3.
	for i := 0; i < 8; i++ {
		a.p("VUNPCKLPS Z%d, Z%d, Z%d", 2*i+1, 2*i, 16+2*i)
		a.p("VUNPCKHPS Z%d, Z%d, Z%d", 2*i+1, 2*i, 17+2*i)
	}
	for i := 0; i < 4; i++ {
		t := 16 + 4*i
		a.p("VUNPCKLPD Z%d, Z%d, Z%d", t+2, t, 4*i)
		a.p("VUNPCKHPD Z%d, Z%d, Z%d", t+2, t, 4*i+1)
		a.p("VUNPCKLPD Z%d, Z%d, Z%d", t+3, t+1, 4*i+2)
		a.p("VUNPCKHPD Z%d, Z%d, Z%d", t+3, t+1, 4*i+3)
	}
	// Column c = 4L+j is lane L of Z j, Z 4+j, Z 8+j, Z 12+j: lanes 0-1
	// and 2-3 of each pair first, then lanes L of the four.
	for j := 0; j < 4; j++ {
		for h, pair := range [2][2]int{{j, 4 + j}, {8 + j, 12 + j}} {
			a.p("VSHUFF32X4 $0x44, Z%d, Z%d, Z%d", pair[1], pair[0], 16+4*j+h)
			a.p("VSHUFF32X4 $0xee, Z%d, Z%d, Z%d", pair[1], pair[0], 18+4*j+h)
		}
		for l := 0; l < 4; l++ {
			x := 16 + 4*j + 2*(l/2)
			imm := 0x88
			if l%2 == 1 {
				imm = 0xdd
			}
			a.p("VSHUFF32X4 $0x%x, Z%d, Z%d, Z%d", imm, x+1, x, 4*l+j)
		}
	}
	a.p("MOVQ DX, AX")
	switch {
	case g == 1:
		a.p("MOVQ ldBytes+72(FP), CX")
		a.p("SHLQ $4, CX")
		a.p("ADDQ CX, AX")
		a.p("MOVQ tokens+80(FP), CX")
		a.p("SUBQ $16, CX")
	case groups == 2:
		a.p("MOVL $16, CX")
	default:
		a.p("MOVQ tokens+80(FP), CX")
	}
	for c := 0; c < 16; c++ {
		a.p("VMOVUPS Z%d, %d(AX)", c, rowOff)
		if c < 15 {
			a.p("DECQ CX")
			a.p("JZ %s_stored", label)
			a.p("ADDQ ldBytes+72(FP), AX")
		}
	}
	a.label(label + "_stored")
}
