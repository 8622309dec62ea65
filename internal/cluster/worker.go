package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// WorkerConfig configures a Worker. The zero value of each field means its
// default.
type WorkerConfig struct {
	// ID names the worker on the subjects (default: "w-" and 8 random hex
	// digits). See ValidID.
	ID string
	// Model is the id of the model the engine serves (required): gateways
	// send a worker only requests for its model.
	Model string
	// ContextLength is advertised in heartbeats (default: the engine's
	// MaxContext bounded by its KV pool).
	ContextLength int
	// Heartbeat is the interval between heartbeats (default 1s). A gateway
	// drops a worker silent for three intervals, and a request stream
	// silent for as long fails.
	Heartbeat time.Duration
	// Events is the engine's KV event log (engine.Config.Events), published
	// on SubjectEvents (nil: none published).
	Events *kv.EventLog
	// Logger receives what an operator should know (default: discard).
	Logger *slog.Logger
	// NoKVCopy: copy no KV blocks from peers or to them (see SubjectKV),
	// even where the engine can.
	NoKVCopy bool
}

// Engine is what a worker serves: kvserve's own engine (Local), or an
// adapter in front of another server that predicts its cache
// (internal/upstream). Its KV events, if any, come through
// WorkerConfig.Events.
type Engine interface {
	// Submit queues r; its refusals are the engine package's errors.
	Submit(ctx context.Context, r engine.Request) (Job, error)
	// Now is the load the heartbeats announce.
	Now() engine.Stats
	// BlockSize is the KV block size the engine hashes prompts by.
	BlockSize() int
	// ContextLength is the longest sequence it can hold.
	ContextLength() int
	// Snapshot lists every block held, as stored events, and the sequence
	// number the next event gets.
	Snapshot() ([]kv.Event, uint64)
}

// Job is a submitted request's outputs (an *engine.Stream for Local).
type Job interface {
	Recv(ctx context.Context, dst []engine.Output) ([]engine.Output, error)
	Usage() engine.Usage
	QueueTime() time.Duration
	Ended() time.Time
	Cancel()
}

// Local is kvserve's engine e as a worker's Engine.
func Local(e *engine.Engine) Engine { return localEngine{e} }

type localEngine struct{ e *engine.Engine }

func (l localEngine) Submit(ctx context.Context, r engine.Request) (Job, error) {
	st, err := l.e.Submit(ctx, r)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (l localEngine) Now() engine.Stats              { return l.e.Now() }
func (l localEngine) BlockSize() int                 { return l.e.Config().BlockSize }
func (l localEngine) Snapshot() ([]kv.Event, uint64) { return l.e.KV().Snapshot() }

// ContextLength is the model's context bounded by the KV pool.
func (l localEngine) ContextLength() int {
	return min(l.e.Config().MaxContext, l.e.KV().NumBlocks()*l.e.Config().BlockSize)
}

// DefaultHeartbeat is the default WorkerConfig.Heartbeat.
const DefaultHeartbeat = time.Second

// silentBeats is how many heartbeat intervals of silence mean a worker is
// gone.
const silentBeats = 3

// eventBatch is the most events one EventBatch carries: a stored event
// holds its blocks' tokens, so a batch stays far below NATS's default 1 MB
// message limit.
const eventBatch = 256

// frameOutputs is the most outputs one Frame carries.
const frameOutputs = 256

// snapshotChunk is how many events go in one SnapshotChunk: a chunk stays
// far below NATS's default 1 MB message limit.
const snapshotChunk = 2000

// Worker serves an engine's requests over NATS. Every subject is addressed
// by the worker's id; nothing needs its network address. Close drains it.
//
// Goroutines: NATS's dispatcher runs each subscription's handler (one at a
// time per subscription); each request has one pump goroutine that feeds
// its reply stream until the engine's stream ends; one goroutine
// heartbeats and one publishes KV events. Close ends them all.
type Worker struct {
	nc  *nats.Conn
	e   Engine
	cfg WorkerConfig
	log *slog.Logger

	mu       sync.Mutex
	inflight map[string]*job // by request id
	draining bool
	gateways map[string]gatewaySeen

	subs  []*nats.Subscription
	pumps sync.WaitGroup // request goroutines
	// forgotten counts the scopes dropped from the forget stream.
	forgotten atomic.Int64
	// copiesOut and copiesIn bound the KV copies served and taken at
	// once: each holds up to maxCopyBytes in memory.
	copiesOut, copiesIn chan struct{}
	bg                  sync.WaitGroup // heartbeat and event goroutines
	stop                context.CancelFunc
	stopCtx             context.Context
	closeErr            error
	once                sync.Once
}

// gatewaySeen is a gateway's last heartbeat.
type gatewaySeen struct {
	at       time.Time
	interval time.Duration
}

// job is a request the worker runs.
type job struct {
	gateway string    // the sender, whose silence stops the request
	start   time.Time // when it arrived
	st      Job       // nil while being submitted (guarded by Worker.mu)
	// orphaned: its gateway went silent and it was cancelled (Worker.mu).
	orphaned bool
	// cutOff: the drain's deadline passed; its cancellation is reported
	// to the client as the error it is, not as the client's own cancel.
	cutOff atomic.Bool
}

// StartWorker registers e on the cluster nc connects to and serves it
// until Close. nc stays the caller's.
func StartWorker(nc *nats.Conn, e Engine, cfg WorkerConfig) (*Worker, error) {
	if cfg.Model == "" {
		return nil, errors.New("cluster: a worker needs its model id")
	}
	if cfg.ID == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.ID = "w-" + hex.EncodeToString(b[:])
	}
	if err := ValidID(cfg.ID); err != nil {
		return nil, err
	}
	if cfg.ContextLength <= 0 {
		cfg.ContextLength = e.ContextLength()
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, stop := context.WithCancel(context.Background())
	w := &Worker{nc: nc, e: e, cfg: cfg, log: cfg.Logger, inflight: map[string]*job{}, gateways: map[string]gatewaySeen{}, stop: stop, stopCtx: ctx,
		copiesOut: make(chan struct{}, maxCopies), copiesIn: make(chan struct{}, maxCopies)}
	for subj, h := range map[string]nats.MsgHandler{
		SubjectGenerate(cfg.ID): w.onGenerate,
		SubjectCancel(cfg.ID):   w.onCancel,
		SubjectSnapshot(cfg.ID): w.onSnapshot,
		SubjectKV(cfg.ID):       w.onKV,
		SubjectDiscover:         func(*nats.Msg) { w.heartbeat() },
		SubjectGatewayHeartbeat: w.onGatewayHeartbeat,
	} {
		sub, err := nc.Subscribe(subj, h)
		if err != nil {
			w.unsubscribe()
			stop()
			return nil, fmt.Errorf("cluster: worker %s: subscribe %s: %w", cfg.ID, subj, err)
		}
		w.subs = append(w.subs, sub)
	}
	// The subscriptions must be in place before the first heartbeat makes
	// the worker known, or a gateway's first request could find no one.
	if err := nc.Flush(); err != nil {
		w.unsubscribe()
		stop()
		return nil, fmt.Errorf("cluster: worker %s: %w", cfg.ID, err)
	}
	w.heartbeat()
	w.bg.Add(1)
	go w.beat(ctx)
	if cfg.Events != nil {
		w.bg.Add(1)
		go w.publishEvents(ctx, cfg.Events.Next())
	}
	if f, ok := e.(scopeForgetter); ok {
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			w.followForgets(ctx, f)
		}()
	}
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

func (w *Worker) unsubscribe() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
	w.subs = nil
}

// Close drains the worker: it says it is draining (gateways stop sending it
// requests), refuses new requests, lets the ones in flight finish until ctx
// ends (then cancels them: their clients get an error), says it has left,
// and stops. The engine and the connection stay the caller's.
func (w *Worker) Close(ctx context.Context) error {
	w.once.Do(func() {
		w.mu.Lock()
		w.draining = true
		w.mu.Unlock()
		w.heartbeat() // draining: gateways pick others from now on
		done := make(chan struct{})
		go func() { w.pumps.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			w.mu.Lock()
			for _, j := range w.inflight {
				j.cutOff.Store(true)
				if j.st != nil {
					j.st.Cancel()
				}
			}
			w.mu.Unlock()
			<-done
			w.closeErr = fmt.Errorf("cluster: worker %s: requests cut off by the drain's deadline: %w", w.cfg.ID, ctx.Err())
		}
		w.stop()
		w.bg.Wait()
		w.unsubscribe()
		w.publish(SubjectLeave, Leave{V: Version, Worker: w.cfg.ID})
		if err := w.nc.Flush(); err != nil && w.closeErr == nil {
			w.closeErr = fmt.Errorf("cluster: worker %s: %w", w.cfg.ID, err)
		}
	})
	return w.closeErr
}

// publish sends m as JSON, logging a failure: a lost heartbeat or event
// batch is recovered from by the next one (or a snapshot), never by the
// sender retrying.
func (w *Worker) publish(subj string, m any) {
	data, err := json.Marshal(m)
	if err == nil {
		err = w.nc.Publish(subj, data)
	}
	if err != nil {
		w.log.Warn("cluster: publish failed", "worker", w.cfg.ID, "subject", subj, "err", err)
	}
}

func (w *Worker) beat(ctx context.Context) {
	defer w.bg.Done()
	t := time.NewTicker(w.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.heartbeat()
			w.reapOrphans(time.Now())
		}
	}
}

func (w *Worker) heartbeat() {
	st := w.e.Now()
	w.mu.Lock()
	draining := w.draining
	w.mu.Unlock()
	hb := Heartbeat{V: Version, Worker: w.cfg.ID, Model: w.cfg.Model, ContextLength: w.cfg.ContextLength,
		BlockSize: w.e.BlockSize(), Interval: w.cfg.Heartbeat, Draining: draining,
		Running: st.Running, Waiting: st.Waiting, KVTotal: st.KV.Total, KVActive: st.KV.Active, KVCached: st.KV.Cached,
		WaitingByPriority: st.WaitingByPriority}
	hb.CopiesKV = w.peer() != nil
	if w.cfg.Events != nil {
		hb.EventSeq = w.cfg.Events.Next()
	}
	w.publish(SubjectHeartbeat, hb)
}

// onGenerate takes a request. The engine's Submit (which may compile a
// grammar) runs on the request's own goroutine, so one slow submission
// does not hold up the others.
func (w *Worker) onGenerate(m *nats.Msg) {
	if m.Reply == "" {
		w.log.Warn("cluster: generate request without a reply subject", "worker", w.cfg.ID)
		return
	}
	req, err := DecodeGenerateRequest(m.Data)
	if err != nil {
		w.log.Warn("cluster: bad generate request", "worker", w.cfg.ID, "err", err)
		w.publish(m.Reply, Frame{V: Version, Done: true, Error: &WireError{Kind: KindInvalid, Message: err.Error()}})
		return
	}
	w.mu.Lock()
	if w.draining {
		w.mu.Unlock()
		w.publish(m.Reply, Frame{V: Version, ID: req.ID, Done: true,
			Error: &WireError{Kind: KindClosed, Message: "engine: closed (worker " + w.cfg.ID + " is draining)"}})
		return
	}
	if _, dup := w.inflight[req.ID]; dup {
		w.mu.Unlock()
		w.publish(m.Reply, Frame{V: Version, ID: req.ID, Done: true,
			Error: &WireError{Kind: KindInvalid, Message: "engine: invalid request: request id " + req.ID + " is already running"}})
		return
	}
	j := &job{gateway: req.Gateway, start: time.Now()}
	w.inflight[req.ID] = j
	w.pumps.Add(1)
	w.mu.Unlock()
	go w.serve(req, j, m.Reply)
}

// serve runs one request and streams its frames to reply.
func (w *Worker) serve(req GenerateRequest, j *job, reply string) {
	defer w.pumps.Done()
	defer func() {
		w.mu.Lock()
		if w.inflight[req.ID] == j {
			delete(w.inflight, req.ID)
		}
		w.mu.Unlock()
	}()
	f := Frame{V: Version, ID: req.ID}
	// Submit compiles the request's grammar, which can take longer than
	// the gateway waits in silence.
	stopKeepAlive := w.keepAlive(req.ID, reply)
	if req.CopyFrom != "" {
		// Blocks another worker holds, copied rather than computed; the
		// request runs either way.
		if n, err := w.copyFrom(w.stopCtx, req.CopyFrom, &req.Request); err != nil {
			w.log.Warn("cluster: KV blocks not copied; computing them", "worker", w.cfg.ID, "from", req.CopyFrom, "err", err)
		} else if n > 0 {
			w.log.Debug("cluster: KV blocks copied", "worker", w.cfg.ID, "from", req.CopyFrom, "blocks", n)
		}
	}
	st, err := w.e.Submit(context.Background(), req.Request)
	stopKeepAlive()
	if err != nil {
		f.Done, f.Error = true, toWire(err)
		w.publish(reply, f)
		return
	}
	w.mu.Lock()
	live := w.inflight[req.ID] == j && !j.cutOff.Load()
	j.st = st
	w.mu.Unlock()
	if !live { // cancelled while being submitted
		st.Cancel()
	}
	f.Received = j.start
	w.publish(reply, f) // frame 0: queued
	f.Received = time.Time{}
	var buf []engine.Output
	for {
		// Wait at most one heartbeat: an idle stream (queued, or a long
		// prefill) sends an empty frame so the gateway knows it is alive.
		ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Heartbeat)
		buf, err = st.Recv(ctx, buf[:0])
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			w.publish(reply, Frame{V: Version, ID: req.ID, KeepAlive: true})
			continue
		}
		if j.cutOff.Load() {
			for i := range buf {
				if buf[i].Finish == engine.FinishCancel {
					buf[i].Finish = engine.FinishError
					buf[i].Err = fmt.Errorf("cluster: worker %s shut down before the request finished", w.cfg.ID)
				}
			}
		}
		f.Usage = st.Usage()
		f.QueueTime = st.QueueTime()
		// Outputs that piled up (many samples, logprobs) go in several
		// frames, each far below NATS's message size limit.
		for len(buf) > frameOutputs {
			f.Seq++
			f.Outputs = buf[:frameOutputs]
			w.publish(reply, f)
			buf = buf[frameOutputs:]
		}
		f.Seq++
		f.Outputs = buf
		if errors.Is(err, engine.ErrDone) {
			f.Done, f.Ended = true, st.Ended()
		}
		w.publish(reply, f)
		if f.Done {
			return
		}
	}
}

// onGatewayHeartbeat notes that a gateway is alive.
func (w *Worker) onGatewayHeartbeat(m *nats.Msg) {
	hb, err := DecodeGatewayHeartbeat(m.Data)
	if err != nil {
		w.log.Warn("cluster: bad gateway heartbeat", "worker", w.cfg.ID, "err", err)
		return
	}
	w.mu.Lock()
	w.gateways[hb.Gateway] = gatewaySeen{at: time.Now(), interval: hb.Interval}
	w.mu.Unlock()
}

// reapOrphans cancels the requests whose gateway has been silent for
// three of its heartbeat intervals (counted from the request's arrival if
// the gateway was never heard): the gateway died, and its clients with it,
// so nobody reads their outputs. It also forgets gateways long gone.
func (w *Worker) reapOrphans(now time.Time) {
	w.mu.Lock()
	var orphans []Job
	for id, j := range w.inflight {
		if j.gateway == "" || j.st == nil || j.orphaned {
			continue
		}
		g, ok := w.gateways[j.gateway]
		last, interval := j.start, w.cfg.Heartbeat
		if ok {
			interval = g.interval
			if g.at.After(last) {
				last = g.at
			}
		}
		if now.Sub(last) > silentBeats*interval {
			j.orphaned = true
			orphans = append(orphans, j.st)
			w.log.Warn("cluster: gateway silent; stopping its request", "worker", w.cfg.ID, "gateway", j.gateway, "request", id)
		}
	}
	for id, g := range w.gateways {
		if now.Sub(g.at) > 10*silentBeats*g.interval {
			delete(w.gateways, id)
		}
	}
	w.mu.Unlock()
	for _, st := range orphans {
		st.Cancel()
	}
}

// keepAlive sends request id's gateway a KeepAlive frame every heartbeat
// interval until the returned function is called.
func (w *Worker) keepAlive(id, reply string) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(w.cfg.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				w.publish(reply, Frame{V: Version, ID: id, KeepAlive: true})
			}
		}
	}()
	return func() { close(done); <-ended }
}

// onCancel stops a request its gateway gave up on.
func (w *Worker) onCancel(m *nats.Msg) {
	c, err := DecodeCancel(m.Data)
	if err != nil {
		w.log.Warn("cluster: bad cancel", "worker", w.cfg.ID, "err", err)
		return
	}
	w.mu.Lock()
	var st Job
	if j, ok := w.inflight[c.ID]; ok {
		if st = j.st; st == nil {
			delete(w.inflight, c.ID) // serve cancels it once submitted
		}
	}
	w.mu.Unlock()
	if st != nil {
		st.Cancel()
	}
}

// publishEvents ships the engine's KV events, in batches of consecutive
// sequence numbers, from seq on. A batch lost to a slow log reader is
// reported as a jump in First: consumers resync from a snapshot.
func (w *Worker) publishEvents(ctx context.Context, seq uint64) {
	defer w.bg.Done()
	var buf []kv.Event
	for {
		var err error
		var next uint64
		buf, next, err = w.cfg.Events.Read(ctx, seq, buf[:0])
		switch {
		case errors.Is(err, kv.ErrEventsLost):
			w.log.Warn("cluster: KV events lost before they were published; consumers will resync", "worker", w.cfg.ID, "from", seq, "oldest", next)
			seq = next
			continue
		case err != nil:
			return // ctx ended
		}
		// In batches small enough for NATS's message size limit however
		// many events came at once.
		for i := 0; i < len(buf); i += eventBatch {
			part := buf[i:min(i+eventBatch, len(buf))]
			b := EventBatch{V: Version, Worker: w.cfg.ID, First: seq + uint64(i), Events: make([]WireEvent, len(part))}
			for j, e := range part {
				b.Events[j] = wireEvent(e)
			}
			w.publish(SubjectEvents(w.cfg.ID), b)
		}
		seq = next
	}
}

// onSnapshot answers a snapshot request with every block the engine's
// pool holds, in chunks.
func (w *Worker) onSnapshot(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	events, next := w.e.Snapshot()
	for part := 0; ; part++ {
		n := min(len(events), snapshotChunk)
		c := SnapshotChunk{V: Version, Worker: w.cfg.ID, Next: next, Part: part, Last: n == len(events),
			Events: make([]WireEvent, n)}
		for i, e := range events[:n] {
			c.Events[i] = wireEvent(e)
		}
		w.publish(m.Reply, c)
		events = events[n:]
		if c.Last {
			return
		}
	}
}
