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

// randQ80Rows returns n rows of nb Q8_0 blocks stride bytes apart, with
// random values in [-127, 127] (the extremes and zero included) and f16
// scales of many magnitudes (zero included).
func randQ80Rows(rng *rand.Rand, n, nb, stride int) []byte {
	b := make([]byte, (n-1)*stride+nb*34)
	for j := range n {
		for blk := range nb {
			o := j*stride + blk*34
			d := float32(math.Ldexp(rng.Float64(), rng.IntN(20)-14))
			if rng.IntN(10) == 0 {
				d = 0
			}
			h := F32ToF16(d)
			b[o], b[o+1] = byte(h), byte(h>>8)
			for i := range 32 {
				v := rng.IntN(255) - 127
				switch rng.IntN(16) {
				case 0:
					v = 127
				case 1:
					v = -127
				case 2:
					v = 0
				}
				b[o+2+i] = byte(int8(v))
			}
		}
	}
	return b
}

// TestQ80AttentionKernels checks the Q8_0 key and value kernels against
// their portable versions bit for bit, for every row count up to 40 (the
// dots take eight rows at a time and hand the rest to the portable code)
// and one to four blocks per row.
func TestQ80AttentionKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for nb := 1; nb <= 4; nb++ {
		for n := 1; n <= 40; n++ {
			stride := nb*34 + 34*rng.IntN(3)
			k := randQ80Rows(rng, n, nb, stride)
			q := randQ80Rows(rng, 1, nb, nb*34)
			got, want := make([]float32, n), make([]float32, n)
			DotsQ80(got, q, k, stride)
			dotsQ80Generic(want, q, k, stride)
			for j := range got {
				if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
					t.Fatalf("DotsQ80 %d blocks, %d rows: row %d: %v, portable %v", nb, n, j, got[j], want[j])
				}
			}
			p := make([]float32, n)
			for i := range p {
				p[i] = rng.Float32()
			}
			o1 := make([]float32, nb*32)
			for i := range o1 {
				o1[i] = float32(rng.NormFloat64())
			}
			o2 := append([]float32(nil), o1...)
			AxpysQ80(o1, p, k, stride)
			axpysQ80Generic(o2, p, k, stride)
			for i := range o1 {
				if math.Float32bits(o1[i]) != math.Float32bits(o2[i]) {
					t.Fatalf("AxpysQ80 %d blocks, %d rows: out %d: %v, portable %v", nb, n, i, o1[i], o2[i])
				}
			}
		}
	}
}
