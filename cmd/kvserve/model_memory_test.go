package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
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
	ms := time.Millisecond
	for _, tc := range []struct {
		private, mapped placementTimes
		threads         int
		want            gguf.Placement
		says            string
	}{
		// Decode decides where prompts take the same time: the
		// reference request is 8 prompt passes and 128 decode steps.
		{placementTimes{100 * ms, 800 * ms}, placementTimes{50 * ms, 800 * ms}, 2, gguf.Mapped, "a probe on 2 threads streamed the weights at 20.0 GB/s through the file's mapping, 10.0 GB/s from a packed private copy, and computed prompts' products at 80 tokens/s against 80 (a 512-token prompt and 128-token reply: 12.80 s against 19.20 s)"},
		{placementTimes{50 * ms, 800 * ms}, placementTimes{100 * ms, 800 * ms}, 1, gguf.HugePages, "a probe on 1 thread streamed the weights at 20.0 GB/s from the packed private copy, 10.0 GB/s through the file's mapping"},
		{placementTimes{100 * ms, 0}, placementTimes{96 * ms, 0}, 2, gguf.HugePages, "from the packed private copy"}, // within the margin
		{placementTimes{100 * ms, 0}, placementTimes{94 * ms, 0}, 2, gguf.Mapped, "through the file's mapping, 10.0 GB/s"},
		// A mapping that decodes 10% faster but prompts at half the
		// speed would serve the request slower: the copy stays.
		{placementTimes{100 * ms, 800 * ms}, placementTimes{90 * ms, 1600 * ms}, 2, gguf.HugePages, "prompts' products at 80 tokens/s against 40 (a 512-token prompt and 128-token reply: 19.20 s against 24.32 s)"},
		// One that prompts faster and decodes as fast is taken.
		{placementTimes{100 * ms, 1600 * ms}, placementTimes{100 * ms, 800 * ms}, 2, gguf.Mapped, "through the file's mapping"},
	} {
		got, says := probeChoice(tc.private, tc.mapped, gb, tc.threads)
		if got != tc.want || !strings.Contains(says, tc.says) {
			t.Errorf("probeChoice(%v, %v, %d threads) = %v, %q; want %v, %q", tc.private, tc.mapped, tc.threads, got, says, tc.want, tc.says)
		}
	}
}

func TestStreamsChoice(t *testing.T) {
	const gb = 1e9
	for _, tc := range []struct {
		two, one time.Duration
		want     bool
		says     string
	}{
		{100 * time.Millisecond, 50 * time.Millisecond, true, "in one stream (20.0 GB/s; two streams 10.0 GB/s)"},
		{50 * time.Millisecond, 100 * time.Millisecond, false, "in two streams (20.0 GB/s; one stream 10.0 GB/s)"},
		{100 * time.Millisecond, 96 * time.Millisecond, false, "in two streams"}, // within the margin
		{100 * time.Millisecond, 94 * time.Millisecond, true, "in one stream"},
	} {
		got, says := streamsChoice(tc.two, tc.one, gb)
		if got != tc.want || !strings.Contains(says, tc.says) {
			t.Errorf("streamsChoice(%v, %v) = %v, %q; want %v, %q", tc.two, tc.one, got, says, tc.want, tc.says)
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
	mf, err := openModelWithProgress(path, weightsMemory{placement: "auto"}, 0, 1, &out)
	if err != nil {
		t.Fatal(err)
	}
	defer mf.Close()
	if !strings.Contains(out.String(), "a probe on 1 thread streamed the weights at") {
		t.Errorf("auto's line names no probe on the command's one thread: %q", out.String())
	}
	// Kept private, the copy's Q8_0 matrices are packed; where this CPU
	// reads them in two streams, the probe times one too and says which
	// it kept, and the model is set so.
	if strings.Contains(out.String(), "from the packed private copy") && mf.Model.TwoStreamMatrices() > 0 != strings.Contains(out.String(), "in two streams (") {
		t.Errorf("the line's streams do not match the model's (%d matrices in two streams): %q", mf.Model.TwoStreamMatrices(), out.String())
	}
	if strings.Contains(out.String(), "in one stream (") && mf.Model.TwoStreamMatrices() != 0 {
		t.Errorf("one stream chosen, yet %d matrices read two", mf.Model.TwoStreamMatrices())
	}
	out.Reset()
	mf, err = openModelWithProgress(path, weightsMemory{placement: "hugepages"}, 0, 1, &out)
	if err != nil {
		t.Fatal(err)
	}
	mf.Close()
	if strings.Contains(out.String(), "probe") || !strings.Contains(out.String(), "--model-memory hugepages") {
		t.Errorf("an explicit setting was probed: %q", out.String())
	}
}

// TestModelPlacementSetting: explicit settings are taken as they are, a
// wrong one refused, and a missing file is an error whatever the setting.
func TestModelPlacementSetting(t *testing.T) {
	path := testshared.Path(t, "models", "tiny-q8_0.gguf")
	missing := filepath.Join(t.TempDir(), "missing.gguf")
	for _, tc := range []struct {
		path, setting string
		want          gguf.Placement
		ok            bool
	}{
		{path, "mmap", gguf.Mapped, true}, {path, "hugepages", gguf.HugePages, true}, {path, "huge", 0, false},
		{missing, "mmap", 0, false}, {missing, "auto", 0, false},
	} {
		p, err := planWeights(tc.path, weightsMemory{placement: tc.setting}, 0)
		if (err == nil) != tc.ok || (tc.ok && p.placement != tc.want) {
			t.Errorf("planWeights(%s, %q) = %v, %v", filepath.Base(tc.path), tc.setting, p.placement, err)
		}
	}
}

// TestWidenedClause: the load line names the matrices widened and their
// memory (tiny-iq2_xxs: 12 IQ2_XXS matrices, widened to Q8_K16 on every
// CPU, 1,201,152 bytes; at a limit of 600,576 bytes the first six that fit
// in the file's order), those left in their own bytes beyond the limit;
// Q5_0's, IQ4_NL's and Q5_1's left so where this CPU computes them as
// fast, else widened (tiny-q5_1: 3,584 rows 256 wide, 272 bytes each as
// Q8_0 and 16 for the blocks' minima, and the two ffn_down's 512 rows 512
// wide, 544 + 32 bytes; its token embedding apart from the output, only
// looked up, stays as it is); and nothing for a file without.
func TestWidenedClause(t *testing.T) {
	const q51Row, q51Down = 272 + 16, 544 + 32
	for _, tc := range []struct {
		file  string
		limit int64
		bytes int64
		says  []string
	}{
		{"tiny-iq2_xxs.gguf", model.NoWidenLimit, 1201152, []string{"IQ2_XXS widened to Q8_K16 in 1.1 MiB of memory of its own"}},
		{"tiny-iq2_xxs.gguf", 0, 0, []string{"IQ2_XXS computed in its own bytes, streamed", "widening it would take 1.1 MiB, more than the limit (why)"}},
		{"tiny-iq2_xxs.gguf", 600576, 600576, []string{"IQ2_XXS: 6 matrices widened to Q8_K16 in 586.5 KiB of memory of their own",
			"6 (140.2 KiB) computed in their own bytes, streamed", "widening them would take 586.5 KiB more than the limit (why)"}},
	} {
		f, err := gguf.Open(testshared.Own(t, "models", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		w := model.PlanWidening(f, tc.limit, false)
		if w.Bytes() != tc.bytes {
			t.Errorf("%s limit %d: widened bytes %d, want %d", tc.file, tc.limit, w.Bytes(), tc.bytes)
		}
		c := widenedClause(w, "why")
		if w.Streamed() > 0 {
			// How this CPU computes them: a direct kernel, or widening
			// their rows again.
			how := "widens"
			if tensor.StreamedDirect(tensor.IQ2_XXS) {
				how = "unpacks"
			}
			if !strings.Contains(c, how) {
				t.Errorf("%s limit %d: clause %q does not say the streamed matrices' kernel (%q)", tc.file, tc.limit, c, how)
			}
		}
		for _, s := range tc.says {
			if !strings.Contains(c, s) {
				t.Errorf("%s limit %d: clause %q does not say %q", tc.file, tc.limit, c, s)
			}
		}
	}
	// Q5_0, IQ4_NL and Q5_1: left in their own bytes whatever the limit
	// where this CPU computes them as fast there (in private memory, or in
	// either placement), else widened.
	for _, tc := range []struct {
		typ     tensor.DType
		widened string
		bytes   int64
		size    string
	}{
		{tensor.Q5_0, "Q5_0 widened to Q8_0", 3584*272 + 512*544, "1.2 MiB"},
		{tensor.IQ4_NL, "IQ4_NL widened to Q8_0", 3584*272 + 512*544, "1.2 MiB"},
		{tensor.Q5_1, "Q5_1 widened to Q8_0 with its blocks' minima beside and packed in 1.3 MiB", 3584*q51Row + 512*q51Down, "1.3 MiB"},
	} {
		typ := tc.typ
		name := "tiny-" + strings.ToLower(typ.String()) + ".gguf"
		f, err := gguf.Open(testshared.Own(t, "models", name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, private := range []bool{false, true} {
			w := model.PlanWidening(f, model.NoWidenLimit, private)
			c, want, bytes := widenedClause(w, "why"), tc.widened, tc.bytes
			if !tensor.Packable(tensor.Q8_0) { // the portable kernels read Q8_0 as it is
				want = strings.Replace(want, " and packed", "", 1)
			}
			switch {
			case !tensor.StreamedPreferred(typ, private):
			case !tensor.StreamedPreferred(typ, false): // only packed
				want, bytes = typ.String()+" computed in its own bytes, packed in private memory (through a mapping it is widened): on this CPU at least as fast as widened, which would take "+tc.size, 0
			case tensor.Packable(typ):
				want, bytes = typ.String()+" computed in its own bytes (packed in private memory; through a mapping streamed, by a kernel that unpacks its blocks in registers): on this CPU at least as fast as widened, which would take "+tc.size, 0
			default:
				want, bytes = typ.String()+" computed in its own bytes, streamed (by a kernel that unpacks its blocks in registers): on this CPU as fast as widened, which would take "+tc.size, 0
			}
			if w.Bytes() != bytes || !strings.Contains(c, want) {
				t.Errorf("%s private=%v: %d bytes widened, clause %q; want %d, %q", name, private, w.Bytes(), c, bytes, want)
			}
		}
	}
	g, err := gguf.Open(testshared.Path(t, "models", "tiny-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if w := model.PlanWidening(g, model.NoWidenLimit, true); widenedClause(w, "why") != "" || w.Bytes() != 0 {
		t.Errorf("tiny-q8_0: clause %q, %d bytes", widenedClause(w, "why"), w.Bytes())
	}
}

// TestWidenLimit: --widen-memory as given, none, everything where the
// available memory is unknown, and auto: what is left beside the file, the
// reserved memory and an eighth, never below zero.
func TestWidenLimit(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		setting               hostSize
		file, reserved, avail int64
		want                  int64
		says                  string
	}{
		{2 * gib, 9 * gib, 4 * gib, 16 * gib, 2 * gib, "--widen-memory 2GiB"},
		{-1, 1 * gib, 0, 16 * gib, 0, "--widen-memory 0"},
		{0, 1 * gib, 0, 0, model.NoWidenLimit, "unknown"},
		{0, 9 * gib, 4 * gib, 16 * gib, 1 * gib, "16.00 GiB available, less the file's 9.00 GiB, the KV cache's 4.00 GiB and an eighth"},
		{0, 1 * gib, 0, 8 * gib, 6 * gib, "less the file's 1.00 GiB and an eighth"},
		{0, 15 * gib, 4 * gib, 16 * gib, 0, "available"},
	} {
		got, says := widenLimit(tc.setting, tc.file, tc.reserved, tc.avail)
		if got != tc.want || !strings.Contains(says, tc.says) {
			t.Errorf("widenLimit(%v, %d, %d, %d) = %d, %q; want %d, %q", tc.setting.String(), tc.file, tc.reserved, tc.avail, got, says, tc.want, tc.says)
		}
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
		line := placementLine(gguf.HugePages, "why", tc.private, tc.f, model.PlanWidening(tc.f, model.NoWidenLimit, tc.private), "limit", tc.released)
		if tc.want == "" && strings.Contains(line, "private copy g") || !strings.Contains(line, tc.want) {
			t.Errorf("private=%v released=%d: %q", tc.private, tc.released, line)
		}
	}
}

// TestAMXFlagRefused: --amx takes auto or off (DisableAMX's own test turns
// the tiles off in a fresh process; here the choice may be made already).
func TestAMXFlagRefused(t *testing.T) {
	path := testshared.Path(t, "models", "tiny-q8_0.gguf")
	_, err := openModelWithProgress(path, weightsMemory{placement: "mmap", amx: "on"}, 0, 1, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `--amx "on": want auto or off`) {
		t.Fatalf("--amx on: %v", err)
	}
}
