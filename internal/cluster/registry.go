package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// WorkerInfo is what a gateway knows of a worker: its last heartbeat and
// when it came.
type WorkerInfo struct {
	Heartbeat
	// Seen is when the last heartbeat arrived (the gateway's clock).
	Seen time.Time
}

// RegistryConfig configures a Registry. The zero value of each field means
// its default.
type RegistryConfig struct {
	// Sweep is how often silent workers are looked for (default 100ms).
	Sweep time.Duration
	// Logger receives workers joining and leaving (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Registry is a gateway's view of the workers, fed by their heartbeats. A
// worker is dropped when it leaves or is silent for three of its
// heartbeat intervals.
type Registry struct {
	cfg  RegistryConfig
	log  *slog.Logger
	subs []*nats.Subscription
	stop context.CancelFunc
	done chan struct{}

	mu      sync.Mutex
	workers map[string]*WorkerInfo
}

// NewRegistry follows the workers of the cluster nc connects to, until
// Close. It asks the workers to announce themselves at once.
func NewRegistry(nc *nats.Conn, cfg RegistryConfig) (*Registry, error) {
	if cfg.Sweep <= 0 {
		cfg.Sweep = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Registry{cfg: cfg, log: cfg.Logger, workers: map[string]*WorkerInfo{}, done: make(chan struct{})}
	for subj, h := range map[string]nats.MsgHandler{SubjectHeartbeat: r.onHeartbeat, SubjectLeave: r.onLeave} {
		s, err := nc.Subscribe(subj, h)
		if err != nil {
			r.unsubscribe()
			return nil, fmt.Errorf("cluster: registry: subscribe %s: %w", subj, err)
		}
		r.subs = append(r.subs, s)
	}
	if err := nc.Flush(); err != nil {
		r.unsubscribe()
		return nil, fmt.Errorf("cluster: registry: %w", err)
	}
	if err := nc.Publish(SubjectDiscover, nil); err != nil {
		r.unsubscribe()
		return nil, fmt.Errorf("cluster: registry: %w", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go r.sweep(ctx)
	return r, nil
}

func (r *Registry) unsubscribe() {
	for _, s := range r.subs {
		_ = s.Unsubscribe()
	}
}

// Close stops following the workers.
func (r *Registry) Close() {
	r.unsubscribe()
	r.stop()
	<-r.done
}

func (r *Registry) onHeartbeat(m *nats.Msg) {
	hb, err := DecodeHeartbeat(m.Data)
	if err != nil {
		r.log.Warn("cluster: bad heartbeat", "err", err)
		return
	}
	r.mu.Lock()
	w, known := r.workers[hb.Worker]
	if !known {
		w = &WorkerInfo{}
		r.workers[hb.Worker] = w
	}
	w.Heartbeat, w.Seen = hb, r.cfg.Now()
	r.mu.Unlock()
	if !known {
		r.log.Info("cluster: worker joined", "worker", hb.Worker, "model", hb.Model)
	}
}

func (r *Registry) onLeave(m *nats.Msg) {
	l, err := DecodeLeave(m.Data)
	if err != nil {
		r.log.Warn("cluster: bad leave", "err", err)
		return
	}
	r.mu.Lock()
	_, known := r.workers[l.Worker]
	delete(r.workers, l.Worker)
	r.mu.Unlock()
	if known {
		r.log.Info("cluster: worker left", "worker", l.Worker)
	}
}

func (r *Registry) sweep(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.cfg.Sweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := r.cfg.Now()
		r.mu.Lock()
		for id, w := range r.workers {
			if silent := now.Sub(w.Seen); silent > silentBeats*w.Interval {
				delete(r.workers, id)
				r.log.Warn("cluster: worker dropped: no heartbeat", "worker", id, "silent", silent.Round(time.Millisecond))
			}
		}
		r.mu.Unlock()
	}
}

// Workers returns the known workers serving model ("": every model), by
// id, draining ones included.
func (r *Registry) Workers(model string) []WorkerInfo {
	r.mu.Lock()
	out := make([]WorkerInfo, 0, len(r.workers))
	for _, w := range r.workers {
		if model == "" || w.Model == model {
			out = append(out, *w)
		}
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.Worker, b.Worker) })
	return out
}

// Worker returns what is known of worker id.
func (r *Registry) Worker(id string) (WorkerInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[id]
	if !ok {
		return WorkerInfo{}, false
	}
	return *w, true
}
