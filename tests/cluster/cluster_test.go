// Package cluster_test runs a kvserve cluster as separate processes on
// loopback — a NATS server (natsd: the embedded server of `kvserve cluster
// up` in a process of its own), three `kvserve worker --engine sim` and two
// `kvserve gateway` — sends a workload through both gateways, kills one
// worker with SIGKILL in the middle of it, and checks what issue 17 asks
// of a failure: every request ends (completed, retried on another worker,
// or a clear error), none hangs, the surviving workers hold no blocks for
// requests that have ended, and both gateways' router index forgets the
// dead worker and agrees with a fresh snapshot of each survivor.
package cluster_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/router"
	"github.com/kvserve/kvserve/internal/sim"
	"github.com/kvserve/kvserve/tests/sdk"
)

// requestDeadline bounds every client call: one that reaches it has hung
// (a request of this workload needs a few seconds; the margin is for a
// loaded machine).
const requestDeadline = 60 * time.Second

// startDeadline bounds building the binaries and starting each process.
const startDeadline = 3 * time.Minute

// pass is the simulated duration of every forward pass: a request of
// maxTokens tokens runs for a few seconds, long enough to be caught in
// the middle by the kill.
const (
	pass      = 20 * time.Millisecond
	maxTokens = 120
)

// Keys of the gateways: an admin (for /metrics) and two tenants.
var tenantKeys = []string{"sk-tenant-a", "sk-tenant-b"}

const adminKey = "sk-admin"

func TestKillWorkerMidRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kvserve and runs a cluster of six processes")
	}
	root := sdk.RepoRoot(t)
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./cmd/kvserve", "./tests/cluster/natsd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kvserve, natsd := filepath.Join(bin, "kvserve"), filepath.Join(bin, "natsd")

	modelFile := apitest.ModelFile(t)
	profile := slowProfile(t, modelFile)
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	// Every process gets a data directory of its own (a disk tier belongs to
	// one process) holding the cluster's secret, so the gateways' router
	// hashes prompts as the workers do.
	dataDir := func(name string) string {
		d := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "secret"), []byte(hex.EncodeToString(secret)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}

	ns := start(ctx, t, "natsd", natsd, `^nats: (nats://\S+)$`, "-store", t.TempDir())
	natsURL := ns.found

	workers := map[string]*process{}
	for _, id := range []string{"w1", "w2", "w3"} {
		workers[id] = start(ctx, t, id, kvserve, `worker `+id+` serving`, "worker", "--nats", natsURL, "--id", id,
			"--engine", "sim", "--sim-profile", profile, "--model", modelFile, "--data-dir", dataDir(id),
			"--kv-cache-memory", "16MiB", "--drain-timeout", "2s")
	}
	var gateways []*process
	for _, name := range []string{"g1", "g2"} {
		args := []string{"gateway", "--nats", natsURL, "--model", modelFile, "--addr", "127.0.0.1:0",
			"--data-dir", dataDir(name), "--shutdown-timeout", "2s", "--api-key", adminKey}
		for i, k := range tenantKeys {
			args = append(args, "--api-key", fmt.Sprintf("%s=tenant-%d", k, i))
		}
		gateways = append(gateways, start(ctx, t, name, kvserve, `gateway serving "[^"]*" on (http://[0-9.]+:[0-9]+)`, args...))
	}
	modelID := strings.TrimSuffix(filepath.Base(modelFile), ".gguf")

	// The test follows the workers' heartbeats itself: their load and KV
	// pools.
	beats := followHeartbeats(t, natsURL)

	// Both gateways know the three workers, and their router index follows
	// each (a snapshot applied makes a series, even with no block yet).
	for _, g := range gateways {
		waitFor(t, "gateway "+g.name+" to follow three workers", 30*time.Second, func() (bool, string) {
			m := metrics(t, g.found)
			ok := m.value("kvserve_cluster_workers") == 3
			for id := range workers {
				_, has := m.workerBlocks(id)
				ok = ok && has
			}
			return ok, m.text
		})
	}

	// The gateways, separate processes, share the cluster's tenant store:
	// a key made through g1 works on g2 and, revoked through g1, is refused
	// by g2 within the store's staleness bound.
	if status, body := request(t, "POST", gateways[0].found+"/v1/admin/tenants", adminKey, `{"name":"shared"}`); status != 201 {
		t.Fatalf("create a tenant through g1: %d %s", status, body)
	}
	status, body := request(t, "POST", gateways[0].found+"/v1/admin/keys", adminKey, `{"tenant":"shared","role":"user"}`)
	var key struct{ ID, Secret string }
	if status != 201 || json.Unmarshal([]byte(body), &key) != nil {
		t.Fatalf("create a key through g1: %d %s", status, body)
	}
	chat := `{"model":"` + modelID + `","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`
	if status, body := request(t, "POST", gateways[1].found+"/v1/chat/completions", key.Secret, chat); status != 200 {
		t.Fatalf("g1's key on g2: %d %s", status, body)
	}
	if status, body := request(t, "DELETE", gateways[0].found+"/v1/admin/keys/"+key.ID, adminKey, ""); status != 200 {
		t.Fatalf("revoke through g1: %d %s", status, body)
	}
	waitFor(t, "g2 to refuse the key revoked through g1", 3*time.Second, func() (bool, string) {
		status, body := request(t, "POST", gateways[1].found+"/v1/chat/completions", key.Secret, chat)
		return status == 401, body
	})

	// The workload: streaming and non-streaming chats from two tenants
	// through both gateways, most sharing one of three long system prompts
	// (so the router has prefixes to place by), and a few clients that
	// leave in the middle of their stream.
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []result
	)
	send := func(phase string, n int) {
		for i := range n {
			c := call{
				phase:   phase,
				gateway: gateways[i%len(gateways)].found,
				key:     tenantKeys[(i/2)%len(tenantKeys)],
				model:   modelID,
				stream:  i%3 != 0,
				leave:   phase == "before" && i%7 == 6,
				system:  systemPrompt(i % 4), // 3: no shared prefix
				user:    fmt.Sprintf("Question %d of the %s phase: what is %d times %d?", i, phase, i, i+7),
			}
			wg.Go(func() {
				r := c.do()
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			})
		}
	}
	send("before", 18)

	// Kill the worker running the most requests once it runs some and the
	// gateways' index credits it with blocks, so the kill cuts requests off
	// and has index entries to drop.
	var victim string
	waitFor(t, "a worker running requests", 30*time.Second, func() (bool, string) {
		best := 0
		for id, hb := range beats.last() {
			if hb.Running > best {
				victim, best = id, hb.Running
			}
		}
		return best > 0, fmt.Sprint(beats.last())
	})
	for _, g := range gateways {
		waitFor(t, "gateway "+g.name+" to index "+victim+"'s blocks", 30*time.Second, func() (bool, string) {
			m := metrics(t, g.found)
			n, _ := m.workerBlocks(victim)
			return n > 0, m.text
		})
	}
	workers[victim].kill(t)
	t.Logf("killed %s", victim)
	// Requests sent at once: a gateway still knows the dead worker for up to
	// three heartbeats, so some are dispatched to it and must be retried.
	send("after", 12)
	wg.Wait()

	// Every request ended, and in a way a client can tell.
	counts := map[string]int{}
	for _, r := range results {
		counts[r.phase+" "+r.outcome]++
		switch {
		case r.err != nil:
			t.Errorf("%s request (stream %v, via %s): %v", r.phase, r.stream, r.gateway, r.err)
		case r.phase == "after" && r.outcome != outcomeCompleted:
			// Sent after the kill, before its first token anywhere: a
			// dispatch to the dead worker is retried on a live one.
			t.Errorf("request sent after the kill (stream %v, via %s): %s, want completed: %s", r.stream, r.gateway, r.outcome, r.detail)
		}
	}
	t.Logf("outcomes: %v", counts)
	if counts["before "+outcomeCompleted] == 0 {
		t.Errorf("no request sent before the kill completed: %v", counts)
	}

	// The gateways forget the dead worker: out of the registry and out of
	// the router's index; the survivors stay indexed.
	for _, g := range gateways {
		waitFor(t, "gateway "+g.name+" to forget "+victim, 30*time.Second, func() (bool, string) {
			m := metrics(t, g.found)
			_, has := m.workerBlocks(victim)
			ok := !has && m.value("kvserve_cluster_workers") == 2
			for id := range workers {
				if _, live := m.workerBlocks(id); id != victim && !live {
					ok = false
				}
			}
			return ok, m.text
		})
	}

	// No block leaks: with every request ended (completed, cut off, or its
	// client gone), the survivors run nothing and hold no block in use; what
	// stays in their pools is the prefix cache.
	cached := 0
	for id := range workers {
		if id == victim {
			continue
		}
		waitFor(t, id+" to hold no active block", 30*time.Second, func() (bool, string) {
			hb, ok := beats.last()[id]
			if ok && hb.Running == 0 && hb.Waiting == 0 && hb.KVActive == 0 {
				cached += hb.KVCached
				return true, ""
			}
			return false, fmt.Sprintf("%+v", hb)
		})
	}
	// The survivors did serve: their pools keep the finished requests'
	// blocks as prefix cache, which the heartbeats count apart from the
	// blocks in use.
	if cached == 0 {
		t.Errorf("the surviving workers' pools cache no block: the heartbeats do not show the workload")
	}
	// The gateways' indexes, kept by events through the kill, the retries
	// and the clients that left, agree with a fresh snapshot of each
	// survivor's blocks.
	for id := range workers {
		if id == victim {
			continue
		}
		fresh := snapshotIndex(t, beats.nc, id)
		for _, g := range gateways {
			waitFor(t, "gateway "+g.name+"'s index of "+id+" to match a snapshot", 30*time.Second, func() (bool, string) {
				got, _ := metrics(t, g.found).workerBlocks(id)
				want := fresh.Blocks(id)
				return int(got) == want, fmt.Sprintf("gateway %v, snapshot %d", got, want)
			})
		}
	}
	for _, g := range gateways {
		m := metrics(t, g.found)
		t.Logf("gateway %s: %v retries, %v cut-offs", g.name, m.value("kvserve_cluster_retries_total"), m.value("kvserve_cluster_cutoffs_total"))
	}
}

// slowProfile writes a simulator profile for modelFile whose every forward
// pass takes pass.
func slowProfile(t *testing.T, modelFile string) string {
	t.Helper()
	mf, err := model.Open(modelFile, gguf.Mapped, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	c := mf.Model.Config
	p := sim.Profile{Model: "slow", Shape: sim.Shape{Vocab: c.Vocab, Context: c.Context, Layers: c.Layers, KVDim: c.KVDim(),
		KVType: "F16", MaxTokens: 512}, Cost: sim.Cost{Fixed: pass.Seconds()}}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "slow.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// systemPrompt returns one of three long system prompts (several blocks
// each, different from their first words), or none for n ≥ 3.
func systemPrompt(n int) string {
	if n >= 3 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Assistant number %d of the cluster test.", n)
	for i := range 12 {
		fmt.Fprintf(&b, " Rule %d: answer question %d briefly and in plain words.", i+1, i+n)
	}
	return b.String()
}

// The ways a request may end.
const (
	outcomeCompleted = "completed"   // 200 with a finish reason, or a stream with one and [DONE]
	outcomeError     = "error"       // an error status with an error body, or an error event in the stream
	outcomeLeft      = "client-left" // the client closed its stream on purpose
)

// call is one request of the workload.
type call struct {
	phase, gateway, key, model string
	stream, leave              bool
	system, user               string
}

// result is how a call ended. err is set when it did not end in a way a
// client can tell (a hang, a stream cut without an error event, a
// malformed answer): the test fails on it.
type result struct {
	call
	outcome, detail string
	err             error
}

func (c call) do() result {
	r := result{call: c}
	ctx, cancel := context.WithTimeout(context.Background(), requestDeadline)
	defer cancel()
	msgs := []map[string]string{}
	if c.system != "" {
		msgs = append(msgs, map[string]string{"role": "system", "content": c.system})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": c.user})
	body, _ := json.Marshal(map[string]any{"model": c.model, "messages": msgs, "max_tokens": maxTokens, "stream": c.stream})
	req, err := http.NewRequestWithContext(ctx, "POST", c.gateway+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.err = fmt.Errorf("no response: %w", deadlineHit(ctx, err))
		return r
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			r.err = fmt.Errorf("status %d, body unread: %w", resp.StatusCode, deadlineHit(ctx, err))
			return r
		}
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if resp.StatusCode < 500 || json.Unmarshal(data, &e) != nil || e.Error.Message == "" {
			r.err = fmt.Errorf("status %d: %s", resp.StatusCode, data)
			return r
		}
		r.outcome, r.detail = outcomeError, fmt.Sprintf("%d %s", resp.StatusCode, e.Error.Message)
		return r
	}
	if !c.stream {
		var out struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			} `json:"choices"`
		}
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			r.err = fmt.Errorf("body: %w", deadlineHit(ctx, err))
			return r
		}
		if json.Unmarshal(data, &out) != nil || len(out.Choices) != 1 || !finished(out.Choices[0].FinishReason) {
			r.err = fmt.Errorf("200 without a finished choice: %s", data)
			return r
		}
		r.outcome = outcomeCompleted
		return r
	}
	// A stream ends with a finish reason and [DONE], or with an error
	// event; anything else (the connection cut, the deadline) is a failure.
	var finish, errorEvent string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			if finish == "" && errorEvent == "" {
				r.err = errors.New("[DONE] with no finish reason and no error event")
				return r
			}
			break
		}
		var ev struct {
			Choices []struct {
				Delta        struct{ Content string } `json:"delta"`
				FinishReason string                   `json:"finish_reason"`
			} `json:"choices"`
			Error *struct{ Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			r.err = fmt.Errorf("malformed event %q: %w", data, err)
			return r
		}
		if ev.Error != nil {
			errorEvent = ev.Error.Message
			continue
		}
		for _, ch := range ev.Choices {
			if ch.FinishReason != "" {
				finish = ch.FinishReason
			}
			if c.leave && ch.Delta.Content != "" {
				r.outcome = outcomeLeft
				return r // the deferred Close and cancel hang up mid-stream
			}
		}
	}
	if err := sc.Err(); err != nil {
		r.err = fmt.Errorf("stream: %w", deadlineHit(ctx, err))
		return r
	}
	switch {
	case errorEvent != "":
		r.outcome, r.detail = outcomeError, errorEvent
	case finished(finish):
		r.outcome = outcomeCompleted
	default:
		r.err = errors.New("the stream ended with no finish reason and no error event")
	}
	return r
}

func finished(reason string) bool { return reason == "stop" || reason == "length" }

// deadlineHit names a hang as one.
func deadlineHit(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("HUNG: no end within %s: %w", requestDeadline, err)
	}
	return err
}

// process is a child process of the test: stopped with SIGINT (SIGKILL
// ten seconds later) when the test ends, its output attached to the
// test's log if the test fails.
type process struct {
	name   string
	found  string // the first submatch of the line start waited for
	log    *lineLog
	cmd    *exec.Cmd
	exited chan struct{}
}

// start runs bin with args and waits for a line of its output matching
// ready.
func start(ctx context.Context, t *testing.T, name, bin, ready string, args ...string) *process {
	t.Helper()
	re := regexp.MustCompile(ready)
	found := make(chan string, 1)
	p := &process{name: name, exited: make(chan struct{})}
	p.log = &lineLog{onLine: func(line string) {
		if m := re.FindStringSubmatch(line); m != nil {
			select {
			case found <- m[len(m)-1]:
			default:
			}
		}
	}}
	runCtx, stop := context.WithCancel(context.Background())
	p.cmd = sdk.Command(runCtx, bin, args...)
	p.cmd.Env = sdk.CleanEnv("KVSERVE_")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		stop()
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not exit after SIGINT and SIGKILL", name)
		}
		if t.Failed() {
			t.Logf("%s's output:\n%s", name, p.log.String())
		}
	})
	select {
	case p.found = <-found:
	case <-p.exited:
		t.Fatalf("%s exited before it was ready:\n%s", name, p.log.String())
	case <-ctx.Done():
		t.Fatalf("%s not ready within %s:\n%s", name, startDeadline, p.log.String())
	}
	return p
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("%s did not exit after SIGKILL", p.name)
	}
}

// lineLog collects a process's output and calls onLine with each line.
type lineLog struct {
	onLine func(string)
	mu     sync.Mutex
	buf    bytes.Buffer
	part   []byte
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(b)
	l.part = append(l.part, b...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.onLine(string(l.part[:i]))
		l.part = l.part[i+1:]
	}
	return len(b), nil
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// heartbeats keeps the last heartbeat of every worker.
type heartbeats struct {
	nc    *nats.Conn
	mu    sync.Mutex
	beats map[string]cluster.Heartbeat
}

func followHeartbeats(t *testing.T, url string) *heartbeats {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("kvserve cluster test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	h := &heartbeats{nc: nc, beats: map[string]cluster.Heartbeat{}}
	if _, err := nc.Subscribe(cluster.SubjectHeartbeat, func(m *nats.Msg) {
		hb, err := cluster.DecodeHeartbeat(m.Data)
		if err != nil {
			return
		}
		h.mu.Lock()
		h.beats[hb.Worker] = hb
		h.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *heartbeats) last() map[string]cluster.Heartbeat {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]cluster.Heartbeat, len(h.beats))
	for k, v := range h.beats {
		out[k] = v
	}
	return out
}

// snapshotIndex returns a router index following worker from a fresh
// snapshot (as a gateway that has just started would), once the snapshot
// is in.
func snapshotIndex(t *testing.T, nc *nats.Conn, worker string) *router.Index {
	t.Helper()
	idx := router.NewIndex(nil)
	f, err := cluster.Follow(nc, worker, cluster.FollowConfig{Apply: func(u cluster.Update) { idx.Apply(u.Worker, u.Reset, u.Events) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	waitFor(t, "a snapshot of "+worker, 30*time.Second, func() (bool, string) { return !idx.Updated(worker).IsZero(), "" })
	return idx
}

// request sends a request with key and returns its status and body.
func request(t *testing.T, method, url, key, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, string(data)
}

// scrape is a gateway's /metrics.
type scrape struct{ text string }

func metrics(t *testing.T, base string) scrape {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestDeadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v: %s", resp.StatusCode, err, data)
	}
	return scrape{string(data)}
}

// value returns the value of the unlabelled series name (-1: none).
func (s scrape) value(name string) float64 {
	for line := range strings.Lines(s.text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// workerBlocks returns kvserve_router_index_worker_blocks of worker, and
// whether the series exists.
func (s scrape) workerBlocks(worker string) (float64, bool) {
	prefix := `kvserve_router_index_worker_blocks{worker="` + worker + `"} `
	for line := range strings.Lines(s.text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// waitFor polls cond until it holds, failing the test after limit with
// what cond saw last.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, seen := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last seen:\n%s", limit, what, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
