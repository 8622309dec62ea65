package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Pass is one measured forward pass.
type Pass struct {
	Features
	Duration time.Duration `json:"duration_ns"`
}

// FitReport says how well a fitted Cost reproduces the passes it came from.
type FitReport struct {
	Passes int `json:"passes"`
	// MedianError and P90Error are of |modelled − measured| / measured.
	MedianError float64 `json:"median_relative_error"`
	P90Error    float64 `json:"p90_relative_error"`
	// TotalError is (Σ modelled − Σ measured) / Σ measured: the bias over
	// the whole run.
	TotalError float64 `json:"total_relative_error"`
}

// Fit finds the non-negative Cost that minimises the passes' squared
// relative error (a decode pass of a few milliseconds matters as much as a
// prefill pass of a second: each is some request's latency). Terms that no
// pass exercises are zero.
func Fit(passes []Pass) (Cost, *FitReport, error) {
	if len(passes) < 4 {
		return Cost{}, nil, fmt.Errorf("sim: fit: %d passes; need at least 4", len(passes))
	}
	const terms = numTerms
	rows := make([][terms]float64, 0, len(passes))
	ys := make([]float64, 0, len(passes))
	for _, p := range passes {
		if p.Duration <= 0 {
			continue
		}
		y := p.Duration.Seconds()
		// Weight each row by 1/y: least squares on relative error.
		r := p.terms()
		for j := range r {
			r[j] /= y
		}
		rows = append(rows, r)
		ys = append(ys, 1)
	}
	active := [terms]bool{}
	for j := range terms {
		for _, r := range rows {
			if r[j] != 0 {
				active[j] = true
				break
			}
		}
	}
	var x [terms]float64
	// Active-set non-negative least squares: solve on the active terms,
	// drop the most negative one, repeat.
	for {
		var err error
		x, err = solve(rows, ys, active)
		if err != nil {
			return Cost{}, nil, err
		}
		worst := -1
		for j := range terms {
			if active[j] && x[j] < 0 && (worst < 0 || x[j] < x[worst]) {
				worst = j
			}
		}
		if worst < 0 {
			break
		}
		active[worst] = false
	}
	c := costOf(x)
	if err := c.valid(); err != nil {
		return Cost{}, nil, fmt.Errorf("sim: fit: %w", err)
	}
	return c, Report(c, passes), nil
}

// solve solves the normal equations of the weighted rows on the active
// terms (Gaussian elimination with partial pivoting; the system is tiny).
func solve(rows [][numTerms]float64, ys []float64, active [numTerms]bool) ([numTerms]float64, error) {
	var idx []int
	for j, a := range active {
		if a {
			idx = append(idx, j)
		}
	}
	var x [numTerms]float64
	n := len(idx)
	if n == 0 {
		return x, errors.New("sim: fit: no term is exercised by the passes")
	}
	// Scale columns to unit size so the per-token terms (tiny) and the
	// fixed term (large) condition the system alike.
	scale := make([]float64, n)
	for a, j := range idx {
		for _, r := range rows {
			scale[a] = max(scale[a], math.Abs(r[j]))
		}
	}
	m := make([][]float64, n)
	for a := range m {
		m[a] = make([]float64, n+1)
	}
	for i, r := range rows {
		for a, ja := range idx {
			va := r[ja] / scale[a]
			for b, jb := range idx {
				m[a][b] += va * r[jb] / scale[b]
			}
			m[a][n] += va * ys[i]
		}
	}
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(m[r][c]) > math.Abs(m[p][c]) {
				p = r
			}
		}
		if math.Abs(m[p][c]) < 1e-12 {
			return x, errors.New("sim: fit: the passes do not separate the cost terms (vary batch sizes and prompt lengths)")
		}
		m[c], m[p] = m[p], m[c]
		for r := range n {
			if r == c {
				continue
			}
			k := m[r][c] / m[c][c]
			for k2 := c; k2 <= n; k2++ {
				m[r][k2] -= k * m[c][k2]
			}
		}
	}
	for a, j := range idx {
		x[j] = m[a][n] / m[a][a] / scale[a]
	}
	return x, nil
}

// Report measures how well c reproduces passes.
func Report(c Cost, passes []Pass) *FitReport {
	errs := make([]float64, 0, len(passes))
	var model, meas float64
	for _, p := range passes {
		if p.Duration <= 0 {
			continue
		}
		t := c.Time(p.Features).Seconds()
		y := p.Duration.Seconds()
		errs = append(errs, math.Abs(t-y)/y)
		model += t
		meas += y
	}
	r := &FitReport{Passes: len(errs)}
	if len(errs) == 0 {
		return r
	}
	slices.Sort(errs)
	r.MedianError = errs[len(errs)/2]
	r.P90Error = errs[len(errs)*9/10]
	r.TotalError = (model - meas) / meas
	return r
}
