package gguf

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvserve/kvserve/internal/ggml"
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

// openPlaced opens path placed as p, closed when the test ends.
func openPlaced(t *testing.T, path string, p Placement) *File {
	t.Helper()
	f, err := OpenPlaced(path, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestRewrite: a private copy can be rewritten in place, the change seen
// through its tensors; a read-only mapping refuses without calling fn.
func TestRewrite(t *testing.T) {
	path := testshared.Path(t, "models", "tiny-f32.gguf")
	mapped := openPlaced(t, path, Mapped)
	if mapped.Private() {
		t.Fatal("a mapping reports a private copy")
	}
	if err := mapped.Rewrite(func() { t.Fatal("fn called on a read-only mapping") }); err == nil {
		t.Fatal("rewriting a mapping succeeded")
	}
	huge := openPlaced(t, path, HugePages)
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

// TestRelease: a private copy gives back the whole pages inside a
// released tensor, whose Data is then gone; its neighbours keep their
// bytes. A mapping gives back nothing and keeps its tensors.
func TestRelease(t *testing.T) {
	const bigN = 2 << 20 // float32s: 8 MiB
	w := &Writer{Alignment: DefaultAlignment}
	w.Set("general.architecture", String("test"))
	small := make([]byte, 4*16)
	for i := range small {
		small[i] = byte(i + 1)
	}
	big := make([]byte, 4*bigN)
	for i := range big {
		big[i] = byte(i)
	}
	for _, tc := range []struct {
		name string
		n    uint64
		data []byte
	}{{"a", 16, small}, {"big", bigN, big}, {"b", 16, small}} {
		if err := w.AddTensor(tc.name, ggml.F32, []uint64{tc.n}, tc.data); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "release.gguf")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	mapped := openPlaced(t, path, Mapped)
	if n := mapped.Release("big"); n != 0 || len(mapped.Tensors[1].Data) != len(big) {
		t.Fatalf("a mapping gave back %d bytes, kept %d", n, len(mapped.Tensors[1].Data))
	}
	huge := openPlaced(t, path, HugePages)
	if !huge.Private() {
		t.Skip("no private copy on this system (huge pages unavailable)")
	}
	n := huge.Release("big", "missing")
	if n < int64(len(big))-4096 || n > int64(len(big)) || n%4096 != 0 {
		t.Fatalf("gave back %d bytes of an 8 MiB tensor, want its whole pages", n)
	}
	if huge.Tensors[1].Data != nil {
		t.Fatal("a released tensor still has data")
	}
	for _, i := range []int{0, 2} {
		if !bytes.Equal(huge.Tensors[i].Data, small) {
			t.Fatalf("tensor %s lost its bytes", huge.Tensors[i].Name)
		}
	}
	if again := huge.Release("big"); again != 0 {
		t.Fatalf("released twice: %d bytes the second time", again)
	}
}
