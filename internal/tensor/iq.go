package tensor

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// The IQ1, IQ2 and IQ3 types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S) are the importance-matrix quants of llama.cpp: each group
// of 4 or 8 weights is an index into a grid of patterns, with one sign bit
// per weight (IQ2, IQ3) or a shift of ±1/8 per group (IQ1), and a small odd
// scale per 16 or 32 weights. They are read, never written (no Quantize:
// making them needs an importance matrix and a search of the grid), and
// computed through a wider type (Widen): every value is d·sc·q with small
// integers sc and q, which the IQ1 and IQ3 types' fit Q6_K's scales and
// values exactly and the IQ2 types' fit Q8_K16's.

// q8K16Size is the bytes of a Q8_K16 block (the kernels' offsets: values
// at 0, scales at 256, d at 272).
const q8K16Size = 276

var (
	// iq2Values are the IQ2 grids' three magnitudes.
	iq2Values = [3]int8{8, 25, 43}
	// iq3XXSValues are IQ3_XXS's grid's eight magnitudes.
	iq3XXSValues = [8]int8{4, 12, 20, 28, 36, 44, 52, 62}
)

// iqSigns is ggml's ksigns_iq2xs: seven stored sign bits and an eighth that
// makes the count of minus signs even.
func iqSigns(s uint32) uint8 {
	s &= 127
	return uint8(s) | uint8(bits.OnesCount32(s)&1)<<7
}

// iqBlock holds one block of 256 values of an IQ1, IQ2 or IQ3 type as integers:
// value i is d·sc[i/16]·q[i], exactly (every product fits a float32's
// mantissa).
type iqBlock struct {
	d  float32
	sc [16]int8
	q  [qkK]int8
}

// isIQGrid reports whether t is one of the grid types iqBlock decodes.
func isIQGrid(t DType) bool {
	switch t {
	case IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S:
		return true
	}
	return false
}

// put2Bit8 sets q[0:8] to the eight magnitudes of a grid code (2 bits each,
// into iq2Values) with the signs of s's bits.
func put2Bit8(q []int8, code uint16, s uint8) {
	for j := 0; j < 8; j++ {
		v := iq2Values[code>>(2*j)&3]
		if s>>j&1 != 0 {
			v = -v
		}
		q[j] = v
	}
}

// put3Bit4 sets q[0:4] to the four magnitudes of a 3-bit grid code, odd
// (IQ3_S: 2c+1) or from iq3XXSValues, with the signs of s's low 4 bits.
func put3Bit4(q []int8, code uint16, s uint8, odd bool) {
	for j := 0; j < 4; j++ {
		c := code >> (3 * j) & 7
		v := iq3XXSValues[c]
		if odd {
			v = int8(2*c + 1)
		}
		if s>>j&1 != 0 {
			v = -v
		}
		q[j] = v
	}
}

// put1Bit8 sets q[0:8] to eight IQ1 values of a grid code (2 bits each,
// the value code−1) shifted by ±1/8 (neg: −), times 8: 8g±1.
func put1Bit8(q []int8, code uint16, neg bool) {
	delta := int8(1)
	if neg {
		delta = -1
	}
	for j := 0; j < 8; j++ {
		q[j] = 8*(int8(code>>(2*j)&3)-1) + delta
	}
}

// decode fills b from one block blk of type t (or of Q8_K16), as ggml's
// dequantize_row_iq* read it: the per-32 (IQ1_S, IQ2_XXS, IQ3_XXS, IQ3_S)
// or per-16 (IQ1_M, IQ2_XS, IQ2_S) 3- or 4-bit scale s is the odd 2s+1,
// and the block's constant factor (¼ of IQ2's 0.25·(0.5+s), ½ of
// IQ3_XXS's, IQ1's 1/8 of the shift) goes into d.
func (b *iqBlock) decode(t DType, blk []byte) {
	switch t {
	case IQ1_M:
		b.decodeIQ1M(blk)
		return
	case Q8_K16:
		b.readQ8K16(blk)
		return
	}
	d := f16At(blk, 0)
	switch t {
	case IQ1_S:
		b.d = d / 8
		qs := blk[2:34]
		for ib := 0; ib < 8; ib++ {
			qh := binary.LittleEndian.Uint16(blk[34+2*ib:])
			s := int8(2*(qh>>12&7) + 1)
			b.sc[2*ib], b.sc[2*ib+1] = s, s
			for l := 0; l < 4; l++ {
				idx := uint16(qs[4*ib+l]) | (qh>>(3*l)&7)<<8
				put1Bit8(b.q[32*ib+8*l:], iq1SCodes[idx], qh&0x8000 != 0)
			}
		}
	case IQ2_XXS:
		b.d = d / 8
		for ib := 0; ib < 8; ib++ {
			idx := blk[2+8*ib : 2+8*ib+4]
			aux := binary.LittleEndian.Uint32(blk[2+8*ib+4:])
			s := int8(2*(aux>>28) + 1)
			b.sc[2*ib], b.sc[2*ib+1] = s, s
			for l := 0; l < 4; l++ {
				put2Bit8(b.q[32*ib+8*l:], iq2XXSCodes[idx[l]], iqSigns(aux>>(7*l)))
			}
		}
	case IQ2_XS:
		b.d = d / 8
		scales := blk[66:74]
		for ib := 0; ib < 8; ib++ {
			b.sc[2*ib] = int8(2*(scales[ib]&0xf) + 1)
			b.sc[2*ib+1] = int8(2*(scales[ib]>>4) + 1)
			for l := 0; l < 4; l++ {
				v := binary.LittleEndian.Uint16(blk[2+8*ib+2*l:])
				put2Bit8(b.q[32*ib+8*l:], iq2XSCodes[v&511], iqSigns(uint32(v>>9)))
			}
		}
	case IQ2_S:
		b.d = d / 8
		qs, signs, qh, scales := blk[2:34], blk[34:66], blk[66:74], blk[74:82]
		for ib := 0; ib < 8; ib++ {
			b.sc[2*ib] = int8(2*(scales[ib]&0xf) + 1)
			b.sc[2*ib+1] = int8(2*(scales[ib]>>4) + 1)
			for l := 0; l < 4; l++ {
				idx := uint16(qs[4*ib+l]) | uint16(qh[ib])<<(8-2*l)&0x300
				put2Bit8(b.q[32*ib+8*l:], iq2SCodes[idx], signs[4*ib+l])
			}
		}
	case IQ3_XXS:
		b.d = d / 4
		qs := blk[2:66]
		for ib := 0; ib < 8; ib++ {
			aux := binary.LittleEndian.Uint32(blk[66+4*ib:])
			s := int8(2*(aux>>28) + 1)
			b.sc[2*ib], b.sc[2*ib+1] = s, s
			for l := 0; l < 4; l++ {
				sg := iqSigns(aux >> (7 * l))
				q := b.q[32*ib+8*l:]
				put3Bit4(q, iq3XXSCodes[qs[8*ib+2*l]], sg, false)
				put3Bit4(q[4:], iq3XXSCodes[qs[8*ib+2*l+1]], sg>>4, false)
			}
		}
	case IQ3_S:
		b.d = d
		qs, qh, signs, scales := blk[2:66], blk[66:74], blk[74:106], blk[106:110]
		for ib := 0; ib < 8; ib++ {
			s := int8(2*(scales[ib/2]>>(4*(ib%2))&0xf) + 1)
			b.sc[2*ib], b.sc[2*ib+1] = s, s
			for l := 0; l < 4; l++ {
				q := b.q[32*ib+8*l:]
				for k := 0; k < 2; k++ {
					i := 2*l + k
					idx := uint16(qs[8*ib+i]) | uint16(qh[ib]>>i&1)<<8
					put3Bit4(q[4*k:], iq3SCodes[idx], signs[4*ib+l]>>(4*k), true)
				}
			}
		}
	}
}

// decodeIQ1M is decode for IQ1_M, whose f16 d is spread over the top
// nibbles of its four scale words.
func (b *iqBlock) decodeIQ1M(blk []byte) {
	qs, qh := blk[0:32], blk[32:48]
	var sc [4]uint16
	for i := range sc {
		sc[i] = binary.LittleEndian.Uint16(blk[48+2*i:])
	}
	h := sc[0]>>12 | sc[1]>>8&0x00f0 | sc[2]>>4&0x0f00 | sc[3]&0xf000
	b.d = F16ToF32(h) / 8
	for ib := 0; ib < 8; ib++ {
		w := sc[ib/2] >> (6 * (ib % 2))
		b.sc[2*ib] = int8(2*(w&7) + 1)
		b.sc[2*ib+1] = int8(2*(w>>3&7) + 1)
		h0, h1 := uint16(qh[2*ib]), uint16(qh[2*ib+1])
		idx := [4]uint16{
			uint16(qs[4*ib]) | h0<<8&0x700, uint16(qs[4*ib+1]) | h0<<4&0x700,
			uint16(qs[4*ib+2]) | h1<<8&0x700, uint16(qs[4*ib+3]) | h1<<4&0x700,
		}
		neg := [4]bool{h0&0x08 != 0, h0&0x80 != 0, h1&0x08 != 0, h1&0x80 != 0}
		for l := 0; l < 4; l++ {
			put1Bit8(b.q[32*ib+8*l:], iq1SCodes[idx[l]], neg[l])
		}
	}
}

// dequantIQ dequantizes len(dst) values of an IQ1, IQ2 or IQ3 type or of
// Q8_K16.
func dequantIQ(t DType, dst []float32, src []byte) {
	bs := t.TypeSize()
	var b iqBlock
	for k := 0; k < len(dst)/qkK; k++ {
		b.decode(t, src[k*bs:(k+1)*bs])
		b.dequant(dst[k*qkK : (k+1)*qkK])
	}
}

func (b *iqBlock) dequant(y []float32) {
	for i := range y[:qkK] {
		y[i] = b.d * float32(b.sc[i/16]) * float32(b.q[i])
	}
}

// sum is the block's integer product with 256 activations: Σ_k sc_k·Σ q·y
// over the 16 sub-blocks, the bsum of ggml's vec_dot_iq*_q8_K.
func (b *iqBlock) sum(y []int8) int32 {
	var sumi int32
	for k := 0; k < 16; k++ {
		var s int32
		for i := 16 * k; i < 16*k+16; i++ {
			s += int32(b.q[i]) * int32(y[i])
		}
		sumi += int32(b.sc[k]) * s
	}
	return sumi
}

// dotIQRow is ggml_vec_dot_iq*_q8_K for the IQ1, IQ2 and IQ3 types, and the
// product of Q8_K16 with the same integer sums and float steps: per block,
// d·dy·bsum with ggml's constant factor (0.125, 0.25) folded into d, which
// scales by a power of two and so changes no bits. IQ1's
// d·dy·(sumi + sumi1/8), sumi1 the shifts' sums, is (d/8)·dy·bsum with
// bsum = 8·sumi + sumi1: the same while sumi + sumi1/8 is exact in a
// float32 (|sumi| < 2^20).
func dotIQRow(t DType) func(row []byte, a *actBuf, tok int) float32 {
	bs := t.TypeSize()
	return func(row []byte, a *actBuf, tok int) float32 {
		c := a.cols
		nb := c / qkK
		q := a.q[tok*c : (tok+1)*c]
		dy := a.d[tok*nb : (tok+1)*nb]
		var b iqBlock
		var sum float32
		for k := 0; k < nb; k++ {
			b.decode(t, row[k*bs:(k+1)*bs])
			sum += b.d * dy[k] * float32(b.sum(q[k*qkK:(k+1)*qkK]))
		}
		return sum
	}
}

// Q8_K16 is kvserve's own widened type for the IQ2 types (and IQ3_XXS
// matrices Q6_K cannot hold): per block of 256, the values q+64 as
// unsigned bytes (|q| ≤ 64, so vpmaddubsw cannot saturate), sixteen int8
// scales and an f32 d; value i is d·sc[i/16]·q[i]. It never appears in a
// file.

// putQ8K16 writes b as a Q8_K16 block.
func (b *iqBlock) putQ8K16(dst []byte) {
	for i, q := range b.q {
		dst[i] = byte(int(q) + 64)
	}
	for k, s := range b.sc {
		dst[256+k] = byte(s)
	}
	binary.LittleEndian.PutUint32(dst[272:], math.Float32bits(b.d))
}

// readQ8K16 reads a Q8_K16 block into b.
func (b *iqBlock) readQ8K16(blk []byte) {
	for i := range b.q {
		b.q[i] = int8(int(blk[i]) - 64)
	}
	for k := range b.sc {
		b.sc[k] = int8(blk[256+k])
	}
	b.d = math.Float32frombits(binary.LittleEndian.Uint32(blk[272:]))
}

// putQ6K writes b as a Q6_K block if it fits one exactly: values in
// [−32, 31] and d an f16 (after halving the values, which IQ3_XXS's even
// magnitudes allow, when they do not fit as they are).
func (b *iqBlock) putQ6K(dst []byte) bool {
	d, shift := b.d, 0
	for _, q := range b.q {
		if q < -32 || q > 31 {
			d, shift = 2*b.d, 1
			break
		}
	}
	h := F32ToF16(d)
	if F16ToF32(h) != d {
		return false
	}
	var L [qkK]int8
	for i, q := range b.q {
		if shift == 1 && q&1 != 0 || q>>shift < -32 || q>>shift > 31 {
			return false
		}
		L[i] = q>>shift + 32
	}
	for k, s := range b.sc {
		dst[192+k] = byte(s)
	}
	binary.LittleEndian.PutUint16(dst[208:], h)
	packQ6K(dst, &L)
	return true
}

// widenIQ converts a matrix of an IQ type below 4 bits to Q6_K when every
// block fits one (IQ3_S always; IQ3_XXS unless a block's d/2 is not an f16,
// IQ1_S and IQ1_M unless d/8 is not: rare, tiny scales), else to Q8_K16.
func widenIQ(m Matrix) Matrix {
	bs := m.Type.TypeSize()
	nb := m.Rows * m.Cols / qkK
	var b iqBlock
	if wt, _ := WidenedType(m.Type); wt == Q6_K {
		out := Matrix{Type: Q6_K, Rows: m.Rows, Cols: m.Cols, Data: make([]byte, nb*q6KSize)}
		ok := true
		for k := 0; k < nb && ok; k++ {
			b.decode(m.Type, m.Data[k*bs:(k+1)*bs])
			ok = b.putQ6K(out.Data[k*q6KSize : (k+1)*q6KSize])
		}
		if ok {
			return out
		}
	}
	out := Matrix{Type: Q8_K16, Rows: m.Rows, Cols: m.Cols, Data: make([]byte, nb*q8K16Size)}
	for k := 0; k < nb; k++ {
		b.decode(m.Type, m.Data[k*bs:(k+1)*bs])
		b.putQ8K16(out.Data[k*q8K16Size : (k+1)*q8K16Size])
	}
	return out
}
