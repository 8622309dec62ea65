package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestQ80KVRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const hd, rows = 64, 9
	stride := 3 * hd / 32 * 34 // three heads per row
	k := make([]byte, rows*stride)
	vals := make([][]float32, rows)
	for j := range rows {
		vals[j] = make([]float32, hd)
		for i := range vals[j] {
			vals[j][i] = float32(rng.NormFloat64())
		}
		QuantizeQ80(k[j*stride+34*2:], vals[j]) // the third head's slot
	}
	// Round trip: within half a quantization step.
	got := make([]float32, hd)
	for j := range rows {
		clear(got)
		AxpysQ80(got, []float32{1}, k[j*stride+68:], stride)
		var amax float64
		for _, v := range vals[j][:32] {
			amax = math.Max(amax, math.Abs(float64(v)))
		}
		for i := 0; i < 32; i++ {
			if d := math.Abs(float64(got[i] - vals[j][i])); d > amax/127*0.51+1e-3 {
				t.Fatalf("row %d value %d: %v vs %v", j, i, got[i], vals[j][i])
			}
		}
	}
	// Dots against a float reference of the dequantized rows.
	q := make([]float32, hd)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	qq := make([]byte, hd/32*34)
	QuantizeQ80(qq, q)
	qd := make([]float32, hd)
	AxpysQ80(qd, []float32{1}, qq, 0)
	dots := make([]float32, rows)
	DotsQ80(dots, qq, k[68:], stride)
	for j := range rows {
		kd := make([]float32, hd)
		AxpysQ80(kd, []float32{1}, k[j*stride+68:], stride)
		var want float64
		for i := range kd {
			want += float64(kd[i]) * float64(qd[i])
		}
		if math.Abs(float64(dots[j])-want) > 1e-3*math.Max(1, math.Abs(want)) {
			t.Fatalf("dot %d: %v, want %v", j, dots[j], want)
		}
	}
}
