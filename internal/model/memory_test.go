//go:build linux

package model_test

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/synth"
)

// procKB reads a "Name: N kB" line of /proc/self/status.
func procKB(t *testing.T, name string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			v, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Skipf("%s not in /proc/self/status", name)
	return 0
}

// TestLoadKeepsWeightsMapped loads a SmolLM2-135M-shaped Q8_0 model and
// checks that its weights stay in the file mapping: after loading (with the
// weights paged in), anonymous memory has grown by a small constant, not by
// the 140 MB of weights, while file-backed resident memory holds them.
func TestLoadKeepsWeightsMapped(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 145 MB model")
	}
	shape, err := synth.LookupShape("smollm2-135m", "")
	if err != nil {
		t.Fatal(err)
	}
	sm, err := synth.New(shape, synth.FileQ8_0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "smollm2-q8_0.gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sm.WriteTo(out, synth.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	// Evict the file from this process's view: pages written are in the page
	// cache but not mapped by us yet, so RssFile starts without them.
	runtime.GC()
	debug.FreeOSMemory()
	anonBefore, fileBefore := procKB(t, "RssAnon"), procKB(t, "RssFile")

	var total int64
	mf, err := model.Open(path, gguf.Mapped, func(done, all int64) { total = all })
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	runtime.GC()
	debug.FreeOSMemory()
	anonGrowth := procKB(t, "RssAnon") - anonBefore
	fileGrowth := procKB(t, "RssFile") - fileBefore
	weightsKB := mf.Model.WeightBytes / 1024
	t.Logf("weights %d kB; after load: anonymous +%d kB, file-backed +%d kB", weightsKB, anonGrowth, fileGrowth)
	if total != mf.Model.WeightBytes {
		t.Fatalf("progress reported %d bytes of %d", total, mf.Model.WeightBytes)
	}
	// The metadata (a 49,152-token vocabulary and its merges) is parsed into
	// Go values; everything else must stay in the mapping.
	if anonGrowth > 24<<10 {
		t.Fatalf("anonymous memory grew by %d kB loading %d kB of weights: weights were copied", anonGrowth, weightsKB)
	}
	if fileGrowth < weightsKB*9/10 {
		t.Fatalf("file-backed resident memory grew by only %d kB for %d kB of weights: not paged in", fileGrowth, weightsKB)
	}
}
