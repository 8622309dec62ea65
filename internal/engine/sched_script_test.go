package engine_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/engine"
	kvpkg "github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/sim"
)

// TestSchedulerScripts runs the scheduler through the scripts in
// testdata/sched on the simulator, stepped one pass at a time in virtual
// time, and compares what it did — each pass's sequences, each request's
// tokens and finish, the pool's blocks — with the expected output written
// under each command. Regenerate after a deliberate change with
// `go test ./internal/engine -run TestSchedulerScripts -rewrite`, and read
// the diff.
//
// Commands:
//
//	new [max-batch-tokens=N] [block-size=N] [kv-blocks=N] [host-blocks=N] [max-running=N] [no-prefix-cache] [contiguous]
//	submit name=A prompt=SEG:LEN[,SEG:LEN...] max=N [priority=N] [n=N] [scope=S] [expect=N]
//	       [retention=ephemeral|session|persistent|pinned] [ttl=DURATION] [session=ID [end-session]]
//	       [count=N]   N requests A-1…A-N at once, each segment named SEG-i (no shared prefix)
//	advance by=DURATION   move the virtual clock (pins expire)
//	cancel name=A
//	step [n=N]     run N passes (default 1)
//	run [order]    step until nothing is queued or running; with order, print
//	               only the names of the requests in the order they ended
//	stats          the engine's and the pool's counts
//	sessions       the agent sessions remembered, largest first
//
// A prompt is segments of deterministic tokens: the same segment name
// gives the same tokens, so prompts share a prefix by sharing their
// leading segments. A pass is printed as its sequences, each as
// pPROMPTLEN@POS+N (the sequence of the request whose prompt has PROMPTLEN
// tokens, N new tokens from position POS): give requests distinct prompt
// lengths to tell them apart.
func TestSchedulerScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/sched", func(t *testing.T, path string) {
		h := &schedHarness{}
		defer h.close()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			out, err := h.do(d)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return out
		})
	})
}

// tap records the passes of the forward pass it wraps.
type tap struct {
	*sim.Forwarder
	passes [][]batch.Seq
}

func (t *tap) Forward(ctx context.Context, seqs []batch.Seq) error {
	t.passes = append(t.passes, slices.Clone(seqs))
	return t.Forwarder.Forward(ctx, seqs)
}

type schedReq struct {
	name     string
	stream   *engine.Stream
	tokens   int
	finished bool
}

type schedHarness struct {
	clock *sim.VirtualClock
	e     *engine.Engine
	fwd   *tap
	reqs  []*schedReq
	steps int
}

func (h *schedHarness) close() {
	if h.e != nil {
		h.e.Close()
	}
}

const schedEOG = 63

func (h *schedHarness) do(d *datadriven.TestData) (string, error) {
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	num := func(key string, def int) (int, error) {
		v, ok := args[key]
		if !ok {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: %w", key, v, err)
		}
		return n, nil
	}
	if d.Cmd != "new" && h.e == nil {
		return "", errors.New("no engine: start the script with new")
	}
	switch d.Cmd {
	case "new":
		return h.new(args, num)
	case "submit":
		return h.submit(args, num)
	case "cancel":
		r := h.find(args["name"])
		if r == nil {
			return "", fmt.Errorf("no request %q", args["name"])
		}
		r.stream.Cancel()
		return "ok\n", nil
	case "step":
		n, err := num("n", 1)
		if err != nil {
			return "", err
		}
		var b strings.Builder
		for range n {
			if !h.step(&b) {
				break
			}
		}
		return b.String(), nil
	case "run":
		var b strings.Builder
		var ended []string
		for h.e.Pending() {
			var steps strings.Builder
			ran := h.step(&steps)
			b.WriteString(steps.String())
			for line := range strings.Lines(steps.String()) {
				if f := strings.Fields(line); len(f) > 1 && f[1] == "done:" {
					ended = append(ended, f[0])
				}
			}
			if !ran && h.e.Pending() {
				return b.String(), errors.New("requests wait but nothing runs")
			}
		}
		if _, order := args["order"]; order {
			return "ended: " + strings.Join(ended, " ") + "\n", nil
		}
		return b.String(), nil
	case "advance":
		d, err := time.ParseDuration(args["by"])
		if err != nil {
			return "", fmt.Errorf("advance by=DURATION: %w", err)
		}
		h.clock.Advance(d)
		return fmt.Sprintf("clock +%s\n", h.clock.Since()), nil
	case "sessions":
		var b strings.Builder
		for _, s := range h.e.Sessions(0) {
			fmt.Fprintf(&b, "%s/%s: blocks=%d tokens=%d idle-in=%s\n", s.Tenant, s.ID, s.Blocks, s.Tokens, s.IdleAt.Sub(h.clock.Now()))
		}
		if b.Len() == 0 {
			return "none\n", nil
		}
		return b.String(), nil
	case "stats":
		st := h.e.Now()
		kv := st.KV
		out := fmt.Sprintf("running=%d waiting=%d peak-running=%d\nblocks: free=%d active=%d cached=%d pinned=%d hit-tokens=%d evictions=%d\n",
			st.Running, st.Waiting, st.PeakRunning, kv.Free, kv.Active, kv.Cached, kv.Pinned, kv.HitTokens, kv.Evictions)
		if h := kv.Host; h != (kvpkg.HostStats{}) {
			out += fmt.Sprintf("host: blocks=%d offloaded=%d onboarded=%d evicted=%d\n", h.Blocks, h.Stored, h.Onboarded, h.Evicted)
		}
		return out, nil
	}
	return "", fmt.Errorf("unknown command %q", d.Cmd)
}

func (h *schedHarness) new(args map[string]string, num func(string, int) (int, error)) (string, error) {
	h.close()
	*h = schedHarness{}
	maxBatch, err := num("max-batch-tokens", 64)
	if err != nil {
		return "", err
	}
	blockSize, err := num("block-size", 16)
	if err != nil {
		return "", err
	}
	blocks, err := num("kv-blocks", 64)
	if err != nil {
		return "", err
	}
	maxRunning, err := num("max-running", 0)
	if err != nil {
		return "", err
	}
	hostBlocks, err := num("host-blocks", 0)
	if err != nil {
		return "", err
	}
	p := &sim.Profile{
		Model: "script",
		// One layer of 8 KV values: 32 bytes of f16 KV per token.
		Shape: sim.Shape{Vocab: 64, Context: 4096, Layers: 1, KVDim: 8, KVType: "f16", MaxTokens: 256},
		Cost:  sim.Cost{Fixed: 0.001, PrefillToken: 0.0001, DecodeSeq: 0.0002},
	}
	h.clock = sim.NewVirtualClock()
	f, err := sim.NewForwarder(p, sim.Options{Clock: h.clock, EndOfGeneration: schedEOG})
	if err != nil {
		return "", err
	}
	h.fwd = &tap{Forwarder: f}
	_, noPrefix := args["no-prefix-cache"]
	_, contiguous := args["contiguous"]
	h.e, err = engine.NewStepped(h.fwd, engine.Config{
		MaxBatchTokens: maxBatch, BlockSize: blockSize, MaxRunning: maxRunning,
		KVMemoryBytes: int64(blocks * blockSize * 32), KVNoStorage: true,
		KVHostMemoryBytes:  int64(hostBlocks * blockSize * 32),
		DisablePrefixCache: noPrefix, Contiguous: contiguous,
		EndOfGeneration: []int32{schedEOG}, Clock: h.clock,
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("pool: %d blocks of %d tokens\n", h.e.KV().NumBlocks(), blockSize), nil
}

// segmentTokens are the deterministic tokens of a prompt segment.
func segmentTokens(name string, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		f := fnv.New32a()
		fmt.Fprintf(f, "%s/%d", name, i)
		out[i] = int32(f.Sum32() % schedEOG) // never the end token
	}
	return out
}

func (h *schedHarness) submit(args map[string]string, num func(string, int) (int, error)) (string, error) {
	count, err := num("count", 0)
	if err != nil || count == 0 {
		return h.submitOne(args, num, "")
	}
	var b strings.Builder
	for i := range count {
		out, err := h.submitOne(args, num, fmt.Sprintf("-%d", i+1))
		if err != nil {
			return b.String(), err
		}
		if i == 0 || i == count-1 {
			b.WriteString(out)
		} else if i == 1 && count > 2 {
			b.WriteString("…\n")
		}
	}
	return b.String(), nil
}

// submitOne submits a request; suffix, when set, is appended to its name
// and to each of its prompt's segment names.
func (h *schedHarness) submitOne(args map[string]string, num func(string, int) (int, error), suffix string) (string, error) {
	name := args["name"] + suffix
	if name == suffix || h.find(name) != nil {
		return "", fmt.Errorf("submit needs a new name=, got %q", name)
	}
	var prompt []int32
	for _, seg := range strings.Split(args["prompt"], ",") {
		segName, l, ok := strings.Cut(seg, ":")
		n, err := strconv.Atoi(l)
		if !ok || err != nil {
			return "", fmt.Errorf("prompt segment %q: want NAME:LENGTH", seg)
		}
		prompt = append(prompt, segmentTokens(segName+suffix, n)...)
	}
	r := engine.Request{Prompt: prompt, Sampling: sample.Params{TopP: 1}, Scope: args["scope"]}
	var err error
	if r.MaxTokens, err = num("max", 1); err != nil {
		return "", err
	}
	if r.Priority, err = num("priority", 0); err != nil {
		return "", err
	}
	if r.N, err = num("n", 1); err != nil {
		return "", err
	}
	if r.Hints.ExpectedOutputTokens, err = num("expect", 0); err != nil {
		return "", err
	}
	if v, ok := args["retention"]; ok {
		found := false
		for c := engine.RetentionDefault; int(c) < engine.NumRetention; c++ {
			if c.String() == v {
				r.Hints.Retention, found = c, true
			}
		}
		if !found {
			return "", fmt.Errorf("retention=%q: unknown class", v)
		}
	}
	r.Hints.SessionID = args["session"]
	_, r.Hints.EndSession = args["end-session"]
	if v, ok := args["ttl"]; ok {
		if r.Hints.TTL, err = time.ParseDuration(v); err != nil {
			return "", err
		}
	}
	s, err := h.e.Submit(context.Background(), r)
	if err != nil {
		return "", err
	}
	h.reqs = append(h.reqs, &schedReq{name: name, stream: s})
	return fmt.Sprintf("%s: %d prompt tokens\n", name, len(prompt)), nil
}

func (h *schedHarness) find(name string) *schedReq {
	for _, r := range h.reqs {
		if r.name == name {
			return r
		}
	}
	return nil
}

// step runs one step and writes what it did: its pass (or "no pass") and
// what each request received. It reports whether a pass ran.
func (h *schedHarness) step(b *strings.Builder) bool {
	before := len(h.fwd.passes)
	ran := h.e.Step(context.Background())
	h.steps++
	fmt.Fprintf(b, "step %d:", h.steps)
	if !ran {
		b.WriteString(" no pass")
	}
	for _, pass := range h.fwd.passes[before:] {
		for _, s := range pass {
			fmt.Fprintf(b, " p%d@%d+%d", s.PromptLen, s.Pos, len(s.Tokens))
		}
	}
	b.WriteString("\n")
	for _, r := range h.reqs {
		if r.finished {
			continue
		}
		outs, _ := r.stream.Poll(nil)
		var finish []string
		got := 0
		for _, o := range outs {
			if o.Token >= 0 {
				got++
			}
			if o.Finish != engine.FinishNone {
				f := fmt.Sprintf("sample %d %s", o.Index, o.Finish)
				if o.Err != nil {
					f += " (" + o.Err.Error() + ")"
				}
				finish = append(finish, f)
			}
		}
		r.tokens += got
		if got > 0 || len(finish) > 0 {
			fmt.Fprintf(b, "  %s: +%d", r.name, got)
			for _, f := range finish {
				b.WriteString("; " + f)
			}
			b.WriteString("\n")
		}
		// The step queued every output it made: once the last sample has
		// ended, the request is done.
		if !r.stream.Ended().IsZero() {
			r.finished = true
			u := r.stream.Usage()
			fmt.Fprintf(b, "  %s done: prompt=%d cached=%d completion=%d\n", r.name, u.PromptTokens, u.CachedTokens, u.CompletionTokens)
		}
	}
	return ran
}
