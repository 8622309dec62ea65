package model

import (
	"math"
	"time"

	"github.com/kvserve/kvserve/internal/tensor"
)

// DecodePass times the weight products of one decoded token on p — the
// layers' matrices in order, one token each, as a decode step computes
// them (attention aside), as many as make up budget bytes (all of them if
// they make up less), then the classifier — and returns the time a whole
// step's products would take by that reading (the layers' time scaled to
// all of their bytes, plus the classifier's), the fastest of reps passes,
// and the bytes a step reads (DecodeBytes). A pass reads each of those
// weights once, so it measures how fast this CPU's kernels stream the
// weights where and how they are placed; a budget well past the
// last-level cache measures the same as the whole model for less. The
// classifier is timed whole: it is one matrix, often the largest, and its
// layout (packed in a private copy, as the file has it in a mapping) can
// differ where the layers' does not.
func (m *Model) DecodePass(p *tensor.Pool, reps int, budget int64) (time.Duration, int64) {
	best, total := m.probePass(p, 1, reps, budget, true)
	return best, total + int64(m.Output.Bytes())
}

// PrefillPass times the weight products of a prompt of tokens tokens on p
// as DecodePass does a decoded token's — the layers' matrices in order, as
// many as make up budget bytes, each on all the tokens — and returns the
// time all the layers' products would take by that reading, the fastest
// of reps passes. The classifier is left out: a prompt computes it for its
// last token only. Prompts are bound by the kernels' arithmetic where
// decode is bound by memory, and the kernels differ by placement (packed
// layouts, the AMX tiles, are the private copy's), so the two can rank the
// placements differently.
func (m *Model) PrefillPass(p *tensor.Pool, tokens, reps int, budget int64) time.Duration {
	best, _ := m.probePass(p, tokens, reps, budget, false)
	return best
}

// probePass times the products of the layers' first budget bytes of
// matrices (and the classifier's, with classifier) on tokens tokens, the
// fastest of reps passes with the layers' time scaled to all of their
// bytes, and returns it and those bytes.
func (m *Model) probePass(p *tensor.Pool, tokens, reps int, budget int64, classifier bool) (time.Duration, int64) {
	all := m.layerMatrices()
	ws := all
	var n, total int64
	for _, w := range all {
		total += int64(w.Bytes())
	}
	for i, w := range all {
		if n += int64(w.Bytes()); n >= budget {
			ws = all[:i+1]
			break
		}
	}
	var cols, rows int
	if classifier {
		cols, rows = m.Output.Cols, m.Output.Rows
	}
	for _, w := range ws {
		cols, rows = max(cols, w.Cols), max(rows, w.Rows)
	}
	x := make([]float32, tokens*cols)
	for i := range x {
		x[i] = float32(math.Sin(float64(i))) / 16
	}
	dst := make([]float32, tokens*rows)
	product := func(w *tensor.Matrix, n int) { p.MatMul(dst[:n*w.Rows], *w, x[:n*w.Cols], n) }
	best := time.Duration(math.MaxInt64)
	for range max(1, reps) {
		start := time.Now()
		for _, w := range ws {
			product(w, tokens)
		}
		pass := time.Duration(float64(time.Since(start)) * float64(total) / float64(max(n, 1)))
		if classifier {
			start = time.Now()
			product(&m.Output, 1)
			pass += time.Since(start)
		}
		best = min(best, pass)
	}
	return best, total
}

// TwoStreamMatrices counts the matrices whose one-token products read
// their weights in two streams on this CPU (tensor.Matrix.TwoStreams):
// where there are none, SetOneStream changes nothing.
func (m *Model) TwoStreamMatrices() int {
	n := 0
	for _, w := range append(m.layerMatrices(), &m.Output) {
		if w.TwoStreams() {
			n++
		}
	}
	return n
}

// SetOneStream sets every weight matrix's one-token products to read one
// stream (on) or, the default, two where they can (tensor.Matrix.OneStream):
// the load probe's choice by a timed decode pass of each. Not safe while
// the model computes.
func (m *Model) SetOneStream(on bool) {
	for _, w := range append(m.layerMatrices(), &m.TokenEmbed, &m.Output) {
		*w = w.OneStream(on)
	}
}
