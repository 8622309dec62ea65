package cluster

import (
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// view is a consumer's picture of one worker's blocks: what a router's
// index holds.
type view struct {
	mu     sync.Mutex
	blocks map[kv.Tier]map[kv.Hash]bool
	resets int
}

func (v *view) apply(u Update) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if u.Reset {
		v.blocks = map[kv.Tier]map[kv.Hash]bool{}
		v.resets++
	}
	for _, e := range u.Events {
		if v.blocks[e.Tier] == nil {
			v.blocks[e.Tier] = map[kv.Hash]bool{}
		}
		switch e.Kind {
		case kv.BlockStored:
			for _, h := range e.Hashes {
				v.blocks[e.Tier][h] = true
			}
		case kv.BlockRemoved:
			for _, h := range e.Hashes {
				delete(v.blocks[e.Tier], h)
			}
		case kv.AllCleared:
			v.blocks[e.Tier] = map[kv.Hash]bool{}
		}
	}
}

// matches reports whether the view holds exactly the pool's blocks.
func (v *view) matches(p *kv.Pool) bool {
	want := &view{}
	events, _ := p.Snapshot()
	want.apply(Update{Reset: true, Events: events})
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, t := range []kv.Tier{kv.TierPool, kv.TierHost, kv.TierDisk} {
		if len(v.blocks[t]) != len(want.blocks[t]) || !maps.Equal(v.blocks[t], want.blocks[t]) {
			return false
		}
	}
	return true
}

// TestFollowEvents: a follower's view tracks the worker's pool through its
// events, and a gap in the sequence numbers makes it resync from a
// snapshot.
func TestFollowEvents(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	w := startWorker(t, s, "w1", time.Millisecond)
	run := func(p []int32) {
		t.Helper()
		readAll(t, mustSubmit(t, api.LocalBackend(w.e), engine.Request{Prompt: p, MaxTokens: 3}))
	}
	run(prompt(50)) // blocks the first snapshot will hold
	v := &view{}
	f, err := Follow(connect(t, s), "w1", FollowConfig{Apply: v.apply})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	waitFor(t, "the snapshot is applied", func() bool { return v.matches(w.e.KV()) && v.resets == 1 })
	for i := range 20 { // more blocks than the pool holds: some are evicted
		p := prompt(300)
		p[0] = int32(i + 2)
		run(p)
	}
	waitFor(t, "the events are applied", func() bool { return v.matches(w.e.KV()) })
	if w.e.KV().Stats().Evictions == 0 {
		t.Fatal("nothing was evicted: the test saw no removals")
	}
	if n := f.Snapshots(); n != 1 {
		t.Fatalf("%d snapshots without a gap", n)
	}
	// A batch from the future: events were missed.
	nc := connect(t, s)
	if err := nc.Publish(SubjectEvents("w1"), mustJSON(t, EventBatch{V: Version, Worker: "w1", First: 1 << 40})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the follower resyncs", func() bool { return f.Snapshots() == 2 })
	run(prompt(70))
	waitFor(t, "the events are applied after the resync", func() bool { return v.matches(w.e.KV()) })
	// Heartbeats announcing events that never come (their batch was lost
	// and the worker stays idle): a resync one heartbeat later.
	lost := Heartbeat{V: Version, Worker: "w1", Model: testModel, Interval: testBeat, EventSeq: w.events.Next() + 5}
	for range 2 {
		if err := nc.Publish(SubjectHeartbeat, mustJSON(t, lost)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the follower resyncs after the heartbeats", func() bool { return f.Snapshots() == 3 })
	waitFor(t, "the view matches after it", func() bool { return v.matches(w.e.KV()) })
}

// TestEventBatches: a burst of events reaches subscribers complete and in
// order, in numbered batches of at most eventBatch events.
func TestEventBatches(t *testing.T) {
	s := startNATS(t)
	w := startWorker(t, s, "w1", time.Millisecond)
	batches := make(chan *nats.Msg, 1024)
	nc := connect(t, s)
	if _, err := nc.ChanSubscribe(SubjectEvents("w1"), batches); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil { // the subscription reaches the server
		t.Fatal(err)
	}
	first := w.events.Next()
	const n = 3*eventBatch + 7
	for i := range n {
		w.events.Publish(kv.Event{Kind: kv.BlockStored, Tier: kv.TierPool, Hashes: []kv.Hash{{byte(i), byte(i >> 8)}}, BlockSize: 16})
	}
	next := first
	for next < first+n {
		select {
		case m := <-batches:
			b, err := DecodeEventBatch(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			if b.First != next || len(b.Events) == 0 || len(b.Events) > eventBatch {
				t.Fatalf("batch from %d of %d events when %d was due", b.First, len(b.Events), next)
			}
			for i, we := range b.Events {
				e, err := we.Event(b.First + uint64(i))
				if err != nil {
					t.Fatal(err)
				}
				if k := int(e.Seq - first); e.Hashes[0] != (kv.Hash{byte(k), byte(k >> 8)}) {
					t.Fatalf("event %d carries the wrong hash", e.Seq)
				}
			}
			next += uint64(len(b.Events))
		case <-time.After(5 * time.Second):
			t.Fatalf("events from %d did not come", next)
		}
	}
}
