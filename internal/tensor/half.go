package tensor

import "math"

// Half-precision conversions.
//
// F16 is IEEE 754 binary16; BF16 is the top half of an IEEE binary32. Both
// conversions from float32 round to nearest, ties to even, as the x86 F16C
// instruction vcvtps2ph (with rounding mode 0) and ggml's reference code do,
// so that activations rounded here equal the ones llama.cpp computes.

// F16ToF32 converts an IEEE binary16 value to float32. The conversion is
// exact. A NaN keeps its sign and payload and comes out quiet.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0x1f:
		if mant != 0 {
			return math.Float32frombits(sign | 0x7fc00000 | mant<<13)
		}
		return math.Float32frombits(sign | 0x7f800000)
	case 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: normalise the significand into float32's normal range.
		e := uint32(127 - 15 + 1)
		for mant&0x400 == 0 {
			mant <<= 1
			e--
		}
		return math.Float32frombits(sign | e<<23 | (mant&0x3ff)<<13)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// F32ToF16 converts a float32 to IEEE binary16, rounding to nearest with ties
// to even. Values too large for binary16 become infinities; a NaN stays a
// (quiet) NaN with the top bits of its payload, as F16C does.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	if exp == 0xff {
		if mant != 0 {
			return sign | 0x7e00 | uint16(mant>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased binary16 exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Result is subnormal (or zero): shift the 24-bit significand so
		// that one unit is 2^-24 and round.
		if exp == 0 {
			return sign // float32 subnormals are far below binary16's range
		}
		m := mant | 0x800000
		shift := uint32(14 - e)
		if shift > 24 {
			return sign
		}
		r := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to 0x7c00 (infinity): correct
	}
	return sign | uint16(r)
}

// BF16ToF32 converts a bfloat16 value to float32 (exact).
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 converts a float32 to bfloat16 with ggml's semantics: round to
// nearest, ties to even; a NaN keeps its top bits and is forced quiet.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// F32ToF16Slice converts src to binary16 into dst, which must be at least as
// long as src.
func F32ToF16Slice(dst []uint16, src []float32) {
	f32ToF16Slice(dst[:len(src)], src)
}

// F16ToF32Slice converts binary16 values in src to float32 into dst, which
// must be at least as long as src.
func F16ToF32Slice(dst []float32, src []uint16) {
	f16ToF32Slice(dst[:len(src)], src)
}

// RoundF16 rounds every element of x to the nearest binary16 value (ties to
// even), in place: F16ToF32(F32ToF16(v)) for each v, vectorized. Attention
// uses it where llama.cpp converts an f32 operand to f16.
func RoundF16(x []float32) { roundF16(x) }

// F32ToBF16Slice converts src to bfloat16 into dst (at least len(src) long).
func F32ToBF16Slice(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = F32ToBF16(v)
	}
}

// BF16ToF32Slice converts bfloat16 values in src to float32 into dst (at
// least len(src) long).
func BF16ToF32Slice(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = BF16ToF32(v)
	}
}
