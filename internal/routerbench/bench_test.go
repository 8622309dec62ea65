package routerbench

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/router"
	"github.com/kvserve/kvserve/internal/sim"
)

// prefixWorkload is n requests alternating between k long shared prefixes,
// each with a short suffix of its own, arriving every gap.
func prefixWorkload(n, k int, gap time.Duration) []Arrival {
	var trace []sim.TraceRequest
	for i := range n {
		// Hash ids: the prefix's two blocks, then one of the request's own.
		trace = append(trace, sim.TraceRequest{Timestamp: int64(i) * gap.Milliseconds(), InputLength: 3 * 512, OutputLength: 4,
			HashIDs: []int64{int64(i % k * 2), int64(i%k*2 + 1), int64(1000 + i)}})
	}
	return FromTrace(trace, 1)
}

func TestRunPolicies(t *testing.T) {
	arrivals := prefixWorkload(48, 3, 2*time.Second) // 3 prefixes on 4 workers: round-robin scatters them
	res := map[router.Policy]Result{}
	for _, p := range []router.Policy{router.PolicyKV, router.PolicyRoundRobin, router.PolicyLeastLoaded} {
		r, err := Run(context.Background(), Config{Workers: 4, Policy: p}, arrivals)
		if err != nil {
			t.Fatal(err)
		}
		if r.Failed > 0 || r.Requests != 48 || r.TTFTp50 <= 0 || r.DecisionP99 < r.DecisionP50 {
			t.Fatalf("%s: %+v", p, r)
		}
		res[p] = r
	}
	kv, rr := res[router.PolicyKV], res[router.PolicyRoundRobin]
	// One cache shared by all: every prefix misses once.
	if kv.SharedHitRate < 0.6 {
		t.Errorf("shared hit rate %.3f", kv.SharedHitRate)
	}
	if kv.HitRate < 0.9*kv.SharedHitRate {
		t.Errorf("kv hit rate %.3f, shared %.3f", kv.HitRate, kv.SharedHitRate)
	}
	if !(kv.HitRate > rr.HitRate && kv.TTFTp90 < rr.TTFTp90) {
		t.Errorf("kv (hit %.3f, TTFT p90 %.0f ms) is no better than round-robin (%.3f, %.0f ms)", kv.HitRate, kv.TTFTp90, rr.HitRate, rr.TTFTp90)
	}
}

func TestRunRejects(t *testing.T) {
	if _, err := Run(context.Background(), Config{Policy: "random"}, prefixWorkload(2, 1, time.Second)); err == nil {
		t.Error("an unknown policy ran")
	}
	bad := prefixWorkload(2, 1, time.Second)
	bad[0].Parent = 1
	if _, err := Run(context.Background(), Config{}, bad); err == nil {
		t.Error("a turn before its parent ran")
	}
}

// TestAgent: each turn follows an earlier request, and a session's turns
// extend its previous turn's prompt.
func TestAgent(t *testing.T) {
	arr, err := Agent(AgentOptions{Sessions: 5, SystemTokens: 1000, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	roots := 0
	for i, a := range arr {
		if a.Parent < 0 {
			roots++
			continue
		}
		if a.Parent >= i {
			t.Fatalf("arrival %d follows %d", i, a.Parent)
		}
		// The previous turn of the same session (sub-agents have none).
		if a.Request.Hints.SessionID == "" {
			continue
		}
		prev := a.Parent
		for arr[prev].Request.Hints.SessionID != a.Request.Hints.SessionID {
			prev = arr[prev].Parent
		}
		pp := arr[prev].Request.Prompt
		if len(a.Request.Prompt) <= len(pp) || !slices.Equal(a.Request.Prompt[:len(pp)], pp) {
			t.Fatalf("turn %d does not extend turn %d", i, prev)
		}
	}
	if roots != 5 {
		t.Errorf("%d sessions, want 5", roots)
	}
	if _, err := Agent(AgentOptions{TimeScale: -1}); err == nil {
		t.Error("a negative time scale was taken")
	}
}

// TestRunPeerCopies: requests sharing one prefix, too many at once for the
// worker that holds it: with copies the other workers take some, copying
// the prefix from that worker instead of computing it, so the load
// spreads with no fewer prompt tokens served from cache and the first
// tokens come sooner; with no copies the router keeps them on the holder
// (or they compute it).
func TestRunPeerCopies(t *testing.T) {
	// One request computes the prefix; a burst follows once it is cached.
	var trace []sim.TraceRequest
	for i := range 24 {
		at := int64(0)
		if i > 0 {
			at = 60_000 + int64(i)*10
		}
		trace = append(trace, sim.TraceRequest{Timestamp: at, InputLength: 9 * 512, OutputLength: 4,
			HashIDs: []int64{0, 1, 2, 3, 4, 5, 6, 7, int64(1000 + i)}})
	}
	arrivals := FromTrace(trace, 1)
	run := func(bytesPerSecond float64) Result {
		t.Helper()
		r, err := Run(context.Background(), Config{Workers: 4, PeerBytesPerSecond: bytesPerSecond}, arrivals)
		if err != nil {
			t.Fatal(err)
		}
		if r.Failed > 0 {
			t.Fatalf("%d requests failed", r.Failed)
		}
		return r
	}
	without, with := run(0), run(1.25e9)
	t.Logf("without copies: hit %.3f, TTFT p50 %.0f ms; with: hit %.3f, TTFT p50 %.0f ms, %d copies, %d tokens",
		without.HitRate, without.TTFTp50, with.HitRate, with.TTFTp50, with.PeerCopies, with.PeerTokens)
	if without.PeerCopies != 0 || without.PeerTokens != 0 {
		t.Errorf("copies without peers: %d (%d tokens)", without.PeerCopies, without.PeerTokens)
	}
	if with.PeerCopies == 0 || with.PeerTokens == 0 {
		t.Fatal("no copies with peers")
	}
	if !(with.HitRate >= without.HitRate && with.TTFTp50 < without.TTFTp50) {
		t.Errorf("copies did not help: hit %.3f vs %.3f, TTFT p50 %.0f vs %.0f ms", with.HitRate, without.HitRate, with.TTFTp50, without.TTFTp50)
	}
}
