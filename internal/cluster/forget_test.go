package cluster

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// recordingEngine records the scopes it is told to forget.
type recordingEngine struct {
	Engine
	mu     sync.Mutex
	scopes []string
}

func (r *recordingEngine) ForgetScope(scope string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scopes = append(r.scopes, scope)
	return nil
}

func (r *recordingEngine) forgot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.scopes)
}

// TestForgetDeletedTenant: a deleted tenant's scope, appended to the forget
// stream, leaves a running worker's KV (its prompt finds nothing cached
// there afterwards, another tenant's still does), and a worker started
// later forgets it too.
func TestForgetDeletedTenant(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	w1 := startWorker(t, s, "w1", time.Millisecond)
	reg, b := gateway(t, s, prefer("w1"))
	waitWorkers(t, reg, 1)
	cached := func(scope string) int {
		t.Helper()
		st := mustSubmit(t, b, engine.Request{Prompt: prompt(64), MaxTokens: 1, Scope: scope})
		readAll(t, st)
		return st.Usage().CachedTokens
	}
	for _, scope := range []string{"gone", "kept"} {
		cached(scope)
		if n := cached(scope); n != 48 {
			t.Fatalf("scope %s: %d tokens cached the second time, want 48", scope, n)
		}
	}
	f, err := NewForgetter(context.Background(), connect(t, s), 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ForgetScope("gone"); err != nil {
		t.Fatal(err)
	}
	if err := f.ForgetScope(""); err == nil {
		t.Error("an empty scope was accepted")
	}
	waitFor(t, "the worker forgets the scope", func() bool { return w1.forgotten.Load() == 1 })
	if n := cached("gone"); n != 0 {
		t.Errorf("the forgotten scope found %d tokens cached", n)
	}
	if n := cached("kept"); n != 48 {
		t.Errorf("the other scope found %d tokens cached, want 48", n)
	}

	// A worker that joins later reads the stream from its start.
	rec := &recordingEngine{Engine: Local(simEngine(t, time.Millisecond, kv.NewEventLog(64)))}
	w2, err := StartWorker(connect(t, s), rec, WorkerConfig{ID: "w2", Model: testModel, Heartbeat: testBeat})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w2.Close(context.Background()) })
	waitFor(t, "the new worker forgets the scope", func() bool { return slices.Equal(rec.forgot(), []string{"gone"}) })
}
