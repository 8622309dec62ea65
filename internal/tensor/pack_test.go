package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackedMatMul: products of packed weights are bit-identical to the
// same weights unpacked, for every token count of the kernels and row
// counts with and without a tail after the last block of eight, and
// DequantizeRow reads packed rows as it reads them unpacked.
func TestPackedMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range []DType{Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, F16, BF16} {
		if !packable(typ) {
			t.Logf("%v: no packed layout on this CPU", typ)
			continue
		}
		testPackedMatMul(t, rng, p, typ)
	}
}

func testPackedMatMul(t *testing.T, rng *rand.Rand, p *Pool, typ DType) {
	colsList := []int{32, 576, 32 * 37}
	if typ.BlockSize() == qkK {
		colsList = []int{256, 256 * 5, 256 * 9}
	}
	if typ == F16 || typ == BF16 {
		// Odd numbers of 8- and 16-column steps (a BF16 matrix whose
		// columns are no multiple of 16 stays unpacked for vdpbf16ps).
		colsList = append(colsList, 16*37)
		if typ == F16 || zmmRowStep(BF16) == 0 {
			colsList = append(colsList, 8*37)
		}
	}
	rowsList := []int{8, 13, 64, 67, 200}
	// Decode's work items whose halves start splitMinBytes apart or more
	// at the widest columns, read in two streams (splitHalf),
	// an odd block and unpacked rows after them.
	switch typ {
	case F16, BF16:
		rowsList = append(rowsList, 1003)
	case Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL:
		rowsList = append(rowsList, 4003)
	}
	for _, cols := range colsList {
		for _, rows := range rowsList {
			m, _ := randMatrix(t, rng, typ, rows, cols)
			pm := m
			pm.Data = append([]byte(nil), m.Data...)
			pm = Pack(pm)
			if !pm.packed {
				t.Fatalf("%v %dx%d: not packed", typ, rows, cols)
			}
			for r := 0; r < rows; r++ {
				want, got := make([]float32, cols), make([]float32, cols)
				m.DequantizeRow(want, r)
				pm.DequantizeRow(got, r)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%v %dx%d row %d: packed value %d = %v, want %v", typ, rows, cols, r, i, got[i], want[i])
					}
				}
			}
			for _, n := range []int{1, 2, 3, 8, 16, 17, 40} {
				x := randVec(rng, n*cols, 1)
				want, got := make([]float32, n*rows), make([]float32, n*rows)
				p.MatMul(want, m, x, n)
				p.MatMul(got, pm, x, n)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: token %d row %d = %v, want %v", fmt.Sprintf("%v %dx%d n=%d", typ, rows, cols, n), i/rows, i%rows, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestPackLeavesOthers: types without a packed layout, matrices of fewer
// than eight rows, and F16/BF16 rows that are not whole 8-column steps come
// back as they were.
func TestPackLeavesOthers(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	for _, tc := range []struct {
		typ        DType
		rows, cols int
	}{{F32, 16, 32}, {IQ2_XS, 16, 256}, {Q4_K, 7, 256}, {Q8_0, 7, 64}, {Q4_0, 7, 64}, {F16, 7, 64}, {F16, 16, 36}, {BF16, 16, 20}} {
		m, _ := randMatrix(t, rng, tc.typ, tc.rows, tc.cols)
		orig := append([]byte(nil), m.Data...)
		if pm := Pack(m); pm.packed || string(m.Data) != string(orig) {
			t.Errorf("%v %dx%d: packed", tc.typ, tc.rows, tc.cols)
		}
	}
}
