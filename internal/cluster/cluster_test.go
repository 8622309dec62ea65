package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/sample"
)

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gather: %v %v", mfs, err)
	}
	return mfs[0].GetMetric()[0].GetCounter().GetValue()
}

// prefer picks worker id when it is a candidate, else the least loaded.
type prefer string

func (p prefer) Pick(r *engine.Request, cands []Candidate) int {
	for i, c := range cands {
		if c.Worker == string(p) {
			return i
		}
	}
	return LeastLoaded{}.Pick(r, cands)
}

func prompt(n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1 + i%60)
	}
	return p
}

// TestSameOutputsAsLocal: a request through the gateway's backend to a
// worker streams what the same engine in this process streams, and the
// engine's refusals come back as the same errors.
func TestSameOutputsAsLocal(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	startWorker(t, s, "w1", time.Millisecond)
	reg, remote := gateway(t, s, nil)
	waitWorkers(t, reg, 1)
	local := api.LocalBackend(simEngine(t, time.Millisecond, nil))
	cancels := make(chan *nats.Msg, 16)
	watcher := connect(t, s)
	sub, err := watcher.ChanSubscribe(SubjectCancel("w1"), cancels)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	tests := []struct {
		name    string
		req     engine.Request
		wantErr error
	}{
		{"greedy", engine.Request{Prompt: prompt(40), MaxTokens: 12}, nil},
		{"two samples", engine.Request{Prompt: prompt(33), MaxTokens: 9, N: 2, Sampling: sample.Params{Temperature: 0.8, Seed: 7}}, nil},
		{"one token", engine.Request{Prompt: prompt(3), MaxTokens: 1, Scope: "tenant-a"}, nil},
		// More outputs at once than one frame carries.
		{"128 samples", engine.Request{Prompt: prompt(20), MaxTokens: 6, N: 128, Sampling: sample.Params{Temperature: 1, Seed: 3}}, nil},
		{"too long", engine.Request{Prompt: prompt(5000), MaxTokens: 1}, engine.ErrTooLong},
		{"invalid", engine.Request{Prompt: prompt(8)}, engine.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			ls, lerr := local.Submit(ctx, tt.req)
			rs, rerr := remote.Submit(ctx, tt.req)
			if tt.wantErr != nil {
				if !errors.Is(lerr, tt.wantErr) || !errors.Is(rerr, tt.wantErr) {
					t.Fatalf("local error %v, remote error %v; want both %v", lerr, rerr, tt.wantErr)
				}
				if api.AsError(lerr).Status() != api.AsError(rerr).Status() {
					t.Fatalf("local status %d, remote %d", api.AsError(lerr).Status(), api.AsError(rerr).Status())
				}
				return
			}
			if lerr != nil || rerr != nil {
				t.Fatalf("local %v, remote %v", lerr, rerr)
			}
			// Read as the API does: up to the last sample's finish, then
			// Cancel, which has nothing left to cancel on the worker.
			var got []engine.Output
			for finished := 0; finished < max(tt.req.N, 1); {
				var err error
				n := len(got)
				if got, err = rs.Recv(ctx, got); err != nil {
					t.Fatal(err)
				}
				for _, o := range got[n:] {
					if o.Finish != engine.FinishNone {
						finished++
					}
				}
			}
			if rs.Ended().IsZero() {
				t.Fatal("no end time once every sample has finished")
			}
			rs.Cancel()
			// The round trips deliver whatever Cancel published.
			if remote.nc.Flush() != nil || watcher.Flush() != nil {
				t.Fatal("flush")
			}
			if len(cancels) > 0 {
				t.Fatal("a finished stream's Cancel was sent to the worker")
			}
			if outs, err := rs.Recv(ctx, nil); !errors.Is(err, engine.ErrDone) || len(outs) > 0 {
				t.Fatalf("Recv after the end: %+v, %v", outs, err)
			}
			want := stripTimes(readAll(t, ls))
			if got = stripTimes(got); !slices.Equal(want, got) {
				t.Fatalf("remote outputs differ:\n got %+v\nwant %+v", got, want)
			}
			if lu, ru := ls.Usage(), rs.Usage(); lu != ru {
				t.Fatalf("usage: remote %+v, local %+v", ru, lu)
			}
		})
	}
	// Each request that produced a token timed the cluster's part of its
	// first token's wait, on one host's clock: positive, and far below
	// the engine's millisecond passes plus the test's own slack.
	var m dto.Metric
	if err := remote.added.Write(&m); err != nil {
		t.Fatal(err)
	}
	if h := m.GetHistogram(); h.GetSampleCount() != 4 || h.GetSampleSum() <= 0 || h.GetSampleSum() > 4 {
		t.Errorf("kvserve_cluster_added_seconds: %d samples summing %v s, want 4 and a positive sum", h.GetSampleCount(), h.GetSampleSum())
	}
}

// TestClampToWorkerContext: a request whose output would run past the
// worker's context (its KV pool may hold less than the model's context,
// which is all the API knows) is clamped to it, as the API clamps to the
// model's, rather than refused.
func TestClampToWorkerContext(t *testing.T) {
	s := startNATS(t)
	w := startWorker(t, s, "w1", time.Millisecond)
	reg, b := gateway(t, s, nil)
	waitWorkers(t, reg, 1)
	ctx := w.e.Config().MaxContext
	st := mustSubmit(t, b, engine.Request{Prompt: prompt(ctx - 3), MaxTokens: 100})
	outs := readAll(t, st)
	tokens := 0
	for _, o := range outs {
		if o.Token >= 0 {
			tokens++
		}
	}
	if tokens != 3 || outs[len(outs)-1].Finish != engine.FinishLength {
		t.Fatalf("outputs %+v, want 3 tokens and a length finish", outs)
	}
}

// TestNoWorkers: with no worker of the model (a worker of another model
// does not count) the backend refuses at once with a 503.
func TestNoWorkers(t *testing.T) {
	s := startNATS(t)
	reg, b := gateway(t, s, nil)
	other := Heartbeat{V: Version, Worker: "other", Model: "another-model", Interval: time.Hour, ContextLength: 4096}
	if err := connect(t, s).Publish(SubjectHeartbeat, mustJSON(t, other)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the registry knows the other model's worker", func() bool { return len(reg.Workers("")) == 1 })
	_, err := b.Submit(context.Background(), engine.Request{Prompt: prompt(4), MaxTokens: 2})
	if !errors.Is(err, ErrNoWorkers) || api.AsError(err).Status() != 503 {
		t.Fatalf("error %v (status %d), want ErrNoWorkers as 503", err, api.AsError(err).Status())
	}
	if err := b.Ready(); !errors.Is(err, ErrNoWorkers) {
		t.Fatalf("Ready: %v", err)
	}
	startWorker(t, s, "w1", time.Millisecond)
	waitFor(t, "the backend is ready", func() bool { return b.Ready() == nil })
}

// TestCancelReachesWorker: a stream cancelled at the gateway (its client
// went away) stops on the worker's engine.
func TestCancelReachesWorker(t *testing.T) {
	for _, how := range []string{"Cancel", "context"} {
		t.Run(how, func(t *testing.T) {
			checkGoroutines(t)
			s := startNATS(t)
			w := startWorker(t, s, "w1", 5*time.Millisecond)
			reg, b := gateway(t, s, nil)
			waitWorkers(t, reg, 1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := b.Submit(ctx, engine.Request{Prompt: prompt(20), MaxTokens: 2000})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Recv(ctx, nil); err != nil {
				t.Fatal(err)
			}
			// The engine counts its running sequences after the step that
			// sent the first token, so the count may trail the token.
			waitFor(t, "the worker's engine runs the stream", func() bool { return w.e.Now().Running == 1 })
			if how == "Cancel" {
				st.Cancel()
			} else {
				cancel()
			}
			waitFor(t, "the worker's engine runs nothing", func() bool {
				n := w.e.Now()
				return n.Running == 0 && n.Waiting == 0
			})
		})
	}
}

// TestSilentWorkerDropped: a worker that stops heartbeating is dropped
// after three intervals; one that drains and leaves, at once.
func TestSilentWorkerDropped(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	w1 := startWorker(t, s, "w1", time.Millisecond)
	w2 := startWorker(t, s, "w2", time.Millisecond)
	reg, _ := gateway(t, s, nil)
	waitWorkers(t, reg, 2)
	w1.kill()
	before, _ := reg.Worker("w1")
	waitWorkers(t, reg, 1)
	if d := time.Since(before.Seen); d < silentBeats*testBeat {
		t.Fatalf("dropped %v after its last heartbeat: before three were missed", d)
	}
	if _, ok := reg.Worker("w2"); !ok {
		t.Fatal("the live worker was dropped")
	}
	if err := w2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, reg, 0)
}

// TestWorkerKilledMidStream: a worker that dies after the first output
// ends the client's stream with a clear error, within three heartbeats.
func TestWorkerKilledMidStream(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	w := startWorker(t, s, "w1", 5*time.Millisecond)
	startWorker(t, s, "w2", 5*time.Millisecond)
	reg, b := gateway(t, s, prefer("w1"))
	waitWorkers(t, reg, 2)
	st, err := b.Submit(context.Background(), engine.Request{Prompt: prompt(20), MaxTokens: 2000, N: 2})
	if err != nil {
		t.Fatal(err)
	}
	first, err := st.Recv(context.Background(), nil)
	if err != nil || len(first) == 0 {
		t.Fatal(first, err)
	}
	w.kill()
	start := time.Now()
	outs := readAll(t, st)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the error took %v", d)
	}
	failed := 0
	for _, o := range outs {
		if o.Finish == engine.FinishError {
			failed++
			if o.Err == nil || !strings.Contains(o.Err.Error(), "worker w1") {
				t.Fatalf("error output without a clear message: %v", o.Err)
			}
		}
	}
	if failed != 2 {
		t.Fatalf("%d samples ended in an error, want 2: %+v", failed, outs)
	}
	if n := counterValue(t, b.cutoffs); n != 1 {
		t.Fatalf("%v cut-offs counted", n)
	}
}

// TestRetryBeforeFirstOutput: a worker that cannot or does not answer
// before the first output is replaced by another, once, and the client
// sees only the second worker's outputs.
func TestRetryBeforeFirstOutput(t *testing.T) {
	tests := []struct {
		name   string
		answer func(nc *nats.Conn, m *nats.Msg) // the bad worker's behaviour (nil: not subscribed)
		// fast: the failure is known at once, without waiting out the
		// silence timeout.
		fast bool
	}{
		{"no responders", nil, true},
		{"silent", func(*nats.Conn, *nats.Msg) {}, false},
		{"draining", func(nc *nats.Conn, m *nats.Msg) {
			req, _ := DecodeGenerateRequest(m.Data)
			_ = nc.Publish(m.Reply, mustJSON(t, Frame{V: Version, ID: req.ID, Done: true, Error: &WireError{Kind: KindClosed, Message: "engine: closed"}}))
		}, true},
		{"dies after queueing", func(nc *nats.Conn, m *nats.Msg) {
			req, _ := DecodeGenerateRequest(m.Data)
			_ = nc.Publish(m.Reply, mustJSON(t, Frame{V: Version, ID: req.ID}))
		}, false},
		{"loses a frame", func(nc *nats.Conn, m *nats.Msg) {
			req, _ := DecodeGenerateRequest(m.Data)
			_ = nc.Publish(m.Reply, mustJSON(t, Frame{V: Version, ID: req.ID}))
			_ = nc.Publish(m.Reply, mustJSON(t, Frame{V: Version, ID: req.ID, Seq: 2}))
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkGoroutines(t)
			s := startNATS(t)
			// A fast failure is told apart from one found by silence by
			// a silence far longer than the test may take.
			every := testBeat
			if tt.fast {
				every = 10 * time.Second
			}
			fakeWorkerEvery(t, s, "bad", every, tt.answer)
			good := startWorker(t, s, "good", time.Millisecond)
			reg, b := gateway(t, s, prefer("bad"))
			waitWorkers(t, reg, 2)
			req := engine.Request{Prompt: prompt(24), MaxTokens: 5}
			start := time.Now()
			st, err := b.Submit(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); tt.fast && d >= 10*time.Second {
				t.Fatalf("took %v: the failure was not noticed at once", d)
			}
			got := stripTimes(readAll(t, st))
			if n := counterValue(t, b.retries); n != 1 {
				t.Fatalf("%v retries counted", n)
			}
			want := stripTimes(readAll(t, mustSubmit(t, api.LocalBackend(good.e), req)))
			if !slices.Equal(got, want) {
				t.Fatalf("got %+v\nwant the good worker's %+v", got, want)
			}
		})
	}
}

func mustSubmit(t *testing.T, b api.Backend, r engine.Request) api.Stream {
	t.Helper()
	st, err := b.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestRetryOnlyOnce: when the replacement fails too, the client gets a
// clear error rather than a third try or a hang.
func TestRetryOnlyOnce(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	fakeWorker(t, s, "bad1", func(*nats.Conn, *nats.Msg) {})
	fakeWorker(t, s, "bad2", func(*nats.Conn, *nats.Msg) {})
	reg, b := gateway(t, s, nil)
	waitWorkers(t, reg, 2)
	_, err := b.Submit(context.Background(), engine.Request{Prompt: prompt(4), MaxTokens: 2})
	if api.AsError(err).Status() != 503 || !strings.Contains(err.Error(), "sent nothing") {
		t.Fatalf("error %v, want a 503 saying the worker sent nothing", err)
	}
}

// TestDrain: a worker closing finishes what it runs, takes nothing new
// (the gateway sends new requests elsewhere), and leaves.
func TestDrain(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	w1 := startWorker(t, s, "w1", 2*time.Millisecond)
	startWorker(t, s, "w2", 2*time.Millisecond)
	reg, b := gateway(t, s, prefer("w1"))
	waitWorkers(t, reg, 2)
	req := engine.Request{Prompt: prompt(10), MaxTokens: 50}
	st, err := b.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- w1.Close(context.Background()) }()
	waitFor(t, "w1 is draining", func() bool { w, _ := reg.Worker("w1"); return w.Draining })
	// A new request goes to w2.
	st2, err := b.Submit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	outs := readAll(t, st)
	tokens := 0
	for _, o := range outs {
		if o.Token >= 0 {
			tokens++
		}
	}
	if tokens != 50 || outs[len(outs)-1].Finish != engine.FinishLength {
		t.Fatalf("the draining worker's request: %d tokens, last output %+v", tokens, outs[len(outs)-1])
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, reg, 1)
	if outs := readAll(t, st2); outs[len(outs)-1].Finish != engine.FinishLength {
		t.Fatalf("the new request: %+v", outs[len(outs)-1])
	}
}

// TestDrainDeadline: requests still running when the drain's deadline
// passes end with an error saying the worker shut down, not as if the
// client had cancelled.
func TestDrainDeadline(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	w := startWorker(t, s, "w1", 5*time.Millisecond)
	reg, b := gateway(t, s, nil)
	waitWorkers(t, reg, 1)
	st, err := b.Submit(context.Background(), engine.Request{Prompt: prompt(10), MaxTokens: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := w.Close(ctx); err == nil {
		t.Fatal("the drain met its deadline with a 2,000-token request running")
	}
	outs := readAll(t, st)
	last := outs[len(outs)-1]
	if last.Finish != engine.FinishError || last.Err == nil || !strings.Contains(last.Err.Error(), "shut down") {
		t.Fatalf("last output %+v (%v)", last, last.Err)
	}
}

// TestKeepAlive: a worker that is busy (compiling a grammar, a long
// prefill) but says so is waited for, however long past the silence
// timeout it takes.
func TestKeepAlive(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	fakeWorker(t, s, "slow", func(nc *nats.Conn, m *nats.Msg) {
		req, _ := DecodeGenerateRequest(m.Data)
		go func() {
			for range 2 * silentBeats {
				_ = nc.Publish(m.Reply, mustJSON(t, Frame{V: Version, ID: req.ID, KeepAlive: true}))
				time.Sleep(testBeat)
			}
			_ = nc.Publish(m.Reply, mustJSON(t, Frame{V: Version, ID: req.ID}))
			for range 2 * silentBeats {
				_ = nc.Publish(m.Reply, mustJSON(t, Frame{V: Version, ID: req.ID, KeepAlive: true}))
				time.Sleep(testBeat)
			}
			_ = nc.Publish(m.Reply, mustJSON(t, Frame{V: Version, ID: req.ID, Seq: 1, Done: true,
				Outputs: []engine.Output{{Token: 7, Finish: engine.FinishLength}}}))
		}()
	})
	reg, b := gateway(t, s, nil)
	waitWorkers(t, reg, 1)
	st, err := b.Submit(context.Background(), engine.Request{Prompt: prompt(4), MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	if outs := readAll(t, st); len(outs) != 1 || outs[0].Token != 7 || outs[0].Finish != engine.FinishLength {
		t.Fatalf("outputs %+v", outs)
	}
}

// TestGatewayDeath: the requests of a gateway that dies (its heartbeats
// stop; nobody will cancel them) are stopped on their worker three
// gateway heartbeats later.
func TestGatewayDeath(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	w := startWorker(t, s, "w1", 5*time.Millisecond)
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	reg, err := NewRegistry(nc, RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	const beat = 2 * testBeat // a live gateway is never taken for dead, even on a loaded machine
	b, err := NewBackend(nc, reg, BackendConfig{Model: testModel, Heartbeat: beat})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	waitWorkers(t, reg, 1)
	st, err := b.Submit(context.Background(), engine.Request{Prompt: prompt(10), MaxTokens: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// Alive: the request runs on past the silence a dead gateway would have.
	time.Sleep(2 * silentBeats * beat)
	if n := w.e.Now().Running; n != 1 {
		t.Fatalf("%d running while the gateway lives", n)
	}
	nc.Close() // the gateway dies: no cancel, no more heartbeats
	waitFor(t, "the worker stops the dead gateway's request", func() bool { return w.e.Now().Running == 0 })
}

// statsEngine is an engine that only reports load.
type statsEngine struct{ st engine.Stats }

func (s statsEngine) Submit(context.Context, engine.Request) (Job, error) {
	return nil, engine.ErrQueueFull
}
func (s statsEngine) Now() engine.Stats              { return s.st }
func (s statsEngine) BlockSize() int                 { return 16 }
func (s statsEngine) ContextLength() int             { return 4096 }
func (s statsEngine) Snapshot() ([]kv.Event, uint64) { return nil, 0 }

// TestHeartbeatWaitingByPriority: a worker's heartbeat says how many
// requests wait at each priority, and the gateway's registry has it (the
// router counts only those at a request's priority or above as ahead).
func TestHeartbeatWaitingByPriority(t *testing.T) {
	s := startNATS(t)
	by := []engine.PriorityWaiting{{Priority: 3, Requests: 1, PromptTokens: 40}, {Priority: 0, Requests: 4, PromptTokens: 900}}
	w, err := StartWorker(connect(t, s), statsEngine{engine.Stats{Waiting: 5, WaitingByPriority: by}},
		WorkerConfig{ID: "w-prio", Model: testModel, Heartbeat: testBeat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	reg, _ := gateway(t, s, LeastLoaded{})
	waitWorkers(t, reg, 1)
	info, ok := reg.Worker("w-prio")
	if !ok || info.Waiting != 5 || !slices.Equal(info.WaitingByPriority, by) {
		t.Fatalf("registry has %+v (found %v), want waiting 5 by priority %+v", info.Heartbeat, ok, by)
	}
}
