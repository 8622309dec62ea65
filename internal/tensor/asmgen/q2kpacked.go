package main

// The packed Q2_K layout (matrix.go, kPackedOffset): per block of eight
// rows and block b of 256 columns, 8·84 bytes at b times that, the bytes
// of the eight rows' blocks rearranged so that a vector lane is a row: four
// vectors of the rows' 16 scale bytes (scale in the low nibble, min in the
// high one), 16 of their qs dwords, then the rows' f16 d and dmin.
const (
	q2KPackedBytes = 8 * 84
	q2KPackedQs    = 128
	q2KPackedD     = 640
	q2KPackedDmin  = 656
)

// q2KPacked is Q2_K's sub16Type: values qs's two bits, unsigned 4-bit
// scales and mins.
var q2KPacked = sub16Type{
	prefix: "q2K", typ: "Q2_K", bytes: q2KPackedBytes, dOff: q2KPackedD, dminOff: q2KPackedDmin,
	consts: q2KConsts, steps: q2KSteps, scales: q2KScales, pairs: q2KMinPairs,
}

// q2KConsts loads the packed Q2_K kernels' constants: Y29 0x03 bytes, Y13
// 0x0f dwords.
func q2KConsts(a *asm) {
	a.p("MOVL $0x03030303, CX")
	a.p("VPBROADCASTD CX, Y29")
	a.p("MOVL $0x0f, CX")
	a.p("VPBROADCASTD CX, Y13")
}

// q2KSteps builds a packed Q2_K block's values at SI, sub-blocks 2p and
// 2p+1 a step: value i of a row (sub-block s = i/16) is bits 2j of qs byte
// 32n + i%32, with n = i/128 and j = i%128/32, so sub-block s's dword e is
// qs vector 8n + 4h + e shifted by 2j (h = s%2), as Q3_K's two low bits.
func q2KSteps(a *asm, step func(sa, sb int)) {
	for p := 0; p < 8; p++ {
		for i, s := range []int{2 * p, 2*p + 1} {
			n, j, h := s/8, s%8/2, s%2
			for e := 0; e < 4; e++ {
				v, qs := 16+4*i+e, q2KPackedQs+32*(8*n+4*h+e)
				if j == 0 {
					a.p("VPANDD %d(SI), Y29, Y%d", qs, v)
					continue
				}
				a.p("VPSRLW $%d, %d(SI), Y%d", 2*j, qs, v)
				a.p("VPANDD Y%d, Y29, Y%d", v, v)
			}
		}
		step(2*p, 2*p+1)
	}
}

// q2KNibble sets Y[dst] to the rows' scale (high: min) of sub-block s, a
// dword each: a nibble of scale byte s.
func q2KNibble(a *asm, s, dst int, high bool) {
	sh := 8 * (s % 4)
	if high {
		sh += 4
	}
	if sh > 0 {
		a.p("VPSRLD $%d, %d(SI), Y%d", sh, 32*(s/4), dst)
		a.p("VPANDD Y%d, Y13, Y%d", dst, dst)
		return
	}
	a.p("VPANDD %d(SI), Y13, Y%d", 32*(s/4), dst)
}

// q2KScales sets Y24 and Y25 to the rows' scales of sub-blocks sa and sb.
func q2KScales(a *asm, sa, sb int) {
	q2KNibble(a, sa, 24, false)
	q2KNibble(a, sb, 25, false)
}

// q2KMinPairs sets Y16-Y23 to the rows' mins of sub-blocks 2p and 2p+1 as
// int16 pairs; Y25 is scratch.
func q2KMinPairs(a *asm) {
	for p := 0; p < 8; p++ {
		q2KNibble(a, 2*p, 16+p, true)
		q2KNibble(a, 2*p+1, 25, true)
		a.p("VPSLLD $16, Y25, Y25")
		a.p("VPORD Y25, Y%d, Y%d", 16+p, 16+p)
	}
}
