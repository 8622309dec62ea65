package main

import (
	"path/filepath"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
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
