package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// weightsMemory is where a command keeps a model's weights, how much
// memory their widened copies may take and whether the AMX tiles may
// compute with them: --model-memory, --widen-memory and --amx.
type weightsMemory struct {
	placement string
	widen     hostSize // 0: auto, -1: none
	amx       string
}

// weightsMemoryFlags registers --model-memory, --widen-memory and --amx.
func weightsMemoryFlags(f *pflag.FlagSet, w *weightsMemory) {
	f.StringVar(&w.amx, "amx", "auto", "the AMX tiles of Intel Xeons (Sapphire Rapids and later): auto (each AMX kernel family used where a probe at load finds it faster than the AVX-512 kernels; the load line says which), off (none: to compare, or where the tiles slow the CPU's other cores)")
	f.StringVar(&w.placement, "model-memory", "auto", "where the weights live: mmap (a shared read-only mapping of the file), hugepages (a private copy in transparent huge pages, its weights packed for the CPU's kernels: faster decoding, the whole file in RAM), auto (hugepages when the kernel offers them and the file takes at most half of MemAvailable, unless the mapping would serve a 512-token prompt and 128-token reply faster by a decode step's and a prompt's weight products timed at load on both with the command's --threads; the same probe times decode's products on the copy in one stream and in two per work item and keeps the faster; else mmap)")
	f.Var(&w.widen, "widen-memory", "memory the widened copies of weights may take (the matrices of Q5_0, Q4_1, Q5_1, IQ4_NL and the IQ types below 4 bits are widened at load to types with faster kernels, 1.5-4.2 times their size; those that do not fit are computed in their own bytes: slower prompts, and slower decoding too on CPUs without kernels that unpack them in registers; Q5_0's, IQ4_NL's, Q4_1's and Q5_1's are not widened on CPUs whose kernels compute them as fast in their own bytes; the load line says which), e.g. 2GiB; auto: what MemAvailable leaves beside the file, the KV cache and an eighth of it; 0: none")
}

// weightsPlan is where a command puts a model's weights and why, and the
// limit of their widened copies' memory (model.Options) and why.
type weightsPlan struct {
	placement  gguf.Placement
	why        string
	widenLimit int64
	widenWhy   string
}

// planWeights resolves w for the model at path, for a command that keeps
// reserved bytes of memory besides (its KV cache), for the line a command
// prints when it loads a model and `model info`; with --amx off it turns
// the tiles off for the process first (tensor.DisableAMX).
func planWeights(path string, w weightsMemory, reserved int64) (weightsPlan, error) {
	var p weightsPlan
	st, err := os.Stat(path)
	if err != nil {
		return p, fmt.Errorf("open %s: %w", path, err)
	}
	switch w.amx {
	case "off":
		if err := tensor.DisableAMX(); err != nil {
			return p, fmt.Errorf("--amx off: %w", err)
		}
	case "auto", "":
	default:
		return p, fmt.Errorf("--amx %q: want auto or off", w.amx)
	}
	avail := memAvailable()
	p.widenLimit, p.widenWhy = widenLimit(w.widen, st.Size(), reserved, avail)
	if w.placement != "auto" && w.placement != "" {
		if p.placement, err = gguf.ParsePlacement(w.placement); err != nil {
			return p, fmt.Errorf("--model-memory %q: want auto, mmap or hugepages", w.placement)
		}
		p.why = "--model-memory " + w.placement
		return p, nil
	}
	f, err := gguf.Open(path)
	if err != nil {
		return p, err
	}
	// Widened copies take memory in either placement, on top of a
	// private copy's: those of the plan for a private copy is the
	// question.
	size := st.Size() + model.PlanWidening(f, p.widenLimit, true).Bytes()
	f.Close()
	huge := gguf.HugePagesAvailable()
	p.placement, p.why = autoPlacement(size, avail, huge), autoPlacementWhy(size, avail, huge)
	return p, nil
}

// widenLimit resolves --widen-memory for a file of fileBytes when a command
// keeps reserved bytes besides and avail bytes are available (0: unknown),
// and says why. auto leaves an eighth of the available memory to the rest
// (activations, the runtime, the page cache's other users); with the
// available memory unknown it widens everything, as before the limit.
func widenLimit(setting hostSize, fileBytes, reserved, avail int64) (int64, string) {
	switch {
	case setting < 0:
		return 0, "--widen-memory 0"
	case setting > 0:
		return int64(setting), "--widen-memory " + setting.String()
	case avail <= 0:
		return model.NoWidenLimit, "--widen-memory auto, the available memory unknown"
	}
	limit := max(0, avail-fileBytes-reserved-avail/8)
	why := fmt.Sprintf("--widen-memory auto: %s available, less the file's %s", humanBytes(uint64(avail)), humanBytes(uint64(fileBytes)))
	if reserved > 0 {
		why += fmt.Sprintf(", the KV cache's %s", humanBytes(uint64(reserved)))
	}
	return limit, why + " and an eighth for the rest"
}

// probePlacement is --model-memory auto's check of its choice of a private
// copy (private, just opened) by measurement: it times a decode step's
// weight products (model.DecodePass) and a prompt's (model.PrefillPass) on
// the packed copy and on a mapping of the file, whose pages the copy has
// just brought into the page cache, alternated, and keeps the placement
// that would serve a reference request faster (probeChoice). On one Intel
// Xeon the packed copy in huge pages decoded slower than the file's
// mapping (issue 19), on the AMD machines faster: a table by CPU model
// would be a guess where this is a reading. Prompts are timed too because
// the packed kernels (and the AMX ones among them) are the copy's: a
// mapping that decodes a little faster can prompt much slower. The decode
// probe reads the first probeBytes of the layers' weights and the
// classifier: once on the mapping to page them in, then probeRounds times
// on each placement, alternated, the fastest pass of each compared; the
// prompt probe the first promptProbeBytes, on promptProbeTokens tokens.
//
// The passes run on as many threads as the command computes with (threads;
// <= 0: all cores, tensor.NewPool's default): one thread's decode is bound
// by the core's reach into memory and two threads' by the memory system,
// and which placement or stream count reads faster can differ between them.
//
// The mapping is loaded with the copy's widening limit and shares the
// copy's widened matrices (the same matrices widened, in memory once; auto
// made a private copy only if the file and its widened copies take at most
// half of the available memory, so the file's pages fit beside).
func probePlacement(path string, private *model.File, why string, widenLimit int64, threads int) (*model.File, gguf.Placement, string) {
	mapped, err := model.OpenWith(path, gguf.Mapped, nil, model.Options{WidenLimit: widenLimit, WidenedFrom: private.Model})
	if err != nil {
		return private, gguf.HugePages, why + "; probe skipped: " + err.Error()
	}
	p := tensor.NewPool(threads)
	defer p.Close()
	mapped.Model.DecodePass(p, 1, probeBytes) // pages in what the timed passes read
	streams := private.Model.TwoStreamMatrices() > 0
	tp, tp1, tm := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	var read int64 // the same on all
	for range probeRounds {
		d, _ := private.Model.DecodePass(p, 1, probeBytes)
		tp = min(tp, d)
		if streams {
			private.Model.SetOneStream(true)
			d, _ = private.Model.DecodePass(p, 1, probeBytes)
			private.Model.SetOneStream(false)
			tp1 = min(tp1, d)
		}
		d, read = mapped.Model.DecodePass(p, 1, probeBytes)
		tm = min(tm, d)
	}
	// Prompts after decode: their products do not depend on the stream
	// count, and they read less, so they disturb the decode readings less
	// when they come after. Alternated too, the fastest of each.
	pp, pm := private.Model.PrefillPass(p, promptProbeTokens, 1, promptProbeBytes), mapped.Model.PrefillPass(p, promptProbeTokens, 1, promptProbeBytes)
	for range probeRounds - 1 {
		pp = min(pp, private.Model.PrefillPass(p, promptProbeTokens, 1, promptProbeBytes))
		pm = min(pm, mapped.Model.PrefillPass(p, promptProbeTokens, 1, promptProbeBytes))
	}
	var streamsRead string
	if streams {
		var one bool
		one, streamsRead = streamsChoice(tp, tp1, read)
		if one {
			private.Model.SetOneStream(true)
			tp = tp1
		}
	}
	place, reading := probeChoice(placementTimes{tp, pp}, placementTimes{tm, pm}, read, p.Threads())
	why += "; " + reading
	if place == gguf.Mapped {
		private.Close()
		return mapped, gguf.Mapped, why
	}
	mapped.Close()
	if streamsRead != "" {
		why += "; " + streamsRead
	}
	return private, gguf.HugePages, why
}

// streamsChoice decides, from a decode pass's time on the packed copy with
// its one-token products in two streams (the default) and in one, over
// weights of the given size, whether they read one stream (one), and says
// so. Two streams gained on AMD's Zen 5; whether they do on every CPU's
// memory system is this reading's to say. One stream needs the margin
// probeChoice gives the mapping: both kernels give the same bits, so only
// speed decides.
func streamsChoice(two, one time.Duration, weightBytes int64) (bool, string) {
	rate := func(d time.Duration) float64 { return float64(weightBytes) / d.Seconds() / 1e9 }
	if float64(one) < probeMargin*float64(two) {
		return true, fmt.Sprintf("decode reads each work item in one stream (%.1f GB/s; two streams %.1f GB/s)", rate(one), rate(two))
	}
	return false, fmt.Sprintf("decode reads each work item in two streams (%.1f GB/s; one stream %.1f GB/s)", rate(two), rate(one))
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

// probeMargin: the probe gives up the private copy only when the file's
// mapping would serve the reference request in less than this fraction of
// the copy's time; a closer reading is within a pass's noise.
const probeMargin = 0.95

// The prompt probe: products on promptProbeTokens tokens (enough for the
// 16-token AMX kernels and the packed prompt kernels' full tiles) of the
// first promptProbeBytes of the layers' weights (prompts are bound by
// arithmetic, not memory: a few layers' worth reads as the whole does).
const (
	promptProbeTokens = 64
	promptProbeBytes  = 32 << 20
)

// The reference request probeChoice weighs the placements by: llama-bench's
// default pair, a 512-token prompt and a 128-token reply.
const refPromptTokens, refReplyTokens = 512, 128

// placementTimes are the probe's readings on one placement: a decode
// step's weight products, and a prompt's of promptProbeTokens tokens.
type placementTimes struct{ decode, prompt time.Duration }

// request is the time the reference request's weight products would take
// by these readings.
func (t placementTimes) request() time.Duration {
	return t.prompt*refPromptTokens/promptProbeTokens + t.decode*refReplyTokens
}

// probeChoice decides between a private packed copy and the file's mapping
// from the readings on each, decode over weights of the given size, on the
// given number of threads: the mapping where it would serve the reference
// request faster by the margin; and says so.
func probeChoice(private, mapped placementTimes, weightBytes int64, threads int) (gguf.Placement, string) {
	rate := func(d time.Duration) float64 { return float64(weightBytes) / d.Seconds() / 1e9 }
	prompt := func(d time.Duration) float64 { return promptProbeTokens / d.Seconds() }
	on := fmt.Sprintf("a probe on %d thread", threads)
	if threads != 1 {
		on += "s"
	}
	say := func(first, second string, a, b placementTimes) string {
		return fmt.Sprintf("%s streamed the weights at %.1f GB/s %s, %.1f GB/s %s, and computed prompts' products at %.0f tokens/s against %.0f (a %d-token prompt and %d-token reply: %.2f s against %.2f s)",
			on, rate(a.decode), first, rate(b.decode), second, prompt(a.prompt), prompt(b.prompt), refPromptTokens, refReplyTokens, a.request().Seconds(), b.request().Seconds())
	}
	if float64(mapped.request()) < probeMargin*float64(private.request()) {
		return gguf.Mapped, say("through the file's mapping", "from a packed private copy", mapped, private)
	}
	return gguf.HugePages, say("from the packed private copy", "through the file's mapping", private, mapped)
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
// compute with them: placement p, chosen for why, whether the weights did
// get a private copy, for file f whose matrices are widened as w says (for
// the limit limitWhy explains), and what the private copy gave back
// (released; negative: not loaded yet).
func placementLine(p gguf.Placement, why string, private bool, f *gguf.File, w model.Widening, limitWhy string, released int64) string {
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
	if amx := tensor.AMX(); amx != "" {
		k += "; " + amx
	}
	if slices.Contains(types, tensor.BF16) {
		if amx := tensor.AMXBF16(); amx != "" {
			k += "; " + amx
		}
	}
	line := fmt.Sprintf("in %s (%s); %s%s", where, why, k, widenedClause(w, limitWhy))
	switch {
	case !private || w.Bytes() == 0:
	case released >= 0:
		line += fmt.Sprintf("; the private copy gave back %s of the widened matrices' original bytes", humanBytes(uint64(released)))
	default:
		line += "; the private copy gives back the widened matrices' original bytes at load"
	}
	return line
}

// widenedClause says, for each type of a file's matrices that the model
// loader widens to a type with faster kernels (tensor.Widen), what w does
// with them: the copies' memory besides the file's, and the matrices left
// in their own bytes beyond the limit (limitWhy says whose) or because they
// are as fast there; or is empty.
func widenedClause(w model.Widening, limitWhy string) string {
	var parts []string
	for _, wt := range w.Types {
		t := wt.Type
		to, _ := tensor.WidenedType(t)
		how := "widened to " + to.String()
		if tensor.WidenedRowBytes(t, 256) > to.RowBytes(256) { // Q4_1, Q5_1
			how += " with its blocks' minima beside"
		}
		if tensor.Packable(to) {
			how += " and packed"
		}
		switch {
		case wt.Own && tensor.Packable(t) && !tensor.StreamedPreferred(t, false): // own bytes only packed
			parts = append(parts, fmt.Sprintf("%v computed in its own bytes, packed in private memory (through a mapping it is widened): on this CPU at least as fast as widened, which would take %s",
				t, humanBytes(uint64(wt.StreamedWideBytes))))
		case wt.Own && tensor.Packable(t): // packed where the weights are private
			parts = append(parts, fmt.Sprintf("%v computed in its own bytes (packed in private memory; through a mapping streamed, %s): on this CPU at least as fast as widened, which would take %s",
				t, streamedHow(t, "its"), humanBytes(uint64(wt.StreamedWideBytes))))
		case wt.Own:
			parts = append(parts, fmt.Sprintf("%v computed in its own bytes, streamed (%s): on this CPU as fast as widened, which would take %s",
				t, streamedHow(t, "its"), humanBytes(uint64(wt.StreamedWideBytes))))
		case wt.Streamed == 0:
			parts = append(parts, fmt.Sprintf("%v %s in %s of memory of its own (the same products, faster kernels)", t, how, humanBytes(uint64(wt.WidenedBytes))))
		case wt.Widened == 0:
			parts = append(parts, fmt.Sprintf("%v computed in its own bytes, streamed (%s): widening it would take %s, more than the limit (%s)",
				t, streamedHow(t, "its"), humanBytes(uint64(wt.StreamedWideBytes)), limitWhy))
		default:
			parts = append(parts, fmt.Sprintf("%v: %d matrices %s in %s of memory of their own (the same products, faster kernels), %d (%s) computed in their own bytes, streamed (%s), widening them would take %s more than the limit (%s)",
				t, wt.Widened, how, humanBytes(uint64(wt.WidenedBytes)), wt.Streamed, humanBytes(uint64(wt.StreamedBytes)), streamedHow(t, "their"), humanBytes(uint64(wt.StreamedWideBytes)), limitWhy))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, ", ")
}

// streamedHow says how this CPU computes streamed matrices of type t, whose
// rows are named by the possessive its (one matrix) or their.
func streamedHow(t tensor.DType, its string) string {
	if tensor.StreamedDirect(t) {
		return "by a kernel that unpacks " + its + " blocks in registers"
	}
	return "slower: each product widens " + its + " rows again"
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
