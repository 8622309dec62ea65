package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/sim"
	"github.com/kvserve/kvserve/internal/testshared"
)

// TestSimCalibrateAndReplay: calibrate on the tiny model gives a profile
// the simulator accepts, serve takes it, and replay runs a trace with it.
func TestSimCalibrateAndReplay(t *testing.T) {
	dir := t.TempDir()
	profile := filepath.Join(dir, "profile.json")
	run := func(args ...string) string {
		t.Helper()
		out, errOut, err := runCommand(newRootCmd(), args...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut)
		}
		return out
	}
	run("sim", "calibrate", "-m", apitest.ModelFile(t), "-o", profile, "-t", "1", "--max-prompt", "64", "--max-batch", "4")
	p, err := sim.ReadProfile(profile)
	if err != nil {
		t.Fatal(err)
	}
	if p.Fit == nil || p.Fit.Passes < 20 || p.Threads != 1 || p.WeightBytes == 0 {
		t.Fatalf("profile %+v", p)
	}

	trace := testshared.Path(t, "traces", "mooncake_fast25_conversation_trace.jsonl")
	if _, err := os.Stat(trace); err != nil {
		t.Fatalf("the shared traces are missing: %v", err)
	}
	out := run("sim", "replay", "--trace", trace, "--sim-profile", profile, "--limit", "40", "--kv-tokens", "2000000", "--json")
	var res replayResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Requests != 40 || res.Failed != 0 || res.HitRate <= 0 || res.TTFTp50 <= 0 || res.Speedup <= 1 {
		t.Fatalf("replay %+v", res)
	}
	// A pool too small for the trace's reuse, then the same with a disk
	// tier below it: G3's hits are hits.
	small := run("sim", "replay", "--trace", trace, "--sim-profile", profile, "--limit", "200", "--kv-tokens", "80000", "--json")
	tiered := run("sim", "replay", "--trace", trace, "--sim-profile", profile, "--limit", "200", "--kv-tokens", "80000",
		"--kv-disk-tokens", "2000000", "--json")
	var s, g3 replayResult
	if json.Unmarshal([]byte(small), &s) != nil || json.Unmarshal([]byte(tiered), &g3) != nil {
		t.Fatalf("%s\n%s", small, tiered)
	}
	if g3.DiskHitTokens == 0 || g3.HitRate <= s.HitRate || s.DiskHitTokens != 0 {
		t.Fatalf("small pool: %+v\nwith G3: %+v", s, g3)
	}
	for _, bad := range [][]string{
		{"sim", "replay", "--trace", filepath.Join(dir, "missing.jsonl")},
		{"sim", "replay", "--trace", trace, "--stretch", "0"},
		{"sim", "calibrate", "-m", apitest.ModelFile(t), "-o", profile, "--only-passes"},
	} {
		if _, _, err := runCommand(newRootCmd(), bad...); err == nil || !strings.Contains(err.Error(), "sim") {
			t.Errorf("%v: error %v", bad, err)
		}
	}
}
