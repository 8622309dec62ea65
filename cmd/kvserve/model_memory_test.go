package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/testshared"
)

func TestAutoPlacement(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		size, avail int64
		huge        bool
		want        gguf.Placement
	}{
		{140 << 20, 16 * gib, true, gguf.HugePages},
		{8 * gib, 16 * gib, true, gguf.HugePages}, // exactly half
		{9 * gib, 16 * gib, true, gguf.Mapped},    // more than half
		{140 << 20, 16 * gib, false, gguf.Mapped}, // THP off
		{140 << 20, 0, true, gguf.Mapped},         // memory unknown
	} {
		if got := autoPlacement(tc.size, tc.avail, tc.huge); got != tc.want {
			t.Errorf("autoPlacement(%d, %d, %v) = %v, want %v", tc.size, tc.avail, tc.huge, got, tc.want)
		}
	}
}

func TestProbeChoice(t *testing.T) {
	const gb = 1e9
	for _, tc := range []struct {
		private, mapped time.Duration
		want            gguf.Placement
		says            string
	}{
		{100 * time.Millisecond, 50 * time.Millisecond, gguf.Mapped, "20.0 GB/s through the file's mapping, 10.0 GB/s from a packed private copy"},
		{50 * time.Millisecond, 100 * time.Millisecond, gguf.HugePages, "20.0 GB/s from the packed private copy, 10.0 GB/s through the file's mapping"},
		{100 * time.Millisecond, 96 * time.Millisecond, gguf.HugePages, "from the packed private copy"}, // within the margin
		{100 * time.Millisecond, 94 * time.Millisecond, gguf.Mapped, "through the file's mapping, 10.0 GB/s"},
	} {
		got, says := probeChoice(tc.private, tc.mapped, gb)
		if got != tc.want || !strings.Contains(says, tc.says) {
			t.Errorf("probeChoice(%v, %v) = %v, %q; want %v, %q", tc.private, tc.mapped, got, says, tc.want, tc.says)
		}
	}
}

// TestAutoPlacementProbe: --model-memory auto times both placements when it
// made a private copy and says what it read; an explicit setting is taken
// as it is.
func TestAutoPlacementProbe(t *testing.T) {
	if !gguf.HugePagesAvailable() {
		t.Skip("no transparent huge pages here: auto makes no private copy to probe")
	}
	path := testshared.Path(t, "models", "tiny-q8_0.gguf")
	var out strings.Builder
	mf, err := openModelWithProgress(path, "auto", &out)
	if err != nil {
		t.Fatal(err)
	}
	mf.Close()
	if !strings.Contains(out.String(), "a probe streamed the weights at") {
		t.Errorf("auto's line names no probe: %q", out.String())
	}
	out.Reset()
	mf, err = openModelWithProgress(path, "hugepages", &out)
	if err != nil {
		t.Fatal(err)
	}
	mf.Close()
	if strings.Contains(out.String(), "probe") || !strings.Contains(out.String(), "--model-memory hugepages") {
		t.Errorf("an explicit setting was probed: %q", out.String())
	}
}

func TestModelPlacementSetting(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.gguf")
	for _, tc := range []struct {
		setting string
		want    gguf.Placement
		ok      bool
	}{{"mmap", gguf.Mapped, true}, {"hugepages", gguf.HugePages, true}, {"huge", 0, false}, {"auto", 0, false}} {
		got, err := modelPlacement(missing, tc.setting)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("modelPlacement(%q) = %v, %v", tc.setting, got, err)
		}
	}
}

// TestWidenedClause: the load line names the matrices widened to Q8_0
// and their memory (tiny-q5_0: 4,096 rows 256 wide, 272 bytes each as
// Q8_0, and the two ffn_down's 512 rows 512 wide, 544 bytes; tiny-q5_1 the
// same and 2 bytes a block of 32 for its minima), and nothing for a file
// without.
func TestWidenedClause(t *testing.T) {
	for _, tc := range []struct {
		file, how, size string
		bytes           int64
	}{
		{"tiny-q5_0.gguf", "Q5_0 widened to Q8_0", "1.3 MiB", 4096*272 + 512*544},
		{"tiny-q5_1.gguf", "Q5_1 widened to Q8_0 with its blocks' minima beside", "1.4 MiB", 4096*(272+16) + 512*(544+32)},
	} {
		f, err := gguf.Open(testshared.Own(t, "models", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if widenedBytes(f) != tc.bytes {
			t.Errorf("%s: widened bytes %d, want %d", tc.file, widenedBytes(f), tc.bytes)
		}
		if c := widenedClause(f); !strings.Contains(c, tc.how) || !strings.Contains(c, " in "+tc.size) {
			t.Errorf("%s: clause %q", tc.file, c)
		}
	}
	g, err := gguf.Open(testshared.Path(t, "models", "tiny-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if c, n := widenedClause(g), widenedBytes(g); c != "" || n != 0 {
		t.Errorf("tiny-q8_0: clause %q, %d bytes", c, n)
	}
}

// TestPlacementLineReleased: the line says what a private copy gave back
// of the widened matrices' original bytes (or that it will, before load),
// and says nothing of it for a mapping or a file with nothing widened.
func TestPlacementLineReleased(t *testing.T) {
	f, err := gguf.Open(testshared.Own(t, "models", "tiny-iq2_xxs.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := gguf.Open(testshared.Path(t, "models", "tiny-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, tc := range []struct {
		private  bool
		f        *gguf.File
		released int64
		want     string
	}{
		{true, f, 3 << 20, "the private copy gave back 3.0 MiB of the widened matrices' original bytes"},
		{true, f, -1, "the private copy gives back the widened matrices' original bytes at load"},
		{false, f, 0, ""},
		{true, g, 0, ""},
	} {
		line := placementLine(gguf.HugePages, "why", tc.private, tc.f, tc.released)
		if tc.want == "" && strings.Contains(line, "private copy g") || !strings.Contains(line, tc.want) {
			t.Errorf("private=%v released=%d: %q", tc.private, tc.released, line)
		}
	}
}
