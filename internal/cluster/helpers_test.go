package cluster

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/sim"
)

// testModel is the model id every test worker serves.
const testModel = "sim-test"

// testBeat is the test workers' heartbeat: short, so silence is noticed in
// a fraction of a second.
const testBeat = 100 * time.Millisecond

// startNATS runs an embedded server for one test.
func startNATS(t *testing.T) *Server {
	t.Helper()
	s, err := StartServer(ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func connect(t *testing.T, s *Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// simEngine is an engine on the simulator in real time: each forward pass
// sleeps pass. Tokens depend only on the sequence, so two such engines
// generate the same outputs for the same request.
func simEngine(t *testing.T, pass time.Duration, events *kv.EventLog) *engine.Engine {
	t.Helper()
	return simEngineVocab(t, pass, events, 64)
}

// simEngineVocab is simEngine for a model of vocab tokens.
func simEngineVocab(t *testing.T, pass time.Duration, events *kv.EventLog, vocab int) *engine.Engine {
	t.Helper()
	p := &sim.Profile{
		Model: "cluster-test",
		Shape: sim.Shape{Vocab: vocab, Context: 4096, Layers: 1, KVDim: 8, KVType: "f16", MaxTokens: 256},
		Cost:  sim.Cost{Fixed: pass.Seconds()},
	}
	f, err := sim.NewForwarder(p, sim.Options{EndOfGeneration: -1})
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(f, engine.Config{KVMemoryBytes: 256 * 16 * 32, KVNoStorage: true, Events: events, ModelID: testModel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// testWorker is a worker with its own connection, so a test can cut it
// off as if its process died.
type testWorker struct {
	*Worker
	e      *engine.Engine
	nc     *nats.Conn
	events *kv.EventLog
}

func startWorker(t *testing.T, s *Server, id string, pass time.Duration) *testWorker {
	t.Helper()
	return startWorkerVocab(t, s, id, pass, 64)
}

func startWorkerVocab(t *testing.T, s *Server, id string, pass time.Duration, vocab int) *testWorker {
	t.Helper()
	events := kv.NewEventLog(4096)
	return startWorkerOn(t, s, id, simEngineVocab(t, pass, events, vocab), events)
}

// startWorkerOn serves e, whose KV events go to events, as worker id.
func startWorkerOn(t *testing.T, s *Server, id string, e *engine.Engine, events *kv.EventLog) *testWorker {
	t.Helper()
	nc := connect(t, s)
	w, err := StartWorker(nc, Local(e), WorkerConfig{ID: id, Model: testModel, Heartbeat: testBeat, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(ctx)
	})
	return &testWorker{Worker: w, e: e, nc: nc, events: events}
}

// kill cuts the worker off the cluster as a crash would: no drain, no
// leave; its engine stops.
func (w *testWorker) kill() {
	w.nc.Close()
	w.e.Close()
}

// gateway is a registry and a backend on their own connection, its
// metrics in a registry of their own.
func gateway(t *testing.T, s *Server, picker Picker) (*Registry, *Backend) {
	t.Helper()
	nc := connect(t, s)
	reg, err := NewRegistry(nc, RegistryConfig{Sweep: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	b, err := NewBackend(nc, reg, BackendConfig{Model: testModel, Picker: picker, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return reg, b
}

// waitFor polls cond until it holds or 5 seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitWorkers(t *testing.T, reg *Registry, n int) {
	t.Helper()
	waitFor(t, "the registry knows the workers", func() bool { return len(reg.Workers(testModel)) == n })
}

// readAll reads a stream to its end (at most 10 seconds: a hang fails).
func readAll(t *testing.T, st api.Stream) []engine.Output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []engine.Output
	for {
		var err error
		out, err = st.Recv(ctx, out)
		if errors.Is(err, engine.ErrDone) {
			return out
		}
		if err != nil {
			t.Fatalf("Recv: %v (after %d outputs)", err, len(out))
		}
	}
}

// stripTimes drops what differs between two runs of the same request.
func stripTimes(outs []engine.Output) []engine.Output {
	c := make([]engine.Output, len(outs))
	for i, o := range outs {
		o.Time = time.Time{}
		c[i] = o
	}
	return c
}

// checkGoroutines fails the test if goroutines started during it are
// still running once its cleanups have run (they get a few seconds to
// end). Call it first, so its cleanup runs last.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// fakeWorker heartbeats as a worker of testModel and answers generate
// requests with answer (nil: it does not even subscribe, so NATS reports
// no responders).
func fakeWorker(t *testing.T, s *Server, id string, answer func(nc *nats.Conn, m *nats.Msg)) {
	t.Helper()
	fakeWorkerEvery(t, s, id, testBeat, answer)
}

// fakeWorkerEvery is fakeWorker announcing a heartbeat interval of every
// (it heartbeats every testBeat whatever it announces).
func fakeWorkerEvery(t *testing.T, s *Server, id string, every time.Duration, answer func(nc *nats.Conn, m *nats.Msg)) {
	t.Helper()
	nc := connect(t, s)
	if answer != nil {
		if _, err := nc.Subscribe(SubjectGenerate(id), func(m *nats.Msg) { answer(nc, m) }); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(testBeat)
		defer tk.Stop()
		for {
			data := mustJSON(t, Heartbeat{V: Version, Worker: id, Model: testModel, Interval: every, ContextLength: 4096, BlockSize: 16})
			_ = nc.Publish(SubjectHeartbeat, data)
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}
