package gguf

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/kvserve/kvserve/internal/testshared"
)

func TestParsePlacement(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Placement
		ok   bool
	}{{"mmap", Mapped, true}, {"hugepages", HugePages, true}, {"", 0, false}, {"huge", 0, false}, {"MMAP", 0, false}} {
		got, err := ParsePlacement(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParsePlacement(%q) = %v, %v", tc.in, got, err)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
}

// TestOpenPlacedSameBytes opens a real model both ways and checks that the
// metadata and every tensor's bytes agree, and that both close cleanly.
func TestOpenPlacedSameBytes(t *testing.T) {
	path := testshared.Path(t, "models", "tiny-f32.gguf")
	mapped, err := OpenPlaced(path, Mapped)
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	huge, err := OpenPlaced(path, HugePages)
	if err != nil {
		t.Fatal(err)
	}
	if len(huge.Tensors) != len(mapped.Tensors) || len(huge.Tensors) == 0 {
		t.Fatalf("%d tensors placed in huge pages, %d mapped", len(huge.Tensors), len(mapped.Tensors))
	}
	for i, tm := range mapped.Tensors {
		th := huge.Tensors[i]
		if th.Name != tm.Name || !bytes.Equal(th.Data, tm.Data) {
			t.Fatalf("tensor %d (%s / %s) differs between placements", i, th.Name, tm.Name)
		}
	}
	if err := huge.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenPlaced(filepath.Join(t.TempDir(), "missing.gguf"), HugePages); err == nil {
		t.Fatal("opening a missing file succeeded")
	}
}

// TestRewrite: a private copy can be rewritten in place, the change seen
// through its tensors; a read-only mapping refuses without calling fn.
func TestRewrite(t *testing.T) {
	path := testshared.Path(t, "models", "tiny-f32.gguf")
	mapped, err := OpenPlaced(path, Mapped)
	if err != nil {
		t.Fatal(err)
	}
	defer mapped.Close()
	if mapped.Private() {
		t.Fatal("a mapping reports a private copy")
	}
	if err := mapped.Rewrite(func() { t.Fatal("fn called on a read-only mapping") }); err == nil {
		t.Fatal("rewriting a mapping succeeded")
	}
	huge, err := OpenPlaced(path, HugePages)
	if err != nil {
		t.Fatal(err)
	}
	defer huge.Close()
	if !huge.Private() {
		t.Skip("no private copy on this system (huge pages unavailable)")
	}
	d := huge.Tensors[0].Data
	want := d[0] ^ 0xff
	if err := huge.Rewrite(func() { d[0] = want }); err != nil {
		t.Fatal(err)
	}
	if huge.Tensors[0].Data[0] != want {
		t.Fatal("the rewrite is not visible")
	}
}
