package tensor

import (
	"encoding/binary"
	"math"
)

// Widening IQ blocks to Q8_K16 eight values at a time, for streamed
// matrices (stream.go), which widen every row again for every product:
// iqBlock.decode's value-by-value loops are its reference.
//
// Each grid point becomes its Q8_K16 bytes 64+v in a word (q8Grid), and a
// sign pattern a mask of 0xff bytes (signMasks): a negative value's byte
// 64−v is 0x80−(64+v), which no byte borrows from another (64+v ≤ 0x80), so
// one word's eight values take a load, a subtraction and a select.

// q8Grid2 writes an IQ2 grid's table into g: per point, its eight
// magnitudes as Q8_K16 bytes.
func q8Grid2(g []uint64, codes []uint16) {
	for i, c := range codes {
		for j := range 8 {
			g[i] |= uint64(64+iq2Values[c>>(2*j)&3]) << (8 * j)
		}
	}
}

// q8Grid3 writes an IQ3 grid's table into g: per point, its four
// magnitudes (from iq3XXSValues, or odd: IQ3_S's 2c+1) as Q8_K16 bytes.
func q8Grid3(g []uint32, codes []uint16, odd bool) {
	for i, c := range codes {
		for j := range 4 {
			k := c >> (3 * j) & 7
			v := iq3XXSValues[k]
			if odd {
				v = int8(2*k + 1)
			}
			g[i] |= uint32(64+int(v)) << (8 * j)
		}
	}
}

// The tables (read-only), arrays so that an index masked to their size
// needs no bounds check.
var (
	q8GridIQ2XXS = func() (g [256]uint64) { q8Grid2(g[:], iq2XXSCodes[:]); return }()
	q8GridIQ2XS  = func() (g [512]uint64) { q8Grid2(g[:], iq2XSCodes[:]); return }()
	q8GridIQ2S   = func() (g [1024]uint64) { q8Grid2(g[:], iq2SCodes[:]); return }()
	q8GridIQ3XXS = func() (g [256]uint32) { q8Grid3(g[:], iq3XXSCodes[:], false); return }()
	q8GridIQ3S   = func() (g [512]uint32) { q8Grid3(g[:], iq3SCodes[:], true); return }()
	// q8GridIQ1 holds IQ1's points as bytes 64+8(g−1), before the shift.
	q8GridIQ1 = func() (g [2048]uint64) {
		for i, c := range iq1SCodes {
			for j := range 8 {
				g[i] |= uint64(64+8*(int(c>>(2*j)&3)-1)) << (8 * j)
			}
		}
		return g
	}()
	// signMasks[s] has byte j 0xff where bit j of s is set.
	signMasks = func() (m [256]uint64) {
		for s := range m {
			for j := range 8 {
				if s>>j&1 != 0 {
					m[s] |= 0xff << (8 * j)
				}
			}
		}
		return m
	}()
	// iqSignMasks[s] is signMasks of iqSigns(s) for seven stored bits s.
	iqSignMasks = func() (m [128]uint64) {
		for s := range m {
			m[s] = signMasks[iqSigns(uint32(s))]
		}
		return m
	}()
)

const bytes80 = 0x8080808080808080

// signed returns the Q8_K16 bytes of magnitudes p (64+v each) with the
// signs of mask (0xff bytes negative).
func signed(p, mask uint64) uint64 { return p ^ (p^(bytes80-p))&mask }

// widenIQBlockQ8K16 writes block blk of IQ type t as a Q8_K16 block dst,
// the bytes iqBlock.decode then putQ8K16 write.
func widenIQBlockQ8K16(t DType, dst, blk []byte) {
	dst = dst[:q8K16Size]
	q := dst[:qkK]
	sc := dst[256:272]
	var d float32
	switch t {
	case IQ2_XXS:
		d = f16At(blk, 0) / 8
		for ib := range 8 {
			sub := blk[2+8*ib : 2+8*ib+8]
			aux := binary.LittleEndian.Uint32(sub[4:])
			s := byte(2*(aux>>28) + 1)
			sc[2*ib], sc[2*ib+1] = s, s
			for l := range 4 {
				v := signed(q8GridIQ2XXS[sub[l]], iqSignMasks[aux>>(7*l)&127])
				binary.LittleEndian.PutUint64(q[32*ib+8*l:], v)
			}
		}
	case IQ2_XS:
		d = f16At(blk, 0) / 8
		for ib := range 8 {
			s := blk[66+ib]
			sc[2*ib], sc[2*ib+1] = 2*(s&0xf)+1, 2*(s>>4)+1
			for l := range 4 {
				c := binary.LittleEndian.Uint16(blk[2+8*ib+2*l:])
				v := signed(q8GridIQ2XS[c&511], iqSignMasks[c>>9])
				binary.LittleEndian.PutUint64(q[32*ib+8*l:], v)
			}
		}
	case IQ2_S:
		d = f16At(blk, 0) / 8
		qs, signs, qh, scales := blk[2:34], blk[34:66], blk[66:74], blk[74:82]
		for ib := range 8 {
			s := scales[ib]
			sc[2*ib], sc[2*ib+1] = 2*(s&0xf)+1, 2*(s>>4)+1
			for l := range 4 {
				idx := uint16(qs[4*ib+l]) | uint16(qh[ib])<<(8-2*l)&0x300
				v := signed(q8GridIQ2S[idx&1023], signMasks[signs[4*ib+l]])
				binary.LittleEndian.PutUint64(q[32*ib+8*l:], v)
			}
		}
	case IQ3_XXS:
		d = f16At(blk, 0) / 4
		qs := blk[2:66]
		for ib := range 8 {
			aux := binary.LittleEndian.Uint32(blk[66+4*ib:])
			s := byte(2*(aux>>28) + 1)
			sc[2*ib], sc[2*ib+1] = s, s
			for l := range 4 {
				p := uint64(q8GridIQ3XXS[qs[8*ib+2*l]]) | uint64(q8GridIQ3XXS[qs[8*ib+2*l+1]])<<32
				binary.LittleEndian.PutUint64(q[32*ib+8*l:], signed(p, iqSignMasks[aux>>(7*l)&127]))
			}
		}
	case IQ3_S:
		d = f16At(blk, 0)
		qs, qh, signs, scales := blk[2:66], blk[66:74], blk[74:106], blk[106:110]
		for ib := range 8 {
			s := 2*(scales[ib/2]>>(4*(ib%2))&0xf) + 1
			sc[2*ib], sc[2*ib+1] = s, s
			h := uint16(qh[ib])
			for l := range 4 {
				i0, i1 := uint16(qs[8*ib+2*l])|(h>>(2*l)&1)<<8, uint16(qs[8*ib+2*l+1])|(h>>(2*l+1)&1)<<8
				p := uint64(q8GridIQ3S[i0&511]) | uint64(q8GridIQ3S[i1&511])<<32
				binary.LittleEndian.PutUint64(q[32*ib+8*l:], signed(p, signMasks[signs[4*ib+l]]))
			}
		}
	case IQ1_S:
		d = f16At(blk, 0) / 8
		qs := blk[2:34]
		for ib := range 8 {
			qh := binary.LittleEndian.Uint16(blk[34+2*ib:])
			s := byte(2*(qh>>12&7) + 1)
			sc[2*ib], sc[2*ib+1] = s, s
			delta := uint64(0x0101010101010101)
			if qh&0x8000 != 0 {
				delta = -delta
			}
			for l := range 4 {
				idx := uint16(qs[4*ib+l]) | (qh>>(3*l)&7)<<8
				binary.LittleEndian.PutUint64(q[32*ib+8*l:], q8GridIQ1[idx&2047]+delta)
			}
		}
	case IQ1_M:
		qs, qh := blk[0:32], blk[32:48]
		var w [4]uint16
		for i := range w {
			w[i] = binary.LittleEndian.Uint16(blk[48+2*i:])
		}
		d = F16ToF32(w[0]>>12|w[1]>>8&0x00f0|w[2]>>4&0x0f00|w[3]&0xf000) / 8
		for ib := range 8 {
			s := w[ib/2] >> (6 * (ib % 2))
			sc[2*ib], sc[2*ib+1] = byte(2*(s&7)+1), byte(2*(s>>3&7)+1)
			for l := range 4 {
				h := uint16(qh[2*ib+l/2]) >> (4 * (l % 2))
				idx := uint16(qs[4*ib+l]) | (h&7)<<8
				delta := uint64(0x0101010101010101)
				if h&8 != 0 {
					delta = -delta
				}
				binary.LittleEndian.PutUint64(q[32*ib+8*l:], q8GridIQ1[idx&2047]+delta)
			}
		}
	default:
		panic("tensor: widenIQBlockQ8K16 of " + t.String())
	}
	binary.LittleEndian.PutUint32(dst[272:], math.Float32bits(d))
}
