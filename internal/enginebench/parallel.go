package enginebench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kvserve/kvserve/internal/tensor"
)

// computeParallelism measures how many cores' worth of compute the pool's
// threads get together: the time of a run of cache-resident Q8_0 products
// (16 tokens, the batch-decode kernel) on one thread, divided by the same
// run shared by threads threads. ~threads when each thread has a core of
// its own; ~1 when the host runs them on one physical core — which a VM's
// vCPUs can do for minutes at a time (on the 2-vCPU machine this was built
// on, a vpdpbusd loop on both vCPUs at once took 2.0× its time alone in
// such minutes and 1.03× otherwise). Batch decode is compute-bound there,
// batch 1 is not, so their ratio depends on it; the scenario reports it.
// The pool's dispatch costs a few percent, so two threads on two cores
// measure ~1.8-1.9, not 2.
func computeParallelism(threads int) (float64, error) {
	if threads <= 1 {
		return 1, nil
	}
	const rows, cols, n, reps = 1024, 576, 16, 20
	rng := rand.New(rand.NewPCG(8, 8))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = rng.Float32()*2 - 1
	}
	data, err := tensor.Quantize(tensor.Q8_0, w)
	if err != nil {
		return 0, fmt.Errorf("enginebench: parallelism probe: %w", err)
	}
	m, err := tensor.NewMatrix(tensor.Q8_0, rows, cols, data)
	if err != nil {
		return 0, fmt.Errorf("enginebench: parallelism probe: %w", err)
	}
	x := make([]float32, n*cols)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	dst := make([]float32, n*rows)
	timeOn := func(th int) time.Duration {
		p := tensor.NewPool(th)
		defer p.Close()
		best := time.Duration(1<<63 - 1)
		for range 3 { // the fastest of three: the probe must not catch a hiccup
			start := time.Now()
			for i := range reps {
				x[0] = float32(i) // a new input each time: no conversion is reused
				p.MatMul(dst, m, x, n)
			}
			best = min(best, time.Since(start))
		}
		return best
	}
	one := timeOn(1)
	return float64(one) / float64(timeOn(threads)), nil
}
