package model

import (
	"math"
	"time"

	"github.com/kvserve/kvserve/internal/tensor"
)

// DecodePass times the weight products of one decoded token on p — every
// layer's matrices and the output, one token each, as a decode step
// computes them (attention aside) — and returns the fastest of reps
// passes. A pass reads every weight once, so it measures how fast this
// CPU's kernels stream the weights where and how they are placed.
func (m *Model) DecodePass(p *tensor.Pool, reps int) time.Duration {
	ws := append(m.layerMatrices(), &m.Output)
	cols, rows := 0, 0
	for _, w := range ws {
		cols, rows = max(cols, w.Cols), max(rows, w.Rows)
	}
	x := make([]float32, cols)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) / 16
	}
	dst := make([]float32, rows)
	best := time.Duration(math.MaxInt64)
	for range max(1, reps) {
		start := time.Now()
		for _, w := range ws {
			p.MatMul(dst[:w.Rows], *w, x[:w.Cols], 1)
		}
		best = min(best, time.Since(start))
	}
	return best
}
