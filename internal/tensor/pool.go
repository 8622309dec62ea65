package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Pool is a fixed set of persistent worker goroutines that run the
// data-parallel parts of the kernels (MatMul, and Parallel for callers).
//
// Why persistent workers: a decode step of a small model runs a few hundred
// matrix-vector products of ~10–100 µs each, so starting goroutines (or even
// waking parked ones through the scheduler, tens of µs in a VM) for every
// call would cost a large share of the step. Workers therefore spin for a
// while after each job and only park on a channel when no work has come for
// spinLimit polls. The calling goroutine always works too, so a Pool of N
// threads starts N-1 goroutines.
//
// Why items are claimed rather than assigned: a job is cut into items that
// any thread claims from one atomic word holding (generation, item count,
// next item). The caller claims items like everyone else and then waits
// only for items that were claimed and are still running, never for a
// worker to show up: on a busy machine a worker's OS thread may be
// descheduled for milliseconds, and a job must not wait for it. A worker
// that wakes late finds the generation changed and claims nothing, so job
// fields are only read by threads holding an unfinished item of that job,
// while the caller cannot yet have replaced them.
//
// A Pool also owns the scratch memory that MatMul converts activations into;
// it grows to the largest request and is reused, so steady-state calls
// allocate nothing.
//
// Calls on one Pool are serialised by a mutex; a function passed to Parallel
// must not call back into the same Pool (it would deadlock).
type Pool struct {
	threads int
	nice    int // > 0: background threads (see PoolOptions.Nice)
	mu      sync.Mutex

	_     cacheLinePad
	gen   atomic.Uint32 // generation of the current job, bumped per dispatch
	_     cacheLinePad
	claim atomic.Uint64 // gen<<40 | items<<20 | next item
	_     cacheLinePad
	fin   atomic.Int64 // items of the current job finished
	_     cacheLinePad

	quit    atomic.Bool
	resting atomic.Bool // idle workers park at once (Rest) until the next dispatch
	closed  bool
	// spinLimit is the polls an idle worker makes before parking
	// (spinLimit below; tests raise it).
	spinLimit int
	workers   []poolWorker
	wg        sync.WaitGroup

	// The current job; written by the dispatcher before gen is bumped.
	kind   jobKind
	fn     func(lo, hi int)
	n      int
	chunks int
	mm     matmulJob
	bounds []int // the current job's token ranges (MatMulsPrepCost)

	act actBuf
	// s1, act2 and minsOut serve the products of block minima
	// (addMinsParts): their activations, padded and converted to F16, and
	// their outputs, per product.
	s1      []float32
	act2    actBuf
	minsOut [maxMatMuls][]float32
	// scratch is each thread's for the streamed kernels (stream.go).
	scratch []streamScratch
}

type cacheLinePad [64]byte

type jobKind uint8

const (
	jobParallel jobKind = iota
	jobMatMul
	jobConvert
)

// Claim word layout: 24 bits of generation, 20 bits of item count, 20 bits
// of next item.
const (
	claimBits = 20
	maxItems  = 1<<claimBits - 1
	claimMask = 1<<claimBits - 1
	genMask   = 1<<24 - 1
)

type poolWorker struct {
	sleeping atomic.Int32
	wake     chan struct{}
	_        cacheLinePad
}

// yieldEvery is how long a thread runs items of one job before it lets the
// Go scheduler run other goroutines queued on its P. Jobs end in a wait
// that yields anyway, but one job can be long — the output layer of a
// 64-sequence decode step is ~10 ms here — and for its whole length every P
// is held by a compute thread, so an HTTP handler woken meanwhile (a new
// request to parse and submit, a stream's last chunk to write) would wait
// for the job's end or the runtime's 10 ms preemption. Checked between
// items (a matrix product's take tens of microseconds; a Parallel job has
// one item per thread, so it yields only at its end), so a handler waits
// about this long at most; a yield with nothing else runnable costs well
// under a microsecond.
const yieldEvery = 200 * time.Microsecond

// An idle worker first polls for new work with the CPU's spin-wait hint
// (cpuRelax, tens of nanoseconds) spinPause times, then yields the OS thread
// between polls (osYield, about a microsecond) up to spinLimit polls in all,
// then parks: a few hundred microseconds of waiting, longer than the gaps
// between the matrix products of a decode step, short enough not to burn a
// core when the engine is idle. Yielding matters when the machine has more
// runnable threads than cores: a spinner must not take the CPU from the
// thread it is waiting for. Every 64 polls the spinner also yields to the Go
// scheduler, so a goroutine made runnable on its P (for example the caller,
// after waking a parked worker) never waits for the spin to end.
const (
	spinPause = 1 << 9
	spinLimit = spinPause + 1<<9
)

// NewPool starts a pool of threads workers (the caller counts as one).
// threads <= 0 means runtime.NumCPU().
func NewPool(threads int) *Pool { return NewPoolWith(PoolOptions{Threads: threads}) }

// PoolOptions configures NewPoolWith. The zero value of each field means
// its default.
type PoolOptions struct {
	// Threads is the number of threads that share each job, the caller
	// included (default runtime.NumCPU()).
	Threads int
	// Nice, when positive, makes the pool's threads background threads:
	// each worker goroutine is locked to its own OS thread whose
	// scheduling priority is lowered (Linux: 1..19 raise the nice value
	// by that much; 20 moves the threads to the SCHED_IDLE policy;
	// elsewhere the threads are locked but keep their priority), and no
	// pool thread ever hands its P to other goroutines while it spins.
	// The caller that drives the pool should make its own thread a
	// background thread too, with LockBackground.
	//
	// Why: a server runs latency-sensitive goroutines (HTTP handlers
	// writing each token to its client) beside the compute threads, which
	// are busy or spinning through every forward pass. At equal priority
	// the OS time-slices them, and a handler thread that wakes may wait a
	// slice (milliseconds) behind the compute threads. A nice value only
	// shortens that wait under Linux's EEVDF scheduler (a running thread
	// may keep the CPU to the end of its slice); under SCHED_IDLE any
	// normal thread that wakes takes the CPU at once. SCHED_IDLE threads
	// run only when nothing else wants the core, so it suits dedicated
	// machines, not ones shared with other busy processes.
	//
	// The pool's threads then occupy Threads Ps without yielding them, so
	// GOMAXPROCS must exceed Threads for other goroutines to run promptly
	// (they would otherwise wait for the runtime's 10 ms preemption).
	Nice int

	// spinLimit overrides the package's spinLimit (tests only).
	spinLimit int
}

// NewPoolWith starts a pool configured by o.
func NewPoolWith(o PoolOptions) *Pool {
	threads := o.Threads
	if threads <= 0 {
		threads = runtime.NumCPU()
	}
	p := &Pool{threads: threads, nice: max(o.Nice, 0), workers: make([]poolWorker, threads-1), spinLimit: spinLimit,
		scratch: make([]streamScratch, threads)}
	if o.spinLimit > 0 {
		p.spinLimit = o.spinLimit
	}
	// Background workers lower their threads before NewPoolWith returns,
	// so no job ever runs on a worker thread at normal priority.
	var lowered sync.WaitGroup
	lowered.Add(len(p.workers))
	for i := range p.workers {
		p.workers[i].wake = make(chan struct{}, 1)
		p.wg.Add(1)
		go p.work(i+1, &lowered)
	}
	lowered.Wait()
	return p
}

// Threads returns the number of threads that share each job.
func (p *Pool) Threads() int { return p.threads }

// LockBackground makes the calling goroutine's thread a background thread
// like the pool's workers (PoolOptions.Nice): it locks the goroutine to its
// OS thread for good and lowers the thread's scheduling priority. The
// goroutine that drives a background pool calls it once; when that
// goroutine exits, its thread exits too. On a pool without Nice it does
// nothing. The error says why the priority could not be lowered (the
// thread stays locked).
func (p *Pool) LockBackground() error {
	if p.nice == 0 {
		return nil
	}
	runtime.LockOSThread()
	return lowerThreadPriority(p.nice)
}

// Rest tells the idle workers to park now instead of spinning for the next
// job; the next job wakes them. The caller calls it when it leaves the pool
// for a while — the engine, between a step's last product and its next
// pass, delivering tokens to the HTTP handlers they wake: a spinning worker
// keeps its P, and it keeps it from the scheduler's work stealing too (each
// of its yields puts it on the global run queue, which an idle P looks at
// before stealing), so every handler woken from the caller's thread would
// run on the caller's P alone, one after another. A parked worker's P goes
// idle and takes half of them, and, idle, also polls the network, which
// a P busy with spinning never does.
func (p *Pool) Rest() { p.resting.Store(true) }

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
func (p *Pool) work(id int, lowered *sync.WaitGroup) {
	defer p.wg.Done()
	if p.nice > 0 {
		// Never unlocked: the thread exits with the goroutine, so its
		// lowered priority never passes to a thread that runs other code.
		runtime.LockOSThread()
		_ = lowerThreadPriority(p.nice)
	}
	lowered.Done()
	w := &p.workers[id-1]
	// gen is 0 when the pool is created; a worker that starts late must
	// still look at the jobs dispatched before it first looked.
	var seen uint32
	for {
		g := p.gen.Load()
		for spins := 0; g == seen; spins++ {
			if spins >= p.spinLimit || p.resting.Load() {
				w.sleeping.Store(1)
				if g = p.gen.Load(); g != seen {
					if !w.sleeping.CompareAndSwap(1, 0) {
						<-w.wake // the dispatcher saw us asleep and sent a token
					}
					break
				}
				<-w.wake
				spins = 0
			} else if spins%64 == 63 && p.nice == 0 {
				runtime.Gosched() // let goroutines queued on this P run
			} else if spins < spinPause {
				cpuRelax()
			} else {
				osYield()
			}
			g = p.gen.Load()
		}
		seen = g
		if p.quit.Load() {
			return
		}
		p.runItems(g, id)
	}
}

// runItems claims and runs items of job generation g until none are left,
// yielding the P every yieldEvery where p.yields().
func (p *Pool) runItems(g uint32, id int) {
	last := time.Now()
	yield := p.yields()
	for {
		c := p.claim.Load()
		if uint32(c>>(2*claimBits))&genMask != g&genMask {
			return // a later job (or none)
		}
		items, next := c>>claimBits&claimMask, c&claimMask
		if next >= items {
			return
		}
		if !p.claim.CompareAndSwap(c, c+1) {
			continue
		}
		p.runItem(int(next), id)
		p.fin.Add(1)
		if yield {
			if now := time.Now(); now.Sub(last) >= yieldEvery {
				runtime.Gosched()
				last = now
			}
		}
	}
}

// yields says whether runItems hands its P over between items: where the
// pool's threads hold every P, unless they are background ones, which never
// do (PoolOptions.Nice). With a P left idle, a goroutine made ready runs
// there at once, and a yield would only wake that P's thread to look for
// work (a futex call each time, on this thread).
func (p *Pool) yields() bool { return p.nice == 0 && p.threads >= runtime.GOMAXPROCS(0) }

// dispatch runs the job set up in p, cut into items, on all threads and
// returns when every item has finished. p.mu must be held.
func (p *Pool) dispatch(items int) {
	if items > maxItems {
		panic("tensor: too many work items")
	}
	g := p.gen.Load() + 1
	p.fin.Store(0)
	p.claim.Store(uint64(g&genMask)<<(2*claimBits) | uint64(items)<<claimBits)
	if p.closed || p.threads == 1 || items == 1 {
		p.runItems(g, 0)
		return
	}
	p.resting.Store(false)
	p.gen.Store(g)
	p.wakeAll()
	p.runItems(g, 0)
	// Wait for items other threads claimed. A worker woken from its
	// channel lands in this P's run queue, so after a short spin yield
	// regularly to let it (or anything else this P owes time to) run.
	for spins := 1; p.fin.Load() != int64(items); spins++ {
		switch {
		case spins%64 == 0 && p.nice == 0:
			runtime.Gosched()
		case spins < 256:
			cpuRelax()
		default:
			osYield() // the worker may be waiting for this CPU
		}
	}
}

// runItem executes item i of the current job on thread id.
func (p *Pool) runItem(i, id int) {
	switch p.kind {
	case jobParallel:
		lo, hi := p.n*i/p.chunks, p.n*(i+1)/p.chunks
		if lo < hi {
			p.fn(lo, hi)
		}
	case jobMatMul:
		p.mm.runItem(p, i, id)
	case jobConvert:
		p.mm.convert(p, i, id)
	}
}

// Parallel splits [0,n) into one contiguous chunk per thread, runs fn on
// each non-empty chunk concurrently (the caller takes part) and returns when
// all are done.
func (p *Pool) Parallel(n int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kind, p.fn, p.n, p.chunks = jobParallel, fn, n, min(n, p.threads)
	p.dispatch(p.chunks)
	p.fn = nil
}
