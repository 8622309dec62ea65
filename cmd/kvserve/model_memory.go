package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tensor"
)

// modelMemoryFlag registers --model-memory, where a command keeps the
// model's weights.
func modelMemoryFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "model-memory", "auto", "where the weights live: mmap (a shared read-only mapping of the file), hugepages (a private copy in transparent huge pages, its weights packed for the CPU's kernels: faster decoding, the whole file in RAM), auto (hugepages when the kernel offers them and the file takes at most half of MemAvailable, else mmap)")
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
		avail, huge := memAvailable(), gguf.HugePagesAvailable()
		p := autoPlacement(st.Size(), avail, huge)
		return p, autoPlacementWhy(st.Size(), avail, huge), nil
	}
	p, err := gguf.ParsePlacement(setting)
	if err != nil {
		return 0, "", fmt.Errorf("--model-memory %q: want auto, mmap or hugepages", setting)
	}
	return p, "--model-memory " + setting, nil
}

// autoPlacementWhy says why autoPlacement chose what it did.
func autoPlacementWhy(size, avail int64, huge bool) string {
	switch {
	case !huge:
		return "auto: the kernel offers no transparent huge pages"
	case avail <= 0:
		return "auto: available memory unknown"
	case size > avail/2:
		return fmt.Sprintf("auto: the file (%s) takes more than half of the available memory (%s)", humanBytes(uint64(size)), humanBytes(uint64(avail)))
	}
	return fmt.Sprintf("auto: the file (%s) takes at most half of the available memory (%s)", humanBytes(uint64(size)), humanBytes(uint64(avail)))
}

// placementLine describes where a model's weights are and which kernels
// compute with them: placement p, chosen for why, and whether the weights
// did get a private copy, for a file whose matrices have the given types.
func placementLine(p gguf.Placement, why string, private bool, types []tensor.DType) string {
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
	return fmt.Sprintf("in %s (%s); %s", where, why, k)
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
