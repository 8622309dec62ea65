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
	sink  func(Pass)
	mu    sync.Mutex
	rec   []Pass
}

// NewRecorder wraps f, keeping the passes in memory (Passes).
func NewRecorder(f forwarder) *Recorder { return &Recorder{inner: f} }

// NewStreamingRecorder wraps f and hands each pass to sink (from the
// engine's step loop; it must be quick) instead of keeping it: a server
// that records its real traffic for a later fit (`kvserve sim calibrate
// --passes`) runs for days.
func NewStreamingRecorder(f forwarder, sink func(Pass)) *Recorder {
	return &Recorder{inner: f, sink: sink}
}

// Shape is the wrapped pass's shape.
func (r *Recorder) Shape() batch.Shape { return r.inner.Shape() }

// Forward runs and times the wrapped pass.
func (r *Recorder) Forward(ctx context.Context, seqs []batch.Seq) error {
	f := FeaturesOf(seqs)
	start := time.Now()
	err := r.inner.Forward(ctx, seqs)
	d := time.Since(start)
	if err == nil {
		p := Pass{Features: f, Duration: d}
		if r.sink != nil {
			r.sink(p)
			return nil
		}
		r.mu.Lock()
		r.rec = append(r.rec, p)
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
