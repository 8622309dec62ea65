package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
)

// TestSimulateTCO: the seeds' scenario from the built-in price book cuts
// the day's cost by more than 74% with the context cache, for the fast
// model and the strong one; the measured run times the real engine and
// finds the cached question faster than the whole prompt.
func TestSimulateTCO(t *testing.T) {
	run := func(args ...string) []byte {
		t.Helper()
		var out bytes.Buffer
		cmd := newSimulateCmd()
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append([]string{"tco"}, args...))
		if err := cmd.Execute(); err != nil {
			t.Fatalf("simulate tco %v: %v", args, err)
		}
		return out.Bytes()
	}
	if table := string(run()); !strings.Contains(table, "88.7%") || !strings.Contains(table, "89.2%") {
		t.Fatalf("the seeds' scenario:\n%s", table)
	}
	var rep tcoReport
	if err := json.Unmarshal(run("--json", "--measure", "--model", apitest.ModelFile(t), "--measure-lengths", "96,192", "--threads", "1"), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Priced) != 2 {
		t.Fatalf("priced %+v", rep.Priced)
	}
	for _, p := range rep.Priced {
		if p.Cut < 0.74 {
			t.Errorf("%s: cut %.3f, under the 74%% bar", p.Model, p.Cut)
		}
	}
	m := rep.Measured
	if m == nil || len(m.Points) != 2 || m.Scaled.TTFTWithoutCache <= m.Scaled.TTFTWithCache || m.Scaled.Cut <= 0 {
		t.Fatalf("measured: %+v", m)
	}
	for _, p := range m.Points {
		if p.Cold <= 0 || p.Warm <= 0 {
			t.Fatalf("a point without times: %+v", p)
		}
	}
	cmd := newSimulateCmd()
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"tco", "--fast", "no-such-model"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "no model") {
		t.Fatalf("an unknown model: %v", err)
	}
}
