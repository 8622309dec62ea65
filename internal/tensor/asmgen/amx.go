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
	return fmt.Sprintf("[%s+%s+%d]", strings.ToLower(base), strings.ToLower(index), disp)
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
	var cfg [64]byte
	cfg[0] = 1
	set := func(t, rows, colsb int) {
		cfg[16+2*t] = byte(colsb)
		cfg[48+t] = byte(rows)
	}
	for s := 0; s < 2; s++ {
		set(amxTiles*s+amxTileA, 16, 32)
		set(amxTiles*s+amxTileB, 8, 32)
		set(amxTiles*s+amxTileC, 16, 32)
	}
	for i := 0; i < 64; i += 8 {
		var q uint64
		for j := 7; j >= 0; j-- {
			q = q<<8 | uint64(cfg[i+j])
		}
		fmt.Fprintf(&a.b, "DATA amxQ80Cfg<>+%d(SB)/8, $0x%016x\n", i, q)
	}
	a.b.WriteString("GLOBL amxQ80Cfg<>(SB), RODATA|NOPTR, $64\n\n")
}

// amxQ80Sig: the packed kernels' arguments without the prefetch distance,
// with scratch (amxScratchBytes).
const amxQ80Sig = "(w *byte, rowBlocks int, act *byte, blockStride, blocks int, dst *float32, ldBytes int, scratch *byte)"

// The kernels' scratch: per block in flight, its tile of sums (16 tokens
// × 8 rows' dwords) and, for Q4_0, its weights unpacked (8 dword vectors):
// the sums of both blocks first, then the unpacked weights. Package tensor
// sizes its buffer by amxScratchBytes, which amxScratchDecl declares there.
const (
	amxSumsBytes     = 16 * 32
	amxUnpackedBytes = 8 * 32
	amxScratchBytes  = 2 * (amxSumsBytes + amxUnpackedBytes)
)

// amxScratchDecl declares amxScratchBytes in the generated Go file.
func amxScratchDecl(d *decl) {
	fmt.Fprintf(&d.b, "// amxScratchBytes is the scratch the AMX kernels take (asmgen/amx.go).\nconst amxScratchBytes = %d\n\n", amxScratchBytes)
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
	amxInst(a, "tilerelease", tilereleaseBytes())
	a.p("VZEROUPPER")
	a.p("RET")
	a.b.WriteString("\n")
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
