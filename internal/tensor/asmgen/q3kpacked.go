package main

// The packed Q3_K layout (matrix.go, kPackedOffset): per block of eight
// rows and block b of 256 columns, 8·110 bytes at b times that, the bytes
// of the eight rows' blocks rearranged so that a vector lane is a row: 16
// vectors of the rows' qs dwords, 8 of their hmask dwords, three of their
// 12 scale bytes, then the rows' f16 d.
const (
	q3KPackedBytes  = 8 * 110
	q3KPackedHmask  = 512
	q3KPackedScales = 768
	q3KPackedD      = 864
)

// q3KPacked is Q3_K's sub16Type: values q+4 (qs's two bits, hmask's bit
// at bit 2, unsigned), 6-bit scales less 32.
var q3KPacked = sub16Type{
	prefix: "q3K", typ: "Q3_K", bytes: q3KPackedBytes, dOff: q3KPackedD,
	consts: q3KConsts, steps: q3KSteps, scales: q3KScales, pairs: q3KPairs, offset: 2,
}

// q3KConsts loads the packed Q3_K kernels' constants: Y28 0x0f bytes, Y29
// 0x03 bytes, Y15 0x04 bytes, Y13 0x3f dwords, Y12 32 dwords, Y11 32 words.
func q3KConsts(a *asm) {
	for _, c := range []struct {
		v   uint32
		reg int
	}{{0x0f0f0f0f, 28}, {0x03030303, 29}, {0x04040404, 15}, {0x3f, 13}, {32, 12}, {0x00200020, 11}} {
		a.p("MOVL $%#x, CX", c.v)
		a.p("VPBROADCASTD CX, Y%d", c.reg)
	}
}

// q3KSteps builds a packed Q3_K block's values at SI, sub-blocks 2p and
// 2p+1 a step. Value i of a row (sub-block s = i/16) is bits 2j of qs byte
// 32n + i%32 and bit 4n+j of hmask byte i%32, with n = i/128 and j =
// i%128/32, so sub-block s's dword e is qs vector 8n + 4h + e shifted by
// 2j, and hmask vector 4h + e's bit 4n+j moved to bit 2 (h = s%2).
func q3KSteps(a *asm, step func(sa, sb int)) {
	for p := 0; p < 8; p++ {
		for i, s := range []int{2 * p, 2*p + 1} {
			n, j, h := s/8, s%8/2, s%2
			for e := 0; e < 4; e++ {
				v := 16 + 4*i + e
				qs, hm := 32*(8*n+4*h+e), q3KPackedHmask+32*(4*h+e)
				if j == 0 {
					a.p("VPANDD %d(SI), Y29, Y%d", qs, v)
				} else {
					a.p("VPSRLW $%d, %d(SI), Y%d", 2*j, qs, v)
					a.p("VPANDD Y%d, Y29, Y%d", v, v)
				}
				// hmask's bit b to bit 2 (16-bit shifts of at most five
				// move no other byte's bit there).
				switch b := 4*n + j; {
				case b == 2:
					a.p("VPTERNLOGD $0xf8, %d(SI), Y15, Y%d", hm, v) // v |= hm & 0x04
					continue
				case b > 2:
					a.p("VPSRLW $%d, %d(SI), Y14", b-2, hm)
				default:
					a.p("VPSLLW $%d, %d(SI), Y14", 2-b, hm)
				}
				a.p("VPTERNLOGD $0xf8, Y15, Y14, Y%d", v) // v |= Y14 & 0x04
			}
		}
		step(2*p, 2*p+1)
	}
}

// q3KScale sets Y[dst] to the 6-bit scale sc+32 (0..63) of sub-block s of
// each of the eight rows, a dword each: four low bits from scale byte s%8
// (its high nibble for s ≥ 8), two high bits from byte 8 + s%4 at bit
// 2·(s/4), as q3KScale reads them; Y14 is scratch.
func q3KScale(a *asm, s, dst int) {
	lo, loShift := q3KPackedScales+32*(s%8/4), 8*(s%4)+4*(s/8)
	if loShift > 0 {
		a.p("VPSRLD $%d, %d(SI), Y%d", loShift, lo, dst)
	} else {
		a.p("VMOVDQU32 %d(SI), Y%d", lo, dst)
	}
	hi := q3KPackedScales + 64
	switch sh := 8*(s%4) + 2*(s/4) - 4; { // the two high bits to bits 4-5
	case sh > 0:
		a.p("VPSRLD $%d, %d(SI), Y14", sh, hi)
	case sh < 0:
		a.p("VPSLLD $%d, %d(SI), Y14", -sh, hi)
	default:
		a.p("VMOVDQU32 %d(SI), Y14", hi)
	}
	a.p("VPTERNLOGD $0xe4, Y28, Y14, Y%d", dst) // low nibble from dst, high from Y14
	a.p("VPANDD Y%d, Y13, Y%d", dst, dst)
}

// q3KScales sets Y24 and Y25 to the rows' signed scales of sub-blocks sa
// and sb.
func q3KScales(a *asm, sa, sb int) {
	for i, s := range []int{sa, sb} {
		q3KScale(a, s, 24+i)
		a.p("VPSUBD Y12, Y%d, Y%d", 24+i, 24+i)
	}
}

// q3KPairs sets Y16-Y23 to the rows' signed scales of sub-blocks 2p and
// 2p+1 as int16 pairs; Y25 is scratch.
func q3KPairs(a *asm) {
	for p := 0; p < 8; p++ {
		q3KScale(a, 2*p, 16+p)
		q3KScale(a, 2*p+1, 25)
		a.p("VPSLLD $16, Y25, Y25")
		a.p("VPORD Y25, Y%d, Y%d", 16+p, 16+p)
		a.p("VPSUBW Y11, Y%d, Y%d", 16+p, 16+p)
	}
}
