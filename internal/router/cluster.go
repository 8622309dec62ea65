package router

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/engine"
)

// Policy names a way to place requests (kvserve gateway --router).
type Policy string

// The policies.
const (
	PolicyKV          Policy = "kv"
	PolicyLeastLoaded Policy = "least-loaded"
	PolicyRoundRobin  Policy = "round-robin"
)

// ParsePolicy reads a policy name.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case PolicyKV, PolicyLeastLoaded, PolicyRoundRobin:
		return p, nil
	}
	return "", fmt.Errorf("router: policy %q: want kv, least-loaded or round-robin", s)
}

// Picker is the router as a gateway's cluster.Picker.
type Picker struct {
	r *Router
}

var (
	_ cluster.Picker     = (*Picker)(nil)
	_ cluster.CopyPicker = (*Picker)(nil)
	_ cluster.Picker     = (*RoundRobin)(nil)
)

// NewPicker returns a cluster.Picker placing with r.
func NewPicker(r *Router) *Picker { return &Picker{r: r} }

// Pick implements cluster.Picker.
func (p *Picker) Pick(req *engine.Request, cands []cluster.Candidate) int {
	i, _ := p.PickCopy(req, cands)
	return i
}

// PickCopy implements cluster.CopyPicker.
func (p *Picker) PickCopy(req *engine.Request, cands []cluster.Candidate) (int, int) {
	ws := make([]Worker, len(cands))
	for i, c := range cands {
		// Dispatched counts this gateway's requests not ended, running ones
		// included; those beyond what the heartbeat shows running or
		// waiting are on their way (a lower bound: the heartbeat counts
		// every gateway's).
		ws[i] = Worker{ID: c.Worker, BlockSize: c.BlockSize, Running: c.Running, Waiting: c.Waiting,
			WaitingByPriority: c.WaitingByPriority, Queued: max(0, c.Dispatched-c.Running-c.Waiting), EventSeq: c.EventSeq,
			CopiesKV: c.CopiesKV}
	}
	d := p.r.Choose(req, ws)
	if d.Index < 0 || d.Score.Peer == 0 {
		return d.Index, -1
	}
	return d.Index, d.Score.PeerFrom
}

// RoundRobin is a cluster.Picker taking the candidates in turn: the
// baseline that ignores both caches and load.
type RoundRobin struct{ n atomic.Uint64 }

// Pick implements cluster.Picker.
func (rr *RoundRobin) Pick(_ *engine.Request, cands []cluster.Candidate) int {
	return int((rr.n.Add(1) - 1) % uint64(len(cands)))
}

// FeedConfig configures a Feed. The zero value of each field means its
// default.
type FeedConfig struct {
	// Model: only its workers are followed (required).
	Model string
	// Poll is how often the registry is looked at for workers joining and
	// leaving (default 250ms).
	Poll time.Duration
	// Follow configures each worker's follower (its Apply is the feed's).
	Follow cluster.FollowConfig
	// Logger receives workers followed and forgotten (default: discard).
	Logger *slog.Logger
}

// Feed keeps a router's index fed from the cluster: a cluster.Follow per
// live worker of the model, and the worker forgotten (its blocks and
// sessions) once the registry has dropped it, because it left or went
// silent.
type Feed struct {
	stop context.CancelFunc
	done chan struct{}
}

// NewFeed starts feeding r from the workers reg knows, until Close.
func NewFeed(nc *nats.Conn, reg *cluster.Registry, r *Router, cfg FeedConfig) (*Feed, error) {
	if cfg.Model == "" {
		return nil, fmt.Errorf("router: a feed needs its model id")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	idx := r.Index()
	cfg.Follow.Apply = func(u cluster.Update) {
		idx.Apply(u.Worker, u.Reset, u.Events)
		r.Learn(u.Events)
	}
	ctx, stop := context.WithCancel(context.Background())
	f := &Feed{stop: stop, done: make(chan struct{})}
	go f.run(ctx, nc, reg, r, cfg)
	return f, nil
}

// Close stops every follower.
func (f *Feed) Close() {
	f.stop()
	<-f.done
}

func (f *Feed) run(ctx context.Context, nc *nats.Conn, reg *cluster.Registry, r *Router, cfg FeedConfig) {
	defer close(f.done)
	followers := map[string]*cluster.Follower{}
	defer func() {
		for _, fl := range followers {
			fl.Close()
		}
	}()
	t := time.NewTicker(cfg.Poll)
	defer t.Stop()
	for {
		live := map[string]bool{}
		for _, w := range reg.Workers(cfg.Model) {
			live[w.Worker] = true
			if followers[w.Worker] != nil {
				continue
			}
			fl, err := cluster.Follow(nc, w.Worker, cfg.Follow)
			if err != nil {
				cfg.Logger.Warn("router: cannot follow a worker's KV events; it is placed by load alone", "worker", w.Worker, "err", err)
				continue
			}
			followers[w.Worker] = fl
			cfg.Logger.Info("router: following a worker's KV events", "worker", w.Worker)
		}
		for id, fl := range followers {
			if !live[id] {
				fl.Close()
				delete(followers, id)
				r.Forget(id)
				cfg.Logger.Info("router: worker gone; its blocks forgotten", "worker", id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
