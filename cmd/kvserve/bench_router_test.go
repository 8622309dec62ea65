package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/routerbench"
	"github.com/kvserve/kvserve/internal/sim"
	"github.com/kvserve/kvserve/internal/testshared"
)

// TestBenchRouter: `kvserve bench router` on a short prefix of a shared
// trace and on a few agent sessions compares every policy, and the
// KV-aware one hits the cache at least as often as round-robin.
func TestBenchRouter(t *testing.T) {
	trace := testshared.Path(t, "traces", "mooncake_fast25_conversation_trace.jsonl")
	tests := []struct {
		name string
		args []string
	}{
		{"trace", []string{"--trace", trace, "--limit", "60", "--stretch", "200"}},
		{"agent", []string{"--workload", "agent", "--sessions", "6", "--system-tokens", "2000", "--time-scale", "0.1", "--session-rate", "0.5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"bench", "router", "--workers", "2,3", "--json"}, tt.args...)
			out, errOut, err := runCommand(newRootCmd(), args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			var res struct {
				Requests int                  `json:"requests"`
				CPU      string               `json:"cpu"`
				Rows     []routerbench.Result `json:"rows"`
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if len(res.Rows) != 6 || res.Requests == 0 || res.CPU == "" {
				t.Fatalf("result %+v", res)
			}
			hit := map[string]float64{}
			for _, r := range res.Rows {
				if r.Failed > 0 || r.TTFTp50 <= 0 || r.TTFTp99 < r.TTFTp50 || r.SharedHitRate <= 0 || r.HitRate > r.SharedHitRate*1.01 || r.Requests != res.Requests {
					t.Errorf("row %+v", r)
				}
				if r.Workers == 2 {
					hit[r.Policy] = r.HitRate
				}
			}
			if hit["kv"] < hit["round-robin"] {
				t.Errorf("hit rates %v: kv below round-robin", hit)
			}
			// The table names every policy.
			table, _, err := runCommand(newRootCmd(), append([]string{"bench", "router", "--workers", "2", "--policy", "kv,least-loaded"}, tt.args...)...)
			if err != nil || !strings.Contains(table, " kv ") || !strings.Contains(table, " least-loaded ") || strings.Contains(table, "round-robin") {
				t.Errorf("table (%v):\n%s", err, table)
			}
		})
	}
}

// TestBenchRouterSettings: the settings that shape a run change it: a
// slower cost profile slows the first token, a KV pool smaller than the
// prompts refuses them, a temperature moves placements, more tenants
// (each its own system prompt) lower the hit rate.
func TestBenchRouterSettings(t *testing.T) {
	trace := testshared.Path(t, "traces", "mooncake_fast25_conversation_trace.jsonl")
	p := sim.DefaultProfile()
	p.Cost.PrefillToken *= 3
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	slow := filepath.Join(t.TempDir(), "slow.json")
	if err := os.WriteFile(slow, data, 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) routerbench.Result {
		t.Helper()
		out, errOut, err := runCommand(newRootCmd(), append([]string{"bench", "router", "--workers", "4", "--policy", "kv", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut)
		}
		var res struct{ Rows []routerbench.Result }
		if err := json.Unmarshal([]byte(out), &res); err != nil || len(res.Rows) != 1 {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
		return res.Rows[0]
	}
	tr := []string{"--trace", trace, "--limit", "80", "--stretch", "300"}
	base := run(tr...)
	if r := run(append(tr, "--sim-profile", slow)...); r.TTFTp50 <= base.TTFTp50 {
		t.Errorf("a slower profile: TTFT p50 %.0f ms, %.0f ms before", r.TTFTp50, base.TTFTp50)
	}
	if r := run(append(tr, "--kv-tokens", "4000")...); base.Failed != 0 || r.Failed == 0 {
		t.Errorf("a pool of 4,000 tokens: %d requests failed, %d before", r.Failed, base.Failed)
	}
	if r := run(append(tr, "--temperature", "2")...); slices.Equal(r.Placements, base.Placements) {
		t.Errorf("a temperature: the same placements %v", r.Placements)
	}
	ag := []string{"--workload", "agent", "--sessions", "8", "--system-tokens", "3000", "--time-scale", "0.1"}
	one, four := run(append(ag, "--tenants", "1")...), run(append(ag, "--tenants", "4")...)
	if four.SharedHitRate >= one.SharedHitRate {
		t.Errorf("4 tenants: shared hit rate %.3f, one tenant %.3f", four.SharedHitRate, one.SharedHitRate)
	}
}

func TestBenchRouterRejectsBadSettings(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{}, "--trace"},
		{[]string{"--workload", "chat"}, "--workload"},
		{[]string{"--workload", "agent", "--trace", "x.jsonl"}, "exclusive"},
		{[]string{"--workload", "agent", "--workers", "0"}, "--workers"},
		{[]string{"--workload", "agent", "--policy", "random"}, "--policy"},
		{[]string{"--workload", "agent", "--stretch", "0"}, "--stretch"},
		{[]string{"--workload", "agent", "--kv-tokens", "0"}, "--kv-tokens"},
		{[]string{"--workload", "agent", "--time-scale", "-1"}, "time scale"},
		{[]string{"--trace", "/nonexistent.jsonl"}, "nonexistent"},
	}
	for _, tt := range tests {
		_, _, err := runCommand(newRootCmd(), append([]string{"bench", "router"}, tt.args...)...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one naming %s", tt.args, err, tt.want)
		}
	}
}
