package main

import (
	"fmt"
	"strings"
)

// AMX-INT8 kernels (Intel Sapphire Rapids and later): the packed Q8_0
// kernel of 16 tokens with each block's integer sums taken by the tile
// unit instead of 128 vpdpbusd.
//
// Go's assembler has no AMX mnemonics, so the instructions are written as
// bytes (amxInst), each with its Intel-syntax form in a comment; their
// encodings are checked by TestAMXEncoding against the SDM's tables
// (VEX.128.0F38.W0, opcodes 49, 4B, 5E).

// gpr numbers the general registers as the instruction encoding does.
var gpr = map[string]byte{
	"AX": 0, "CX": 1, "DX": 2, "BX": 3, "SP": 4, "BP": 5, "SI": 6, "DI": 7,
	"R8": 8, "R9": 9, "R10": 10, "R11": 11, "R12": 12, "R13": 13, "R14": 14, "R15": 15,
}

// The VEX prefixes' pp field.
const (
	ppNone = 0
	pp66   = 1
	ppF3   = 2
	ppF2   = 3
)

// vex3 returns a three-byte VEX prefix of map 0F38, W0, L0 (128 bits):
// rx, x and b the high bits of ModRM.reg, SIB.index and ModRM.rm/SIB.base,
// vvvv the extra register operand (0 where none: encoded as 1111).
func vex3(r, x, b bool, vvvv, pp byte) []byte {
	b1 := byte(0x02) // map 0F38
	if !r {
		b1 |= 0x80
	}
	if !x {
		b1 |= 0x40
	}
	if !b {
		b1 |= 0x20
	}
	return []byte{0xC4, b1, (^vvvv&0xF)<<3 | pp}
}

// amxSIB encodes the memory operand disp(base)(index*1) with ModRM.reg =
// reg (a tile number): the prefix, opcode op, ModRM, SIB and displacement.
func amxSIB(pp, op, reg byte, base, index string, disp int) []byte {
	bn, in := gpr[base], gpr[index]
	if index == "SP" {
		panic("amx: SP cannot index")
	}
	mod, d := byte(0), []byte(nil)
	switch {
	case disp == 0 && bn&7 != 5: // BP and R13 need a displacement
	case disp >= -128 && disp <= 127:
		mod, d = 1, []byte{byte(int8(disp))}
	default:
		mod, d = 2, []byte{byte(disp), byte(disp >> 8), byte(disp >> 16), byte(disp >> 24)}
	}
	out := vex3(false, in >= 8, bn >= 8, 0, pp)
	out = append(out, op, mod<<6|(reg&7)<<3|4, (in&7)<<3|bn&7)
	return append(out, d...)
}

// amxInst emits the bytes of one instruction, its Intel form as comment.
func amxInst(a *asm, intel string, code []byte) {
	hex := make([]string, len(code))
	for i, c := range code {
		hex[i] = fmt.Sprintf("$0x%02x", c)
	}
	a.p("BYTE %s // %s", strings.Join(hex, "; BYTE "), intel)
}

// Intel-syntax names of the operands, for the comments.
func amxMem(base, index string, disp int) string {
	return fmt.Sprintf("[%s+%s+%d]", intelReg(base), intelReg(index), disp)
}

// intelReg is the Intel name of general register r (Go's name).
func intelReg(r string) string {
	r = strings.ToLower(r)
	if len(r) == 2 && r[0] != 'r' {
		return "r" + r
	}
	return r
}

// ldtilecfgBytes: LDTILECFG m512 (VEX.128.NP.0F38.W0 49 /0), the 64-byte
// configuration at (base), base not SP, BP, R12 or R13 (which would need a
// SIB or displacement).
func ldtilecfgBytes(base string) []byte {
	bn := gpr[base]
	if bn&7 == 4 || bn&7 == 5 {
		panic("amx: ldtilecfg base needs SIB or displacement")
	}
	return append(vex3(false, false, bn >= 8, 0, ppNone), 0x49, bn&7)
}

// tilereleaseBytes: TILERELEASE (VEX.128.NP.0F38.W0 49 C0).
func tilereleaseBytes() []byte { return append(vex3(false, false, false, 0, ppNone), 0x49, 0xC0) }

// tilezeroBytes: TILEZERO tmm (VEX.128.F2.0F38.W0 49 11:rrr:000).
func tilezeroBytes(t byte) []byte {
	return append(vex3(false, false, false, 0, ppF2), 0x49, 0xC0|t<<3)
}

// tileloaddBytes: TILELOADD tmm, [base+index+disp] (VEX.128.F2.0F38.W0
// 4B !(11):rrr:100), rows index bytes apart.
func tileloaddBytes(t byte, base, index string, disp int) []byte {
	return amxSIB(ppF2, 0x4B, t, base, index, disp)
}

// tilestoredBytes: TILESTORED [base+index+disp], tmm (VEX.128.F3.0F38.W0
// 4B !(11):rrr:100).
func tilestoredBytes(t byte, base, index string, disp int) []byte {
	return amxSIB(ppF3, 0x4B, t, base, index, disp)
}

// tdpbsudBytes: TDPBSUD dst, a, b (VEX.128.F3.0F38.W0 5E 11:rrr:bbb, b in
// vvvv): dst's dword (m, n) += Σ a's signed bytes of row m × b's unsigned
// bytes of column n, four at a time.
func tdpbsudBytes(dst, a, b byte) []byte {
	return append(vex3(false, false, false, b, ppF3), 0x5E, 0xC0|dst<<3|a)
}

// The tiles of q80AMXPackedKernel: per block in flight (two), the
// activations A (16 tokens × 32 bytes), the packed weights B (8 dwords k
// × 8 rows) and the sums C (16 tokens × 8 rows).
const (
	q80PackedScale = 256 // the packed block's f16 scales, after its eight vectors

	amxTileA = 0
	amxTileB = 1
	amxTileC = 2
	amxTiles = 3 // the second block's are 3, 4, 5
)

// amxQ80CfgData emits the tile configuration (palette 1): rows and bytes a
// row of tiles 0-5 as above.
func amxQ80CfgData(a *asm) {
	amxCfgData(a, "amxQ80Cfg", [3][2]int{amxTileA: {16, 32}, amxTileB: {8, 32}, amxTileC: {16, 32}})
}

// amxCfgData emits as symbol name a tile configuration (palette 1) of two
// blocks in flight, each with tiles A, B and C of shape[tile] = {rows,
// bytes a row} (the second block's tiles amxTiles further).
func amxCfgData(a *asm, name string, shape [3][2]int) {
	var cfg [64]byte
	cfg[0] = 1
	for s := 0; s < 2; s++ {
		for t, sh := range shape {
			cfg[16+2*(amxTiles*s+t)] = byte(sh[1])
			cfg[48+amxTiles*s+t] = byte(sh[0])
		}
	}
	amxCfgBytes(a, name, cfg)
}

// amxCfgBytes emits the 64-byte tile configuration cfg as symbol name.
func amxCfgBytes(a *asm, name string, cfg [64]byte) {
	for i := 0; i < 64; i += 8 {
		var q uint64
		for j := 7; j >= 0; j-- {
			q = q<<8 | uint64(cfg[i+j])
		}
		fmt.Fprintf(&a.b, "DATA %s<>+%d(SB)/8, $0x%016x\n", name, i, q)
	}
	fmt.Fprintf(&a.b, "GLOBL %s<>(SB), RODATA|NOPTR, $64\n\n", name)
}

// amxQ80Sig: the packed kernels' arguments without the prefetch distance,
// with scratch (amxScratchBytes).
const amxQ80Sig = "(w *byte, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, ldBytes int, scratch *byte)"

// The kernels' scratch: per block in flight, its tile of sums (16 tokens
// × 8 rows' dwords) and, for Q4_0, its weights unpacked (8 dword vectors):
// the sums of both blocks first, then the unpacked weights. Package tensor
// sizes its buffer by amxScratchBytes, which amxScratchDecl declares there.
const (
	amxSumsBytes          = 16 * 32
	amxUnpackedBytes      = 8 * 32
	amxPackedScratchBytes = 2 * (amxSumsBytes + amxUnpackedBytes)
)

// amxScratchDecl declares in the generated Go file the scratch the AMX
// kernels take (the most of the packed and the row kernels').
func amxScratchDecl(d *decl) {
	fmt.Fprintf(&d.b, "// amxScratchBytes is the scratch the AMX kernels take (asmgen/amx.go).\nconst amxScratchBytes = %d\n\n", max(amxPackedScratchBytes, amxRowScratchBytes, amxK45ScratchBytes, amxBF16ScratchBytes))
}

// q80AMXPackedKernel generates q80AMXP_16 (or, with q4, q40AMXP_16):
// rowBlocks × 8 rows × 16 tokens of packed Q8_0 weights (the VNNI level's
// layout, q+128; Q4_0's, q+8 in nibbles) × Q8_0 activations (the row
// layout), the float steps of q80VNNIP_16 (q40VNNIP_16) exactly.
//
// Per block, TILELOADD takes the 16 tokens' 32 values as A (rows 40 bytes
// apart in the row layout) and the packed block's eight dword vectors as B
// (B's row k, dword r: values 4k..4k+3 of row r: the layout vpdpbusd's
// transposed operand has, which is AMX's too; Q4_0's nibbles unpacked to
// it in scratch first); TDPBSUD sums them into C, token t's row r at dword
// (t, r): Σ y·u with u the unsigned weights. Stored to scratch, a token's
// eight sums get the offset −128·Σy (Q4_0: shifted right by 4, −8·Σy;
// exact), then the float steps of q80RowTokens: S to f32, D = dw·dy, acc =
// fma(S, D, acc), blocks in order. Two blocks are in flight on separate
// tiles and scratch, so the tile unit works on one while the vector unit
// scales the other.
//
// Registers: Y0-Y7 the unpacked nibbles and Y8 their mask (Q4_0); Y8
// (Y15) the block's (the next block's) scales; Y9-Y14 per-token scratch;
// Y16+t token t's accumulators. GPRs: DI the row block's weights at the
// current block, R14 (R12) the block's (next block's) activations, R11
// blockStride, CX blocks left, DX the row block's outputs, R9 ldBytes, R13
// the store cursor, SI scratch, R8 40 (A's stride), R10 32 (B's and C's),
// R15 row blocks left.
func q80AMXPackedKernel(a *asm, d *decl, q4 bool) {
	name, typ, blk := "q80AMXP_16", "Q8_0", q80PackedBlock
	if q4 {
		name, typ, blk = "q40AMXP_16", "Q4_0", q40PackedBlock
	}
	text(a, d, fmt.Sprintf("%s computes rowBlocks × 8 rows × 16 tokens of packed %s weights × Q8_0 activations on the AMX tiles; the tiles must be permitted (requestAMX).", name, typ), name, amxQ80Sig, "$0-64")
	a.p("MOVQ w+0(FP), DI")
	a.p("MOVQ rowBlocks+8(FP), R15")
	a.p("MOVQ blockStride+24(FP), R11")
	a.p("MOVQ dst+40(FP), DX")
	a.p("MOVQ ldBytes+48(FP), R9")
	a.p("MOVQ scratch+56(FP), SI")
	a.p("LEAQ amxQ80Cfg<>(SB), AX")
	amxInst(a, "ldtilecfg [rax]", ldtilecfgBytes("AX"))
	a.p("MOVL $%d, R8", q80BlockBytes)
	a.p("MOVL $32, R10")
	a.label(name + "_rows")
	for t := 0; t < 16; t++ {
		a.p("VPXORD Y%d, Y%d, Y%d", 16+t, 16+t, 16+t)
	}
	a.p("MOVQ act+16(FP), R14")
	a.p("MOVQ blocks+32(FP), CX")
	a.p("CMPQ CX, $2")
	a.p("JL %s_one", name)
	a.label(name + "_pair")
	a.p("LEAQ (R14)(R11*1), R12")
	amxProducts(a, q4, 0, "R14", 0)
	amxProducts(a, q4, amxTiles, "R12", blk)
	amxScale(a, q4, 0, "R14", 0, 8)
	amxScale(a, q4, amxTiles, "R12", blk, 15)
	a.p("ADDQ $%d, DI", 2*blk)
	a.p("LEAQ (R12)(R11*1), R14")
	a.p("SUBQ $2, CX")
	a.p("CMPQ CX, $2")
	a.p("JGE %s_pair", name)
	a.label(name + "_one")
	a.p("TESTQ CX, CX")
	a.p("JZ %s_store", name)
	amxProducts(a, q4, 0, "R14", 0)
	amxScale(a, q4, 0, "R14", 0, 8)
	a.p("ADDQ $%d, DI", blk)
	a.label(name + "_store")
	a.p("MOVQ DX, R13")
	q80StoreTokens(a, 16, 16, "", "R13")
	a.p("ADDQ $32, DX")
	a.p("DECQ R15")
	a.p("JNZ %s_rows", name)
	amxReturn(a)
}

// amxHalf is the offset in scratch of the sums of tile set s (0 or
// amxTiles), and amxUnpacked that of its unpacked Q4_0 weights.
func amxHalf(s byte) int { return amxSumsBytes * int(s/amxTiles) }
func amxUnpacked(s byte) int {
	return 2*amxSumsBytes + amxUnpackedBytes*int(s/amxTiles)
}

// amxProducts loads the block at wOff(DI) (Q4_0: unpacked to scratch
// first) and the activations at (act) into tiles s+B and s+A and sums
// their products into s+C.
func amxProducts(a *asm, q4 bool, s byte, act string, wOff int) {
	ta, tb, tc := s+amxTileA, s+amxTileB, s+amxTileC
	amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", ta, amxMem(act, "R8", 0)), tileloaddBytes(ta, act, "R8", 0))
	if q4 {
		// Vector m holds bytes 4m..4m+3 of the rows' nibble bytes: its low
		// nibbles are values 4m.. (dword m), its high ones 16+4m.. (dword
		// m+4).
		a.p("VPBROADCASTD q40Mask<>(SB), Y8")
		for m := 0; m < 4; m++ {
			a.p("VMOVDQU %d(DI), Y%d", wOff+32*m, m+4)
			a.p("VPAND Y8, Y%d, Y%d", m+4, m)
			a.p("VPSRLW $4, Y%d, Y%d", m+4, m+4)
			a.p("VPAND Y8, Y%d, Y%d", m+4, m+4)
		}
		u := amxUnpacked(s)
		for k := 0; k < 8; k++ {
			a.p("VMOVDQU Y%d, %d(SI)", k, u+32*k)
		}
		amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", tb, amxMem("SI", "R10", u)), tileloaddBytes(tb, "SI", "R10", u))
	} else {
		amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", tb, amxMem("DI", "R10", wOff)), tileloaddBytes(tb, "DI", "R10", wOff))
	}
	amxInst(a, fmt.Sprintf("tilezero tmm%d", tc), tilezeroBytes(tc))
	amxInst(a, fmt.Sprintf("tdpbsud tmm%d, tmm%d, tmm%d", tc, ta, tb), tdpbsudBytes(tc, ta, tb))
}

// amxScale stores tile s+C to its scratch and runs the float steps of the
// 16 tokens over it: the activations at (act), the block's scales at
// wOff(DI) past its values converted into Y(sc).
func amxScale(a *asm, q4 bool, s byte, act string, wOff, sc int) {
	tc := s + amxTileC
	half := amxHalf(s)
	amxInst(a, fmt.Sprintf("tilestored %s, tmm%d", amxMem("SI", "R10", half), tc), tilestoredBytes(tc, "SI", "R10", half))
	scales := q80PackedScale
	if q4 {
		scales = 128
	}
	a.p("VCVTPH2PS %d(DI), Y%d", wOff+scales, sc)
	for t := 0; t < 16; t++ {
		ti := 9 + 2*(t%3)
		td := ti + 1
		base := q80BlockBytes * t
		a.p("VPBROADCASTD %d(%s), Y%d", base+q80BlockOffset, act, ti)
		if q4 {
			a.p("VPSRAD $4, Y%d, Y%d", ti, ti)
		}
		a.p("VPADDD %d(SI), Y%d, Y%d", half+32*t, ti, ti)
		a.p("VCVTDQ2PS Y%d, Y%d", ti, ti)
		a.p("VMULPS.BCST %d(%s), Y%d, Y%d", base+q80BlockScale, act, sc, td)
		a.p("VFMADD231PS Y%d, Y%d, Y%d", td, ti, 16+t)
	}
}

// tdpbssdBytes: TDPBSSD dst, a, b (VEX.128.F2.0F38.W0 5E 11:rrr:bbb, b in
// vvvv): as TDPBSUD with b's bytes signed too.
func tdpbssdBytes(dst, a, b byte) []byte {
	return append(vex3(false, false, false, b, ppF2), 0x5E, 0xC0|dst<<3|a)
}

// The AMX kernels on weights as the file has them (q80AMXR_16,
// q40AMXR_16) compute 16 rows × 16 tokens a pass: the weights are tile A
// (16 rows of a block's 32 values, rowBytes apart; Q4_0's unpacked to
// scratch first), the activations tile B, read from the tile layout that
// package tensor fills for them (fillQ80Tiles): for an n-token
// conversion, per block 9·n dwords at block·36n bytes, first eight rows of
// n dwords (row k, dword t: token t's values 4k..4k+3), then the n
// tokens' scales dy (f32). Tile B of 16 tokens from token t is then eight
// rows of 64 bytes, 4n apart, from 4t; their scales the 16 floats at
// 32n + 4t.

// The scratch of the row kernels: per block in flight (s = 0 or
// amxTiles), its tile of sums C (16 rows × 16 tokens' dwords), for Q4_0
// its 16 rows unpacked (32 signed bytes each, 64 apart: C's stride), and
// the 16 rows' scales (f32).
const (
	amxRowSumsBytes     = 16 * 64
	amxRowUnpackedBytes = 16 * 64
	amxRowScalesBytes   = 16 * 4
	amxRowScratchBytes  = 2 * (amxRowSumsBytes + amxRowUnpackedBytes + amxRowScalesBytes)
)

func amxRowSums(s byte) int { return amxRowSumsBytes * int(s/amxTiles) }
func amxRowUnpacked(s byte) int {
	return 2*amxRowSumsBytes + amxRowUnpackedBytes*int(s/amxTiles)
}
func amxRowScales(s byte) int {
	return 2*(amxRowSumsBytes+amxRowUnpackedBytes) + amxRowScalesBytes*int(s/amxTiles)
}

// amxRowsCfgData emits the row kernels' tile configuration: per block in
// flight A 16 rows × 32 bytes, B 8 × 64, C 16 × 64; and the dwords 0..15
// the kernels scale by strides into gather and scatter indices.
func amxRowsCfgData(a *asm) {
	amxCfgData(a, "amxRowsCfg", [3][2]int{amxTileA: {16, 32}, amxTileB: {8, 64}, amxTileC: {16, 64}})
	for i := 0; i < 16; i++ {
		fmt.Fprintf(&a.b, "DATA amxIota<>+%d(SB)/4, $%d\n", 4*i, i)
	}
	a.b.WriteString("GLOBL amxIota<>(SB), RODATA|NOPTR, $64\n\n")
}

// amxRowsSig: the row kernels' arguments; act is the tile layout at the
// first token, tokBytes 4n.
const amxRowsSig = "(w *byte, rowBytes, rowTiles int, act *byte, tokBytes, blocks int, dst *float32, ldBytes int, scratch *byte)"

// q80AMXRowsKernel generates q80AMXR_16 (or, with q4, q40AMXR_16):
// rowTiles × 16 rows × 16 tokens of Q8_0 (Q4_0) weights as the file has
// them × Q8_0 activations in the tile layout, with the float steps of
// q80VNNIR_16 (q40VNNIR_16) exactly: per block, TDPBSSD gives C (row r,
// token t) = Σ w·y (Q4_0: Σ (q−8)·y), the same integer as the VNNI
// kernels' unsigned sums with their offset; then, per row r, S to f32, D
// = dw·dy and acc = fma(S, D, acc), blocks in order. The accumulators
// hold a row's 16 tokens in their lanes (the VNNI kernels' hold a token's
// eight rows), so the results are scattered to dst[t·ld + r] at the end of
// a row tile. Two blocks are in flight on separate tiles, as in
// q80AMXPackedKernel.
//
// Registers: Z16+r row r's accumulators; Z15 the block's dy; Z14 the
// rows' gather indices (r·rowBytes), Z13 the gathered scales; Z10 the
// outputs' scatter indices (t·ldBytes); Y11, Y12 the nibble mask and the
// 8s (Q4_0); Z0-Z9 scratch. GPRs: DI the row tile's weights at the
// current block, R12 the row tile's first block, R14 (R9) the block's (the
// next block's) activations, R8 rowBytes, R13 3·rowBytes, R10 tokBytes
// (B's stride), BX 64 (C's stride, and that of Q4_0's A), CX blocks left,
// DX the row tile's outputs, R15 row tiles left, SI scratch, AX scratch.
func q80AMXRowsKernel(a *asm, d *decl, q4 bool) {
	name, typ, bsz := "q80AMXR_16", "Q8_0", 34
	if q4 {
		name, typ, bsz = "q40AMXR_16", "Q4_0", 18
	}
	text(a, d, fmt.Sprintf("%s computes rowTiles × 16 rows × 16 tokens of %s weights (rows rowBytes apart) × Q8_0 activations in the tile layout on the AMX tiles; the tiles must be permitted (requestAMX).", name, typ), name, amxRowsSig, "$0-72")
	a.p("MOVQ w+0(FP), R12")
	a.p("MOVQ rowBytes+8(FP), R8")
	a.p("MOVQ rowTiles+16(FP), R15")
	a.p("MOVQ tokBytes+32(FP), R10")
	a.p("MOVQ dst+48(FP), DX")
	a.p("MOVQ scratch+64(FP), SI")
	a.p("LEAQ (R8)(R8*2), R13")
	a.p("VMOVDQU32 amxIota<>(SB), Z10")
	a.p("VPBROADCASTD R8, Z14")
	a.p("VPMULLD Z10, Z14, Z14")
	a.p("VPBROADCASTD ldBytes+56(FP), Z9")
	a.p("VPMULLD Z9, Z10, Z10")
	if q4 {
		a.p("VPBROADCASTD q40Mask<>(SB), Y11")
		a.p("MOVL $0x08080808, AX")
		a.p("VPBROADCASTD AX, Y12")
	}
	a.p("LEAQ amxRowsCfg<>(SB), AX")
	amxInst(a, "ldtilecfg [rax]", ldtilecfgBytes("AX"))
	a.p("MOVL $64, BX")
	a.label(name + "_tile")
	for r := 0; r < 16; r++ {
		a.p("VPXORD Z%d, Z%d, Z%d", 16+r, 16+r, 16+r)
	}
	a.p("MOVQ R12, DI")
	a.p("MOVQ act+24(FP), R14")
	a.p("MOVQ blocks+40(FP), CX")
	a.p("CMPQ CX, $2")
	a.p("JL %s_one", name)
	a.label(name + "_pair")
	a.p("LEAQ (R14)(R10*8), R9")
	a.p("ADDQ R10, R9")
	amxRowProducts(a, q4, 0, 0, "R14")
	amxRowProducts(a, q4, amxTiles, bsz, "R9")
	amxRowScale(a, 0, 0, "R14")
	amxRowScale(a, amxTiles, bsz, "R9")
	a.p("ADDQ $%d, DI", 2*bsz)
	a.p("LEAQ (R9)(R10*8), R14")
	a.p("ADDQ R10, R14")
	a.p("SUBQ $2, CX")
	a.p("CMPQ CX, $2")
	a.p("JGE %s_pair", name)
	a.label(name + "_one")
	a.p("TESTQ CX, CX")
	a.p("JZ %s_store", name)
	amxRowProducts(a, q4, 0, 0, "R14")
	amxRowScale(a, 0, 0, "R14")
	a.label(name + "_store")
	for r := 0; r < 16; r++ {
		a.p("KXNORW K2, K2, K2")
		a.p("VSCATTERDPS Z%d, K2, %d(DX)(Z10*1)", 16+r, 4*r)
	}
	a.p("ADDQ $64, DX")
	a.p("MOVQ R8, AX")
	a.p("SHLQ $4, AX")
	a.p("ADDQ AX, R12")
	a.p("DECQ R15")
	a.p("JNZ %s_tile", name)
	amxReturn(a)
}

// amxRowProducts loads the block at wOff(DI) of the row tile's 16 rows
// (Q4_0: unpacked to scratch first, signed) and its activations at (act)
// into tiles s+A and s+B and sums their products into s+C.
func amxRowProducts(a *asm, q4 bool, s byte, wOff int, act string) {
	ta, tb, tc := s+amxTileA, s+amxTileB, s+amxTileC
	if q4 {
		// Row r's 16 nibble bytes: low nibbles values 0-15, high 16-31.
		u := amxRowUnpacked(s)
		for r := 0; r < 16; r++ {
			base := "DI"
			switch {
			case r == 4:
				a.p("LEAQ (DI)(R8*4), AX")
			case r > 4 && r%4 == 0:
				a.p("LEAQ (AX)(R8*4), AX")
			}
			if r >= 4 {
				base = "AX"
			}
			y := r % 4
			a.p("VMOVDQU %s, X%d", stride(wOff+2, base, "R8", "R13", r%4), y)
			a.p("VPSRLW $4, X%d, X%d", y, 4+y)
			a.p("VINSERTI128 $1, X%d, Y%d, Y%d", 4+y, y, y)
			a.p("VPAND Y11, Y%d, Y%d", y, y)
			a.p("VPSUBB Y12, Y%d, Y%d", y, y)
			a.p("VMOVDQU Y%d, %d(SI)", y, u+64*r)
		}
		amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", ta, amxMem("SI", "BX", u)), tileloaddBytes(ta, "SI", "BX", u))
	} else {
		amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", ta, amxMem("DI", "R8", wOff+2)), tileloaddBytes(ta, "DI", "R8", wOff+2))
	}
	amxInst(a, fmt.Sprintf("tileloadd tmm%d, %s", tb, amxMem(act, "R10", 0)), tileloaddBytes(tb, act, "R10", 0))
	amxInst(a, fmt.Sprintf("tilezero tmm%d", tc), tilezeroBytes(tc))
	amxInst(a, fmt.Sprintf("tdpbssd tmm%d, tmm%d, tmm%d", tc, ta, tb), tdpbssdBytes(tc, ta, tb))
}

// amxRowScale gathers the 16 rows' scales of the block at wOff(DI), stores
// tile s+C to scratch and runs the float steps of its 16 rows, the
// tokens' scales 8·tokBytes past their values at (act).
func amxRowScale(a *asm, s byte, wOff int, act string) {
	tc := s + amxTileC
	sums, scales := amxRowSums(s), amxRowScales(s)
	a.p("KXNORW K1, K1, K1")
	a.p("VPGATHERDD %d(DI)(Z14*1), K1, Z13", wOff)
	a.p("VPMOVDW Z13, Y13")
	a.p("VCVTPH2PS Y13, Z13")
	a.p("VMOVUPS Z13, %d(SI)", scales)
	a.p("VMOVUPS (%s)(R10*8), Z15", act)
	amxInst(a, fmt.Sprintf("tilestored %s, tmm%d", amxMem("SI", "BX", sums), tc), tilestoredBytes(tc, "SI", "BX", sums))
	for r := 0; r < 16; r++ {
		ti := 2 * (r % 5)
		td := ti + 1
		a.p("VCVTDQ2PS %d(SI), Z%d", sums+64*r, ti)
		a.p("VMULPS.BCST %d(SI), Z15, Z%d", scales+4*r, td)
		a.p("VFMADD231PS Z%d, Z%d, Z%d", td, ti, 16+r)
	}
}

// amxReturn ends an AMX kernel: the tiles released (their state need not
// be saved across the next context switch), the vector state clean.
func amxReturn(a *asm) {
	amxInst(a, "tilerelease", tilereleaseBytes())
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
}
