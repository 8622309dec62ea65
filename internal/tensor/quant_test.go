package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

func putF16(b []byte, v float32) { binary.LittleEndian.PutUint16(b, F32ToF16(v)) }

// TestDequantizeHandBuilt checks each block layout against values worked out
// by hand from the format description.
func TestDequantizeHandBuilt(t *testing.T) {
	// Q8_0: d = 0.5, q = j-16.
	q80 := make([]byte, q80Size)
	putF16(q80, 0.5)
	for j := 0; j < 32; j++ {
		q80[2+j] = byte(int8(j - 16))
	}
	// Q4_0: d = 2; byte j = low nibble j&15, high nibble 15-j.
	q40 := make([]byte, q40Size)
	putF16(q40, 2)
	for j := 0; j < 16; j++ {
		q40[2+j] = byte(j) | byte(15-j)<<4
	}
	// Q5_0: d = 0.5; value j has q = (7j+3) mod 32 (every fifth bit pattern).
	q50 := make([]byte, q50Size)
	putF16(q50, 0.5)
	val5 := func(j int) int { return (7*j + 3) % 32 }
	var qh uint32
	for j := 0; j < 16; j++ {
		q50[6+j] = byte(val5(j)&0xf | (val5(j+16)&0xf)<<4)
		qh |= uint32(val5(j)>>4)<<j | uint32(val5(j+16)>>4)<<(j+16)
	}
	binary.LittleEndian.PutUint32(q50[2:], qh)
	// Q4_1: d = 0.5, m = -3, value j = (5j+1) mod 16 (nibbles as Q4_0's).
	q41 := make([]byte, q41Size)
	putF16(q41, 0.5)
	putF16(q41[2:], -3)
	val41 := func(j int) int { return (5*j + 1) % 16 }
	for j := 0; j < 16; j++ {
		q41[4+j] = byte(val41(j) | val41(j+16)<<4)
	}
	// Q5_1: d = 0.25, m = 1.5, Q5_0's values and bits.
	q51 := make([]byte, q51Size)
	putF16(q51, 0.25)
	putF16(q51[2:], 1.5)
	copy(q51[4:], q50[2:])
	// IQ4_NL: d = 0.5, nibble j%16 for value j (the whole table twice).
	iq4 := make([]byte, iq4Size)
	putF16(iq4, 0.5)
	for j := 0; j < 16; j++ {
		iq4[2+j] = byte(j) | byte(15-j)<<4
	}
	// Q3_K: d = 0.25, sub-block k scale k−16 (four low bits in scales[k%8],
	// high nibble for k ≥ 8; two high bits in scales[8+k%4] at 2·(k/4));
	// value i is (i mod 8) − 4: two bits in qs[32·(i/128) + i%32] at
	// 2·((i%128)/32), and bit i/32 of hmask[i%32] set unless it is below 0.
	q3k := make([]byte, q3KSize)
	putF16(q3k[108:], 0.25)
	for k := 0; k < 16; k++ {
		u := byte(k - 16 + 32)
		q3k[96+k%8] |= (u & 0xf) << (4 * (k / 8))
		q3k[96+8+k%4] |= (u >> 4) << (2 * (k / 4))
	}
	for i := 0; i < 256; i++ {
		v := i%8 - 4
		q := v
		if v >= 0 {
			q3k[i%32] |= 1 << (i / 32)
		} else {
			q += 4
		}
		q3k[32+32*(i/128)+i%32] |= byte(q) << (2 * (i % 128 / 32))
	}
	// IQ4_XS: d = 0.25, sub-block ib scale ib−4 (ls = ib+28: four low bits in
	// scales_l, two high in scales_h), index (i+ib)%16 for value i of each.
	iq4xs := make([]byte, iq4XSSize)
	putF16(iq4xs, 0.25)
	var sh uint16
	for ib := 0; ib < 8; ib++ {
		ls := byte(ib + 28)
		iq4xs[4+ib/2] |= (ls & 0xf) << (4 * (ib % 2))
		sh |= uint16(ls>>4) << (2 * ib)
		for j := 0; j < 16; j++ {
			iq4xs[8+16*ib+j] = byte((j+ib)%16) | byte((j+16+ib)%16)<<4
		}
	}
	binary.LittleEndian.PutUint16(iq4xs[2:], sh)
	// Q2_K: d = 0.5, dmin = 0.25, sub-block k scale k%16 and min 15−k; value
	// i is i%4, placed as Q3_K's low bits.
	q2k := make([]byte, q2KSize)
	putF16(q2k[80:], 0.5)
	putF16(q2k[82:], 0.25)
	for k := 0; k < 16; k++ {
		q2k[k] = byte(k) | byte(15-k)<<4
	}
	for i := 0; i < 256; i++ {
		q2k[16+32*(i/128)+i%32] |= byte(i%4) << (2 * (i % 128 / 32))
	}
	// Q4_K: d = 1, dmin = 0.25; sub-block j has scale j+1 and min 2j (sub-blocks
	// 4..7 exercise the packed high bits: scale 40+j, min 50+j).
	q4k := make([]byte, q4KSize)
	putF16(q4k[0:], 1)
	putF16(q4k[2:], 0.25)
	sc := []uint8{1, 2, 3, 4, 44, 45, 46, 47}
	mn := []uint8{0, 2, 4, 6, 54, 55, 56, 57}
	s := q4k[4:16]
	for j := 0; j < 8; j++ {
		if j < 4 {
			s[j] = sc[j]
			s[j+4] = mn[j]
		} else {
			s[j+4] = sc[j]&0xf | (mn[j]&0xf)<<4
			s[j-4] |= (sc[j] >> 4) << 6
			s[j] |= (mn[j] >> 4) << 6
		}
	}
	for i := 0; i < 128; i++ {
		q4k[16+i] = byte(i%16) | byte((i/2)%16)<<4
	}
	// Q5_K: Q4_K's scales and mins; value i is (11i+5) mod 32, its fifth bit
	// in bit i/32 of qh[i%32].
	q5k := make([]byte, q5KSize)
	copy(q5k, q4k[:16])
	val5K := func(i int) int { return (11*i + 5) % 32 }
	for i := 0; i < 256; i++ {
		j, l := i/32, i%32
		q5k[48+32*(j/2)+l] |= byte(val5K(i)&0xf) << (4 * (j % 2))
		q5k[16+l] |= byte(val5K(i)>>4) << j
	}
	// Q6_K: d = 0.125, sub-block k scale k-8 (negative ones too);
	// value v at position p = (p*7)%64.
	q6k := make([]byte, q6KSize)
	putF16(q6k[208:], 0.125)
	for k := 0; k < 16; k++ {
		q6k[192+k] = byte(int8(k - 8))
	}
	val6 := func(p int) int { return (p * 7) % 64 }
	for h := 0; h < 2; h++ {
		for l := 0; l < 32; l++ {
			v1, v2, v3, v4 := val6(128*h+l), val6(128*h+l+32), val6(128*h+l+64), val6(128*h+l+96)
			q6k[64*h+l] = byte(v1&0xf | (v3&0xf)<<4)
			q6k[64*h+l+32] = byte(v2&0xf | (v4&0xf)<<4)
			q6k[128+32*h+l] = byte(v1>>4 | (v2>>4)<<2 | (v3>>4)<<4 | (v4>>4)<<6)
		}
	}

	tests := []struct {
		name string
		t    DType
		src  []byte
		want func(i int) float32
		n    int
	}{
		{"Q8_0", Q8_0, q80, func(i int) float32 { return float32(i-16) * 0.5 }, 32},
		{"Q4_0", Q4_0, q40, func(i int) float32 {
			if i < 16 {
				return float32(i-8) * 2
			}
			return float32(15-(i-16)-8) * 2
		}, 32},
		{"Q5_0", Q5_0, q50, func(i int) float32 { return float32(val5(i)-16) * 0.5 }, 32},
		{"Q4_1", Q4_1, q41, func(i int) float32 { return float32(val41(i))*0.5 - 3 }, 32},
		{"Q5_1", Q5_1, q51, func(i int) float32 { return float32(val5(i))*0.25 + 1.5 }, 32},
		{"Q4_K", Q4_K, q4k, func(i int) float32 {
			j := i / 32                // sub-block
			byteIdx := 32*(j/2) + i%32 // byte in qs
			nib := byteIdx % 16        // low nibble
			if j%2 == 1 {
				nib = (byteIdx / 2) % 16 // high nibble
			}
			return float32(sc[j])*float32(nib) - 0.25*float32(mn[j])
		}, 256},
		{"Q5_K", Q5_K, q5k, func(i int) float32 {
			return float32(sc[i/32])*float32(val5K(i)) - 0.25*float32(mn[i/32])
		}, 256},
		{"IQ4_NL", IQ4_NL, iq4, func(i int) float32 {
			nib := i
			if i >= 16 {
				nib = 15 - (i - 16)
			}
			return []float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}[nib] * 0.5
		}, 32},
		{"IQ4_XS", IQ4_XS, iq4xs, func(i int) float32 {
			kv := []float32{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
			ib := i / 32
			return 0.25 * float32(ib-4) * kv[(i%32+ib)%16]
		}, 256},
		{"Q2_K", Q2_K, q2k, func(i int) float32 {
			return 0.5*float32(i/16)*float32(i%4) - 0.25*float32(15-i/16)
		}, 256},
		{"Q3_K", Q3_K, q3k, func(i int) float32 {
			return 0.25 * float32(i/16-16) * float32(i%8-4)
		}, 256},
		{"Q6_K", Q6_K, q6k, func(i int) float32 {
			return 0.125 * float32(i/16-8) * float32(val6(i)-32)
		}, 256},
		{"F16", F16, func() []byte {
			b := make([]byte, 8)
			for i, v := range []float32{1, -2, 0.5, 65504} {
				putF16(b[2*i:], v)
			}
			return b
		}(), func(i int) float32 { return []float32{1, -2, 0.5, 65504}[i] }, 4},
		{"BF16", BF16, []byte{0x80, 0x3f, 0x00, 0xc0}, func(i int) float32 { return []float32{1, -2}[i] }, 2},
		{"F32", F32, []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}, func(i int) float32 { return []float32{1, -2}[i] }, 2},
	}
	for _, tc := range tests {
		dst := make([]float32, tc.n)
		if err := Dequantize(tc.t, dst, tc.src); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, got := range dst {
			if want := tc.want(i); got != want {
				t.Fatalf("%s: element %d = %v, want %v", tc.name, i, got, want)
			}
		}
	}
}

func TestScaleMinK4(t *testing.T) {
	// Pack all 64×64 (scale, min) combinations through the Q4_K packing
	// used by the quantizer and read them back.
	rng := rand.New(rand.NewPCG(5, 6))
	for range 1000 {
		var s [12]byte
		var sc, mn [8]uint8
		for j := range sc {
			sc[j], mn[j] = uint8(rng.IntN(64)), uint8(rng.IntN(64))
			if j < 4 {
				s[j] = sc[j]
				s[j+4] = mn[j]
			} else {
				s[j+4] = sc[j]&0xf | (mn[j]&0xf)<<4
				s[j-4] |= (sc[j] >> 4) << 6
				s[j] |= (mn[j] >> 4) << 6
			}
		}
		for j := range sc {
			if a, b := scaleMinK4(j, s[:]); a != sc[j] || b != mn[j] {
				t.Fatalf("sub-block %d: got (%d,%d), want (%d,%d)", j, a, b, sc[j], mn[j])
			}
		}
	}
}

func TestDequantizeErrors(t *testing.T) {
	tests := []struct {
		name string
		t    DType
		n    int
		size int
	}{
		{"unsupported", TQ1_0, 256, 1000},
		{"unknown", DType(99), 32, 100},
		{"partial block", Q8_0, 33, 100},
		{"short source", Q4_K, 512, q4KSize*2 - 1},
		{"short f32", F32, 4, 15},
	}
	for _, tc := range tests {
		if err := Dequantize(tc.t, make([]float32, tc.n), make([]byte, tc.size)); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, err := Quantize(Q8_0, make([]float32, 31)); err == nil {
		t.Error("Quantize of a partial block: no error")
	}
	if _, err := Quantize(IQ3_S, make([]float32, 256)); err == nil {
		t.Error("Quantize to an unsupported type: no error")
	}
}

// TestQuantizeRoundTrip checks the reconstruction error of each type on
// Gaussian data against a bound that follows from its step size.
func TestQuantizeRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, 256*64)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	// Outliers and an all-zero block.
	x[5] = 9
	x[300] = -12
	for i := 512; i < 768; i++ {
		x[i] = 0
	}
	tests := []struct {
		t       DType
		maxRMS  float64 // RMS error relative to the data's RMS (1)
		maxElem float64 // worst error in units of the block's absmax
	}{
		{F32, 0, 0},
		{F16, 3e-4, 1e-3},
		{BF16, 3e-3, 4e-3},
		{Q8_0, 0.01, 1.0/254 + 127.0/127*0.0005}, // half a step plus the f16 rounding of the scale
		{Q4_0, 0.15, 1.0/8 + 1e-3},
		{Q5_0, 0.075, 1.0/16 + 1e-3},
		{Q6_K, 0.04, 0.05},
		{Q4_K, 0.15, 0.2},
		{Q5_K, 0.075, 0.1},
		{Q4_1, 0.12, 1.0/15 + 3e-3}, // half a step of range/15 ≤ absmax/15, and the f16 d and m
		{Q5_1, 0.06, 1.0/31 + 3e-3},
		{IQ4_NL, 0.1, 0.12}, // the fitted scale may leave the largest value short of ±127's step
		{Q3_K, 0.2, 0.2},
		{Q2_K, 0.35, 0.4},
		{IQ4_XS, 0.1, 0.13},
	}
	y := make([]float32, len(x))
	for _, tc := range tests {
		q, err := Quantize(tc.t, x)
		if err != nil {
			t.Fatal(err)
		}
		if len(q) != tc.t.RowBytes(len(x)) {
			t.Fatalf("%v: %d bytes, want %d", tc.t, len(q), tc.t.RowBytes(len(x)))
		}
		if err := Dequantize(tc.t, y, q); err != nil {
			t.Fatal(err)
		}
		bs := max(32, tc.t.BlockSize())
		var se float64
		worst := 0.0
		for b := 0; b < len(x)/bs; b++ {
			var amax float64
			for _, v := range x[b*bs : (b+1)*bs] {
				amax = max(amax, math.Abs(float64(v)))
			}
			for i := b * bs; i < (b+1)*bs; i++ {
				e := math.Abs(float64(y[i] - x[i]))
				se += e * e
				if amax > 0 {
					worst = max(worst, e/amax)
				} else if e != 0 {
					t.Fatalf("%v: zero block reconstructed as %v", tc.t, y[i])
				}
			}
		}
		rms := math.Sqrt(se / float64(len(x)))
		if rms > tc.maxRMS || worst > tc.maxElem {
			t.Errorf("%v: rms error %.4g (max %.4g), worst element %.4g of absmax (max %.4g)", tc.t, rms, tc.maxRMS, worst, tc.maxElem)
		}
		t.Logf("%v: rms error %.4g, worst %.4g of absmax", tc.t, rms, worst)
	}
}

func TestNearestInt(t *testing.T) {
	for _, tc := range []struct {
		x    float32
		want int
	}{{0, 0}, {0.5, 0}, {1.5, 2}, {2.5, 2}, {-0.5, 0}, {-1.5, -2}, {-2.6, -3}, {4194303, 4194303}, {-4194303, -4194303}, {0.49999997, 0}} {
		if got := nearestInt(tc.x); got != tc.want {
			t.Errorf("nearestInt(%v) = %d, want %d", tc.x, got, tc.want)
		}
	}
}

func TestMatrix(t *testing.T) {
	data := make([]byte, 3*q80Size*2)
	if _, err := NewMatrix(Q8_0, 3, 64, data); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		t          DType
		rows, cols int
		n          int
	}{
		{"short", Q8_0, 3, 64, len(data) - 1},
		{"long", Q8_0, 3, 64, len(data) + 1},
		{"cols not block multiple", Q8_0, 3, 48, len(data)},
		{"unsupported", Q5_0, 3, 64, len(data)},
		{"zero rows", Q8_0, 0, 64, 0},
		{"huge", Q8_0, 1 << 62, 64, len(data)},
	} {
		if _, err := NewMatrix(tc.t, tc.rows, tc.cols, make([]byte, tc.n)); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	// DequantizeRow reads the right row.
	x := make([]float32, 3*64)
	for i := range x {
		x[i] = float32(i)
	}
	q, _ := Quantize(Q8_0, x)
	m, err := NewMatrix(Q8_0, 3, 64, q)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]float32, 64)
	all := make([]float32, len(x))
	Dequantize(Q8_0, all, q)
	for r := 0; r < 3; r++ {
		m.DequantizeRow(row, r)
		for c, v := range row {
			if v != all[r*64+c] {
				t.Fatalf("row %d col %d: %v, want %v", r, c, v, all[r*64+c])
			}
		}
	}
}
