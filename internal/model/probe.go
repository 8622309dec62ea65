package model

import (
	"math"
	"time"

	"github.com/kvserve/kvserve/internal/tensor"
)

// DecodePass times the weight products of one decoded token on p — the
// layers' matrices in order, one token each, as a decode step computes
// them (attention aside), as many as make up budget bytes (all of them if
// they make up less) — and returns the fastest of reps passes and the
// bytes a pass reads. A pass reads
// each of those weights once, so it measures how fast this CPU's kernels
// stream the weights where and how they are placed; a budget well past
// the last-level cache measures the same as the whole model for less.
func (m *Model) DecodePass(p *tensor.Pool, reps int, budget int64) (time.Duration, int64) {
	ws := m.layerMatrices()
	var n int64
	for i, w := range ws {
		if n += int64(w.Bytes()); n >= budget {
			ws = ws[:i+1]
			break
		}
	}
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
	return best, n
}
