package upstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/api/openai"
	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/router"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/upstream"
	"github.com/nats-io/nats.go"
)

var testSecret = []byte("upstream-test-secret")

// kvserveUpstream is a second kvserve (the real API on a real tiny model)
// used as the external OpenAI-compatible engine.
func kvserveUpstream(t *testing.T) *apitest.Env {
	t.Helper()
	return apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New()}, ModelFile: apitest.BPEModelFile(t)})
}

func newEngine(t *testing.T, env *apitest.Env, url string, edit func(*upstream.Config)) (*upstream.Engine, *kv.EventLog) {
	t.Helper()
	events := kv.NewEventLog(1 << 12)
	cfg := upstream.Config{URL: url, Model: apitest.ModelName, Tokenizer: env.Tokenizer, ContextLength: apitest.ContextLength,
		ModelID: apitest.ModelName, Secret: testSecret, Events: events}
	if edit != nil {
		edit(&cfg)
	}
	e, err := upstream.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e, events
}

// drain reads a job to its end.
func drain(t *testing.T, j cluster.Job) []engine.Output {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var all, buf []engine.Output
	for {
		var err error
		buf, err = j.Recv(ctx, buf[:0])
		all = append(all, buf...)
		if errors.Is(err, engine.ErrDone) {
			return all
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func tokensOf(outs []engine.Output, sample int) []int32 {
	var ts []int32
	for _, o := range outs {
		if o.Index == sample && o.Token >= 0 {
			ts = append(ts, o.Token)
		}
	}
	return ts
}

func finishOf(t *testing.T, outs []engine.Output, sample int) engine.Output {
	t.Helper()
	for _, o := range outs {
		if o.Index == sample && o.Finish != engine.FinishNone {
			return o
		}
	}
	t.Fatalf("sample %d never finished: %v", sample, outs)
	return engine.Output{}
}

// overTheWire is s as a JSON string carries it: invalid UTF-8 becomes
// U+FFFD, as in the upstream's response.
func overTheWire(t *testing.T, s string) string {
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back string
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	return back
}

func TestSameTextAsTheUpstreamEngine(t *testing.T) {
	env := kvserveUpstream(t)
	e, _ := newEngine(t, env, env.URL("/v1"), nil)
	prompt := env.Tokenizer.Encode("Once upon a time, in a cache far away, there lived a block.", true, false)
	for _, max := range []int{1, 7, 40} {
		want := env.Greedy(t, prompt, max)
		j, err := e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: max, Scope: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		outs := drain(t, j)
		got := tokensOf(outs, 0)
		if g, w := env.Tokenizer.Decode(got), overTheWire(t, env.Tokenizer.Decode(want)); g != w {
			t.Errorf("max %d: text %q, want the upstream's greedy %q", max, g, w)
		}
		f := finishOf(t, outs, 0)
		wantFinish := engine.FinishLength
		if len(want) < max {
			wantFinish = engine.FinishStop
		}
		if f.Finish != wantFinish || f.Err != nil {
			t.Errorf("max %d: finish %v (%v), want %v", max, f.Finish, f.Err, wantFinish)
		}
		if u := j.Usage(); u.PromptTokens != len(prompt) || u.CompletionTokens != len(got) {
			t.Errorf("max %d: usage %+v, want %d prompt and %d completion tokens", max, u, len(prompt), len(got))
		}
		if j.Ended().IsZero() {
			t.Errorf("max %d: no end time", max)
		}
	}
	if st := e.Now(); st.Running != 0 {
		t.Errorf("%d requests still counted running", st.Running)
	}
}

func TestSeveralSamples(t *testing.T) {
	env := kvserveUpstream(t)
	e, _ := newEngine(t, env, env.URL("/v1"), nil)
	prompt := env.Tokenizer.Encode("Three samples, please:", true, false)
	j, err := e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 12, N: 3, Scope: "acme",
		Sampling: sample.Params{Temperature: 1, Seed: 7}})
	if err != nil {
		t.Fatal(err)
	}
	outs := drain(t, j)
	for i := range 3 {
		if f := finishOf(t, outs, i); f.Err != nil || (f.Finish != engine.FinishLength && f.Finish != engine.FinishStop) {
			t.Errorf("sample %d: finish %v %v", i, f.Finish, f.Err)
		}
	}
}

// TestPredictedCacheIsTheUpstreams: the upstream reports the cached
// prompt tokens the prediction expected, and the prediction's events carry
// the block hashes a router computes for the same prompt and tenant.
func TestPredictedCacheIsTheUpstreams(t *testing.T) {
	env := kvserveUpstream(t)
	e, events := newEngine(t, env, env.URL("/v1"), nil)
	doc := env.Tokenizer.Encode(strings.Repeat("a shared document about caches; ", 12), true, false)
	bs := e.BlockSize()
	run := func(suffix string) engine.Usage {
		prompt := append(slices.Clone(doc), env.Tokenizer.Encode(suffix, false, false)...)
		j, err := e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 4, Scope: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		drain(t, j)
		return j.Usage()
	}
	if u := run(" first question?"); u.CachedTokens != 0 {
		t.Fatalf("first request: %d cached tokens reported, want 0", u.CachedTokens)
	}
	u := run(" second question?")
	if want := len(doc) / bs * bs; u.CachedTokens < want {
		t.Errorf("second request: the upstream reports %d cached tokens, want at least the document's %d", u.CachedTokens, want)
	}
	if reported, short := e.Predictions(); reported != 2 || short != 0 {
		t.Errorf("predictions: %d reported, %d short of the prediction; want 2 and 0", reported, short)
	}
	// The router hashes the document as the prediction did.
	want := kv.NewHasher([]byte(apitest.ModelName)).Chain(nil, kv.ScopeSalt(testSecret, "acme"), doc, bs)
	evs, _, err := events.Poll(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stored []kv.Hash
	for _, ev := range evs {
		if ev.Kind == kv.BlockStored {
			stored = append(stored, ev.Hashes...)
		}
	}
	if len(stored) < len(want) || !slices.Equal(stored[:len(want)], want) {
		t.Errorf("stored events' hashes do not begin with the document's chain (%d stored, %d in the chain)", len(stored), len(want))
	}
	// Another tenant's identical prompt is not predicted cached.
	snap, _ := e.Snapshot()
	if len(snap) == 0 {
		t.Fatal("empty snapshot after two requests")
	}
	other := kv.NewHasher([]byte(apitest.ModelName)).Chain(nil, kv.ScopeSalt(testSecret, "globex"), doc, bs)
	for _, ev := range snap {
		for _, h := range ev.Hashes {
			if h == other[0] {
				t.Fatal("the prediction holds a block in another tenant's scope")
			}
		}
	}
}

func TestRefusedBeforeSending(t *testing.T) {
	env := kvserveUpstream(t)
	e, _ := newEngine(t, env, env.URL("/v1"), nil)
	prompt := env.Tokenizer.Encode("hello", true, false)
	notEOG := int32(5)
	for env.Tokenizer.IsEOG(notEOG) {
		notEOG++
	}
	cases := []struct {
		name string
		edit func(*engine.Request)
		want error
	}{
		{"logprobs", func(r *engine.Request) { r.Sampling.Logprobs = true }, engine.ErrInvalid},
		{"top logprobs", func(r *engine.Request) { r.Sampling.TopLogprobs = 2 }, engine.ErrInvalid},
		{"constraint", func(r *engine.Request) { r.Constraint = &engine.Constraint{} }, engine.ErrInvalid},
		{"ignore eos", func(r *engine.Request) { r.IgnoreEOS = true }, engine.ErrInvalid},
		{"repeat penalty", func(r *engine.Request) { r.Sampling.RepeatPenalty = 1.3 }, engine.ErrInvalid},
		{"stop token", func(r *engine.Request) { r.StopTokens = []int32{notEOG} }, engine.ErrInvalid},
		{"no max tokens", func(r *engine.Request) { r.MaxTokens = 0 }, engine.ErrInvalid},
		{"empty prompt", func(r *engine.Request) { r.Prompt = nil }, engine.ErrInvalid},
		{"too long", func(r *engine.Request) { r.MaxTokens = apitest.ContextLength }, engine.ErrTooLong},
	}
	before := len(env.Recorder.Requests())
	for _, c := range cases {
		r := engine.Request{Prompt: prompt, MaxTokens: 4, Scope: "acme"}
		c.edit(&r)
		_, err := e.Submit(context.Background(), r)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := len(env.Recorder.Requests()); n != before {
		t.Errorf("%d refused requests reached the upstream", n-before)
	}
	// The model's own end-of-generation tokens are fine as stop tokens.
	j, err := e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 2, Scope: "acme", StopTokens: env.Tokenizer.EOGs()})
	if err != nil {
		t.Fatal(err)
	}
	drain(t, j)
}

func TestUpstreamRefusals(t *testing.T) {
	env := kvserveUpstream(t)
	prompt := env.Tokenizer.Encode(strings.Repeat("hello there, ", 20), true, false) // several blocks
	// A model the upstream does not serve: a misconfiguration, not the
	// client's fault.
	e, _ := newEngine(t, env, env.URL("/v1"), func(c *upstream.Config) { c.Model = "no-such-model" })
	_, err := e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 2, Scope: "acme"})
	if err == nil || errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown upstream model: %v, want the upstream's 404 as a server-side failure", err)
	}
	if snap, _ := e.Snapshot(); len(snap) != 0 {
		t.Errorf("a refused prompt is predicted cached: %d events", len(snap))
	}
	// A prompt beyond the upstream's context: its refusal is the client's.
	e, _ = newEngine(t, env, env.URL("/v1"), func(c *upstream.Config) { c.ContextLength = 1 << 20 })
	long := slices.Repeat(prompt, apitest.ContextLength/len(prompt)+1)
	_, err = e.Submit(context.Background(), engine.Request{Prompt: long, MaxTokens: 4, Scope: "acme"})
	if !errors.Is(err, engine.ErrInvalid) && !errors.Is(err, engine.ErrTooLong) {
		t.Errorf("beyond the upstream's context: %v, want invalid or too long", err)
	}
	if st := e.Now(); st.Running != 0 {
		t.Errorf("%d refused requests still counted running", st.Running)
	}
}

// TestCancelReachesTheUpstream: cancelling a job disconnects from the
// upstream, which stops the request there.
func TestCancelReachesTheUpstream(t *testing.T) {
	env := kvserveUpstream(t)
	e, _ := newEngine(t, env, env.URL("/v1"), nil)
	prompt := env.Tokenizer.Encode("Tell me everything.", true, false)
	j, err := e.Submit(context.Background(), engine.Request{Prompt: prompt, MaxTokens: 3000, Scope: "acme",
		Sampling: sample.Params{Temperature: 1, Seed: 3}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := j.Recv(ctx, nil); err != nil {
		t.Fatal(err)
	}
	j.Cancel()
	outs := drain(t, j)
	if f := finishOf(t, outs, 0); f.Finish != engine.FinishCancel && f.Finish != engine.FinishStop {
		t.Errorf("finish %v (%v), want cancelled", f.Finish, f.Err)
	}
	env.WaitIdle(t)
	if st := e.Now(); st.Running != 0 {
		t.Errorf("%d requests still counted running", st.Running)
	}
}

// TestBrokenStream: an upstream that stops mid-stream ends the sample with
// an error, never a hang or a clean finish.
func TestBrokenStream(t *testing.T) {
	env := kvserveUpstream(t)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"half\",\"finish_reason\":null}]}\n\n")
		w.(http.Flusher).Flush()
		// The process dies: the connection closes without [DONE].
	}))
	defer hs.Close()
	e, _ := newEngine(t, env, hs.URL+"/v1", nil)
	j, err := e.Submit(context.Background(), engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 8, Scope: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	outs := drain(t, j)
	if got := env.Tokenizer.Decode(tokensOf(outs, 0)); got != "half" {
		t.Errorf("text %q, want what came before the break", got)
	}
	if f := finishOf(t, outs, 0); f.Finish != engine.FinishError || f.Err == nil {
		t.Errorf("finish %v (%v), want an error", f.Finish, f.Err)
	}
}

func TestMaxRunning(t *testing.T) {
	env := kvserveUpstream(t)
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"ok\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer hs.Close()
	e, _ := newEngine(t, env, hs.URL+"/v1", func(c *upstream.Config) { c.MaxRunning = 1 })
	r := engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 8, Scope: "acme"}
	j, err := e.Submit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Submit(context.Background(), r); !errors.Is(err, engine.ErrQueueFull) {
		t.Errorf("second request: %v, want queue full", err)
	}
	close(release)
	drain(t, j)
	j2, err := e.Submit(context.Background(), r)
	if err != nil {
		t.Fatalf("after the first ended: %v", err)
	}
	drain(t, j2)
}

func TestConfigRefused(t *testing.T) {
	env := kvserveUpstream(t)
	// The tiny model's placeholder vocabulary drops spaces.
	tiny := apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New()}})
	if _, err := upstream.New(upstream.Config{URL: "http://127.0.0.1:1/v1", Model: "m", Tokenizer: tiny.Tokenizer,
		ContextLength: 10, Secret: testSecret}); err == nil || !strings.Contains(err.Error(), "byte-level BPE") {
		t.Errorf("a tokenizer that does not read text back: %v", err)
	}
	base := upstream.Config{URL: "http://127.0.0.1:1/v1", Model: "m", Tokenizer: env.Tokenizer, ContextLength: 10, Secret: testSecret}
	for name, edit := range map[string]func(*upstream.Config){
		"no url":        func(c *upstream.Config) { c.URL = "" },
		"bad scheme":    func(c *upstream.Config) { c.URL = "ftp://x/v1" },
		"no host":       func(c *upstream.Config) { c.URL = "http:///v1" },
		"no model":      func(c *upstream.Config) { c.Model = "" },
		"no secret":     func(c *upstream.Config) { c.Secret = nil },
		"no tokenizer":  func(c *upstream.Config) { c.Tokenizer = nil },
		"cache < block": func(c *upstream.Config) { c.CacheTokens = 4 },
	} {
		c := base
		edit(&c)
		if _, err := upstream.New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRoutedByPrediction: two external kvserves behind two approximate-mode
// workers; documents sent to each worker directly are predicted cached
// there, and the gateway's KV-aware router sends the follow-up questions
// on each document to the upstream that holds it, which confirms the hit.
// routedCluster runs each engine as a cluster worker (its KV events from
// logs[i]) behind a KV-aware router, and returns the router and the
// backend a gateway would submit to.
func routedCluster(t *testing.T, engines []*upstream.Engine, logs []*kv.EventLog) (*router.Router, *cluster.Backend) {
	t.Helper()
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	dial := func() *nats.Conn {
		nc, err := nats.Connect(ns.URL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	for i, e := range engines {
		w, err := cluster.StartWorker(dial(), e, cluster.WorkerConfig{ID: fmt.Sprintf("ext-%d", i), Model: apitest.ModelName,
			Heartbeat: 100 * time.Millisecond, Events: logs[i]})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			w.Close(ctx)
		})
	}
	gnc := dial()
	reg, err := cluster.NewRegistry(gnc, cluster.RegistryConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	r, err := router.New(router.NewIndex(nil), router.Config{Secret: testSecret, ModelID: apitest.ModelName})
	if err != nil {
		t.Fatal(err)
	}
	feed, err := router.NewFeed(gnc, reg, r, router.FeedConfig{Model: apitest.ModelName, Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(feed.Close)
	b, err := cluster.NewBackend(gnc, reg, cluster.BackendConfig{Model: apitest.ModelName, Picker: router.NewPicker(r), Heartbeat: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return r, b
}

// waitIndexed waits until the router's index holds n blocks.
func waitIndexed(t *testing.T, r *router.Router, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.Index().Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("the router's index has %d blocks after 10 s, want %d", r.Index().Len(), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// submitVia sends prompt through the backend (the router places it) and
// returns its usage.
func submitVia(t *testing.T, b *cluster.Backend, prompt []int32, scope string) engine.Usage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := b.Submit(ctx, engine.Request{Prompt: prompt, MaxTokens: 3, Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	var buf []engine.Output
	for err == nil {
		buf, err = st.Recv(ctx, buf[:0])
	}
	if !errors.Is(err, engine.ErrDone) {
		t.Fatal(err)
	}
	return st.Usage()
}

func TestRoutedByPrediction(t *testing.T) {
	envs := []*apitest.Env{kvserveUpstream(t), kvserveUpstream(t)}
	ups := make([]*upstream.Engine, len(envs))
	logs := make([]*kv.EventLog, len(envs))
	for i, env := range envs {
		ups[i], logs[i] = newEngine(t, env, env.URL("/v1"), nil)
	}
	r, b := routedCluster(t, ups, logs)

	tok := envs[0].Tokenizer
	docs := make([][]int32, 4)
	for i := range docs {
		docs[i] = tok.Encode(strings.Repeat(fmt.Sprintf("document %d says something of its own. ", i), 10), true, false)
	}
	// Documents 0 and 1 on upstream 0, 2 and 3 on upstream 1, sent there
	// directly: only the prediction tells the router.
	for i, doc := range docs {
		j, err := ups[i/2].Submit(context.Background(), engine.Request{Prompt: doc, MaxTokens: 2, Scope: "acme"})
		if err != nil {
			t.Fatal(err)
		}
		drain(t, j)
	}
	waitIndexed(t, r, 4*(len(docs[0])/ups[0].BlockSize()))
	for _, i := range []int{3, 0, 2, 1} {
		prompt := append(slices.Clone(docs[i]), tok.Encode(" What does it say?", false, false)...)
		before := []int{len(envs[0].Recorder.Requests()), len(envs[1].Recorder.Requests())}
		u := submitVia(t, b, prompt, "acme")
		holder := i / 2
		if got := len(envs[holder].Recorder.Requests()) - before[holder]; got != 1 {
			t.Errorf("document %d: its question went to upstream %d, not %d which holds it", i, 1-holder, holder)
		}
		if want := len(docs[i]) / 16 * 16; u.CachedTokens < want {
			t.Errorf("document %d: the upstream reports %d cached prompt tokens, want at least %d (usage %+v; predictions %v)", i, u.CachedTokens, want, u, fmt.Sprint(ups[holder].Predictions()))
		}
	}
}

// TestCacheSalt: with CacheSalt, each tenant's requests carry a salt of
// their own, the same every time, that is not the blocks' scope salt; and
// without it, none.
func TestCacheSalt(t *testing.T) {
	env := kvserveUpstream(t)
	bodies := make(chan map[string]any, 8)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		bodies <- b
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"ok\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer hs.Close()
	salts := func(salted bool, scopes ...string) []any {
		e, _ := newEngine(t, env, hs.URL+"/v1", func(c *upstream.Config) { c.CacheSalt = salted })
		var out []any
		for _, s := range scopes {
			j, err := e.Submit(context.Background(), engine.Request{Prompt: []int32{1, 2, 3}, MaxTokens: 2, Scope: s})
			if err != nil {
				t.Fatal(err)
			}
			drain(t, j)
			out = append(out, (<-bodies)["cache_salt"])
		}
		return out
	}
	got := salts(true, "acme", "globex", "acme")
	a, b, again := got[0], got[1], got[2]
	block := kv.ScopeSalt(testSecret, "acme")
	if a == nil || a == b || a != again || a == fmt.Sprintf("%x", block[:16]) {
		t.Errorf("cache_salt per tenant: acme %v, globex %v, acme again %v", a, b, again)
	}
	if got := salts(false, "acme"); got[0] != nil {
		t.Errorf("without CacheSalt: cache_salt %v sent", got[0])
	}
}
