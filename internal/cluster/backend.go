package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/engine"
)

// Candidate is a worker a Picker may choose.
type Candidate struct {
	WorkerInfo
	// Dispatched counts the requests this gateway sent the worker that have
	// not ended: load its heartbeat does not show yet.
	Dispatched int
}

// Picker chooses the worker for a request among candidates (never empty,
// every one serving the request's model and not draining): it returns an
// index into cands. The KV-aware router is a Picker.
type Picker interface {
	Pick(r *engine.Request, cands []Candidate) int
}

// CopyPicker is a Picker that may also name a candidate holding more of the
// request's prefix in memory than the chosen one, for it to copy the
// blocks from (peer ≥ 0; -1: none).
type CopyPicker interface {
	PickCopy(r *engine.Request, cands []Candidate) (i, peer int)
}

// PickWithCopy asks p for a candidate and, if p is a CopyPicker, for a
// peer to copy from (-1: none).
func PickWithCopy(p Picker, r *engine.Request, cands []Candidate) (i, peer int) {
	if cp, ok := p.(CopyPicker); ok {
		return cp.PickCopy(r, cands)
	}
	return p.Pick(r, cands), -1
}

// LeastLoaded picks the worker with the fewest requests running, waiting
// and on their way; then the one with the fewest KV blocks in use; then
// the first by id (cands come sorted by id), so ties spread predictably.
type LeastLoaded struct{}

// Pick implements Picker.
func (LeastLoaded) Pick(_ *engine.Request, cands []Candidate) int {
	best := 0
	for i := 1; i < len(cands); i++ {
		a, b := cands[i], cands[best]
		la, lb := a.Running+a.Waiting+a.Dispatched, b.Running+b.Waiting+b.Dispatched
		if la < lb || la == lb && a.KVActive < b.KVActive {
			best = i
		}
	}
	return best
}

// ErrNoWorkers: no live worker serves the model. The API answers 503.
var ErrNoWorkers = errors.New("cluster: no worker serves the model")

// errLost: a worker stopped answering a request (silent past the
// inactivity timeout, a frame lost, or nobody subscribed any more).
var errLost = errors.New("cluster: worker lost")

// BackendConfig configures a Backend. The zero value of each field means its
// default.
type BackendConfig struct {
	// Model is the model id requests are for (required): only workers
	// serving it are picked.
	Model string
	// Picker chooses the worker (default LeastLoaded).
	Picker Picker
	// Logger receives failovers (default: discard).
	Logger *slog.Logger
	// ID names the gateway in its heartbeats (default: "g-" and 8 random
	// hex digits).
	ID string
	// Heartbeat is the interval between the gateway's heartbeats (default
	// 1s): a worker stops the requests of a gateway silent for three.
	Heartbeat time.Duration
	// Registerer receives the backend's metrics (optional):
	// kvserve_cluster_workers, kvserve_cluster_retries_total,
	// kvserve_cluster_cutoffs_total, kvserve_cluster_kv_copies_total.
	Registerer prometheus.Registerer
}

// Backend is an api.Backend dispatching each request to one worker of the
// registry over NATS, and reading its outputs back as a stream.
//
// Failures: a worker that refuses a request because it is draining, has no
// subscriber any more, or goes silent before the first output, is replaced
// by another once (the client saw nothing); after an output, its silence
// for three heartbeat intervals ends every unfinished sample with
// engine.FinishError and a message saying so. No request waits forever.
type Backend struct {
	nc  *nats.Conn
	reg *Registry
	cfg BackendConfig
	log *slog.Logger

	retries, cutoffs prometheus.Counter
	copies           prometheus.Counter // dispatches naming a worker to copy KV from
	added            prometheus.Histogram
	stop             context.CancelFunc
	done             chan struct{}

	mu         sync.Mutex
	dispatched map[string]int // by worker
}

var (
	_ api.Backend = (*Backend)(nil)
	_ api.Readier = (*Backend)(nil)
)

// NewBackend returns a backend sending requests over nc to the workers reg
// knows.
func NewBackend(nc *nats.Conn, reg *Registry, cfg BackendConfig) (*Backend, error) {
	if cfg.Model == "" {
		return nil, errors.New("cluster: a backend needs its model id")
	}
	if cfg.Picker == nil {
		cfg.Picker = LeastLoaded{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ID == "" {
		var r [4]byte
		_, _ = rand.Read(r[:])
		cfg.ID = "g-" + hex.EncodeToString(r[:])
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	b := &Backend{done: make(chan struct{}), nc: nc, reg: reg, cfg: cfg, log: cfg.Logger, dispatched: map[string]int{},
		retries: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_cluster_retries_total",
			Help: "Requests sent to a second worker because the first was lost, draining or gone before their first output."}),
		cutoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_cluster_cutoffs_total",
			Help: "Requests ended with an error because their worker was lost after their first output."}),
		copies: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_cluster_kv_copies_total",
			Help: "Requests sent to a worker together with another worker to copy their prefix's KV blocks from (it holds more of it in memory)."}),
		added: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_cluster_added_seconds",
			Help:    "The cluster's part of a request's time to first token: from the start of its placement until its worker received it, plus its first token's way back from the worker's engine to the gateway (meaningful where the gateway's and workers' clocks agree).",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25}}),
	}
	if cfg.Registerer != nil {
		workers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_cluster_workers",
			Help: "Live workers of the model that take requests (not draining)."},
			func() float64 { return float64(len(b.candidates(""))) })
		for _, c := range []prometheus.Collector{workers, b.retries, b.cutoffs, b.copies, b.added} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("cluster: metrics: %w", err)
			}
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	b.stop = stop
	b.heartbeat()
	go b.beat(ctx)
	return b, nil
}

// Close stops the gateway's heartbeats. Requests still running stop on
// their workers three heartbeats later, unless cancelled before.
func (b *Backend) Close() {
	b.stop()
	<-b.done
}

func (b *Backend) beat(ctx context.Context) {
	defer close(b.done)
	t := time.NewTicker(b.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			b.heartbeat()
		}
	}
}

func (b *Backend) heartbeat() {
	data, err := json.Marshal(GatewayHeartbeat{V: Version, Gateway: b.cfg.ID, Interval: b.cfg.Heartbeat})
	if err == nil {
		err = b.nc.Publish(SubjectGatewayHeartbeat, data)
	}
	if err != nil {
		b.log.Warn("cluster: gateway heartbeat not sent", "err", err)
	}
}

// Ready reports ErrNoWorkers while no live, non-draining worker serves
// the model: the gateway's /ready is then 503.
func (b *Backend) Ready() error {
	if len(b.candidates("")) == 0 {
		return fmt.Errorf("%w %q", ErrNoWorkers, b.cfg.Model)
	}
	return nil
}

// Submit sends r to a worker and waits for the worker to queue it, so the
// engine's refusals (a full queue, a prompt too long) come back as the
// same errors the local engine returns.
func (b *Backend) Submit(ctx context.Context, r engine.Request) (api.Stream, error) {
	s := &stream{b: b, req: r, n: max(r.N, 1), cancelled: make(chan struct{})}
	s.finished = make([]bool, s.n)
	if err := s.dispatch(ctx, true); err != nil {
		return nil, err
	}
	s.stopWatch = context.AfterFunc(ctx, s.Cancel)
	return s, nil
}

// candidates returns the live, non-draining workers of the model, except
// skip.
func (b *Backend) candidates(skip string) []Candidate {
	ws := b.reg.Workers(b.cfg.Model)
	out := make([]Candidate, 0, len(ws))
	b.mu.Lock()
	for _, w := range ws {
		if !w.Draining && w.Worker != skip {
			out = append(out, Candidate{WorkerInfo: w, Dispatched: b.dispatched[w.Worker]})
		}
	}
	b.mu.Unlock()
	return out
}

func (b *Backend) count(worker string, d int) {
	b.mu.Lock()
	b.dispatched[worker] += d
	if b.dispatched[worker] <= 0 {
		delete(b.dispatched, worker)
	}
	b.mu.Unlock()
}

// attempt is one dispatch of a request to one worker: its reply inbox and
// the frames that arrived there.
type attempt struct {
	worker  string
	id      string // the request id: the inbox subject, unique
	silence time.Duration
	sub     *nats.Subscription

	mu     sync.Mutex
	queue  []incoming
	notify chan struct{} // capacity 1
}

type incoming struct {
	f   Frame
	err error
	at  time.Time // when it arrived
}

// receive runs on NATS's dispatcher: it only queues, never blocks.
func (a *attempt) receive(m *nats.Msg) {
	in := incoming{at: time.Now()}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		in.err = fmt.Errorf("%w: worker %s no longer takes requests", errLost, a.worker)
	} else if in.f, in.err = DecodeFrame(m.Data); in.err != nil {
		in.err = fmt.Errorf("%w: worker %s: %w", errLost, a.worker, in.err)
	}
	a.mu.Lock()
	a.queue = append(a.queue, in)
	a.mu.Unlock()
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

// stream is a request running on a worker. Recv is called by one reader;
// Cancel, Usage, Ended and QueueTime by anyone.
type stream struct {
	b         *Backend
	req       engine.Request
	n         int
	stopWatch func() bool
	cancelled chan struct{}

	// Reader state.
	seq uint64 // the next frame's
	// dispatched is when the current attempt's placement began, toWorker
	// the time from then until its worker received the request (0:
	// unknown), arrived when the last frame arrived; timed once the first
	// token has been measured.
	dispatched time.Time
	toWorker   time.Duration
	arrived    time.Time
	timed      bool
	delivered  bool // outputs were returned: no more retries
	retried    bool
	finished   []bool
	over       bool

	mu        sync.Mutex
	cur       *attempt
	usage     engine.Usage
	queueTime time.Duration
	ended     time.Time
	cancelOne sync.Once
	allDone   bool // every sample finished: nothing to cancel on the worker
}

// dispatch sends the request to a worker and waits for its frame 0. With
// retry set, a worker that is lost or draining is replaced by another once.
func (s *stream) dispatch(ctx context.Context, retry bool) error {
	skip := ""
	for {
		err := s.dispatchOnce(ctx, skip)
		var lost bool
		if errors.Is(err, errLost) || errors.Is(err, engine.ErrClosed) {
			lost = true
		}
		if err == nil || !lost || !retry || s.retried {
			if lost {
				return &api.Error{Code: api.CodeUnavailable, RetryAfter: time.Second, Err: err,
					Message: "no worker took the request (" + err.Error() + "); retry later"}
			}
			return err
		}
		s.retried = true
		s.b.retries.Inc()
		s.b.log.Warn("cluster: retrying the request on another worker", "err", err)
		s.mu.Lock()
		if s.cur != nil {
			skip = s.cur.worker
		}
		s.mu.Unlock()
	}
}

// dispatchOnce sends the request to one worker (not skip) and waits for
// its frame 0.
func (s *stream) dispatchOnce(ctx context.Context, skip string) error {
	b := s.b
	s.dispatched, s.toWorker = time.Now(), 0
	cands := b.candidates(skip)
	if len(cands) == 0 {
		if skip != "" {
			return fmt.Errorf("%w: no other worker of model %q to retry on", errLost, b.cfg.Model)
		}
		return &api.Error{Code: api.CodeUnavailable, RetryAfter: time.Second, Err: ErrNoWorkers,
			Message: fmt.Sprintf("no worker is serving model %q right now; retry when one has joined", b.cfg.Model)}
	}
	i, peer := PickWithCopy(b.cfg.Picker, &s.req, cands)
	if i < 0 || i >= len(cands) {
		return fmt.Errorf("cluster: the picker chose worker %d of %d", i, len(cands))
	}
	w := cands[i]
	copyFrom := ""
	if peer >= 0 && peer < len(cands) && peer != i && w.CopiesKV && cands[peer].CopiesKV {
		copyFrom = cands[peer].Worker
		b.copies.Inc()
	}
	a := &attempt{worker: w.Worker, id: b.nc.NewInbox(), silence: silentBeats * w.Interval, notify: make(chan struct{}, 1)}
	sub, err := b.nc.Subscribe(a.id, a.receive)
	if err != nil {
		return fmt.Errorf("cluster: subscribe to the reply inbox: %w", err)
	}
	a.sub = sub
	req := s.req
	if cl := w.ContextLength; len(req.Prompt) < cl && len(req.Prompt)+req.MaxTokens > cl {
		// The API clamps max_tokens to the model's context; the worker's
		// KV pool may hold less, which only the worker's heartbeat tells.
		// Clamped, as the API does, rather than refused.
		req.MaxTokens = cl - len(req.Prompt)
	}
	data, err := EncodeGenerateRequest(a.id, b.cfg.ID, copyFrom, req)
	if err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("cluster: encode the request: %w", err)
	}
	s.mu.Lock()
	select {
	case <-s.cancelled:
		s.mu.Unlock()
		_ = sub.Unsubscribe()
		return context.Canceled
	default:
	}
	s.cur = a
	s.mu.Unlock()
	b.count(a.worker, 1)
	s.seq = 0
	if err := b.nc.PublishMsg(&nats.Msg{Subject: SubjectGenerate(a.worker), Reply: a.id, Data: data}); err != nil {
		s.release(a)
		return fmt.Errorf("%w: publish to worker %s: %w", errLost, a.worker, err)
	}
	f, err := s.next(ctx)
	if err == nil && f.Error != nil {
		err = f.Error.Err()
	}
	if err != nil {
		if errors.Is(err, errLost) || ctx.Err() != nil {
			s.sendCancel(a) // it may have the request after all
		}
		s.release(a)
		return err
	}
	if !f.Received.IsZero() {
		s.toWorker = f.Received.Sub(s.dispatched)
	}
	s.note(f)
	return nil
}

// next returns the attempt's next frame, in order: errLost when the
// worker is silent past the attempt's timeout or a frame is missing.
func (s *stream) next(ctx context.Context) (Frame, error) {
	s.mu.Lock()
	a := s.cur
	s.mu.Unlock()
	var timer *time.Timer
	for {
		a.mu.Lock()
		var in incoming
		ok := len(a.queue) > 0
		if ok {
			in = a.queue[0]
			a.queue = a.queue[1:]
		}
		a.mu.Unlock()
		if ok {
			if in.err == nil && in.f.KeepAlive {
				if timer != nil {
					timer.Reset(a.silence)
				}
				continue
			}
			if timer != nil {
				timer.Stop()
			}
			switch {
			case in.err != nil:
				return Frame{}, in.err
			case in.f.ID != a.id && in.f.Error == nil:
				return Frame{}, fmt.Errorf("%w: worker %s answered request %q on the inbox of %q", errLost, a.worker, in.f.ID, a.id)
			case in.f.Seq != s.seq:
				return Frame{}, fmt.Errorf("%w: worker %s: frame %d arrived when %d was due (frames lost)", errLost, a.worker, in.f.Seq, s.seq)
			}
			s.seq++
			s.arrived = in.at
			return in.f, nil
		}
		if timer == nil {
			timer = time.NewTimer(a.silence)
		}
		select {
		case <-a.notify:
		case <-timer.C:
			return Frame{}, fmt.Errorf("%w: worker %s sent nothing for %v", errLost, a.worker, a.silence)
		case <-s.cancelled:
			timer.Stop()
			return Frame{}, context.Canceled
		case <-ctx.Done():
			timer.Stop()
			return Frame{}, ctx.Err()
		}
	}
}

// note records a frame's usage and timing.
func (s *stream) note(f Frame) {
	s.mu.Lock()
	s.usage, s.queueTime = f.Usage, f.QueueTime
	s.mu.Unlock()
}

// Recv implements api.Stream.
func (s *stream) Recv(ctx context.Context, dst []engine.Output) ([]engine.Output, error) {
	if s.over {
		return dst, engine.ErrDone
	}
	start := len(dst)
	for {
		f, err := s.next(ctx)
		switch {
		case errors.Is(err, context.Canceled) && s.isCancelled():
			return s.ended0(start, s.end(dst, engine.FinishCancel, nil))
		case errors.Is(err, errLost):
			s.mu.Lock()
			a := s.cur
			s.mu.Unlock()
			s.sendCancel(a)
			s.release(a)
			if !s.delivered && !s.retried {
				s.b.log.Warn("cluster: worker lost before the first output; retrying elsewhere", "err", err)
				s.retried = true
				s.b.retries.Inc()
				err = s.dispatchOnce(ctx, a.worker)
				switch {
				case err == nil:
					continue
				case s.isCancelled():
					return s.ended0(start, s.end(dst, engine.FinishCancel, nil))
				case ctx.Err() != nil:
					return dst, err // the reader's ctx: it cancels
				}
			}
			s.b.cutoffs.Inc()
			s.b.log.Warn("cluster: request cut off: its worker was lost", "worker", a.worker, "err", err)
			return s.ended0(start, s.end(dst, engine.FinishError, fmt.Errorf("the request was cut off: %w", err)))
		case err != nil:
			return dst, err // the reader's ctx: it cancels
		}
		s.note(f)
		for _, o := range f.Outputs {
			if o.Index < 0 || o.Index >= s.n || s.finished[o.Index] {
				continue
			}
			if o.Finish != engine.FinishNone {
				s.finished[o.Index] = true
			}
			if !s.timed && o.Token >= 0 && !o.Time.IsZero() && s.toWorker > 0 {
				// The cluster's part of the time to the first token: the
				// placement and the request's way to the worker, then the
				// token's way back (the clocks must agree: one host, or
				// hosts kept close by NTP).
				s.timed = true
				s.b.added.Observe((s.toWorker + s.arrived.Sub(o.Time)).Seconds())
			}
			dst = append(dst, o)
		}
		if f.Done || !slices.Contains(s.finished, false) {
			// Every sample has finished (the frame carrying the last
			// outputs has the final usage: the done frame adds nothing),
			// or the worker ended the stream without finishing them.
			s.mu.Lock()
			a := s.cur
			s.mu.Unlock()
			s.release(a)
			return s.ended0(start, s.end(dst, engine.FinishError, fmt.Errorf("cluster: worker %s ended the stream early", a.worker)))
		}
		if len(dst) > start {
			s.delivered = true
			return dst, nil
		}
	}
}

// ended0 is Recv's answer once the stream has ended: the outputs dst
// gained since start, or engine.ErrDone when there are none (every sample
// had already finished).
func (s *stream) ended0(start int, dst []engine.Output) ([]engine.Output, error) {
	if len(dst) == start {
		return dst, engine.ErrDone
	}
	return dst, nil
}

// end finishes every unfinished sample with reason (and err) and ends the
// stream.
func (s *stream) end(dst []engine.Output, reason engine.FinishReason, err error) []engine.Output {
	for i, f := range s.finished {
		if !f {
			s.finished[i] = true
			dst = append(dst, engine.Output{Index: i, Token: -1, Finish: reason, Err: err})
		}
	}
	s.over = true
	s.mu.Lock()
	s.allDone = true // nothing left to cancel on the worker
	if s.ended.IsZero() {
		s.ended = time.Now()
	}
	s.mu.Unlock()
	if s.stopWatch != nil {
		s.stopWatch()
	}
	return dst
}

func (s *stream) isCancelled() bool {
	select {
	case <-s.cancelled:
		return true
	default:
		return false
	}
}

// release ends an attempt: its inbox is unsubscribed and its worker no
// longer counts it.
func (s *stream) release(a *attempt) {
	if a == nil {
		return
	}
	a.mu.Lock()
	sub := a.sub
	a.sub = nil
	a.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
		s.b.count(a.worker, -1)
	}
}

// sendCancel tells a's worker to stop the request.
func (s *stream) sendCancel(a *attempt) {
	data, err := json.Marshal(Cancel{V: Version, ID: a.id})
	if err == nil {
		err = s.b.nc.Publish(SubjectCancel(a.worker), data)
	}
	if err != nil {
		s.b.log.Warn("cluster: could not cancel a request on its worker", "worker", a.worker, "err", err)
	}
}

// Cancel implements api.Stream: the worker is told to stop (unless every
// sample had finished), and the inbox is released.
func (s *stream) Cancel() {
	s.cancelOne.Do(func() {
		s.mu.Lock()
		close(s.cancelled)
		a, done := s.cur, s.allDone
		s.mu.Unlock()
		if a == nil {
			return
		}
		a.mu.Lock()
		live := a.sub != nil
		a.mu.Unlock()
		if live && !done {
			s.sendCancel(a)
		}
		s.release(a)
	})
}

// Worker names the worker serving the request (the last one tried), for
// the usage ledger.
func (s *stream) Worker() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil {
		return ""
	}
	return s.cur.worker
}

// Usage implements api.Stream.
func (s *stream) Usage() engine.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// Ended implements api.Stream: when the last output reached the gateway
// (the worker's clock, in Frame.Ended, may differ from this machine's).
func (s *stream) Ended() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// QueueTime is how long the request waited in its worker's queue.
func (s *stream) QueueTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queueTime
}
