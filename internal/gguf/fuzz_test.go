package gguf

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvserve/kvserve/internal/ggml"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the FuzzParse seed corpus in testdata/fuzz/FuzzParse")

// smallFile is a valid file small enough for the fuzzer to mutate quickly:
// a few entries of each kind of value and three small tensors.
func smallFile(t testing.TB, align uint64) []byte {
	t.Helper()
	w := &Writer{Alignment: align}
	w.Set("general.architecture", String("llama"))
	w.Set("llama.block_count", Uint32(2))
	w.Set("llama.rope.freq_base", Float32(10000))
	w.Set("tokenizer.ggml.add_bos_token", Bool(true))
	w.Set("tokenizer.ggml.tokens", Strings([]string{"<unk>", "a", "▁b"}))
	w.Set("tokenizer.ggml.scores", Float32Array([]float32{0, -1, -2}))
	w.Set("x.nested", Arrays([]Value{Int32Array([]int32{1}), Strings([]string{"z"})}))
	w.Set("x.i64", Int64(-5))
	for i, tt := range []testTensor{
		{"a", ggml.F32, []uint64{4}},
		{"b", ggml.F16, []uint64{8, 2}},
		{"c", ggml.Q8_0, []uint64{32}},
	} {
		size, _ := TensorSize(tt.typ, tt.dims)
		data := bytes.Repeat([]byte{byte(i + 1)}, int(size))
		if err := w.AddTensor(tt.name, tt.typ, tt.dims, data); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// seedInputs returns the named inputs of the seed corpus.
func seedInputs(t testing.TB) map[string][]byte {
	seeds := map[string][]byte{}
	small := smallFile(t, 0)
	seeds["valid-small"] = small
	seeds["valid-align64"] = smallFile(t, 64)
	seeds["valid-empty"] = header(0, 0).b
	seeds["valid-v2"] = (&raw{}).bytes([]byte(Magic)).u32(2).u64(0).u64(1).kvU32("a", 7).b
	f, err := Parse(small)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 20, 40, int(f.DataOffset) - 1, int(f.DataOffset) + 5, len(small) - 1} {
		seeds[fmt.Sprintf("truncated-%d", n)] = small[:n]
	}
	for _, i := range []int{5, 16, 24, 30, int(f.DataOffset) - 12, int(f.DataOffset) - 40} {
		c := bytes.Clone(small)
		c[i] ^= 0xff
		seeds[fmt.Sprintf("corrupted-%d", i)] = c
	}
	seeds["nested-deep"] = header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(1).
		u32(uint32(TypeArray)).u64(1).u32(uint32(TypeUint8)).u64(1).u8(0).b
	seeds["overlap"] = header(2, 0).tinfo("a", ggml.F32, 0, 16).tinfo("b", ggml.F32, 32, 8).withData(64)
	seeds["huge-dims"] = header(1, 0).tinfo("w", ggml.F32, 0, 1<<31-1, 1<<31-1, 2).withData(32)
	seeds["q4k"] = header(1, 0).tinfo("w", ggml.Q4_K, 0, 256).withData(144)
	return seeds
}

// TestFuzzSeedsUpToDate writes the seed corpus with -update-seeds and
// otherwise checks that it is committed.
func TestFuzzSeedsUpToDate(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	for name, data := range seedInputs(t) {
		path := filepath.Join(dir, name)
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data)
		if *updateSeeds {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := os.Stat(path); err != nil {
			t.Errorf("seed %s missing (run go test -run TestFuzzSeedsUpToDate -update-seeds): %v", name, err)
		}
	}
}

// FuzzParse checks, for any input, that Parse returns a File or an error
// wrapping ErrFormat, never panics, and allocates at most allocLimit (a small
// multiple of the input size); and that a parsed file written again by the
// Writer parses to the same content and rewrites to identical bytes.
func FuzzParse(f *testing.F) {
	for _, data := range seedInputs(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var file *File
		var err error
		alloc := allocated(func() { file, err = Parse(data) })
		if limit := allocLimit(len(data)); alloc > limit {
			t.Fatalf("parsing %d bytes allocated %d (limit %d); error %v", len(data), alloc, limit, err)
		}
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		checkConsistent(t, file, data)
		for i := range file.Tensors {
			if len(file.Tensors[i].Name) > MaxNameLen {
				return // valid GGUF, but the Writer keeps to llama.cpp's limit
			}
		}
		b1, err := rewrite(file)
		if err != nil {
			t.Fatalf("Writer refused a parsed file: %v", err)
		}
		f2, err := Parse(b1)
		if err != nil {
			t.Fatalf("rewritten file does not parse: %v", err)
		}
		if len(f2.KVs) < len(file.KVs) || len(f2.KVs) > len(file.KVs)+1 || len(f2.Tensors) != len(file.Tensors) {
			t.Fatalf("rewritten file has %d keys %d tensors, original %d %d", len(f2.KVs), len(f2.Tensors), len(file.KVs), len(file.Tensors))
		}
		for i := range file.Tensors {
			a, b := &file.Tensors[i], &f2.Tensors[i]
			if a.Name != b.Name || a.Type != b.Type || !bytes.Equal(a.Data, b.Data) {
				t.Fatalf("tensor %d differs after rewrite: %s/%s", i, a.Name, b.Name)
			}
		}
		b2, err := rewrite(f2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatal("rewriting is not idempotent")
		}
	})
}
