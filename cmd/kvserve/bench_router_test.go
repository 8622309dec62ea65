package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/routerbench"
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
