package sim

import (
	"context"
	"sync"
	"time"

	"github.com/kvserve/kvserve/internal/batch"
)

// forwarder is the forward pass a Recorder wraps (engine.Forwarder).
type forwarder interface {
	Shape() batch.Shape
	Forward(ctx context.Context, seqs []batch.Seq) error
}

// Recorder is a forward pass that times the one it wraps and records each
// pass's features and duration, for Fit. It passes the engine's optional
// capabilities (Parallel, Rest, LockBackground) through, so the wrapped
// engine schedules as it would without it.
type Recorder struct {
	inner forwarder
	mu    sync.Mutex
	rec   []Pass
}

// NewRecorder wraps f.
func NewRecorder(f forwarder) *Recorder { return &Recorder{inner: f} }

// Shape is the wrapped pass's shape.
func (r *Recorder) Shape() batch.Shape { return r.inner.Shape() }

// Forward runs and times the wrapped pass.
func (r *Recorder) Forward(ctx context.Context, seqs []batch.Seq) error {
	f := FeaturesOf(seqs)
	start := time.Now()
	err := r.inner.Forward(ctx, seqs)
	d := time.Since(start)
	if err == nil {
		r.mu.Lock()
		r.rec = append(r.rec, Pass{Features: f, Duration: d})
		r.mu.Unlock()
	}
	return err
}

// Passes returns the passes recorded so far.
func (r *Recorder) Passes() []Pass {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Pass(nil), r.rec...)
}

// Parallel passes through the wrapped pass's thread pool (sequentially
// when it has none).
func (r *Recorder) Parallel(n int, fn func(lo, hi int)) {
	if p, ok := r.inner.(interface{ Parallel(int, func(int, int)) }); ok {
		p.Parallel(n, fn)
		return
	}
	fn(0, n)
}

// Rest passes through.
func (r *Recorder) Rest() {
	if p, ok := r.inner.(interface{ Rest() }); ok {
		p.Rest()
	}
}

// LockBackground passes through.
func (r *Recorder) LockBackground() error {
	if p, ok := r.inner.(interface{ LockBackground() error }); ok {
		return p.LockBackground()
	}
	return nil
}

func (r *Recorder) reset() {
	r.mu.Lock()
	r.rec = r.rec[:0]
	r.mu.Unlock()
}
