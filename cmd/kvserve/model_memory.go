package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// modelMemoryFlag registers --model-memory, where a command keeps the
// model's weights.
func modelMemoryFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "model-memory", "auto", "where the weights live: mmap (a shared read-only mapping of the file), hugepages (a private copy in transparent huge pages, its weights packed for the CPU's kernels: faster decoding, the whole file in RAM), auto (hugepages when the kernel offers them and the file takes at most half of MemAvailable, unless a decode pass timed at load on both is faster on the mapping; else mmap)")
}

// modelPlacement resolves a --model-memory setting for the model at path.
func modelPlacement(path, setting string) (gguf.Placement, error) {
	p, _, err := modelPlacementWhy(path, setting)
	return p, err
}

// modelPlacementWhy is modelPlacement with the reason for its choice, for
// the line a command prints when it loads a model and `model info`.
func modelPlacementWhy(path, setting string) (gguf.Placement, string, error) {
	if setting == "auto" || setting == "" {
		st, err := os.Stat(path)
		if err != nil {
			return 0, "", fmt.Errorf("open %s: %w", path, err)
		}
		f, err := gguf.Open(path)
		if err != nil {
			return 0, "", err
		}
		// Widened copies take memory in either placement, on top of a
		// private copy's.
		size := st.Size() + widenedBytes(f)
		f.Close()
		avail, huge := memAvailable(), gguf.HugePagesAvailable()
		p := autoPlacement(size, avail, huge)
		return p, autoPlacementWhy(size, avail, huge), nil
	}
	p, err := gguf.ParsePlacement(setting)
	if err != nil {
		return 0, "", fmt.Errorf("--model-memory %q: want auto, mmap or hugepages", setting)
	}
	return p, "--model-memory " + setting, nil
}

// probePlacement is --model-memory auto's check of its choice of a private
// copy (private, just opened) by measurement: it times a decode step's
// weight products (model.DecodePass) on the packed copy and on a mapping
// of the file, whose pages the copy has just brought into the page cache,
// alternated, and keeps the faster. On one Intel Xeon the packed copy in
// huge pages decoded slower than the file's mapping (issue 19), on the AMD
// machines faster: a table by CPU model would be a guess where this is a
// reading. The probe reads the first probeBytes of the layers' weights:
// once on the mapping to page them in, then probeRounds times on each
// placement, alternated, the fastest pass of each compared.
func probePlacement(path string, private *model.File, why string) (*model.File, gguf.Placement, string) {
	mapped, err := model.Open(path, gguf.Mapped, nil)
	if err != nil {
		return private, gguf.HugePages, why + "; probe skipped: " + err.Error()
	}
	p := tensor.NewPool(runtime.GOMAXPROCS(0))
	defer p.Close()
	mapped.Model.DecodePass(p, 1, probeBytes) // pages in what the timed passes read
	tp, tm := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	var read int64 // the same on both
	for range probeRounds {
		d, _ := private.Model.DecodePass(p, 1, probeBytes)
		tp = min(tp, d)
		d, read = mapped.Model.DecodePass(p, 1, probeBytes)
		tm = min(tm, d)
	}
	place, reading := probeChoice(tp, tm, read)
	why += "; " + reading
	if place == gguf.Mapped {
		private.Close()
		return mapped, gguf.Mapped, why
	}
	mapped.Close()
	return private, gguf.HugePages, why
}

// probeBytes is how much of the weights the probe's passes read: past the
// largest last-level caches of the machines it runs on (an Intel Xeon's
// 300 MB among them), so that it times memory as decode does.
const probeBytes = 512 << 20

// probeRounds is how many passes the probe times on each placement. With
// two, a busy moment on a VM once let the mapping read faster than the
// packed copy by more than the margin, on a CPU where the packed copy
// prefills faster and decodes as fast (docs/performance.md): the fastest of
// more passes is a steadier reading, for about a pass's time each.
const probeRounds = 4

// probeMargin: the probe gives up the private copy only when a decode pass
// on the file's mapping takes less than this fraction of the pass on the
// copy; a closer reading is within a pass's noise.
const probeMargin = 0.95

// probeChoice decides between a private packed copy and the file's mapping
// from a decode pass's time on each over weights of the given size, and
// says so.
func probeChoice(private, mapped time.Duration, weightBytes int64) (gguf.Placement, string) {
	rate := func(d time.Duration) float64 { return float64(weightBytes) / d.Seconds() / 1e9 }
	if float64(mapped) < probeMargin*float64(private) {
		return gguf.Mapped, fmt.Sprintf("a probe streamed the weights at %.1f GB/s through the file's mapping, %.1f GB/s from a packed private copy", rate(mapped), rate(private))
	}
	return gguf.HugePages, fmt.Sprintf("a probe streamed the weights at %.1f GB/s from the packed private copy, %.1f GB/s through the file's mapping", rate(private), rate(mapped))
}

// autoPlacementWhy says why autoPlacement chose what it did.
func autoPlacementWhy(size, avail int64, huge bool) string {
	switch {
	case !huge:
		return "auto: the kernel offers no transparent huge pages"
	case avail <= 0:
		return "auto: available memory unknown"
	case size > avail/2:
		return fmt.Sprintf("auto: the weights (%s) take more than half of the available memory (%s)", humanBytes(uint64(size)), humanBytes(uint64(avail)))
	}
	return fmt.Sprintf("auto: the weights (%s) take at most half of the available memory (%s)", humanBytes(uint64(size)), humanBytes(uint64(avail)))
}

// placementLine describes where a model's weights are and which kernels
// compute with them: placement p, chosen for why, and whether the weights
// did get a private copy, for file f.
func placementLine(p gguf.Placement, why string, private bool, f *gguf.File, released int64) string {
	types := matrixTypes(f)
	where := "a read-only mapping of the file"
	switch {
	case private:
		where = "private memory in transparent huge pages"
	case p == gguf.HugePages:
		where += " (no private copy could be made)"
	}
	var packed []string
	for _, t := range types {
		if tensor.Packable(t) {
			packed = append(packed, t.String())
		}
	}
	k := "kernels " + tensor.Kernels()
	switch {
	case len(packed) == 0:
	case private:
		k += ", " + strings.Join(packed, " and ") + " packed for them"
	default:
		k += ", " + strings.Join(packed, " and ") + " not packed (only private memory is)"
	}
	line := fmt.Sprintf("in %s (%s); %s%s", where, why, k, widenedClause(f))
	switch {
	case !private || widenedBytes(f) == 0:
	case released >= 0:
		line += fmt.Sprintf("; the private copy gave back %s of the widened matrices' original bytes", humanBytes(uint64(released)))
	default:
		line += "; the private copy gives back the widened matrices' original bytes at load"
	}
	return line
}

// widenedClause names the types of f's matrices that the model loader
// widens to a type with faster kernels (tensor.Widen), and the memory the
// copies take besides the file's, or is empty.
func widenedClause(f *gguf.File) string {
	var parts []string
	for _, t := range matrixTypes(f) {
		wt, ok := tensor.WidenedType(t)
		if !ok {
			continue
		}
		n := widenedBytesOf(f, t)
		how := "widened to " + wt.String()
		if tensor.WidenedRowBytes(t, 256) > wt.RowBytes(256) { // Q4_1, Q5_1
			how += " with its blocks' minima beside"
		}
		if tensor.Packable(wt) {
			how += " and packed"
		}
		parts = append(parts, fmt.Sprintf("%v %s in %s of memory of its own (the same products, faster kernels)", t, how, humanBytes(uint64(n))))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// widenedBytes is the memory the widened copies of f's matrices take.
func widenedBytes(f *gguf.File) int64 {
	var n int64
	for _, t := range matrixTypes(f) {
		n += widenedBytesOf(f, t)
	}
	return n
}

// widenedBytesOf is the memory the widened copies of f's matrices of type
// t take (0 if t is not widened).
func widenedBytesOf(f *gguf.File, t tensor.DType) int64 {
	var n int64
	for _, ts := range f.Tensors {
		if len(ts.Dims) == 2 && ts.Type == t {
			n += int64(tensor.WidenedRowBytes(t, ts.Cols())) * int64(ts.Rows())
		}
	}
	return n
}

// autoPlacement is --model-memory auto's choice for a file of size bytes
// when avail bytes of memory are available (0: unknown) and the kernel does
// or does not offer huge pages. The copy doubles as the page cache's copy
// while it is read, and must leave room for the KV cache, hence half.
func autoPlacement(size, avail int64, huge bool) gguf.Placement {
	if huge && avail > 0 && size <= avail/2 {
		return gguf.HugePages
	}
	return gguf.Mapped
}
