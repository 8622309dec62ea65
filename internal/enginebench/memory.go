package enginebench

import (
	"math"
	"math/rand/v2"
	"time"
	"unsafe"

	"github.com/kvserve/kvserve/internal/tensor"
)

// MemoryBandwidth measures how fast the compute threads stream memory in, in
// GB/s: F32 matrix-vector products over 1 GiB of random weights (256
// matrices of 1024×1024, far more than any cache), best of five runs. That is
// the access pattern of a decode step — every weight read once, in rows, by
// all threads — with the least arithmetic per byte, so it is the practical
// ceiling a decode can reach: tokens/s ≤ bandwidth ÷ weight bytes per token.
// (Rows of 1024 floats stream fastest on the machines measured; rows of
// 16,384 reached only 60% of it, so the probe does not understate the
// ceiling.)
func MemoryBandwidth(threads int) float64 {
	const side, count = 1024, 256
	rng := rand.New(rand.NewPCG(1, 2))
	mats := make([]tensor.Matrix, count)
	for i := range mats {
		w := make([]float32, side*side)
		for j := range w { // random data: no page is a shared zero page
			w[j] = rng.Float32()
		}
		m, err := tensor.NewMatrix(tensor.F32, side, side, unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), 4*len(w)))
		if err != nil {
			panic(err) // the shape is fixed and valid
		}
		mats[i] = m
	}
	pool := tensor.NewPool(threads)
	defer pool.Close()
	x, y := make([]float32, side), make([]float32, side)
	best := 0.0
	for run := 0; run < 5; run++ {
		start := time.Now()
		for i := range mats {
			pool.MatMul(y, mats[i], x, 1)
		}
		best = math.Max(best, float64(count*side*side*4)/time.Since(start).Seconds()/1e9)
	}
	return best
}
