package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/kv"
)

// Update is a change to a consumer's view of one worker's blocks.
type Update struct {
	Worker string
	// Reset: forget every block known of the worker and take Events (a
	// snapshot: stored events only) instead.
	Reset  bool
	Events []kv.Event
}

// FollowConfig configures a Follower. The zero value of each field means its
// default.
type FollowConfig struct {
	// Apply receives the updates, in order, from the follower's goroutine
	// (required).
	Apply func(Update)
	// SnapshotTimeout bounds the wait for a snapshot (default 5s); a
	// snapshot that does not come is asked for again.
	SnapshotTimeout time.Duration
	// Logger receives resyncs (default: discard).
	Logger *slog.Logger
}

// maxQueuedBatches bounds the batches waiting for Apply: a consumer that far
// behind drops them and resyncs from a snapshot instead.
const maxQueuedBatches = 1024

// Follower keeps a consumer (the router's block index) in step with one
// worker's KV events: it starts from a snapshot, applies the numbered
// batches in order, and on a gap (a batch lost by NATS, events the worker
// could not publish in time, a consumer too slow, events the worker's
// heartbeats announced that never came) resyncs from a new snapshot rather
// than silently missing a removal.
type Follower struct {
	nc     *nats.Conn
	worker string
	cfg    FollowConfig
	log    *slog.Logger
	subs   []*nats.Subscription
	stop   context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	queue    []EventBatch
	overflow bool
	// announced and announcedBefore are the event sequence numbers of the
	// worker's last two heartbeats: every event before announcedBefore
	// was published at least one interval ago.
	announced, announcedBefore uint64
	notify                     chan struct{} // capacity 1

	snapshots atomic.Int64 // asked for
}

// Snapshots returns how many snapshots the follower has asked for: one to
// start, one more for each gap.
func (f *Follower) Snapshots() int { return int(f.snapshots.Load()) }

// Follow follows worker's KV events until Close.
func Follow(nc *nats.Conn, worker string, cfg FollowConfig) (*Follower, error) {
	if cfg.Apply == nil {
		return nil, fmt.Errorf("cluster: follow %s: no Apply", worker)
	}
	if err := ValidID(worker); err != nil {
		return nil, err
	}
	if cfg.SnapshotTimeout <= 0 {
		cfg.SnapshotTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	f := &Follower{nc: nc, worker: worker, cfg: cfg, log: cfg.Logger, done: make(chan struct{}), notify: make(chan struct{}, 1)}
	// Subscribed before the first snapshot is asked for, so no event
	// between the two is missed.
	for subj, h := range map[string]nats.MsgHandler{SubjectEvents(worker): f.receive, SubjectHeartbeat: f.onHeartbeat} {
		sub, err := nc.Subscribe(subj, h)
		if err != nil {
			f.unsubscribe()
			return nil, fmt.Errorf("cluster: follow %s: %w", worker, err)
		}
		f.subs = append(f.subs, sub)
	}
	ctx, stop := context.WithCancel(context.Background())
	f.stop = stop
	go f.run(ctx)
	return f, nil
}

// Close stops following.
func (f *Follower) Close() {
	f.unsubscribe()
	f.stop()
	<-f.done
}

func (f *Follower) unsubscribe() {
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
}

// onHeartbeat notes how far the worker's events went: a batch lost while
// the worker then stays idle shows as events announced and never applied.
func (f *Follower) onHeartbeat(m *nats.Msg) {
	hb, err := DecodeHeartbeat(m.Data)
	if err != nil || hb.Worker != f.worker {
		return
	}
	f.mu.Lock()
	f.announcedBefore, f.announced = f.announced, hb.EventSeq
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

// receive runs on NATS's dispatcher: it only queues.
func (f *Follower) receive(m *nats.Msg) {
	b, err := DecodeEventBatch(m.Data)
	if err != nil {
		f.log.Warn("cluster: bad KV event batch; resyncing", "worker", f.worker, "err", err)
	}
	f.mu.Lock()
	switch {
	case err != nil || len(f.queue) >= maxQueuedBatches:
		f.queue, f.overflow = nil, true
	default:
		f.queue = append(f.queue, b)
	}
	f.mu.Unlock()
	select {
	case f.notify <- struct{}{}:
	default:
	}
}

func (f *Follower) run(ctx context.Context) {
	defer close(f.done)
	var next uint64 // the sequence number due; 0: a snapshot is needed
	for ctx.Err() == nil {
		if next == 0 {
			n, err := f.snapshot(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.log.Warn("cluster: KV snapshot failed; asking again", "worker", f.worker, "err", err)
				}
				continue
			}
			next = n
		}
		f.mu.Lock()
		batches, overflow, announced := f.queue, f.overflow, f.announcedBefore
		f.queue, f.overflow = nil, false
		f.mu.Unlock()
		if overflow {
			next = 0
			continue
		}
		for _, b := range batches {
			if b.First > next {
				f.log.Warn("cluster: KV events missed; resyncing from a snapshot", "worker", f.worker, "due", next, "got", b.First)
				next = 0
				break
			}
			u := Update{Worker: f.worker}
			for i, we := range b.Events {
				seq := b.First + uint64(i)
				if seq < next {
					continue // already in the snapshot or applied
				}
				e, err := we.Event(seq)
				if err != nil {
					f.log.Warn("cluster: bad KV event; resyncing", "worker", f.worker, "err", err)
					next = 0
					break
				}
				u.Events = append(u.Events, e)
			}
			if next == 0 {
				break
			}
			if len(u.Events) > 0 {
				f.cfg.Apply(u)
				next = b.First + uint64(len(b.Events))
			}
		}
		if next == 0 || len(batches) > 0 {
			continue
		}
		if announced > next {
			f.log.Warn("cluster: KV events announced a heartbeat ago never came; resyncing from a snapshot", "worker", f.worker, "due", next, "announced", announced)
			next = 0
			f.mu.Lock()
			f.announced, f.announcedBefore = 0, 0
			f.mu.Unlock()
			continue
		}
		select {
		case <-ctx.Done():
		case <-f.notify:
		}
	}
}

// snapshot asks the worker for its blocks, applies them as a reset, and
// returns the sequence number of the first event to apply after them.
func (f *Follower) snapshot(ctx context.Context) (uint64, error) {
	f.snapshots.Add(1)
	inbox := f.nc.NewInbox()
	ch := make(chan *nats.Msg, 64)
	sub, err := f.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := f.nc.PublishRequest(SubjectSnapshot(f.worker), inbox, nil); err != nil {
		return 0, err
	}
	timer := time.NewTimer(f.cfg.SnapshotTimeout)
	defer timer.Stop()
	var events []kv.Event
	for part := 0; ; part++ {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-timer.C:
			return 0, fmt.Errorf("no snapshot within %v", f.cfg.SnapshotTimeout)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			// The worker is not there (yet, or any more): wait before
			// asking again rather than spinning.
			select {
			case <-timer.C:
			case <-ctx.Done():
			}
			return 0, fmt.Errorf("worker %s does not answer snapshot requests", f.worker)
		}
		c, err := DecodeSnapshotChunk(m.Data)
		switch {
		case err != nil:
			return 0, err
		case c.Error != "":
			return 0, fmt.Errorf("worker %s: %s", f.worker, c.Error)
		case c.Part != part:
			return 0, fmt.Errorf("snapshot chunk %d arrived when %d was due", c.Part, part)
		}
		for _, we := range c.Events {
			e, err := we.Event(0)
			if err != nil {
				return 0, err
			}
			events = append(events, e)
		}
		if c.Last {
			f.cfg.Apply(Update{Worker: f.worker, Reset: true, Events: events})
			return max(c.Next, 1), nil
		}
	}
}
