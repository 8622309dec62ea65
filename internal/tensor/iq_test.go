package tensor

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// randIQBlocks returns n random blocks of an IQ2 or IQ3 type with a d of
// either sign and the size real files have.
func randIQBlocks(rng *rand.Rand, t DType, n int) []byte {
	bs := t.TypeSize()
	q := make([]byte, n*bs)
	for i := range q {
		q[i] = byte(rng.Uint32())
	}
	for b := 0; b < n; b++ {
		d := float32(0.0005 + 0.004*rng.Float64())
		if rng.IntN(2) == 0 {
			d = -d
		}
		setIQD(t, q[b*bs:(b+1)*bs], F32ToF16(d))
	}
	return q
}

// setIQD sets the f16 d of a block: its first two bytes, or for IQ1_M the
// top nibbles of its four scale words.
func setIQD(t DType, blk []byte, h uint16) {
	if t != IQ1_M {
		binary.LittleEndian.PutUint16(blk, h)
		return
	}
	for i := 0; i < 4; i++ {
		w := binary.LittleEndian.Uint16(blk[48+2*i:])&0x0fff | (h>>(4*i)&0xf)<<12
		binary.LittleEndian.PutUint16(blk[48+2*i:], w)
	}
}

// TestIQGrids: the recoded grids, expanded back to ggml's bytes, have the
// FNV-1a checksums of ggml's tables (ggml-common.h at llama.cpp c392e509,
// each entry's little-endian bytes in order).
func TestIQGrids(t *testing.T) {
	expand2 := func(codes []uint16) []byte {
		var out []byte
		for _, c := range codes {
			for j := 0; j < 8; j++ {
				out = append(out, byte(iq2Values[c>>(2*j)&3]))
			}
		}
		return out
	}
	expand3 := func(codes []uint16, odd bool) []byte {
		var out []byte
		for _, c := range codes {
			for j := 0; j < 4; j++ {
				v := c >> (3 * j) & 7
				if odd {
					out = append(out, byte(2*v+1))
				} else {
					out = append(out, byte(iq3XXSValues[v]))
				}
			}
		}
		return out
	}
	expand1 := func(codes []uint16) []byte {
		var out []byte
		for _, c := range codes {
			for j := 0; j < 8; j++ {
				out = append(out, byte(int8(c>>(2*j)&3)-1))
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		bytes []byte
		want  uint64
	}{
		{"iq2xxs_grid", expand2(iq2XXSCodes[:]), 0xbb4ee025b5ac6e8e},
		{"iq2xs_grid", expand2(iq2XSCodes[:]), 0xc9b1ee61e79909bd},
		{"iq2s_grid", expand2(iq2SCodes[:]), 0x123edd38a3b62b90},
		{"iq3xxs_grid", expand3(iq3XXSCodes[:], false), 0xdfa5dc83d6a155d5},
		{"iq3s_grid", expand3(iq3SCodes[:], true), 0xfa37020c25b44829},
		{"iq1s_grid", expand1(iq1SCodes[:]), 0x6703ed863501ae2e},
	} {
		h := fnv.New64a()
		h.Write(tc.bytes)
		if got := h.Sum64(); got != tc.want {
			t.Errorf("%s: checksum %#x, ggml's %#x", tc.name, got, tc.want)
		}
	}
	// ksigns_iq2xs: the eighth sign keeps the count of minus signs even.
	for _, c := range []struct{ in, want uint8 }{{0, 0}, {1, 129}, {3, 3}, {7, 135}, {127, 255}, {64, 192}} {
		if got := iqSigns(uint32(c.in)); got != c.want {
			t.Errorf("signs of %d: %d, want %d", c.in, got, c.want)
		}
	}
}

// TestIQDequantHandBuilt: one group of eight values in a block built by
// hand per type (d = 1, the rest zero bytes), against ggml's formulas with
// the grid points read off ggml's tables: sub-block ib = 1, group l = 2,
// so values 48-55.
func TestIQDequantHandBuilt(t *testing.T) {
	one := F32ToF16(1)
	for _, tc := range []struct {
		typ  DType
		set  func(b []byte)
		want [8]float32
	}{
		{IQ2_XXS, func(b []byte) {
			b[2+8+2] = 255 // grid point 255: 8 25 8 8 25 43 43 43
			// signs of group 2 (values 0 and 2), scale 3: db = 3.5·0.25
			binary.LittleEndian.PutUint32(b[2+8+4:], 0b0000101<<14|3<<28)
		}, [8]float32{-7, 21.875, -7, 7, 21.875, 37.625, 37.625, 37.625}},
		{IQ2_XS, func(b []byte) {
			// grid point 300: 8 25 25 8 8 25 8 25; sign bit 6 and its
			// parity bit 7
			binary.LittleEndian.PutUint16(b[2+2*(4+2):], 300|0b1000000<<9)
			b[66+1] = 0x52 // groups 2-3 scale 5: db = 5.5·0.25
		}, [8]float32{11, 34.375, 34.375, 11, 11, 34.375, -11, -34.375}},
		{IQ2_S, func(b []byte) {
			b[2+4+2] = 700 & 0xff // grid point 700: 8 8 8 43 43 8 25 25
			b[66+1] = (700 >> 8) << 4
			b[34+4+2] = 0x81 // values 0 and 7 negative
			b[74+1] = 0x70   // groups 2-3 scale 7: db = 7.5·0.25
		}, [8]float32{-15, 15, 15, 80.625, 80.625, 15, 46.875, -46.875}},
		{IQ3_XXS, func(b []byte) {
			b[2+8+4] = 200                                               // 4 62 4 44
			b[2+8+5] = 1                                                 // 20 4 4 4
			binary.LittleEndian.PutUint32(b[66+4:], 0b0000011<<14|2<<28) // db = 2.5·0.5
		}, [8]float32{-5, -77.5, 5, 55, 25, 5, 5, 5}},
		{IQ3_S, func(b []byte) {
			b[2+8+4] = 300 - 256 // with qh's bit 4: grid point 300, 3 5 3 7
			b[66+1] = 1 << 4
			b[2+8+5] = 1      // grid point 1: 3 1 1 1
			b[74+4+2] = 0x10  // value 4 negative
			b[106+0] = 6 << 4 // sub-block 1's scale 6: db = 1+2·6
		}, [8]float32{39, 65, 39, 91, -39, 13, 13, 13}},
		{IQ1_S, func(b []byte) {
			b[2+4+2] = 1000 & 0xff // grid point 1000: -1 0 -1 -1 0 0 0 0
			// its top 3 bits at bits 6-8, scale 2 (dl = 5), shift −1/8
			binary.LittleEndian.PutUint16(b[34+2:], (1000>>8)<<6|2<<12|0x8000)
		}, [8]float32{-5.625, -0.625, -5.625, -5.625, -0.625, -0.625, -0.625, -0.625}},
		{IQ1_M, func(b []byte) {
			b[4+2] = 1500 & 0xff     // grid point 1500: 0 -1 -1 0 -1 0 -1 1
			b[32+3] = 1500>>8 | 0x08 // its top 3 bits, shift −1/8
			// sub-block 1's second scale (groups 2-3) 3: dl = 7; d's
			// nibbles are set below
			binary.LittleEndian.PutUint16(b[48:], 3<<9)
		}, [8]float32{-0.875, -7.875, -7.875, -0.875, -7.875, -0.875, -7.875, 6.125}},
	} {
		blk := make([]byte, tc.typ.TypeSize())
		tc.set(blk)
		setIQD(tc.typ, blk, one)
		y := make([]float32, qkK)
		if err := Dequantize(tc.typ, y, blk); err != nil {
			t.Fatal(err)
		}
		for j, w := range tc.want {
			if y[48+j] != w {
				t.Errorf("%v: value %d is %v, want %v (group %v)", tc.typ, 48+j, y[48+j], w, y[48:56])
				break
			}
		}
	}
}

// TestWidenIQ3XXSSubnormal: an IQ3_XXS matrix with a block whose d/2 is not
// an f16 (a subnormal d with its last bit set) cannot be Q6_K; it widens to
// Q8_K16 with the same values and products.
func TestWidenIQ3XXSSubnormal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	rows, cols := 4, 512
	data := randIQBlocks(rng, IQ3_XXS, rows*cols/qkK)
	binary.LittleEndian.PutUint16(data[3*IQ3_XXS.TypeSize():], 0x0003) // 3·2^-24
	m, err := NewMatrix(IQ3_XXS, rows, cols, data)
	if err != nil {
		t.Fatal(err)
	}
	w := Widen(m)
	if w.Type != Q8_K16 {
		t.Fatalf("widened to %v, want Q8_K16", w.Type)
	}
	want := make([]float32, rows*cols)
	Dequantize(IQ3_XXS, want, data)
	row := make([]float32, cols)
	for r := 0; r < rows; r++ {
		w.DequantizeRow(row, r)
		for c, v := range row {
			if math.Float32bits(v) != math.Float32bits(want[r*cols+c]) {
				t.Fatalf("row %d value %d: %v, want %v", r, c, v, want[r*cols+c])
			}
		}
	}
	// A normal d halves exactly: Q6_K.
	binary.LittleEndian.PutUint16(data[3*IQ3_XXS.TypeSize():], F32ToF16(0.001))
	if m, _ := NewMatrix(IQ3_XXS, rows, cols, data); Widen(m).Type != Q6_K {
		t.Fatal("IQ3_XXS with normal scales not widened to Q6_K")
	}
}

// TestQuantizeRefusesIQ: the IQ1, IQ2 and IQ3 types are read, not written.
func TestQuantizeRefusesIQ(t *testing.T) {
	for _, typ := range []DType{IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, Q8_K16} {
		_, err := Quantize(typ, make([]float32, qkK))
		if err == nil || !strings.Contains(err.Error(), "read, not written") {
			t.Errorf("%v: Quantize error %v", typ, err)
		}
	}
}
