package tensor

import (
	"encoding/binary"
	"math"
	"testing"
)

// FuzzDequantize feeds arbitrary bytes as blocks of every type read:
// decoding must never panic, and Dequantize and Matrix.DequantizeRow must
// agree.
func FuzzDequantize(f *testing.F) {
	f.Add(uint8(3), make([]byte, q80Size*2))
	f.Add(uint8(5), make([]byte, q4KSize))
	f.Fuzz(func(t *testing.T, sel uint8, data []byte) {
		typ := kernelTypes[int(sel)%len(kernelTypes)]
		bs, ts := typ.BlockSize(), typ.TypeSize()
		nBlocks := len(data) / ts
		n := nBlocks * bs
		dst := make([]float32, n)
		if err := Dequantize(typ, dst, data); err != nil {
			t.Fatalf("%v: %v", typ, err)
		}
		if n == 0 {
			return
		}
		if err := Dequantize(typ, make([]float32, n+bs), data); err == nil {
			t.Fatalf("%v: no error for a source one block short", typ)
		}
		m, err := NewMatrix(typ, 1, n, data[:nBlocks*ts])
		if err != nil {
			t.Fatal(err)
		}
		row := make([]float32, n)
		m.DequantizeRow(row, 0)
		for i := range row {
			if math.Float32bits(row[i]) != math.Float32bits(dst[i]) {
				t.Fatalf("%v: DequantizeRow differs at %d", typ, i)
			}
		}
	})
}

// FuzzQuantize quantizes arbitrary float32 data to every type: it must never
// panic, and for finite, moderate inputs Q8_0's reconstruction error must stay
// within half a step.
func FuzzQuantize(f *testing.F) {
	seed := make([]byte, 4*256)
	for i := 0; i < 256; i++ {
		binary.LittleEndian.PutUint32(seed[4*i:], math.Float32bits(float32(i%17)-8))
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		n := len(data) / 4 / 256 * 256
		if n == 0 {
			return
		}
		x := make([]float32, n)
		finite := true
		for i := range x {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
			if v := math.Abs(float64(x[i])); math.IsNaN(v) || v > 1e30 || (v < 1e-30 && v != 0) {
				finite = false
			}
		}
		y := make([]float32, n)
		for _, typ := range allTypes {
			q, err := Quantize(typ, x)
			if err != nil {
				t.Fatalf("%v: %v", typ, err)
			}
			if err := Dequantize(typ, y, q); err != nil {
				t.Fatal(err)
			}
			if typ != Q8_0 || !finite {
				continue
			}
			for b := 0; b < n/32; b++ {
				var amax float64
				for _, v := range x[32*b : 32*b+32] {
					amax = max(amax, math.Abs(float64(v)))
				}
				if amax > 60000*127 {
					continue // the f16 scale overflows
				}
				for i := 32 * b; i < 32*b+32; i++ {
					// Half a step, the f16 scale's relative rounding, and
					// for tiny blocks its absolute rounding among the f16
					// subnormals (2^-25) times the largest value, 127.
					if e := math.Abs(float64(y[i]) - float64(x[i])); e > amax/254+amax*0.0005+127*0x1p-25 {
						t.Fatalf("Q8_0 element %d: %v -> %v (block absmax %v)", i, x[i], y[i], amax)
					}
				}
			}
		}
	})
}

// FuzzHalf checks the f16 and bf16 round trips on arbitrary float32 bits:
// converting back and forth again is stable, and the rounding error is at most
// half a unit in the last place of the result.
func FuzzHalf(f *testing.F) {
	f.Add(uint32(0x3f800000))
	f.Add(uint32(0x477ff000))
	f.Add(uint32(0x33000000))
	f.Fuzz(func(t *testing.T, bits uint32) {
		x := math.Float32frombits(bits)
		h := F32ToF16(x)
		y := F16ToF32(h)
		if F32ToF16(y) != h {
			t.Fatalf("f16 of %#08x not stable: %#04x -> %v -> %#04x", bits, h, y, F32ToF16(y))
		}
		b := F32ToBF16(x)
		z := BF16ToF32(b)
		if F32ToBF16(z) != b {
			t.Fatalf("bf16 of %#08x not stable", bits)
		}
		if math.IsNaN(float64(x)) || math.IsInf(float64(y), 0) {
			return
		}
		// Half a unit in the last place of x's binade (subnormals: 2^-24).
		ax := math.Abs(float64(x))
		ulp := math.Pow(2, -24)
		if ax >= math.Pow(2, -14) {
			ulp = math.Pow(2, math.Floor(math.Log2(ax))-10)
		}
		if e := math.Abs(float64(y) - float64(x)); e > ulp/2 {
			t.Fatalf("f16 of %v = %v: error %v > half ulp %v", x, y, e, ulp/2)
		}
		if e := math.Abs(float64(z) - float64(x)); !math.IsInf(float64(z), 0) && e > max(ax*math.Pow(2, -8), math.Pow(2, -134)) {
			t.Fatalf("bf16 of %v = %v: error %v too large", x, z, e)
		}
	})
}
