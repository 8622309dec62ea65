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
