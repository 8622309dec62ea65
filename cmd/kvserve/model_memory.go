package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/kvserve/kvserve/internal/gguf"
)

// modelMemoryFlag registers --model-memory, where a command keeps the
// model's weights.
func modelMemoryFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "model-memory", "auto", "where the weights live: mmap (a shared read-only mapping of the file), hugepages (a private copy in transparent huge pages, its weights packed for the CPU's kernels: faster decoding, the whole file in RAM), auto (hugepages when the kernel offers them and the file takes at most half of MemAvailable, else mmap)")
}

// modelPlacement resolves a --model-memory setting for the model at path.
func modelPlacement(path, setting string) (gguf.Placement, error) {
	if setting == "auto" || setting == "" {
		st, err := os.Stat(path)
		if err != nil {
			return 0, fmt.Errorf("open %s: %w", path, err)
		}
		return autoPlacement(st.Size(), memAvailable(), gguf.HugePagesAvailable()), nil
	}
	p, err := gguf.ParsePlacement(setting)
	if err != nil {
		return 0, fmt.Errorf("--model-memory %q: want auto, mmap or hugepages", setting)
	}
	return p, nil
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
