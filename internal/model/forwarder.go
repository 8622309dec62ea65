package model

import (
	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/tensor"
)

// ForwarderOptions configures NewForwarder. The zero value of each field
// means its default.
type ForwarderOptions struct {
	// Threads for the compute pool (default: all cores).
	Threads int
	// Nice, when positive, runs the compute threads as background threads
	// (tensor.PoolOptions.Nice).
	Nice int
	// MaxTokens is the most tokens one pass accepts (default 512).
	MaxTokens int
	// KVType is the element type of the KV the passes read and write: F16
	// (what servers use), F32 or Q8_0. tensor.DType's zero value is F32, so
	// this field has no implicit default: set it.
	KVType tensor.DType
}

// Forwarder is a Runner with a compute pool of its own: the forward pass an
// engine drives (engine.Forwarder), with the pool's scheduling capabilities
// (Parallel, Rest, LockBackground) that the engine discovers by type
// assertion. Its owner closes it after the engine that uses it.
type Forwarder struct {
	*Runner
	pool *tensor.Pool
}

// NewForwarder starts a compute pool and a Runner for m.
func NewForwarder(m *Model, o ForwarderOptions) (*Forwarder, error) {
	pool := tensor.NewPoolWith(tensor.PoolOptions{Threads: o.Threads, Nice: o.Nice})
	r, err := NewRunner(m, pool, o.MaxTokens, o.KVType)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &Forwarder{Runner: r, pool: pool}, nil
}

// Shape reports the model's vocabulary, context and KV geometry.
func (f *Forwarder) Shape() batch.Shape {
	c := &f.m.Config
	return batch.Shape{Vocab: c.Vocab, Context: c.Context, Layers: c.Layers, KVDim: c.KVDim(),
		KVType: f.kvType, MaxTokens: f.maxTokens}
}

// Parallel runs fn over [0, n) split across the compute threads.
func (f *Forwarder) Parallel(n int, fn func(lo, hi int)) { f.pool.Parallel(n, fn) }

// Rest parks the idle compute threads until the next pass (tensor.Pool.Rest).
func (f *Forwarder) Rest() { f.pool.Rest() }

// LockBackground lowers the calling thread like the compute threads
// (tensor.Pool.LockBackground); the goroutine that drives the passes calls it.
func (f *Forwarder) LockBackground() error { return f.pool.LockBackground() }

// Threads is the number of compute threads.
func (f *Forwarder) Threads() int { return f.pool.Threads() }

// Close stops the compute threads.
func (f *Forwarder) Close() { f.pool.Close() }
