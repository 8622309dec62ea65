// Package routerbench measures placement policies on simulated workers in
// virtual time (`kvserve bench router`): N simulated engines, each with
// its own KV pool and event log, a router fed from those logs, and a
// workload (a Mooncake trace, or agent sessions) placed one request at a
// time.
//
// Each engine has its own virtual clock: engines run in parallel, so one
// engine's pass must not delay another's. The driver is a discrete-event
// loop: it always advances the engine whose clock is furthest behind, and
// places a request when every busy engine's clock has reached its arrival
// (an idle engine's clock jumps to the arrival when it gets one). So a
// request placed on a busy engine joins it at the end of its current pass,
// as it would in a real server.
package routerbench

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/router"
	"github.com/kvserve/kvserve/internal/sim"
)

// Config configures a run. The zero value of each field means its default.
type Config struct {
	// Workers is the number of simulated engines (default 8).
	Workers int
	// Policy places the requests (default router.PolicyKV).
	Policy router.Policy
	// Profile prices the passes (default sim.DefaultProfile, its context
	// widened to the workload's longest request).
	Profile *sim.Profile
	// KVTokens is each worker's KV pool in tokens (default 1,000,000).
	KVTokens int64
	// HostTokens is each worker's host-memory tier (G2) in tokens (0:
	// none). Onboarding from it costs no modelled time (a copy in memory,
	// small beside the prefill it saves).
	HostTokens int64
	// Router configures the kv policy (its Secret, ModelID and Now are
	// the bench's own).
	Router router.Config
	// PeerBytesPerSecond > 0 lets the kv policy's workers copy KV blocks
	// from each other (router.Worker.CopiesKV), each copy taking its bytes
	// at this rate before the request reaches its worker (0: no copies).
	PeerBytesPerSecond float64
}

// secret and modelID are the simulated cluster's: the router hashes with
// them as the engines do.
var secret = []byte("routerbench-secret")

const modelID = "sim"

// Result is a run's measurements. Times are virtual, except the routing
// decisions' (wall time on this machine).
type Result struct {
	Policy   string `json:"policy"`
	Workers  int    `json:"workers"`
	Requests int    `json:"requests"`
	Failed   int    `json:"failed"`
	// TTFT percentiles in milliseconds of virtual time.
	TTFTp50 float64 `json:"ttft_p50_ms"`
	TTFTp90 float64 `json:"ttft_p90_ms"`
	TTFTp99 float64 `json:"ttft_p99_ms"`
	// HitRate is cached / prompt tokens over every request.
	HitRate float64 `json:"hit_rate"`
	// SharedHitRate is the hit rate of one cache shared by every worker
	// that keeps every block, fed the same requests in the same order.
	SharedHitRate float64 `json:"shared_hit_rate"`
	PromptTokens  int64   `json:"prompt_tokens"`
	CachedTokens  int64   `json:"cached_tokens"`
	// Decision percentiles in microseconds of wall time: the policy's
	// choice alone (feeding the index from the event logs is not in it).
	DecisionP50 float64 `json:"decision_p50_us"`
	DecisionP99 float64 `json:"decision_p99_us"`
	// Placements counts the requests placed on each worker.
	Placements []int `json:"placements"`
	// Affinity counts placements made by session affinity (kv policy).
	Affinity int `json:"affinity_placements"`
	// PeerTokens counts prompt tokens copied from another worker's memory
	// instead of computed (kv policy with peer copies; part of
	// CachedTokens), PeerCopies the requests that copied any.
	PeerTokens int64 `json:"peer_tokens"`
	PeerCopies int   `json:"peer_copies"`
	// VirtualS is the virtual time the run took; WallS the real time.
	VirtualS float64 `json:"virtual_s"`
	WallS    float64 `json:"wall_s"`
}

// node is one simulated worker.
type node struct {
	id     string
	e      *engine.Engine
	clock  *sim.VirtualClock
	log    *kv.EventLog
	next   uint64 // the event log's next sequence number to apply
	active []live
	// pending is the estimated prefill of the requests placed here that
	// have no first token yet (the router's own account, as Dynamo's).
	pending float64
	stuck   int
}

type live struct {
	i       int // arrival
	stream  *engine.Stream
	prefill float64 // what the placement added to pending
	first   bool    // the first token came
}

func (n *node) busy() bool { return len(n.active) > 0 || n.e.Pending() }

// outcome is one request's result.
type outcome struct {
	arrival time.Time
	first   time.Time
	usage   engine.Usage
	failed  bool
}

// pendingArrival is an arrival due at a time: to be placed, or, placed
// already on node (≥ 0) and waiting for its blocks copied from a peer, to
// be submitted there with the prefill its placement charged the node.
type pendingArrival struct {
	at      time.Time
	i       int
	node    int
	prefill float64
}

type arrivalHeap []pendingArrival

func (h arrivalHeap) Len() int { return len(h) }
func (h arrivalHeap) Less(i, j int) bool {
	return h[i].at.Before(h[j].at) || h[i].at.Equal(h[j].at) && h[i].i < h[j].i
}
func (h arrivalHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *arrivalHeap) Push(x any)   { *h = append(*h, x.(pendingArrival)) }
func (h *arrivalHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Run places arrivals on cfg.Workers simulated engines with cfg.Policy and
// measures what their clients would have seen.
func Run(ctx context.Context, cfg Config, arrivals []Arrival) (Result, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Policy == "" {
		cfg.Policy = router.PolicyKV
	}
	if _, err := router.ParsePolicy(string(cfg.Policy)); err != nil {
		return Result{}, err
	}
	if cfg.KVTokens <= 0 {
		cfg.KVTokens = 1_000_000
	}
	p := sim.DefaultProfile()
	if cfg.Profile != nil {
		p = *cfg.Profile
	}
	for _, a := range arrivals {
		p.Shape.Context = max(p.Shape.Context, len(a.Request.Prompt)+a.Request.MaxTokens)
	}
	shape, err := p.Shape.Batch()
	if err != nil {
		return Result{}, fmt.Errorf("routerbench: %w", err)
	}
	perToken := int64(2 * shape.Layers * shape.KVDim * shape.KVType.RowBytes(1))

	nodes := make([]*node, cfg.Workers)
	for i := range nodes {
		n := &node{id: fmt.Sprintf("w%02d", i), clock: sim.NewVirtualClock(), log: kv.NewEventLog(1 << 16)}
		n.e, _, err = sim.NewEngine(&p, sim.Options{Clock: n.clock, Vocab: Vocab, EndOfGeneration: -1}, engine.Config{
			KVMemoryBytes: cfg.KVTokens * perToken, KVHostMemoryBytes: max(0, cfg.HostTokens) * perToken, MaxWaiting: len(arrivals) + 1,
			Events: n.log, Secret: secret, ModelID: modelID,
		})
		if err != nil {
			for _, m := range nodes[:i] {
				m.e.Close()
			}
			return Result{}, fmt.Errorf("routerbench: %w", err)
		}
		n.next = n.log.Next()
		nodes[i] = n
	}
	defer func() {
		for _, n := range nodes {
			n.e.Close()
		}
	}()

	// now is the placement's time: the router's clock (session TTLs,
	// stale indexes) follows the arrivals.
	now := sim.Epoch
	rcfg := cfg.Router
	rcfg.Secret, rcfg.ModelID, rcfg.Now = secret, modelID, func() time.Time { return now }
	idx := router.NewIndex(rcfg.Now)
	rt, err := router.New(idx, rcfg)
	if err != nil {
		return Result{}, err
	}

	children := make([][]int, len(arrivals))
	due := &arrivalHeap{}
	for i, a := range arrivals {
		if a.Parent >= 0 {
			if a.Parent >= i {
				return Result{}, fmt.Errorf("routerbench: arrival %d follows %d, not an earlier one", i, a.Parent)
			}
			children[a.Parent] = append(children[a.Parent], i)
			continue
		}
		heap.Push(due, pendingArrival{at: sim.Epoch.Add(a.At), i: i, node: -1})
	}

	res := Result{Policy: string(cfg.Policy), Workers: cfg.Workers, Requests: len(arrivals), Placements: make([]int, len(nodes))}
	outs := make([]outcome, len(arrivals))
	decisions := make([]time.Duration, 0, len(arrivals))
	ws := make([]router.Worker, len(nodes))
	var rr int
	var buf []engine.Output
	var events []kv.Event
	shared := newSharedCache()
	// submit queues arrival i on n, whose pending prefill already counts
	// it.
	submit := func(n *node, i int, prefill float64) {
		n.clock.AdvanceTo(now) // an idle worker waits for the arrival
		s, err := n.e.Submit(ctx, arrivals[i].Request)
		if err != nil {
			outs[i].failed = true
			n.pending -= prefill
			return
		}
		n.active = append(n.active, live{i: i, stream: s, prefill: prefill})
	}
	wallStart := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var step *node
		for _, n := range nodes {
			if n.busy() && (step == nil || n.clock.Now().Before(step.clock.Now())) {
				step = n
			}
		}
		if due.Len() > 0 && (step == nil || !(*due)[0].at.After(step.clock.Now())) {
			pa := heap.Pop(due).(pendingArrival)
			now = pa.at
			req := &arrivals[pa.i].Request
			if pa.node >= 0 { // its copied blocks have arrived
				submit(nodes[pa.node], pa.i, pa.prefill)
				continue
			}
			if cfg.Policy == router.PolicyKV {
				for _, n := range nodes {
					events, n.next, err = n.log.Poll(n.next, events[:0])
					if errors.Is(err, kv.ErrEventsLost) {
						// Fell behind the log: resync from a snapshot, as a
						// follower does.
						var snap []kv.Event
						snap, n.next = n.e.KV().Snapshot()
						idx.Apply(n.id, true, snap)
					} else if len(events) > 0 {
						idx.Apply(n.id, false, events)
						rt.Learn(events)
					}
				}
			}
			for j, n := range nodes {
				st := n.e.Now()
				ws[j] = router.Worker{ID: n.id, Running: st.Running, PendingPrefill: int(n.pending), EventSeq: n.log.Next(),
					CopiesKV: cfg.PeerBytesPerSecond > 0}
			}
			var chosen int
			var prefill float64
			var copyFrom, copyTokens int
			t0 := time.Now()
			switch cfg.Policy {
			case router.PolicyKV:
				d := rt.Choose(req, ws)
				chosen, prefill = d.Index, d.Score.Prefill
				if d.Affinity {
					res.Affinity++
				}
				copyFrom, copyTokens = d.Score.PeerFrom, d.Score.Peer
			case router.PolicyLeastLoaded:
				chosen = leastLoaded(nodes)
			case router.PolicyRoundRobin:
				chosen, rr = rr%len(nodes), rr+1
			}
			decisions = append(decisions, time.Since(t0))
			if cfg.Policy != router.PolicyKV {
				prefill = float64(len(req.Prompt))
			}
			n := nodes[chosen]
			res.Placements[chosen]++
			outs[pa.i].arrival = now
			shared.add(req)
			if copyFrom >= 0 && copyTokens > 0 {
				if copied, err := copyBlocks(nodes[copyFrom], n, req); err != nil {
					return res, err
				} else if copied > 0 {
					res.PeerCopies++
					res.PeerTokens += int64(copied * n.e.Config().BlockSize)
					// The request reaches its worker once the copy has.
					n.pending += prefill
					took := time.Duration(float64(copied) * float64(n.e.BlockBytes()) / cfg.PeerBytesPerSecond * float64(time.Second))
					heap.Push(due, pendingArrival{at: now.Add(took), i: pa.i, node: chosen, prefill: prefill})
					continue
				}
			}
			n.pending += prefill
			submit(n, pa.i, prefill)
			continue
		}
		if step == nil {
			break // nothing due, nothing running
		}
		ran := false
		if step.e.Pending() {
			ran = step.e.Step(ctx)
		}
		progressed := false
		kept := step.active[:0]
		for _, l := range step.active {
			o := &outs[l.i]
			var err error
			buf, err = l.stream.Poll(buf[:0])
			progressed = progressed || len(buf) > 0
			for _, ev := range buf {
				if ev.Token >= 0 && !l.first {
					l.first, o.first = true, ev.Time
					step.pending -= l.prefill
				}
				if ev.Finish == engine.FinishError || ev.Err != nil {
					o.failed = true
				}
			}
			if errors.Is(err, engine.ErrDone) {
				if !l.first {
					step.pending -= l.prefill
				}
				o.usage = l.stream.Usage()
				for _, c := range children[l.i] {
					heap.Push(due, pendingArrival{at: l.stream.Ended().Add(arrivals[c].At), i: c, node: -1})
				}
				continue
			}
			kept = append(kept, l)
		}
		step.active = kept
		if len(kept) == 0 {
			step.pending = 0 // no rounding left over
		}
		if ran || progressed {
			step.stuck = 0
		} else if step.stuck++; step.stuck > 2 {
			return res, fmt.Errorf("routerbench: worker %s has %d requests but cannot run any", step.id, len(step.active))
		}
	}
	res.WallS = time.Since(wallStart).Seconds()
	res.SharedHitRate = shared.hitRate()
	var ttft []time.Duration
	var last time.Time
	for _, n := range nodes {
		if t := n.clock.Now(); t.After(last) {
			last = t
		}
	}
	res.VirtualS = last.Sub(sim.Epoch).Seconds()
	for _, o := range outs {
		if o.failed || o.first.IsZero() {
			res.Failed++
			continue
		}
		ttft = append(ttft, o.first.Sub(o.arrival))
		res.PromptTokens += int64(o.usage.PromptTokens)
		res.CachedTokens += int64(o.usage.CachedTokens)
	}
	if res.PromptTokens > 0 {
		res.HitRate = float64(res.CachedTokens) / float64(res.PromptTokens)
	}
	res.TTFTp50, res.TTFTp90, res.TTFTp99 = ms(pct(ttft, 50)), ms(pct(ttft, 90)), ms(pct(ttft, 99))
	res.DecisionP50, res.DecisionP99 = us(pct(decisions, 50)), us(pct(decisions, 99))
	return res, nil
}

// leastLoaded is cluster.LeastLoaded's rule on the simulated workers: the
// fewest requests placed and not finished, then the fewest KV blocks in
// use, then the first.
func leastLoaded(nodes []*node) int {
	best, bl, bkv := 0, math.MaxInt, math.MaxInt
	for i, n := range nodes {
		l, k := len(n.active), n.e.KV().Stats().Active
		if l < bl || l == bl && k < bkv {
			best, bl, bkv = i, l, k
		}
	}
	return best
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// sharedCache is one cache shared by every worker that keeps every block
// forever (the bound the issue compares against), fed the requests in the
// order they are placed: a request hits its leading full blocks (the
// engines' 16 tokens) seen before in its scope.
type sharedCache struct {
	seen          map[kv.Hash]struct{}
	h             *kv.Hasher
	chain         []kv.Hash
	cached, total int64
}

func newSharedCache() *sharedCache {
	return &sharedCache{seen: map[kv.Hash]struct{}{}, h: kv.NewHasher([]byte(modelID))}
}

func (c *sharedCache) add(r *engine.Request) {
	const bs = 16
	// The engine always computes the last prompt token.
	c.chain = c.h.Chain(c.chain[:0], kv.ScopeSalt(secret, r.Scope), r.Prompt[:len(r.Prompt)-1], bs)
	hit := true
	for _, b := range c.chain {
		if _, ok := c.seen[b]; ok && hit {
			c.cached += bs
		} else {
			hit = false
			c.seen[b] = struct{}{}
		}
	}
	c.total += int64(len(r.Prompt))
}

func (c *sharedCache) hitRate() float64 {
	if c.total == 0 {
		return 0
	}
	return float64(c.cached) / float64(c.total)
}

// copyBlocks copies from holder to n the blocks of req's prompt past those
// n's memory holds, as a worker does on a placement naming a peer, and
// returns how many n stored.
func copyBlocks(holder, n *node, req *engine.Request) (int, error) {
	hashes, from := n.e.MissingBlocks(req)
	if from >= len(hashes) {
		return 0, nil
	}
	data := holder.e.ExportKV(hashes[from:])
	if len(data) == 0 {
		return 0, nil
	}
	stored, err := n.e.ImportKV(req, hashes, from, data)
	if err != nil {
		return 0, fmt.Errorf("routerbench: copying blocks from %s to %s: %w", holder.id, n.id, err)
	}
	return stored, nil
}
