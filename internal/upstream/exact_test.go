package upstream_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/upstream"
	"github.com/kvserve/kvserve/internal/vllmevents"
	"github.com/kvserve/kvserve/internal/vllmevents/vllmtest"
)

// exactEngine is an engine in exact mode in front of a vLLM-like server
// whose events it follows.
type exactEngine struct {
	e   *upstream.Engine
	log *kv.EventLog
	srv *vllmtest.Server
	f   *vllmevents.Follower
}

func newExactEngine(t *testing.T, env *apitest.Env) *exactEngine {
	t.Helper()
	pub := vllmtest.StartPublisher(t, "kv-events")
	srv := vllmtest.NewServer(t, pub, 16)
	log := kv.NewEventLog(1 << 12)
	m := vllmevents.NewMirror(vllmevents.MirrorConfig{Secret: testSecret, ModelID: apitest.ModelName, BlockSize: 16, Events: log})
	f, err := vllmevents.NewFollower(vllmevents.FollowConfig{Endpoint: pub.Endpoint(), Replay: pub.Replay(), Topic: "kv-events",
		Retry: 50 * time.Millisecond}, m)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = f.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	e, _ := newEngine(t, env, srv.URL+"/v1", func(c *upstream.Config) { c.CacheSalt, c.Mirror, c.Events = true, m, log })
	// Subscribed once an empty batch gets through (ZeroMQ's slow joiner).
	waitUntil(t, "the subscription", func() bool {
		pub.Send(vllmtest.Empty(), false)
		time.Sleep(20 * time.Millisecond)
		return f.Stats().Batches > 0
	})
	return &exactEngine{e: e, log: log, srv: srv, f: f}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// poolHashes is the set of pool blocks the log's events leave held.
func poolHashes(t *testing.T, log *kv.EventLog) map[kv.Hash]bool {
	t.Helper()
	evs, _, err := log.Poll(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := map[kv.Hash]bool{}
	for _, e := range evs {
		if e.Tier != kv.TierPool {
			continue
		}
		switch e.Kind {
		case kv.BlockStored:
			for _, h := range e.Hashes {
				held[h] = true
			}
		case kv.BlockRemoved:
			for _, h := range e.Hashes {
				delete(held, h)
			}
		case kv.AllCleared:
			clear(held)
		}
	}
	return held
}

func TestExactModeFollowsEvents(t *testing.T) {
	env := kvserveUpstream(t)
	x := newExactEngine(t, env)
	prompt := make([]int32, 40) // two full blocks and a part
	for i := range prompt {
		prompt[i] = int32(100 + i)
	}
	// What the router computes for each tenant's prompt.
	routerChain := func(scope string, p []int32) []kv.Hash {
		return kv.NewHasher([]byte(apitest.ModelName)).Chain(nil, kv.ScopeSalt(testSecret, scope), p, 16)
	}
	for _, scope := range []string{"acme", "globex"} {
		j, err := x.e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 2, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		drain(t, j)
		if u := j.Usage(); u.CachedTokens != 0 {
			t.Errorf("%s: %d cached tokens on first sight (tenants share no blocks upstream)", scope, u.CachedTokens)
		}
	}
	want := append(routerChain("acme", prompt), routerChain("globex", prompt)...)
	waitUntil(t, "both tenants' blocks", func() bool { return len(poolHashes(t, x.log)) == len(want) })
	held := poolHashes(t, x.log)
	for _, h := range want {
		if !held[h] {
			t.Fatalf("the worker publishes %v, not the router's hashes %v", held, want)
		}
	}
	if salts := x.srv.Salts(); len(salts) != 2 || salts[0] == "" || salts[0] == salts[1] {
		t.Errorf("cache_salt per tenant: %q", salts)
	}
	if st := x.e.Now().KV; st.Cached != 4 || st.Total != (1<<18)/16 {
		t.Errorf("Now().KV %+v: want the 4 blocks the server reports", st)
	}
	// The conversation goes on: the new block chains from the old ones.
	longer := append(slices.Clone(prompt), prompt...)
	j, err := x.e.Submit(context.Background(), engine.Request{Prompt: longer, MaxTokens: 2, Scope: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, j)
	if u := j.Usage(); u.CachedTokens != 32 {
		t.Errorf("the server reports %d cached tokens, want 32", u.CachedTokens)
	}
	acme := routerChain("acme", longer)
	waitUntil(t, "the continuation", func() bool { return poolHashes(t, x.log)[acme[len(acme)-1]] })
	snap, _ := x.e.Snapshot()
	if len(snap) != 5+2 { // acme's five, globex's two
		t.Errorf("snapshot of %d blocks, want 7", len(snap))
	}
	// The server evicts everything: the worker says so.
	x.srv.EvictAll()
	waitUntil(t, "the eviction", func() bool { return len(poolHashes(t, x.log)) == 0 })
	if snap, _ := x.e.Snapshot(); len(snap) != 0 || x.e.Now().KV.Cached != 0 {
		t.Errorf("after the eviction: snapshot %d blocks, stats %+v", len(snap), x.e.Now().KV)
	}
}

func TestExactModeNeedsCacheSalt(t *testing.T) {
	env := kvserveUpstream(t)
	m := vllmevents.NewMirror(vllmevents.MirrorConfig{Secret: testSecret, BlockSize: 16})
	_, err := upstream.New(upstream.Config{URL: "http://127.0.0.1:1/v1", Model: "m", Tokenizer: env.Tokenizer, ContextLength: 64,
		Secret: testSecret, Mirror: m})
	if err == nil || !strings.Contains(err.Error(), "cache_salt") {
		t.Fatalf("exact mode without CacheSalt: %v", err)
	}
}

// TestRoutedByEvents: two vLLM-like servers, each holding two documents
// it was sent directly; the router learns it from their own events and
// sends each question to the server holding its document, and forgets a
// server's blocks when its events say they were evicted.
func TestRoutedByEvents(t *testing.T) {
	env := kvserveUpstream(t)
	xs := []*exactEngine{newExactEngine(t, env), newExactEngine(t, env)}
	r, b := routedCluster(t, []*upstream.Engine{xs[0].e, xs[1].e}, []*kv.EventLog{xs[0].log, xs[1].log})
	tok := env.Tokenizer
	docs := make([][]int32, 4)
	for i := range docs {
		docs[i] = tok.Encode(strings.Repeat(fmt.Sprintf("document %d says something of its own. ", i), 10), true, false)
		j, err := xs[i/2].e.Submit(context.Background(), engine.Request{Prompt: docs[i], MaxTokens: 2, Scope: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		drain(t, j)
	}
	perDoc := len(docs[0]) / 16
	waitIndexed(t, r, 4*perDoc)
	for _, i := range []int{3, 0, 2, 1} {
		prompt := append(slices.Clone(docs[i]), tok.Encode(" What does it say?", false, false)...)
		before := []int{len(xs[0].srv.Salts()), len(xs[1].srv.Salts())}
		u := submitVia(t, b, prompt, "acme")
		holder := i / 2
		if got := len(xs[holder].srv.Salts()) - before[holder]; got != 1 {
			t.Errorf("document %d: its question went to server %d, not %d which holds it", i, 1-holder, holder)
		}
		if want := perDoc * 16; u.CachedTokens < want {
			t.Errorf("document %d: the server reports %d cached prompt tokens, want at least %d", i, u.CachedTokens, want)
		}
	}
	// Server 0 evicts everything: its blocks leave the router's index
	// (server 1's, and the questions' blocks on it, stay).
	before := r.Index().Len()
	xs[0].srv.EvictAll()
	waitUntil(t, "server 0's eviction in the index", func() bool { return r.Index().Len() < before })
	if n := r.Index().Len(); n > before-2*perDoc {
		t.Errorf("after server 0 evicted everything the index has %d blocks of %d", n, before)
	}
}
