package vllmevents

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/vllmevents/vllmtest"
)

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

type followed struct {
	f   *Follower
	m   *Mirror
	log *kv.EventLog
}

func follow(t *testing.T, ctx context.Context, endpoint, replay, topic string) *followed {
	t.Helper()
	log := kv.NewEventLog(1024)
	m := NewMirror(MirrorConfig{Secret: testSecret, ModelID: testModel, BlockSize: 16, Events: log})
	m.Register("salt-a", "tenant-a")
	m.Register("salt-b", "tenant-b")
	cfg := FollowConfig{Endpoint: endpoint, Replay: replay, Topic: topic, Retry: 50 * time.Millisecond}
	f, err := NewFollower(cfg, m)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	fctx, cancel := context.WithCancel(ctx)
	go func() { defer close(done); _ = f.Run(fctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return &followed{f, m, log}
}

func (x *followed) pool(t *testing.T) []kv.Hash {
	evs, _, err := x.log.Poll(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return held(t, evs)[kv.TierPool]
}

// subscribed waits until the follower receives what is published: a
// subscription takes effect a moment after the connection (ZeroMQ's slow
// joiner), so probes are published until one arrives.
func subscribed(t *testing.T, p *vllmtest.Publisher, x *followed) {
	t.Helper()
	waitFor(t, "the subscription", func() bool {
		p.Send(vllmtest.Empty(), false)
		time.Sleep(20 * time.Millisecond)
		return x.f.Stats().Batches > 0
	})
}

func TestFollowGapsReplayedAndRestarts(t *testing.T) {
	ctx := t.Context()
	rec := recording(t, "array")
	a := chain("tenant-a", span(100, 64))
	b := chain("tenant-b", span(200, 32))
	p := vllmtest.StartPublisher(t, "kv-events")
	x := follow(t, ctx, p.Endpoint(), p.Replay(), "kv-events")
	// Empty batches as the probes: whichever of them are replayed or not,
	// they change nothing.
	subscribed(t, p, x)

	// Batch 0 (A's and B's first blocks) is lost on the way; batch 1
	// arrives: the gap is seen and replayed.
	p.Send(rec[0], true)
	p.Send(rec[1], false)
	waitFor(t, "the replayed batch", func() bool { return len(x.pool(t)) == 5 })
	if got, want := x.pool(t), sorted(a[0], a[1], a[2], b[0], b[1]); !slices.Equal(got, want) {
		t.Fatalf("pool %v, want %v", got, want)
	}
	if st := x.f.Stats(); st.Recovered != 1 || st.Lost != 0 {
		t.Fatalf("stats %+v: want one gap recovered", st)
	}

	// A gap the buffer no longer holds: everything is forgotten (it may
	// have removed anything), and what comes after is mirrored again.
	p.Forget(p.Send(rec[2], true))
	p.Send(rec[0], false) // A's and B's first blocks again (a4 was in the lost batch)
	waitFor(t, "the lost gap", func() bool { return x.f.Stats().Lost == 1 })
	if got, want := x.pool(t), sorted(a[0], a[1], a[2], b[0], b[1]); !slices.Equal(got, want) {
		t.Fatalf("after the lost gap the pool holds %v, want %v (batch 0's blocks, stored after the gap)", got, want)
	}

	// The sequence starts over on the same connection (a restarted server
	// behind a proxy): what was held is forgotten.
	p.Renumber()
	waitFor(t, "the renumbering", func() bool {
		p.Send(vllmtest.Empty(), false)
		time.Sleep(20 * time.Millisecond)
		return x.f.Stats().Restarts == 1
	})
	if got := x.pool(t); len(got) != 0 {
		t.Fatalf("after the sequence started over the pool holds %v", got)
	}
	p.Send(rec[0], false)
	waitFor(t, "blocks after the renumbering", func() bool { return len(x.pool(t)) == 5 })

	// The server restarts: the connection drops, the follower reconnects,
	// forgets what it held, and takes what the new server's buffer has.
	p.Restart()
	waitFor(t, "the reconnection", func() bool { return x.f.Stats().Reconnects >= 1 && len(x.pool(t)) == 0 })
	batches := x.f.Stats().Batches
	p.Send(rec[0], false)
	waitFor(t, "blocks after the restart", func() bool {
		p.Send(vllmtest.Empty(), false)
		time.Sleep(20 * time.Millisecond)
		return len(x.pool(t)) == 5 && x.f.Stats().Batches > batches
	})
}

func TestFollowGapWithoutReplayForgets(t *testing.T) {
	ctx := t.Context()
	rec := recording(t, "map")
	p := vllmtest.StartPublisher(t, "")
	x := follow(t, ctx, p.Endpoint(), "", "")
	subscribed(t, p, x)
	p.Send(rec[0], false)
	waitFor(t, "batch 0", func() bool { return len(x.pool(t)) == 5 })
	p.Send(rec[1], true)
	p.Send(vllmtest.Empty(), false)
	waitFor(t, "the gap", func() bool { return x.f.Stats().Lost == 1 })
	if got := x.pool(t); len(got) != 0 {
		t.Fatalf("after a gap with no replay the pool holds %v", got)
	}
}

func TestFollowBadMessagesSkipped(t *testing.T) {
	ctx := t.Context()
	rec := recording(t, "map")
	p := vllmtest.StartPublisher(t, "")
	x := follow(t, ctx, p.Endpoint(), p.Replay(), "")
	subscribed(t, p, x)
	// Two frames only; then a batch that is not msgpack.
	p.SendRaw([]byte(""), []byte("x"))
	p.Send([]byte{0xc1, 0xc1}, false)
	p.Send(rec[0], false)
	waitFor(t, "batch 0 after the bad ones", func() bool { return len(x.pool(t)) == 5 })
	if st := x.f.Stats(); st.Bad != 2 {
		t.Fatalf("stats %+v: want 2 bad", st)
	}
}

// TestFollowLibzmqPublisher replays the recordings through pyzmq (libzmq,
// what vLLM publishes with) when the machine has it: ./scripts/test.sh
// installs Debian's python3-zmq.
func TestFollowLibzmqPublisher(t *testing.T) {
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import zmq").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI needs %s with zmq (Debian's python3-zmq; scripts/test.sh installs it): %v", py, err)
		}
		t.Skipf("no libzmq publisher: %s cannot import zmq (Debian's python3-zmq)", py)
	}
	ctx := t.Context()
	ep, replay := vllmtest.FreeTCP(t), vllmtest.FreeTCP(t)
	cmd := exec.CommandContext(ctx, py, "testdata/publish.py", ep, replay, "kv-events", "testdata/map")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	x := follow(t, ctx, ep, replay, "kv-events")
	// The publisher sends an empty batch every 20 ms until told to go on
	// (a line on stdin), then the recording's batches 0-4, the third not at
	// all: the subscriber asks the ROUTER for it.
	waitFor(t, "the subscription", func() bool { return x.f.Stats().Batches > 0 })
	fmt.Fprintln(stdin, "go")
	a := chain("tenant-a", span(100, 64))
	b := chain("tenant-b", span(200, 32))
	want := sorted(a[0], a[1], a[2], b[0])
	waitFor(t, "the recording", func() bool { return slices.Equal(x.pool(t), want) && x.m.Held()[kv.TierHost] == 1 })
	if st := x.f.Stats(); st.Recovered != 1 || st.Lost != 0 || st.Bad != 0 {
		t.Fatalf("stats %+v: want the one dropped batch recovered", st)
	}
}
