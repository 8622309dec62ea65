package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Block layouts (GGML's, byte for byte; all multi-byte fields little-endian):
//
//	Q8_0 (32 values, 34 bytes):  d f16 | qs [32]int8              x = d*q
//	Q4_0 (32 values, 18 bytes):  d f16 | qs [16]uint8             x = d*(nibble-8);
//	                             byte j holds value j (low nibble) and j+16 (high)
//	Q5_0 (32 values, 22 bytes):  d f16 | qh uint32 | qs [16]uint8  x = d*(q-16);
//	                             q's low four bits as Q4_0's nibbles, bit j of
//	                             qh the fifth bit of value j
//	Q4_1 (32 values, 20 bytes):  d f16 | m f16 | qs [16]uint8      x = d*nibble + m
//	                             (nibbles as Q4_0's)
//	Q5_1 (32 values, 24 bytes):  d f16 | m f16 | qh uint32 | qs [16]uint8
//	                             x = d*q + m, q's bits as Q5_0's
//	IQ4_NL (32 values, 18 bytes): d f16 | qs [16]uint8      x = d*kvaluesIQ4NL[nibble]
//	                             (nibbles as Q4_0's)
//	IQ4_XS (256 values, 136 bytes): d f16 | scales_h uint16 | scales_l [4] | qs [128]
//	                             8 sub-blocks of 32 with 6-bit scale ls (low four
//	                             bits in scales_l, nibble j%2 of byte j/2; high two
//	                             at bit 2j of scales_h): x = d*(ls-32)*kvaluesIQ4NL[q],
//	                             qs as IQ4_NL's 16 bytes per sub-block
//	Q2_K (256 values, 84 bytes):  scales [16] | qs [64] | d f16 | dmin f16
//	                             16 sub-blocks of 16 with 4-bit scale sc (low
//	                             nibble) and min m (high): x = d*sc*q - dmin*m,
//	                             q 2 bits, in qs as Q3_K's low bits
//	Q3_K (256 values, 110 bytes): hmask [32] | qs [64] | scales [12] | d f16
//	                             16 sub-blocks of 16 with 6-bit scale sc:
//	                             x = d*(sc-32)*q, q in [-4, 3] (see q3KValue)
//	Q4_K (256 values, 144 bytes): d f16 | dmin f16 | scales [12] | qs [128]
//	                             8 sub-blocks of 32 with 6-bit scale sc and min m:
//	                             x = d*sc*nibble - dmin*m; qs chunk c (32 bytes)
//	                             holds values 64c+l (low nibble) and 64c+32+l (high)
//	Q5_K (256 values, 176 bytes): d f16 | dmin f16 | scales [12] | qh [32] | qs [128]
//	                             Q4_K with a fifth bit: bit j of qh[l] is that of
//	                             value 32j+l, so q runs 0..31
//	Q6_K (256 values, 210 bytes): ql [128] | qh [64] | scales [16]int8 | d f16
//	                             16 sub-blocks of 16: x = d*sc*(q-32), q 6 bits
//	Q8_K (256 values, activations only): d f32 | qs [256]int8 | bsums [16]int16

const (
	qk80      = 32
	q80Size   = 34
	qk40      = 32
	q40Size   = 18
	qk50      = 32
	q50Size   = 22
	q41Size   = 20
	q51Size   = 24
	iq4Size   = 18
	q3KSize   = 110
	q2KSize   = 84
	iq4XSSize = 136
	qkK       = 256
	q4KSize   = 144
	q5KSize   = 176
	q6KSize   = 210
)

// kvaluesIQ4NL are IQ4_NL's sixteen values (ggml's kvalues_iq4nl), spaced
// to fit a bell-shaped distribution better than Q4_0's even steps.
var kvaluesIQ4NL = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// groupMaxEps is GGML's threshold below which a group counts as all zero.
const groupMaxEps = 1e-15

func f16At(b []byte, off int) float32 {
	return F16ToF32(binary.LittleEndian.Uint16(b[off:]))
}

// checkBlocks validates that n elements of t fit in a buffer of size bytes.
func checkBlocks(t DType, n, size int) error {
	if !t.Supported() {
		return fmt.Errorf("tensor: type %v not supported", t)
	}
	if n < 0 || n%t.BlockSize() != 0 {
		return fmt.Errorf("tensor: %d elements is not a multiple of the %v block size %d", n, t, t.BlockSize())
	}
	if need := t.RowBytes(n); size < need {
		return fmt.Errorf("tensor: %d elements of %v need %d bytes, have %d", n, t, need, size)
	}
	return nil
}

// Dequantize converts len(dst) elements of type t from src to float32. The
// results are bit-identical to ggml's dequantize_row_* functions.
func Dequantize(t DType, dst []float32, src []byte) error {
	if err := checkBlocks(t, len(dst), len(src)); err != nil {
		return fmt.Errorf("tensor: dequantize: %w", err)
	}
	dequantize(t, dst, src)
	return nil
}

// dequantize is Dequantize without validation.
func dequantize(t DType, dst []float32, src []byte) {
	switch t {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		for b := 0; b < len(dst)/qk80; b++ {
			blk := src[b*q80Size : (b+1)*q80Size]
			d := f16At(blk, 0)
			y := dst[b*qk80 : (b+1)*qk80]
			for j := range y {
				y[j] = float32(int8(blk[2+j])) * d
			}
		}
	case Q4_0:
		for b := 0; b < len(dst)/qk40; b++ {
			blk := src[b*q40Size : (b+1)*q40Size]
			d := f16At(blk, 0)
			y := dst[b*qk40 : (b+1)*qk40]
			for j := 0; j < 16; j++ {
				q := blk[2+j]
				y[j] = float32(int(q&0xf)-8) * d
				y[j+16] = float32(int(q>>4)-8) * d
			}
		}
	case Q5_0:
		for b := 0; b < len(dst)/qk50; b++ {
			blk := src[b*q50Size : (b+1)*q50Size]
			d := f16At(blk, 0)
			y := dst[b*qk50 : (b+1)*qk50]
			for j := range y {
				y[j] = float32(q50Value(blk, j)) * d
			}
		}
	case Q4_1, Q5_1:
		bs := t.TypeSize()
		for b := 0; b < len(dst)/32; b++ {
			blk := src[b*bs : (b+1)*bs]
			d, m := f16At(blk, 0), f16At(blk, 2)
			y := dst[b*32 : (b+1)*32]
			for j := range y {
				y[j] = float32(float32(minBlockValue(t, blk, j))*d) + m
			}
		}
	case IQ4_NL:
		for b := 0; b < len(dst)/32; b++ {
			blk := src[b*iq4Size : (b+1)*iq4Size]
			d := f16At(blk, 0)
			y := dst[b*32 : (b+1)*32]
			for j := 0; j < 16; j++ {
				y[j] = float32(kvaluesIQ4NL[blk[2+j]&0xf]) * d
				y[j+16] = float32(kvaluesIQ4NL[blk[2+j]>>4]) * d
			}
		}
	case IQ4_XS:
		for b := 0; b < len(dst)/qkK; b++ {
			blk := src[b*iq4XSSize : (b+1)*iq4XSSize]
			d := f16At(blk, 0)
			for ib := 0; ib < 8; ib++ {
				dl := d * float32(iq4XSScale(blk, ib))
				qs := blk[8+16*ib : 8+16*ib+16]
				y := dst[b*qkK+32*ib : b*qkK+32*ib+32]
				for j := 0; j < 16; j++ {
					y[j] = dl * float32(kvaluesIQ4NL[qs[j]&0xf])
					y[j+16] = dl * float32(kvaluesIQ4NL[qs[j]>>4])
				}
			}
		}
	case Q2_K:
		for b := 0; b < len(dst)/qkK; b++ {
			blk := src[b*q2KSize : (b+1)*q2KSize]
			d, dmin := f16At(blk, 80), f16At(blk, 82)
			y := dst[b*qkK : (b+1)*qkK]
			for k := 0; k < 16; k++ {
				dl, ml := d*float32(blk[k]&0xf), dmin*float32(blk[k]>>4)
				for i := 16 * k; i < 16*k+16; i++ {
					y[i] = float32(dl*float32(q2KValue(blk, i))) - ml
				}
			}
		}
	case Q3_K:
		for b := 0; b < len(dst)/qkK; b++ {
			blk := src[b*q3KSize : (b+1)*q3KSize]
			d := f16At(blk, 108)
			y := dst[b*qkK : (b+1)*qkK]
			for k := 0; k < 16; k++ {
				dl := d * float32(q3KScale(blk, k))
				for i := 16 * k; i < 16*k+16; i++ {
					y[i] = dl * float32(q3KValue(blk, i))
				}
			}
		}
	case Q4_K:
		for b := 0; b < len(dst)/qkK; b++ {
			dequantQ4KBlock(dst[b*qkK:(b+1)*qkK], src[b*q4KSize:(b+1)*q4KSize])
		}
	case Q5_K:
		for b := 0; b < len(dst)/qkK; b++ {
			dequantQ5KBlock(dst[b*qkK:(b+1)*qkK], src[b*q5KSize:(b+1)*q5KSize])
		}
	case IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, Q8_K16:
		dequantIQ(t, dst, src)
	case Q6_K:
		for b := 0; b < len(dst)/qkK; b++ {
			dequantQ6KBlock(dst[b*qkK:(b+1)*qkK], src[b*q6KSize:(b+1)*q6KSize])
		}
	}
}

// q50Value is value j (0-31) of a Q5_0 block as a signed integer, q-16.
func q50Value(blk []byte, j int) int8 { return int8(fiveBits(blk[2:], j)) - 16 }

// fiveBits is value j (0-31) of the 5-bit values of Q5_0 and Q5_1: qh
// (uint32, bit j the fifth bit of value j) then sixteen bytes of nibbles as
// Q4_0's, from the start of p.
func fiveBits(p []byte, j int) uint8 {
	qh := binary.LittleEndian.Uint32(p)
	q := p[4+j%16]
	if j >= 16 {
		q >>= 4
	}
	return q&0xf | byte(qh>>j&1)<<4
}

// minBlockValue is value j (0-31) of a Q4_1 or Q5_1 block, the unsigned q
// of x = d*q + m.
func minBlockValue(t DType, blk []byte, j int) uint8 {
	if t == Q4_1 {
		q := blk[4+j%16]
		if j >= 16 {
			q >>= 4
		}
		return q & 0xf
	}
	return fiveBits(blk[4:], j)
}

// iq4XSScale is the scale of sub-block ib (0-7) of an IQ4_XS block, in
// [-32, 31].
func iq4XSScale(blk []byte, ib int) int8 {
	lo := blk[4+ib/2] >> (4 * (ib % 2)) & 0xf
	hi := byte(binary.LittleEndian.Uint16(blk[2:])>>(2*ib)) & 3
	return int8(lo|hi<<4) - 32
}

// q2KValue is value i (0-255) of a Q2_K block, in [0, 3]: two bits of qs,
// placed as Q3_K's (byte 32·(i/128) + i%32, bits 2·((i%128)/32)).
func q2KValue(blk []byte, i int) uint8 { return twoBits(blk[16:80], i) }

// twoBits is value i (0-255) of the 2-bit planes of Q2_K and Q3_K: byte
// 32·(i/128) + i%32 of qs, bits 2·((i%128)/32).
func twoBits(qs []byte, i int) uint8 {
	return qs[32*(i/128)+i%32] >> (2 * (i % 128 / 32)) & 3
}

// q3KValue is value i (0-255) of a Q3_K block, in [-4, 3]: two bits in qs
// (byte 32·(i/128) + i%32, bits 2·((i%128)/32)) and a high bit in hmask
// (byte i%32, bit i/32) that, when clear, subtracts 4.
func q3KValue(blk []byte, i int) int8 {
	q := int8(twoBits(blk[32:96], i))
	if blk[i%32]>>(i/32)&1 == 0 {
		q -= 4
	}
	return q
}

// q3KScale is the scale of sub-block k (0-15) of a Q3_K block, in
// [-32, 31]: four low bits in scales[k%8] (high nibble for k ≥ 8), two
// high bits in scales[8 + k%4] at bit 2·(k/4).
func q3KScale(blk []byte, k int) int8 {
	sc := blk[32+64:]
	lo := sc[k%8] & 0xf
	if k >= 8 {
		lo = sc[k-8] >> 4
	}
	return int8(lo|(sc[8+k%4]>>(2*(k/4))&3)<<4) - 32
}

// scaleMinK4 unpacks the 6-bit scale and min of sub-block j of a Q4_K block.
func scaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

func dequantQ4KBlock(y []float32, blk []byte) {
	d := f16At(blk, 0)
	dmin := f16At(blk, 2)
	scales := blk[4:16]
	qs := blk[16:144]
	for c := 0; c < 4; c++ {
		sc, m := scaleMinK4(2*c, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = scaleMinK4(2*c+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		q := qs[32*c : 32*c+32]
		out := y[64*c : 64*c+64]
		for l := 0; l < 32; l++ {
			out[l] = float32(d1*float32(q[l]&0xf)) - m1
			out[l+32] = float32(d2*float32(q[l]>>4)) - m2
		}
	}
}

// q5KValue is value i (0-255) of a Q5_K block's 5-bit values.
func q5KValue(blk []byte, i int) uint8 {
	j, l := i/32, i%32
	q := blk[48+32*(j/2)+l] >> (4 * (j & 1)) & 0xf
	return q | (blk[16+l]>>j&1)<<4
}

func dequantQ5KBlock(y []float32, blk []byte) {
	d := f16At(blk, 0)
	dmin := f16At(blk, 2)
	scales := blk[4:16]
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, scales)
		dj, mj := d*float32(sc), dmin*float32(m)
		for l := 0; l < 32; l++ {
			y[32*j+l] = float32(dj*float32(q5KValue(blk, 32*j+l))) - mj
		}
	}
}

func dequantQ6KBlock(y []float32, blk []byte) {
	ql := blk[0:128]
	qh := blk[128:192]
	sc := blk[192:208]
	d := f16At(blk, 208)
	for h := 0; h < 2; h++ {
		l8 := ql[64*h : 64*h+64]
		h8 := qh[32*h : 32*h+32]
		s := sc[8*h : 8*h+8]
		out := y[128*h : 128*h+128]
		for l := 0; l < 32; l++ {
			is := l / 16
			q1 := int(l8[l]&0xf|(h8[l]>>0&3)<<4) - 32
			q2 := int(l8[l+32]&0xf|(h8[l]>>2&3)<<4) - 32
			q3 := int(l8[l]>>4|(h8[l]>>4&3)<<4) - 32
			q4 := int(l8[l+32]>>4|(h8[l]>>6&3)<<4) - 32
			out[l] = float32(d*float32(int8(s[is]))) * float32(q1)
			out[l+32] = float32(d*float32(int8(s[is+2]))) * float32(q2)
			out[l+64] = float32(d*float32(int8(s[is+4]))) * float32(q3)
			out[l+96] = float32(d*float32(int8(s[is+6]))) * float32(q4)
		}
	}
}

// Quantizable reports whether Quantize writes type t: every supported type
// but the IQ1, IQ2 and IQ3 types (and Q8_K16, which they widen to), which
// are only read.
func Quantizable(t DType) bool { return t.Supported() && !isIQGrid(t) && t != Q8_K16 }

// Quantize converts src to type t (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
// Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K) the way llama-quantize does without an importance matrix: GGML's
// reference quantizers, reproduced operation for operation so the bytes are
// the same. len(src) must be a multiple of the type's block size.
func Quantize(t DType, src []float32) ([]byte, error) {
	if !t.Supported() {
		return nil, fmt.Errorf("tensor: quantize: type %v not supported", t)
	}
	if !Quantizable(t) {
		return nil, fmt.Errorf("tensor: quantize: type %v is read, not written (the IQ1, IQ2 and IQ3 types need an importance matrix)", t)
	}
	if len(src)%t.BlockSize() != 0 {
		return nil, fmt.Errorf("tensor: quantize: %d elements is not a multiple of the %v block size %d", len(src), t, t.BlockSize())
	}
	dst := make([]byte, t.RowBytes(len(src)))
	switch t {
	case F32:
		for i, v := range src {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(v))
		}
	case F16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToF16(v))
		}
	case BF16:
		for i, v := range src {
			binary.LittleEndian.PutUint16(dst[2*i:], F32ToBF16(v))
		}
	case Q8_0:
		for b := 0; b < len(src)/qk80; b++ {
			quantQ80RefBlock(dst[b*q80Size:(b+1)*q80Size], src[b*qk80:(b+1)*qk80])
		}
	case Q4_0:
		for b := 0; b < len(src)/qk40; b++ {
			quantQ40RefBlock(dst[b*q40Size:(b+1)*q40Size], src[b*qk40:(b+1)*qk40])
		}
	case Q5_0:
		for b := 0; b < len(src)/qk50; b++ {
			quantQ50RefBlock(dst[b*q50Size:(b+1)*q50Size], src[b*qk50:(b+1)*qk50])
		}
	case Q4_1, Q5_1:
		bs := t.TypeSize()
		for b := 0; b < len(src)/32; b++ {
			quantMinBlock(t, dst[b*bs:(b+1)*bs], src[b*32:(b+1)*32])
		}
	case IQ4_NL:
		for b := 0; b < len(src)/32; b++ {
			quantIQ4NLBlock(dst[b*iq4Size:(b+1)*iq4Size], src[b*32:(b+1)*32])
		}
	case IQ4_XS:
		for b := 0; b < len(src)/qkK; b++ {
			quantIQ4XSBlock(dst[b*iq4XSSize:(b+1)*iq4XSSize], src[b*qkK:(b+1)*qkK])
		}
	case Q2_K:
		for b := 0; b < len(src)/qkK; b++ {
			quantQ2KBlock(dst[b*q2KSize:(b+1)*q2KSize], src[b*qkK:(b+1)*qkK])
		}
	case Q3_K:
		for b := 0; b < len(src)/qkK; b++ {
			quantQ3KBlock(dst[b*q3KSize:(b+1)*q3KSize], src[b*qkK:(b+1)*qkK])
		}
	case Q4_K:
		var s q4KScratch
		for b := 0; b < len(src)/qkK; b++ {
			quantQ4KBlock(dst[b*q4KSize:(b+1)*q4KSize], src[b*qkK:(b+1)*qkK], &s)
		}
	case Q5_K:
		var s q4KScratch
		for b := 0; b < len(src)/qkK; b++ {
			quantQ5KBlock(dst[b*q5KSize:(b+1)*q5KSize], src[b*qkK:(b+1)*qkK], &s)
		}
	case Q6_K:
		for b := 0; b < len(src)/qkK; b++ {
			quantQ6KBlock(dst[b*q6KSize:(b+1)*q6KSize], src[b*qkK:(b+1)*qkK])
		}
	}
	return dst, nil
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// roundHalfAway is C's roundf: round to nearest, ties away from zero.
func roundHalfAway(x float32) float32 { return float32(math.Round(float64(x))) }

// nearestInt is GGML's nearest_int: round to nearest, ties to even, via the
// 1.5*2^23 magic number (valid for |x| <= 2^22, deterministic otherwise).
func nearestInt(x float32) int {
	v := x + 12582912
	return int(int32(math.Float32bits(v)&0x7fffff) - 0x400000)
}

// quantQ80RefBlock is quantize_row_q8_0_ref for one block.
func quantQ80RefBlock(dst []byte, x []float32) {
	var amax float32
	for _, v := range x[:qk80] {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	for j, v := range x[:qk80] {
		dst[2+j] = byte(int8(roundHalfAway(v * id)))
	}
}

// quantQ40RefBlock is quantize_row_q4_0_ref for one block.
func quantQ40RefBlock(dst []byte, x []float32) {
	var amax, mx float32
	for _, v := range x[:qk40] {
		if amax < abs32(v) {
			amax = abs32(v)
			mx = v
		}
	}
	d := mx / -8
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	for j := 0; j < 16; j++ {
		x0 := x[j] * id
		x1 := x[16+j] * id
		xi0 := min(15, uint8(int8(x0+8.5)))
		xi1 := min(15, uint8(int8(x1+8.5)))
		dst[2+j] = xi0 | xi1<<4
	}
}

// quantQ50RefBlock is quantize_row_q5_0_ref for one block: Q4_0's scale
// (the value of largest magnitude maps to -16) with a fifth bit.
func quantQ50RefBlock(dst []byte, x []float32) {
	var amax, mx float32
	for _, v := range x[:qk50] {
		if amax < abs32(v) {
			amax = abs32(v)
			mx = v
		}
	}
	d := mx / -16
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	var qh uint32
	for j := 0; j < 16; j++ {
		xi0 := min(31, uint8(int8(float32(x[j]*id)+16.5))) // no fused multiply-add, as in C
		xi1 := min(31, uint8(int8(float32(x[16+j]*id)+16.5)))
		dst[6+j] = xi0&0xf | xi1<<4
		qh |= uint32(xi0>>4) << j
		qh |= uint32(xi1>>4) << (j + 16)
	}
	binary.LittleEndian.PutUint32(dst[2:], qh)
}

// quantMinBlock is quantize_row_q4_1_ref or quantize_row_q5_1_ref for one
// block: the block's range from its minimum m in 15 or 31 steps of d.
func quantMinBlock(t DType, dst []byte, x []float32) {
	mn, mx := float32(math.MaxFloat32), float32(-math.MaxFloat32)
	for _, v := range x[:32] {
		mn = min(mn, v)
		mx = max(mx, v)
	}
	levels := float32(15)
	if t == Q5_1 {
		levels = 31
	}
	d := (mx - mn) / levels
	var id float32
	if d != 0 {
		id = 1 / d
	}
	binary.LittleEndian.PutUint16(dst[0:], F32ToF16(d))
	binary.LittleEndian.PutUint16(dst[2:], F32ToF16(mn))
	var qh uint32
	for j := 0; j < 16; j++ {
		x0 := float32((x[j] - mn) * id) // no fused multiply-add, as in C
		x1 := float32((x[16+j] - mn) * id)
		if t == Q4_1 {
			xi0 := min(15, uint8(int8(x0+0.5)))
			xi1 := min(15, uint8(int8(x1+0.5)))
			dst[4+j] = xi0 | xi1<<4
			continue
		}
		xi0, xi1 := uint8(x0+0.5), uint8(x1+0.5) // no clamp, as in C
		dst[8+j] = xi0&0xf | (xi1&0xf)<<4
		qh |= uint32(xi0>>4&1)<<j | uint32(xi1>>4&1)<<(j+16)
	}
	if t == Q5_1 {
		binary.LittleEndian.PutUint32(dst[4:], qh)
	}
}

// bestIndexIQ4NL is ggml's best_index_int8 on IQ4_NL's values: the index of
// the value nearest x (the upper one on a tie).
func bestIndexIQ4NL(x float32) uint8 {
	v := &kvaluesIQ4NL
	if x <= float32(v[0]) {
		return 0
	}
	if x >= float32(v[15]) {
		return 15
	}
	ml, mu := 0, 15
	for mu-ml > 1 {
		mav := (ml + mu) / 2
		if x < float32(v[mav]) {
			mu = mav
		} else {
			ml = mav
		}
	}
	if x-float32(v[mu-1]) < float32(v[mu])-x {
		return uint8(mu - 1)
	}
	return uint8(mu)
}

// iq4Scale is quantize_row_iq4_nl_impl's search for one sub-block of 32
// values without importance weights: the scale that fits x best,
// x²-weighted, among fifteen candidates around the one that maps its
// largest magnitude to −127 (0 for a sub-block of zeros).
func iq4Scale(x []float32) float32 {
	var weight [32]float32
	var amax, mx float32
	for j, v := range x[:32] {
		weight[j] = v * v
		if ax := abs32(v); ax > amax {
			amax, mx = ax, v
		}
	}
	if amax < groupMaxEps {
		return 0
	}
	fit := func(id float32) (sumqx, sumq2 float32) {
		for j, v := range x[:32] {
			q := float32(kvaluesIQ4NL[bestIndexIQ4NL(id*v)])
			w := weight[j]
			sumqx += float32(float32(w*q) * v)
			sumq2 += float32(float32(w*q) * q)
		}
		return sumqx, sumq2
	}
	d := -mx / float32(kvaluesIQ4NL[0])
	sumqx, sumq2 := fit(1 / d)
	d = sumqx / sumq2
	best := d * sumqx
	for itry := -7; itry <= 7; itry++ {
		sumqx, sumq2 := fit(float32(itry+int(kvaluesIQ4NL[0])) / mx)
		if sumq2 > 0 && float32(sumqx*sumqx) > float32(best*sumq2) {
			d = sumqx / sumq2
			best = d * sumqx
		}
	}
	return d
}

// packIQ4 writes 32 indices L as IQ4_NL's and IQ4_XS's 16 bytes: value j
// in the low nibble of byte j, value 16+j in its high one.
func packIQ4(dst []byte, L []uint8) {
	for j := 0; j < 16; j++ {
		dst[j] = L[j] | L[16+j]<<4
	}
}

// quantIQ4NLBlock is what llama-quantize runs for IQ4_NL without an
// importance matrix (quantize_iq4_nl, quantize_row_iq4_nl_impl with one
// block per super-block and seven tries each way).
func quantIQ4NLBlock(dst []byte, x []float32) {
	d := iq4Scale(x)
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var L [32]uint8
	for j, v := range x[:32] {
		L[j] = bestIndexIQ4NL(id * v)
	}
	packIQ4(dst[2:18], L[:])
}

// quantIQ4XSBlock is what llama-quantize runs for IQ4_XS without an
// importance matrix (quantize_iq4_xs: quantize_row_iq4_nl_impl on 256
// values in sub-blocks of 32): each sub-block's scale as IQ4_NL's, then d
// from the largest in magnitude (at −32) and each sub-block's scale as a
// 6-bit multiple of it, the indices recomputed with it.
func quantIQ4XSBlock(dst []byte, x []float32) {
	var scales [8]float32
	var maxScale, amaxScale float32
	for ib := range scales {
		scales[ib] = iq4Scale(x[32*ib : 32*ib+32])
		if ad := abs32(scales[ib]); ad > amaxScale {
			amaxScale, maxScale = ad, scales[ib]
		}
	}
	d := -maxScale / 32
	binary.LittleEndian.PutUint16(dst, F32ToF16(d))
	var id float32
	if d != 0 {
		id = 1 / d
	}
	var scalesH uint16
	clear(dst[4:8])
	var L [32]uint8
	for ib := range scales {
		l := max(-32, min(31, nearestInt(id*scales[ib])))
		dl := d * float32(l)
		var idl float32
		if dl != 0 {
			idl = 1 / dl
		}
		xb := x[32*ib : 32*ib+32]
		for j, v := range xb {
			L[j] = bestIndexIQ4NL(idl * v)
		}
		packIQ4(dst[8+16*ib:8+16*ib+16], L[:])
		l += 32
		dst[4+ib/2] |= byte(l&0xf) << (4 * (ib % 2))
		scalesH |= uint16(l>>4) << (2 * ib)
	}
	binary.LittleEndian.PutUint16(dst[2:], scalesH)
}

// makeQ3Quants is GGML's make_qx... for Q3_K, make_q3_quants with rmse on:
// symmetric quantization of x to L in [−nmax, nmax) (stored offset by
// nmax), the value of largest magnitude at −nmax, then up to five passes
// that move single values while the x²-weighted fit improves. It returns
// the scale.
func makeQ3Quants(x []float32, L []int8, nmax int) float32 {
	var amax, mx float32
	for _, v := range x {
		if ax := abs32(v); ax > amax {
			amax, mx = ax, v
		}
	}
	if amax < groupMaxEps {
		clear(L[:len(x)])
		return 0
	}
	iscale := -float32(nmax) / mx
	var sumlx, suml2 float32
	for i, v := range x {
		l := max(-nmax, min(nmax-1, nearestInt(iscale*v)))
		L[i] = int8(l)
		w := v * v
		sumlx += float32(float32(w*v) * float32(l))
		suml2 += float32(float32(w*float32(l)) * float32(l))
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			w := v * v
			li := float32(L[i])
			slx := sumlx - float32(float32(w*v)*li)
			if slx <= 0 {
				continue
			}
			sl2 := suml2 - float32(float32(w*li)*li)
			nl := max(-nmax, min(nmax-1, nearestInt(float32(v*sl2)/slx)))
			if nl == int(L[i]) {
				continue
			}
			fl := float32(nl)
			slx += float32(float32(w*v) * fl)
			sl2 += float32(float32(w*fl) * fl)
			if sl2 > 0 && float32(float32(slx*slx)*suml2) > float32(float32(sumlx*sumlx)*sl2) {
				L[i], sumlx, suml2 = int8(nl), slx, sl2
				changed++
			}
		}
		if changed == 0 {
			break
		}
	}
	for i := range L[:len(x)] {
		L[i] += int8(nmax)
	}
	return sumlx / suml2
}

// quantQ2KBlock is quantize_row_q2_K_ref for one block of 256 values:
// make_qkx2_quants on each sub-block of 16 (|x|-weighted absolute error),
// its scale and min in four bits each of d and dmin.
func quantQ2KBlock(dst []byte, x []float32) {
	var L [qkK]uint8
	var laux [16]uint8
	var weights, mins, scales [16]float32
	var maxScale, maxMin float32
	for j := 0; j < 16; j++ {
		xs := x[16*j : 16*j+16]
		for l, v := range xs {
			weights[l] = abs32(v)
		}
		scales[j], mins[j] = makeQKX2Quants(3, xs, weights[:], L[16*j:16*j+16], laux[:], -0.5, 0.1, 15, true)
		maxScale = max(maxScale, scales[j])
		maxMin = max(maxMin, mins[j])
	}
	sc := dst[0:16]
	clear(sc)
	var dh, dminh uint16 // f16 zeros
	if maxScale > 0 {
		iscale := 15 / maxScale
		for j := range sc {
			sc[j] = byte(nearestInt(iscale * scales[j]))
		}
		dh = F32ToF16(maxScale / 15)
	}
	if maxMin > 0 {
		iscale := 15 / maxMin
		for j := range sc {
			sc[j] |= byte(nearestInt(iscale*mins[j])) << 4
		}
		dminh = F32ToF16(maxMin / 15)
	}
	binary.LittleEndian.PutUint16(dst[80:], dh)
	binary.LittleEndian.PutUint16(dst[82:], dminh)
	for j := 0; j < 16; j++ {
		d := F16ToF32(dh) * float32(sc[j]&0xf)
		if d == 0 {
			continue
		}
		dm := F16ToF32(dminh) * float32(sc[j]>>4)
		for ii := 0; ii < 16; ii++ {
			L[16*j+ii] = uint8(max(0, min(3, nearestInt((x[16*j+ii]+dm)/d))))
		}
	}
	qs := dst[16:80]
	for j := 0; j < qkK; j += 128 {
		for l := 0; l < 32; l++ {
			qs[j/4+l] = L[j+l] | L[j+l+32]<<2 | L[j+l+64]<<4 | L[j+l+96]<<6
		}
	}
}

// quantQ3KBlock is quantize_row_q3_K_ref for one block of 256 values.
func quantQ3KBlock(dst []byte, x []float32) {
	var L [qkK]int8
	var scales [16]float32
	var maxScale, amax float32
	for j := 0; j < 16; j++ {
		scales[j] = makeQ3Quants(x[16*j:16*j+16], L[16*j:16*j+16], 4)
		if sa := abs32(scales[j]); sa > amax {
			amax, maxScale = sa, scales[j]
		}
	}
	hmask, qs, sc := dst[0:32], dst[32:96], dst[96:108]
	clear(sc)
	var dh uint16
	if maxScale != 0 {
		iscale := -32 / maxScale
		for j := 0; j < 16; j++ {
			l := int8(max(-32, min(31, nearestInt(iscale*scales[j])))) + 32
			if j < 8 {
				sc[j] = byte(l & 0xf)
			} else {
				sc[j-8] |= byte(l&0xf) << 4
			}
			sc[j%4+8] |= byte(l>>4) << (2 * (j / 4))
		}
		dh = F32ToF16(1 / iscale)
	} else {
		dh = F32ToF16(0)
	}
	binary.LittleEndian.PutUint16(dst[108:], dh)
	for j := 0; j < 16; j++ {
		d := F16ToF32(dh) * float32(q3KScale(dst, j))
		if d == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			L[16*j+ii] = int8(max(-4, min(3, nearestInt(x[16*j+ii]/d))) + 4)
		}
	}
	clear(hmask)
	for j := 0; j < qkK; j++ {
		if L[j] > 3 {
			hmask[j%32] |= 1 << (j / 32)
			L[j] -= 4
		}
	}
	for j := 0; j < qkK; j += 128 {
		for l := 0; l < 32; l++ {
			qs[j/4+l] = byte(L[j+l]) | byte(L[j+l+32])<<2 | byte(L[j+l+64])<<4 | byte(L[j+l+96])<<6
		}
	}
}

// q4KScratch holds the per-block work arrays of the Q4_K and Q5_K quantizers.
type q4KScratch struct {
	l       [qkK]uint8
	laux    [32]uint8
	weights [32]float32
	mins    [8]float32
	scales  [8]float32
}

// madTerm is one value's error in make_qkx2_quants: |diff| or diff².
func madTerm(diff float32, useMad bool) float32 {
	if useMad {
		return abs32(diff)
	}
	return diff * diff
}

// makeQKX2Quants is GGML's make_qkx2_quants: fit x ≈ scale*L - min with L in
// [0, nmax], searching over a range of candidate scales for the least weighted
// error (squared, or absolute with useMad). It returns the scale and the
// (positive) min.
func makeQKX2Quants(nmax int, x, weights []float32, L, laux []uint8, rmin, rdelta float32, nstep int, useMad bool) (scale, theMin float32) {
	n := len(x)
	mn, mx := x[0], x[0]
	sumW := weights[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		if x[i] < mn {
			mn = x[i]
		}
		if x[i] > mx {
			mx = x[i]
		}
		w := weights[i]
		sumW += w
		sumX += float32(w * x[i])
	}
	if mn > 0 {
		mn = 0
	}
	if mx == mn {
		for i := range L[:n] {
			L[i] = 0
		}
		return 0, -mn
	}
	fnmax := float32(nmax)
	iscale := fnmax / (mx - mn)
	scale = 1 / iscale
	var bestMad float32
	for i := 0; i < n; i++ {
		l := nearestInt(iscale * (x[i] - mn))
		L[i] = uint8(max(0, min(nmax, l)))
		diff := float32(scale*float32(L[i])) + mn - x[i]
		diff = madTerm(diff, useMad)
		bestMad += float32(weights[i] * diff)
	}
	if nstep < 1 {
		return scale, -mn
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + fnmax) / (mx - mn)
		var sumL, sumL2, sumXL float32
		for i := 0; i < n; i++ {
			l := nearestInt(iscale * (x[i] - mn))
			l = max(0, min(nmax, l))
			laux[i] = uint8(l)
			w := weights[i]
			fl := float32(l)
			sumL += float32(w * fl)
			sumL2 += float32(float32(w*fl) * fl)
			sumXL += float32(float32(w*fl) * x[i])
		}
		D := float32(sumW*sumL2) - float32(sumL*sumL)
		if D > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / D
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / D
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var mad float32
			for i := 0; i < n; i++ {
				diff := float32(thisScale*float32(laux[i])) + thisMin - x[i]
				diff = madTerm(diff, useMad)
				mad += float32(weights[i] * diff)
			}
			if mad < bestMad {
				copy(L[:n], laux[:n])
				bestMad = mad
				scale = thisScale
				mn = thisMin
			}
		}
	}
	return scale, -mn
}

// quantQ4KBlock is quantize_row_q4_K_ref for one block of 256 values.
func quantQ4KBlock(dst []byte, x []float32, s *q4KScratch) {
	quantKMinBlock(dst, x, s, 15, -1, 20)
	qs := dst[16:144]
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			qs[32*c+l] = s.l[64*c+l] | s.l[64*c+32+l]<<4
		}
	}
}

// quantQ5KBlock is quantize_row_q5_K_ref for one block of 256 values: Q4_K's
// search with 31 levels and its own search range, the fifth bits in qh.
func quantQ5KBlock(dst []byte, x []float32, s *q4KScratch) {
	quantKMinBlock(dst, x, s, 31, -0.5, 15)
	qh, qs := dst[16:48], dst[48:176]
	clear(qh)
	for c := 0; c < 4; c++ {
		for l := 0; l < 32; l++ {
			l1, l2 := s.l[64*c+l], s.l[64*c+32+l]
			qh[l] |= (l1>>4)<<(2*c) | (l2>>4)<<(2*c+1)
			qs[32*c+l] = l1&0xf | (l2&0xf)<<4
		}
	}
}

// quantKMinBlock is the part quantize_row_q4_K_ref and quantize_row_q5_K_ref
// share: it fits each sub-block of 32 as scale·L − min with L in [0, nmax]
// (make_qkx2_quants over nstep+1 candidate scales from rmin), writes d, dmin
// and the 6-bit scales and mins to dst[0:16], and leaves the final L, each
// recomputed from the rounded scales, in s.l.
func quantKMinBlock(dst []byte, x []float32, s *q4KScratch, nmax int, rmin float32, nstep int) {
	var maxScale, maxMin float32
	for j := 0; j < 8; j++ {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		avX := float32(math.Sqrt(float64(sumX2 / 32)))
		for l, v := range xs {
			s.weights[l] = avX + abs32(v)
		}
		s.scales[j], s.mins[j] = makeQKX2Quants(nmax, xs, s.weights[:], s.l[32*j:32*j+32], s.laux[:], rmin, 0.1, nstep, false)
		if s.scales[j] > maxScale {
			maxScale = s.scales[j]
		}
		if s.mins[j] > maxMin {
			maxMin = s.mins[j]
		}
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	scales := dst[4:16]
	clear(scales)
	for j := 0; j < 8; j++ {
		ls := min(63, uint8(nearestInt(invScale*s.scales[j])))
		lm := min(63, uint8(nearestInt(invMin*s.mins[j])))
		if j < 4 {
			scales[j] = ls
			scales[j+4] = lm
		} else {
			scales[j+4] = ls&0xf | (lm&0xf)<<4
			scales[j-4] |= (ls >> 4) << 6
			scales[j] |= (lm >> 4) << 6
		}
	}
	dh := F32ToF16(maxScale / 63)
	dminh := F32ToF16(maxMin / 63)
	binary.LittleEndian.PutUint16(dst[0:], dh)
	binary.LittleEndian.PutUint16(dst[2:], dminh)
	df, dminf := F16ToF32(dh), F16ToF32(dminh)
	for j := 0; j < 8; j++ {
		sc, m := scaleMinK4(j, scales)
		d := df * float32(sc)
		if d == 0 {
			continue
		}
		dm := dminf * float32(m)
		for ii := 0; ii < 32; ii++ {
			l := nearestInt((x[32*j+ii] + dm) / d)
			s.l[32*j+ii] = uint8(max(0, min(nmax, l)))
		}
	}
}

// makeQXQuants is GGML's make_qx_quants with rmse_type 1 and no importance
// weights: symmetric quantization of x to L in [0, 2*nmax) (stored offset by
// nmax), refining the scale over 18 candidates for the least x²-weighted error.
func makeQXQuants(nmax int, x []float32, L []int8) float32 {
	n := len(x)
	var mx, amax float32
	for _, v := range x {
		if ax := abs32(v); ax > amax {
			amax = ax
			mx = v
		}
	}
	if amax < groupMaxEps {
		for i := range L[:n] {
			L[i] = 0
		}
		return 0
	}
	fnmax := float32(nmax)
	iscale := -fnmax / mx
	var sumLX, sumL2 float32
	for i, v := range x {
		l := nearestInt(iscale * v)
		l = max(-nmax, min(nmax-1, l))
		L[i] = int8(l + nmax)
		w := v * v
		fl := float32(l)
		sumLX += float32(float32(w*v) * fl)
		sumL2 += float32(float32(w*fl) * fl)
	}
	var scale float32
	if sumL2 != 0 {
		scale = sumLX / sumL2
	}
	best := scale * sumLX
	for is := -9; is <= 9; is++ {
		if is == 0 {
			continue
		}
		iscale = -(fnmax + float32(0.1*float32(is))) / mx
		sumLX, sumL2 = 0, 0
		for _, v := range x {
			l := nearestInt(iscale * v)
			l = max(-nmax, min(nmax-1, l))
			w := v * v
			fl := float32(l)
			sumLX += float32(float32(w*v) * fl)
			sumL2 += float32(float32(w*fl) * fl)
		}
		if sumL2 > 0 && float32(sumLX*sumLX) > float32(best*sumL2) {
			for i, v := range x {
				l := nearestInt(iscale * v)
				L[i] = int8(nmax + max(-nmax, min(nmax-1, l)))
			}
			scale = sumLX / sumL2
			best = scale * sumLX
		}
	}
	return scale
}

// quantQ6KBlock is quantize_row_q6_K_ref for one block of 256 values.
func quantQ6KBlock(dst []byte, x []float32) {
	var L [qkK]int8
	var scales [16]float32
	var maxScale, maxAbsScale float32
	for ib := 0; ib < 16; ib++ {
		scale := makeQXQuants(32, x[16*ib:16*ib+16], L[16*ib:16*ib+16])
		scales[ib] = scale
		if as := abs32(scale); as > maxAbsScale {
			maxAbsScale = as
			maxScale = scale
		}
	}
	clear(dst[:q6KSize])
	if maxAbsScale < groupMaxEps {
		return
	}
	iscale := -128 / maxScale
	dh := F32ToF16(1 / iscale)
	binary.LittleEndian.PutUint16(dst[208:], dh)
	sc := dst[192:208]
	for ib := 0; ib < 16; ib++ {
		sc[ib] = byte(int8(min(127, nearestInt(iscale*scales[ib]))))
	}
	df := F16ToF32(dh)
	for j := 0; j < 16; j++ {
		d := df * float32(int8(sc[j]))
		if d == 0 {
			continue
		}
		for ii := 0; ii < 16; ii++ {
			l := nearestInt(x[16*j+ii] / d)
			l = max(-32, min(31, l))
			L[16*j+ii] = int8(l + 32)
		}
	}
	packQ6K(dst, &L)
}

// packQ6K writes Q6_K's low and high bits (ql, qh) of the 256 values L
// (0-63, value+32) into the block dst.
func packQ6K(dst []byte, L *[qkK]int8) {
	ql := dst[0:128]
	qh := dst[128:192]
	for h := 0; h < 2; h++ {
		Lh := L[128*h : 128*h+128]
		qlh := ql[64*h : 64*h+64]
		qhh := qh[32*h : 32*h+32]
		for l := 0; l < 32; l++ {
			q1 := uint8(Lh[l]) & 0xf
			q2 := uint8(Lh[l+32]) & 0xf
			q3 := uint8(Lh[l+64]) & 0xf
			q4 := uint8(Lh[l+96]) & 0xf
			qlh[l] = q1 | q3<<4
			qlh[l+32] = q2 | q4<<4
			qhh[l] = uint8(Lh[l])>>4 | (uint8(Lh[l+32])>>4)<<2 | (uint8(Lh[l+64])>>4)<<4 | (uint8(Lh[l+96])>>4)<<6
		}
	}
}
