package model

import (
	"fmt"

	"github.com/kvserve/kvserve/internal/gguf"
)

// File is a model opened from a GGUF file: the parsed file (metadata, the
// tokenizer's source) and the model whose weights view it. Close unmaps the
// file; the model must not be used afterwards.
type File struct {
	GGUF  *gguf.File
	Model *Model

	pageSum byte // result of prefaulting, kept so the reads are not elided
}

// Progress is told how many of the weight bytes have been paged in.
type Progress func(done, total int64)

// Open loads the model at path, its weights placed in memory as placement
// says (gguf.Mapped: a view of the file's mapping; gguf.HugePages: a private
// copy in transparent huge pages, faster to stream through). When progress
// is not nil, Open also pages the weights in before returning, reporting as
// it goes, so that the first request does not pay for reading the file from
// disk. Widening has no limit (Load).
func Open(path string, placement gguf.Placement, progress Progress) (*File, error) {
	return OpenWith(path, placement, progress, Options{WidenLimit: NoWidenLimit})
}

// OpenWith is Open with Load's options (LoadWith).
func OpenWith(path string, placement gguf.Placement, progress Progress, o Options) (*File, error) {
	f, err := gguf.OpenPlaced(path, placement)
	if err != nil {
		return nil, err
	}
	m, err := LoadWith(f, o)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	mf := &File{GGUF: f, Model: m}
	if progress != nil {
		mf.pageSum = prefault(f, progress)
	}
	return mf, nil
}

// Close releases the weights' memory.
func (f *File) Close() error { return f.GGUF.Close() }

// prefault reads one byte of every page of the tensor data (what is left
// of it: a private copy gives back its widened matrices', gguf.File.Release).
func prefault(f *gguf.File, progress Progress) byte {
	const page = 4096
	const reportEvery = 64 << 20
	var total int64
	for _, t := range f.Tensors {
		total += int64(len(t.Data))
	}
	var done, lastReport int64
	var sink byte
	for _, t := range f.Tensors {
		for i := 0; i < len(t.Data); i += page {
			sink ^= t.Data[i]
		}
		done += int64(len(t.Data))
		if done-lastReport >= reportEvery || done == total {
			progress(done, total)
			lastReport = done
		}
	}
	return sink
}
