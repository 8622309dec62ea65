package vllmevents

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus"
)

// FollowConfig says where a vLLM server publishes its events.
type FollowConfig struct {
	// Endpoint is the server's PUB socket, e.g. tcp://10.0.0.5:5557
	// (vLLM's kv-events-config "endpoint", with the host in place of *).
	Endpoint string
	// Replay is its ROUTER socket for missed batches, e.g.
	// tcp://10.0.0.5:5558 ("replay_endpoint"); without one, a gap empties
	// the mirror.
	Replay string
	// Topic is the server's topic ("topic"; vLLM's default is empty).
	Topic string
	// Retry is the wait before reconnecting (default 1s).
	Retry time.Duration
	// ReplayTimeout bounds one replay (default 5s).
	ReplayTimeout time.Duration
	// Logger receives what an operator should know (default: discard).
	Logger *slog.Logger
}

// FollowStats counts what a Follower did.
type FollowStats struct {
	Batches    int64 // batches applied
	Bad        int64 // messages or batches that could not be read (skipped)
	Recovered  int64 // gaps the replay filled
	Lost       int64 // gaps it could not fill (the mirror was emptied)
	Restarts   int64 // times the server's sequence started over on one connection (the mirror was emptied)
	Reconnects int64 // connections lost and made again (the mirror was emptied and rebuilt from the replay buffer)
}

// Follower applies a vLLM server's event stream to a Mirror, in order:
// a gap in the sequence numbers is filled from the server's replay socket,
// or, if it cannot be, the mirror is emptied (the lost batches may have
// removed any block).
type Follower struct {
	cfg FollowConfig
	m   *Mirror
	log *slog.Logger

	next int64 // sequence number expected next (-1: none seen yet)

	batches, bad, recovered, lost, restarts, reconnects atomic.Int64
}

// NewFollower returns a follower of cfg.Endpoint feeding m.
func NewFollower(cfg FollowConfig, m *Mirror) (*Follower, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("vllmevents: the server's event endpoint is required")
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Follower{cfg: cfg, m: m, log: cfg.Logger, next: -1}, nil
}

// Stats returns the follower's counts.
func (f *Follower) Stats() FollowStats {
	return FollowStats{Batches: f.batches.Load(), Bad: f.bad.Load(), Recovered: f.recovered.Load(),
		Lost: f.lost.Load(), Restarts: f.restarts.Load(), Reconnects: f.reconnects.Load()}
}

// Run follows the stream until ctx ends, reconnecting whenever the
// connection is lost. It returns ctx's error.
//
// A new connection starts from nothing: the mirror is emptied and rebuilt
// from the server's replay buffer. The server may have restarted while the
// connection was down and published more batches since than were seen
// before, which its sequence numbers alone would not show, and a block
// kept from before would draw requests to a server that no longer holds
// it.
func (f *Follower) Run(ctx context.Context) error {
	for {
		err := f.session(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		f.reconnects.Add(1)
		f.m.Clear()
		f.next = -1
		f.log.Warn("vllm events: connection lost; its blocks are forgotten until the server's replay buffer rebuilds them", "endpoint", f.cfg.Endpoint, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(f.cfg.Retry):
		}
	}
}

// session reads from one connection until it fails.
func (f *Follower) session(ctx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub := zmq4.NewSub(sctx, zmq4.WithDialerRetry(f.cfg.Retry), zmq4.WithDialerMaxRetries(-1))
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, f.cfg.Topic); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	if err := sub.Dial(f.cfg.Endpoint); err != nil {
		return fmt.Errorf("connect to %s: %w", f.cfg.Endpoint, err)
	}
	for {
		msg, err := sub.Recv()
		if err != nil {
			return err
		}
		seq, payload, err := frames(msg.Frames)
		if err != nil {
			f.badMessage(err)
			continue
		}
		if f.cfg.Topic != "" && string(msg.Frames[0]) != f.cfg.Topic {
			continue // a longer topic the subscription's prefix also matches
		}
		f.receive(ctx, seq, payload)
	}
}

// frames splits vLLM's message: topic, sequence number, batch.
func frames(fs [][]byte) (int64, []byte, error) {
	if len(fs) != 3 || len(fs[1]) != 8 {
		return 0, nil, fmt.Errorf("a message of %d frames; vLLM sends topic, 8-byte sequence number, batch", len(fs))
	}
	return int64(binary.BigEndian.Uint64(fs[1])), fs[2], nil
}

func (f *Follower) badMessage(err error) {
	if f.bad.Add(1) == 1 {
		f.log.Error("vllm events: unreadable message skipped (further ones are only counted)", "endpoint", f.cfg.Endpoint, "err", err)
	}
}

// receive applies the batch numbered seq, first filling any gap before it.
func (f *Follower) receive(ctx context.Context, seq int64, payload []byte) {
	switch {
	case seq < 0:
		f.badMessage(fmt.Errorf("sequence number %d", seq))
		return
	case f.next >= 0 && seq < f.next:
		// The server started over (a restart): its cache started empty.
		f.restarts.Add(1)
		f.log.Warn("vllm events: the server's sequence started over; its blocks are forgotten", "endpoint", f.cfg.Endpoint, "seq", seq, "expected", f.next)
		f.m.Clear()
		f.next = 0
		f.fill(ctx, seq, true)
	case f.next < 0:
		f.next = 0
		f.fill(ctx, seq, true)
	case seq > f.next:
		f.fill(ctx, seq, false)
	}
	f.apply(seq, payload)
}

// apply decodes and mirrors one batch.
func (f *Follower) apply(seq int64, payload []byte) {
	f.next = seq + 1
	b, err := Decode(payload)
	if err != nil {
		// A batch that cannot be read is a gap nothing can fill.
		f.badMessage(fmt.Errorf("batch %d: %w", seq, err))
		f.lost.Add(1)
		f.m.Clear()
		return
	}
	f.m.Apply(b)
	f.batches.Add(1)
}

// fill replays the batches from f.next up to (not including) upTo. When
// history is set, nothing has been applied from this run of the server:
// the batches missing are its history from its start, and what the replay
// buffer still has is applied with nothing cleared (the mirror is empty).
// Otherwise a gap the replay cannot cover empties the mirror.
func (f *Follower) fill(ctx context.Context, upTo int64, history bool) {
	if f.next >= upTo {
		return
	}
	from := f.next
	got, err := f.replay(ctx, from, upTo)
	if err == nil && int64(len(got)) == upTo-from {
		if !history {
			f.recovered.Add(1)
		}
	} else if history {
		if err != nil && f.cfg.Replay != "" {
			f.log.Warn("vllm events: could not replay the server's earlier batches", "endpoint", f.cfg.Replay, "err", err)
		}
	} else {
		f.lost.Add(1)
		f.log.Warn("vllm events: batches lost; the mirror is emptied", "from", from, "to", upTo-1, "replay", f.cfg.Replay, "err", err)
		f.m.Clear()
		// What the replay returned after the last hole is still true.
		start, prev := 0, from-1
		for i, r := range got {
			if r.seq != prev+1 {
				start = i
			}
			prev = r.seq
		}
		got = got[start:]
		if prev != upTo-1 {
			got = nil // the hole is at the end
		}
	}
	for _, r := range got {
		f.apply(r.seq, r.payload)
	}
	f.next = upTo
}

type replayed struct {
	seq     int64
	payload []byte
}

// replay asks the server's replay socket for the batches from `from` on
// and returns those before upTo, in order.
func (f *Follower) replay(ctx context.Context, from, upTo int64) ([]replayed, error) {
	if f.cfg.Replay == "" {
		return nil, errors.New("no replay endpoint")
	}
	rctx, cancel := context.WithTimeout(ctx, f.cfg.ReplayTimeout)
	defer cancel()
	d := zmq4.NewDealer(rctx, zmq4.WithDialerRetry(100*time.Millisecond), zmq4.WithDialerMaxRetries(3))
	defer d.Close()
	if err := d.Dial(f.cfg.Replay); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], uint64(from))
	if err := d.SendMulti(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	var out []replayed
	for {
		msg, err := d.Recv()
		if err != nil {
			return out, fmt.Errorf("reply: %w", err)
		}
		fs := msg.Frames
		if len(fs) > 0 && len(fs[0]) == 0 {
			fs = fs[1:] // the envelope's empty delimiter
		}
		if len(fs) != 2 || len(fs[0]) != 8 {
			return out, fmt.Errorf("a reply of %d frames; want sequence number and batch", len(fs))
		}
		seq := int64(binary.BigEndian.Uint64(fs[0]))
		if seq == -1 {
			return out, nil
		}
		if seq >= from && seq < upTo && (len(out) == 0 || seq > out[len(out)-1].seq) {
			out = append(out, replayed{seq, fs[1]})
		}
	}
}

// Collectors are the follower's and its mirror's metrics:
// kvserve_upstream_events_batches_total, _bad_total, _recovered_total,
// _lost_total, _restarts_total, _reconnects_total, and the mirror's
// kvserve_upstream_events_skipped_blocks_total and
// kvserve_upstream_events_unattributed_blocks_total.
func (f *Follower) Collectors() []prometheus.Collector {
	counter := func(name, help string, v func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_upstream_events_" + name, Help: help},
			func() float64 { return float64(v()) })
	}
	return []prometheus.Collector{
		counter("batches_total", "KV event batches from the external engine applied.", f.batches.Load),
		counter("bad_total", "KV event messages or batches from the external engine that could not be read.", f.bad.Load),
		counter("recovered_total", "Gaps in the external engine's KV events filled by its replay socket.", f.recovered.Load),
		counter("lost_total", "Gaps in the external engine's KV events that could not be filled (its blocks were forgotten).", f.lost.Load),
		counter("restarts_total", "Times the external engine's KV event sequence started over (a restart).", f.restarts.Load),
		counter("reconnects_total", "Connections to the external engine's KV event socket lost and made again.", f.reconnects.Load),
		counter("skipped_blocks_total", "Blocks in the external engine's events not mirrored: another block size, an adapter, another KV group, a full mirror.",
			f.m.skipped.Load),
		counter("unattributed_blocks_total", "Blocks in the external engine's events whose sequence carries no cache_salt this worker sent (not yet, or not its tenants').",
			f.m.unresolved.Load),
	}
}
