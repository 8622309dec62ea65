package router

import (
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// fakeWorker is a worker as the gateway sees it on NATS: heartbeats, a
// snapshot answered with the blocks it holds, events, and a leave.
type fakeWorker struct {
	t      *testing.T
	nc     *nats.Conn
	id     string
	blocks []kv.Hash
}

func (w *fakeWorker) publish(subj string, v any) {
	w.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.nc.Publish(subj, data); err != nil {
		w.t.Fatal(err)
	}
}

func (w *fakeWorker) heartbeat() {
	w.publish(cluster.SubjectHeartbeat, cluster.Heartbeat{V: cluster.Version, Worker: w.id, Model: testModel,
		ContextLength: 4096, BlockSize: 16, Interval: time.Second, EventSeq: 1})
}

func (w *fakeWorker) serveSnapshots() {
	w.t.Helper()
	_, err := w.nc.Subscribe(cluster.SubjectSnapshot(w.id), func(m *nats.Msg) {
		hs := make([]string, len(w.blocks))
		for i, h := range w.blocks {
			hs[i] = hex.EncodeToString(h[:])
		}
		data, _ := json.Marshal(cluster.SnapshotChunk{V: cluster.Version, Worker: w.id, Next: 1, Last: true,
			Events: []cluster.WireEvent{{Kind: kv.BlockStored, Tier: kv.TierPool, Hashes: hs, BlockSize: 16}}})
		_ = m.Respond(data)
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFeed: the feed follows a worker from its first heartbeat (its
// snapshot lands in the index, and the picker sends the prompt there),
// and forgets it when it leaves.
func TestFeed(t *testing.T) {
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	conn := func() *nats.Conn {
		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	p := prompt(160, 9)
	w := &fakeWorker{t: t, nc: conn(), id: "wb", blocks: chain("t1", p)}
	w.serveSnapshots()
	idle := &fakeWorker{t: t, nc: conn(), id: "wa"}
	idle.serveSnapshots()
	if err := w.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	gw := conn()
	reg, err := cluster.NewRegistry(gw, cluster.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	r, err := New(NewIndex(nil), Config{Secret: testSecret, ModelID: testModel})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := NewFeed(gw, reg, r, FeedConfig{Model: testModel, Poll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	w.heartbeat()
	idle.heartbeat()
	waitFor(t, "the snapshot in the index", func() bool { return r.Index().Blocks("wb") == 10 })

	cands := []cluster.Candidate{{WorkerInfo: cluster.WorkerInfo{Heartbeat: cluster.Heartbeat{Worker: "wa", BlockSize: 16}}},
		{WorkerInfo: cluster.WorkerInfo{Heartbeat: cluster.Heartbeat{Worker: "wb", BlockSize: 16, Running: 1}}}}
	if i := NewPicker(r).Pick(&engine.Request{Prompt: p, Scope: "t1"}, cands); i != 1 {
		t.Errorf("picked %d, want the worker holding the prompt", i)
	}
	if i := NewPicker(r).Pick(&engine.Request{Prompt: p, Scope: "t2"}, cands); i != 0 {
		t.Errorf("another tenant's prompt: picked %d, want the less loaded worker", i)
	}

	// Requests on their way count as waiting ones: 3 dispatched, 1
	// reported running, so 2 more than the heartbeat shows.
	loaded := []cluster.Candidate{{WorkerInfo: cluster.WorkerInfo{Heartbeat: cluster.Heartbeat{Worker: "wa", BlockSize: 16, Running: 1}}, Dispatched: 3},
		{WorkerInfo: cluster.WorkerInfo{Heartbeat: cluster.Heartbeat{Worker: "wc", BlockSize: 16, Running: 1}}, Dispatched: 1}}
	if i := NewPicker(r).Pick(&engine.Request{Prompt: p, Scope: "t2"}, loaded); i != 1 {
		t.Errorf("picked %d, want the worker without requests on their way", i)
	}

	w.publish(cluster.SubjectLeave, cluster.Leave{V: cluster.Version, Worker: "wb"})
	waitFor(t, "the worker forgotten", func() bool { return r.Index().Blocks("wb") == 0 && len(r.Index().Workers()) <= 1 })
}

func TestRoundRobin(t *testing.T) {
	var rr RoundRobin
	cands := make([]cluster.Candidate, 3)
	for i, want := range []int{0, 1, 2, 0, 1} {
		if got := rr.Pick(nil, cands); got != want {
			t.Errorf("pick %d: %d, want %d", i, got, want)
		}
	}
}
