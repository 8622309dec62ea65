package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// Pool is a fixed set of persistent worker goroutines that run the
// data-parallel parts of the kernels (MatMul, and Parallel for callers).
//
// Why persistent workers: a decode step of a small model runs a few hundred
// matrix-vector products of ~100 µs or less each, so starting goroutines (or
// even waking parked ones through the scheduler) for every call would cost a
// noticeable share of the step. Workers therefore spin for a short while
// after each job, watching a generation counter, and only park on a channel
// when no work has come for spinLimit polls. The calling goroutine always
// takes a share of the work itself, so a Pool of N threads starts N-1
// goroutines.
//
// A Pool also owns the scratch memory that MatMul converts activations into;
// it grows to the largest request and is reused, so steady-state calls
// allocate nothing.
//
// Calls on one Pool are serialised by a mutex; a function passed to Parallel
// must not call back into the same Pool (it would deadlock).
type Pool struct {
	threads int
	mu      sync.Mutex

	_    cacheLinePad
	gen  atomic.Uint32 // bumped once per dispatched job
	_    cacheLinePad
	done atomic.Int32 // workers that finished the current job
	_    cacheLinePad
	next atomic.Int64 // next work item of a dynamically scheduled job
	_    cacheLinePad

	quit    atomic.Bool
	closed  bool
	workers []poolWorker
	wg      sync.WaitGroup

	// The current job; written by the dispatcher before gen is bumped.
	kind jobKind
	fn   func(lo, hi int)
	n    int
	mm   matmulJob

	act actBuf
}

type cacheLinePad [64]byte

type jobKind uint8

const (
	jobParallel jobKind = iota
	jobMatMul
	jobConvert
)

type poolWorker struct {
	sleeping atomic.Int32
	wake     chan struct{}
	_        cacheLinePad
}

// spinLimit is how many times an idle worker polls for new work before it
// parks. Each poll is a few nanoseconds, plus a scheduler yield every
// yieldEvery polls, so this is on the order of 100 µs.
const (
	spinLimit  = 1 << 15
	yieldEvery = 1 << 8
)

// NewPool starts a pool of threads workers (the caller counts as one).
// threads <= 0 means runtime.NumCPU().
func NewPool(threads int) *Pool {
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &Pool{threads: threads, workers: make([]poolWorker, threads-1)}
	for i := range p.workers {
		p.workers[i].wake = make(chan struct{}, 1)
		p.wg.Add(1)
		go p.work(i + 1)
	}
	return p
}

// Threads returns the number of threads that share each job.
func (p *Pool) Threads() int { return p.threads }

// Close stops the workers and waits for them to exit. Later calls run
// serially on the caller.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	p.quit.Store(true)
	p.gen.Add(1)
	p.wakeAll()
	p.wg.Wait()
}

func (p *Pool) wakeAll() {
	for i := range p.workers {
		w := &p.workers[i]
		if w.sleeping.CompareAndSwap(1, 0) {
			w.wake <- struct{}{}
		}
	}
}

// work is the loop of worker id (1-based; the caller is 0).
func (p *Pool) work(id int) {
	defer p.wg.Done()
	w := &p.workers[id-1]
	// gen is 0 when the pool is created; a worker that starts late must
	// still run the jobs dispatched before it first looked.
	var seen uint32
	for {
		g := p.gen.Load()
		for spins := 0; g == seen; spins++ {
			if spins >= spinLimit {
				w.sleeping.Store(1)
				if g = p.gen.Load(); g != seen {
					if !w.sleeping.CompareAndSwap(1, 0) {
						<-w.wake // the dispatcher saw us asleep and sent a token
					}
					break
				}
				<-w.wake
				spins = 0
			} else if spins%yieldEvery == yieldEvery-1 {
				runtime.Gosched()
			}
			g = p.gen.Load()
		}
		seen = g
		if p.quit.Load() {
			return
		}
		p.run(id)
		p.done.Add(1)
	}
}

// dispatch runs the job set up in p on all threads and returns when every
// thread has finished it. p.mu must be held.
func (p *Pool) dispatch() {
	p.next.Store(0)
	if p.closed || p.threads == 1 {
		for id := 0; id < p.threads; id++ {
			p.run(id)
		}
		return
	}
	p.done.Store(0)
	p.gen.Add(1)
	p.wakeAll()
	p.run(0)
	want := int32(p.threads - 1)
	for spins := 0; p.done.Load() != want; spins++ {
		if spins%yieldEvery == yieldEvery-1 {
			runtime.Gosched()
		}
	}
}

// run executes thread id's share of the current job.
func (p *Pool) run(id int) {
	switch p.kind {
	case jobParallel:
		lo, hi := p.n*id/p.threads, p.n*(id+1)/p.threads
		if lo < hi {
			p.fn(lo, hi)
		}
	case jobMatMul:
		p.mm.run(p)
	case jobConvert:
		p.mm.convert(p, id)
	}
}

// Parallel splits [0,n) into one contiguous chunk per thread, runs fn on
// each non-empty chunk concurrently (the caller runs the first) and returns
// when all are done.
func (p *Pool) Parallel(n int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kind, p.fn, p.n = jobParallel, fn, n
	p.dispatch()
	p.fn = nil
}
