package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/ggml"
	"github.com/kvserve/kvserve/internal/testshared"
)

// allValues returns one metadata entry of every value type, scalar and array,
// including arrays of arrays and the edge values of each type.
func allValues() []KV {
	return []KV{
		{"t.u8", Uint8(255)},
		{"t.i8", Int8(-128)},
		{"t.u16", Uint16(65535)},
		{"t.i16", Int16(-32768)},
		{"t.u32", Uint32(math.MaxUint32)},
		{"t.i32", Int32(math.MinInt32)},
		{"t.f32", Float32(-1.5e-7)},
		{"t.bool.true", Bool(true)},
		{"t.bool.false", Bool(false)},
		{"t.str", String("héllo\x00wörld")},
		{"t.str.empty", String("")},
		{"t.u64", Uint64(math.MaxUint64)},
		{"t.i64", Int64(math.MinInt64)},
		{"t.f64", Float64(math.Pi)},
		{"t.a.u8", Value{Type: TypeArray, ElemType: TypeUint8, V: []uint8{0, 1, 255}}},
		{"t.a.i8", Value{Type: TypeArray, ElemType: TypeInt8, V: []int8{-128, 0, 127}}},
		{"t.a.u16", Value{Type: TypeArray, ElemType: TypeUint16, V: []uint16{1, 65535}}},
		{"t.a.i16", Value{Type: TypeArray, ElemType: TypeInt16, V: []int16{-1, 32767}}},
		{"t.a.u32", Uint32Array([]uint32{7, math.MaxUint32})},
		{"t.a.i32", Int32Array([]int32{-7, math.MaxInt32})},
		{"t.a.f32", Float32Array([]float32{0.5, -2, float32(math.Inf(1))})},
		{"t.a.bool", Value{Type: TypeArray, ElemType: TypeBool, V: []bool{true, false, true}}},
		{"t.a.str", Strings([]string{"a", "", "▁the", "<|im_start|>"})},
		{"t.a.u64", Value{Type: TypeArray, ElemType: TypeUint64, V: []uint64{0, math.MaxUint64}}},
		{"t.a.i64", Value{Type: TypeArray, ElemType: TypeInt64, V: []int64{math.MinInt64, 3}}},
		{"t.a.f64", Value{Type: TypeArray, ElemType: TypeFloat64, V: []float64{1e300, -0.25}}},
		{"t.a.empty", Int32Array([]int32{})},
		{"t.a.nested", Arrays([]Value{
			Strings([]string{"x", "yz"}),
			Int32Array([]int32{1, 2, 3}),
			Uint32Array([]uint32{}),
		})},
	}
}

type testTensor struct {
	name string
	typ  ggml.Type
	dims []uint64
}

var testTensors = []testTensor{
	{"token_embd.weight", ggml.F32, []uint64{64, 10}},
	{"blk.0.attn_norm.weight", ggml.F32, []uint64{64}},
	{"blk.0.attn_q.weight", ggml.F16, []uint64{64, 64}},
	{"blk.0.ffn_up.weight", ggml.Q8_0, []uint64{64, 3}},
	{"blk.0.ffn_down.weight", ggml.Q4_K, []uint64{256, 2}},
	{"blk.0.four_d", ggml.BF16, []uint64{2, 3, 4, 5}},
	{"output.weight", ggml.Q6_K, []uint64{256, 1}},
}

// buildFile writes a file with allValues and testTensors, tensor data random
// from seed. Half of the tensors are streamed with AddTensorFunc.
func buildFile(t testing.TB, align uint64, seed uint64) ([]byte, map[string][]byte) {
	t.Helper()
	w := &Writer{Alignment: align}
	for _, kv := range allValues() {
		w.Set(kv.Key, kv.Value)
	}
	r := rand.New(rand.NewPCG(seed, 1))
	want := map[string][]byte{}
	for i, tt := range testTensors {
		size, err := TensorSize(tt.typ, tt.dims)
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		want[tt.name] = data
		if i%2 == 0 {
			err = w.AddTensor(tt.name, tt.typ, tt.dims, data)
		} else {
			err = w.AddTensorFunc(tt.name, tt.typ, tt.dims, func(out io.Writer) error {
				// Write in uneven pieces, as a quantizer producing rows would.
				for len(data) > 0 {
					n := min(len(data), 1+r.IntN(100))
					if _, err := out.Write(data[:n]); err != nil {
						return err
					}
					data = data[n:]
				}
				return nil
			})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	n, err := w.WriteTo(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo reported %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes(), want
}

func TestRoundTrip(t *testing.T) {
	for _, align := range []uint64{0, 1, 8, 32, 64, 4096} {
		t.Run(fmt.Sprint("align", align), func(t *testing.T) {
			data, want := buildFile(t, align, align+1)
			f, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			wantAlign := align
			if wantAlign == 0 {
				wantAlign = DefaultAlignment
			}
			if f.Alignment != wantAlign || f.Version != 3 {
				t.Errorf("alignment %d version %d, want %d 3", f.Alignment, f.Version, wantAlign)
			}
			if f.DataOffset%wantAlign != 0 {
				t.Errorf("data offset %d not aligned to %d", f.DataOffset, wantAlign)
			}
			for _, kv := range allValues() {
				got, ok := f.Get(kv.Key)
				if !ok {
					t.Errorf("key %q missing", kv.Key)
					continue
				}
				if !reflect.DeepEqual(got, kv.Value) {
					t.Errorf("key %q: got %#v, want %#v", kv.Key, got, kv.Value)
				}
			}
			wantKVs := len(allValues())
			if align != 0 && align != DefaultAlignment {
				wantKVs++
				if v, _ := f.Get(KeyAlignment); v.Type != TypeUint32 {
					t.Errorf("%s has type %s, want uint32", KeyAlignment, v.Type)
				}
			}
			if len(f.KVs) != wantKVs {
				t.Errorf("%d metadata entries, want %d", len(f.KVs), wantKVs)
			}
			if len(f.Tensors) != len(testTensors) {
				t.Fatalf("%d tensors, want %d", len(f.Tensors), len(testTensors))
			}
			for i, tt := range testTensors {
				got := &f.Tensors[i]
				if got.Name != tt.name || got.Type != tt.typ || !reflect.DeepEqual(got.Dims, tt.dims) {
					t.Errorf("tensor %d: %s %s %v, want %s %s %v", i, got.Name, got.Type, got.Dims, tt.name, tt.typ, tt.dims)
				}
				if !bytes.Equal(got.Data, want[tt.name]) {
					t.Errorf("tensor %s: data differs", tt.name)
				}
				if got.Offset%wantAlign != 0 {
					t.Errorf("tensor %s: offset %d not aligned", tt.name, got.Offset)
				}
				if byName, ok := f.Tensor(tt.name); !ok || byName != got {
					t.Errorf("Tensor(%q) does not find it", tt.name)
				}
			}
			if _, ok := f.Tensor("nope"); ok {
				t.Error("Tensor found a missing name")
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	data, _ := buildFile(t, 0, 1)
	f, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if s, err := f.String("t.str"); err != nil || s != "héllo\x00wörld" {
		t.Errorf("String = %q, %v", s, err)
	}
	if _, err := f.String("t.u8"); err == nil {
		t.Error("String of a uint8 succeeded")
	}
	for key, want := range map[string]int64{"t.u8": 255, "t.i8": -128, "t.u16": 65535, "t.i16": -32768,
		"t.u32": math.MaxUint32, "t.i32": math.MinInt32, "t.i64": math.MinInt64} {
		if got, err := f.Int(key); err != nil || got != want {
			t.Errorf("Int(%s) = %d, %v, want %d", key, got, err, want)
		}
	}
	if _, err := f.Int("t.u64"); err == nil {
		t.Error("Int of MaxUint64 succeeded")
	}
	if _, err := f.Int("t.f32"); err == nil {
		t.Error("Int of a float succeeded")
	}
	if x, err := f.Float("t.f64"); err != nil || x != math.Pi {
		t.Errorf("Float = %v, %v", x, err)
	}
	if x, err := f.Float("t.u16"); err != nil || x != 65535 {
		t.Errorf("Float of an int = %v, %v", x, err)
	}
	if b, err := f.Bool("t.bool.true"); err != nil || !b {
		t.Errorf("Bool = %v, %v", b, err)
	}
	if v, err := f.IntOr("missing", 42); err != nil || v != 42 {
		t.Errorf("IntOr default = %v, %v", v, err)
	}
	if _, err := f.IntOr("t.str", 42); err == nil {
		t.Error("IntOr of a string succeeded")
	}
	if v, err := f.FloatOr("missing", 0.5); err != nil || v != 0.5 {
		t.Errorf("FloatOr default = %v, %v", v, err)
	}
	if v, err := f.BoolOr("t.bool.false", true); err != nil || v {
		t.Errorf("BoolOr = %v, %v", v, err)
	}
	if v, err := f.StringOr("missing", "d"); err != nil || v != "d" {
		t.Errorf("StringOr = %v, %v", v, err)
	}
	if v, err := f.Strings("t.a.str"); err != nil || len(v) != 4 || v[2] != "▁the" {
		t.Errorf("Strings = %q, %v", v, err)
	}
	if _, err := f.Strings("t.a.i32"); err == nil {
		t.Error("Strings of an int array succeeded")
	}
	if v, err := f.Float32s("t.a.f32"); err != nil || len(v) != 3 || v[1] != -2 {
		t.Errorf("Float32s = %v, %v", v, err)
	}
	for _, key := range []string{"t.a.u8", "t.a.i8", "t.a.u16", "t.a.i16", "t.a.u32", "t.a.i32", "t.a.u64", "t.a.i64"} {
		v, err := f.Ints(key)
		if err != nil || len(v) < 2 {
			t.Errorf("Ints(%s) = %v, %v", key, v, err)
		}
	}
	if v, _ := f.Ints("t.a.i32"); v[0] != -7 {
		t.Errorf("Ints(t.a.i32)[0] = %d", v[0])
	}
	if _, err := f.Ints("t.a.str"); err == nil {
		t.Error("Ints of a string array succeeded")
	}
	if _, err := f.Ints("t.u8"); err == nil {
		t.Error("Ints of a scalar succeeded")
	}
	for _, key := range []string{"t.a.str", "t.str", "t.u8"} {
		v, _ := f.Get(key)
		if v.String() == "" {
			t.Errorf("Value.String of %s is empty", key)
		}
	}
}

func TestWriterErrors(t *testing.T) {
	ok := func(io.Writer) error { return nil }
	tests := []struct {
		name string
		add  func(w *Writer) error
		want string
	}{
		{"no dims", func(w *Writer) error { return w.AddTensor("a", ggml.F32, nil, nil) }, "0 dimensions"},
		{"five dims", func(w *Writer) error {
			return w.AddTensor("a", ggml.F32, []uint64{1, 1, 1, 1, 1}, make([]byte, 4))
		}, "5 dimensions"},
		{"zero dim", func(w *Writer) error { return w.AddTensor("a", ggml.F32, []uint64{4, 0}, nil) }, "dimension 1 is 0"},
		{"unknown type", func(w *Writer) error { return w.AddTensor("a", ggml.Type(99), []uint64{4}, nil) }, "unknown tensor type"},
		{"kvserve's own type", func(w *Writer) error { return w.AddTensor("a", ggml.Q8_K16, []uint64{256}, nil) }, "unknown tensor type"},
		{"block size", func(w *Writer) error { return w.AddTensor("a", ggml.Q8_0, []uint64{16}, nil) }, "block size"},
		{"short data", func(w *Writer) error { return w.AddTensor("a", ggml.F32, []uint64{4}, make([]byte, 15)) }, "15 bytes of data, want 16"},
		{"empty name", func(w *Writer) error { return w.AddTensor("", ggml.F32, []uint64{1}, make([]byte, 4)) }, "must be 1..63"},
		{"long name", func(w *Writer) error {
			return w.AddTensor(strings.Repeat("x", 64), ggml.F32, []uint64{1}, make([]byte, 4))
		}, "must be 1..63"},
		{"duplicate", func(w *Writer) error {
			if err := w.AddTensor("a", ggml.F32, []uint64{1}, make([]byte, 4)); err != nil {
				return err
			}
			return w.AddTensorFunc("a", ggml.F32, []uint64{1}, ok)
		}, "duplicate tensor name"},
		{"nil fill", func(w *Writer) error { return w.AddTensorFunc("a", ggml.F32, []uint64{1}, nil) }, "nil fill"},
		{"overflow", func(w *Writer) error {
			return w.AddTensorFunc("a", ggml.F32, []uint64{math.MaxInt32, math.MaxInt32, math.MaxInt32}, ok)
		}, "overflows"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.add(&Writer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

func TestWriteToErrors(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name  string
		build func(w *Writer)
		want  string
	}{
		{"fill short", func(w *Writer) {
			_ = w.AddTensorFunc("a", ggml.F32, []uint64{4}, func(out io.Writer) error {
				_, err := out.Write(make([]byte, 15))
				return err
			})
		}, "wrote 15 of the tensor's 16 bytes"},
		{"fill long", func(w *Writer) {
			_ = w.AddTensorFunc("a", ggml.F32, []uint64{4}, func(out io.Writer) error {
				_, err := out.Write(make([]byte, 17))
				return err
			})
		}, "past the end"},
		{"fill long ignored error", func(w *Writer) {
			_ = w.AddTensorFunc("a", ggml.F32, []uint64{4}, func(out io.Writer) error {
				_, _ = out.Write(make([]byte, 17))
				return nil
			})
		}, "more than the tensor's 16 bytes"},
		{"fill error", func(w *Writer) {
			_ = w.AddTensorFunc("a", ggml.F32, []uint64{4}, func(io.Writer) error { return boom })
		}, "boom"},
		{"value type mismatch", func(w *Writer) { w.Set("k", Value{Type: TypeUint32, V: int32(1)}) }, "does not match"},
		{"array type mismatch", func(w *Writer) {
			w.Set("k", Value{Type: TypeArray, ElemType: TypeUint32, V: []int32{1}})
		}, "does not match"},
		{"array of arrays holding scalars", func(w *Writer) {
			w.Set("k", Arrays([]Value{Uint32(1)}))
		}, "element 0 of an array of arrays"},
		{"nested too deep", func(w *Writer) {
			w.Set("k", Arrays([]Value{Arrays([]Value{Int32Array(nil)})}))
		}, "nested deeper"},
		{"unknown value type", func(w *Writer) { w.Set("k", Value{Type: 13, V: 1}) }, "cannot write value type"},
		{"bad alignment", func(w *Writer) { w.Alignment = 48 }, "not a power of two"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &Writer{}
			tc.build(w)
			_, err := w.WriteTo(io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// A failing destination is reported.
	w := &Writer{}
	_ = w.AddTensor("a", ggml.F32, []uint64{1 << 20}, make([]byte, 4<<20))
	if _, err := w.WriteTo(failWriter{}); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("WriteTo a failing writer: %v", err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestWriterDataSize checks that DataSize plus the header is the file size.
func TestWriterDataSize(t *testing.T) {
	for _, align := range []uint64{0, 64} {
		w := &Writer{Alignment: align}
		w.Set("general.architecture", String("llama"))
		for _, tt := range testTensors {
			size, _ := TensorSize(tt.typ, tt.dims)
			if err := w.AddTensor(tt.name, tt.typ, tt.dims, make([]byte, size)); err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		if _, err := w.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		f, err := Parse(buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if got := f.DataOffset + w.DataSize(); got != uint64(buf.Len()) {
			t.Errorf("align %d: data offset %d + DataSize %d = %d, file is %d bytes", align, f.DataOffset, w.DataSize(), got, buf.Len())
		}
	}
}

// A streamed tensor must not need the whole file in memory: write a 64 MiB
// tensor through AddTensorFunc to a discarding writer and check that the heap
// grew by far less than that.
func TestWriterStreamsLargeTensor(t *testing.T) {
	const rows, cols = 4096, 4096 // 64 MiB of F32
	w := &Writer{}
	row := make([]byte, cols*4)
	err := w.AddTensorFunc("big", ggml.F32, []uint64{cols, rows}, func(out io.Writer) error {
		for r := 0; r < rows; r++ {
			row[0] = byte(r)
			if _, err := out.Write(row); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	alloc := allocated(func() { n, err = w.WriteTo(io.Discard) })
	if err != nil {
		t.Fatal(err)
	}
	if n < rows*cols*4 {
		t.Fatalf("wrote %d bytes", n)
	}
	if alloc > 4<<20 {
		t.Errorf("writing a streamed 64 MiB tensor allocated %d bytes", alloc)
	}
}

// allocated returns the bytes the heap handed out while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// realFile describes a shared model and what its header must say.
type realFile struct {
	path    string
	arch    string
	types   map[ggml.Type]int
	kvCount int
}

func TestRealFiles(t *testing.T) {
	shared := testshared.Dir(t)
	llamaTiny := 21
	files := []realFile{
		{"models/aidreams260K-f32.gguf", "llama", map[ggml.Type]int{ggml.F32: 39}, 0},
		{"models/tiny-f32.gguf", "llama", map[ggml.Type]int{ggml.F32: llamaTiny}, 0},
		{"models/tiny-f16.gguf", "llama", map[ggml.Type]int{ggml.F16: 16, ggml.F32: 5}, 0},
		{"models/tiny-bf16.gguf", "llama", map[ggml.Type]int{ggml.BF16: 16, ggml.F32: 5}, 0},
		{"models/tiny-q8_0.gguf", "llama", map[ggml.Type]int{ggml.Q8_0: 16, ggml.F32: 5}, 0},
		{"models/tiny-q6_k.gguf", "llama", map[ggml.Type]int{ggml.Q6_K: 16, ggml.F32: 5}, 0},
		{"models/tiny-q4_k_m.gguf", "llama", map[ggml.Type]int{ggml.Q4_K: 13, ggml.Q6_K: 3, ggml.F32: 5}, 0},
		{"models/tiny-q4_0.gguf", "llama", map[ggml.Type]int{ggml.Q4_0: 15, ggml.Q6_K: 1, ggml.F32: 5}, 0},
		{"models/tiny-qwen2-f32.gguf", "qwen2", map[ggml.Type]int{ggml.F32: 26}, 0},
		{"models/tiny-qwen2-q8_0.gguf", "qwen2", map[ggml.Type]int{ggml.Q8_0: 15, ggml.F32: 11}, 0},
	}
	vocabs, err := filepath.Glob(filepath.Join(shared, "testdata", "vocab", "*.gguf"))
	if err != nil || len(vocabs) == 0 {
		t.Fatalf("no vocab files: %v", err)
	}
	for _, v := range vocabs {
		rel, _ := filepath.Rel(shared, v)
		files = append(files, realFile{path: rel, types: map[ggml.Type]int{}})
	}
	for _, rf := range files {
		t.Run(filepath.Base(rf.path), func(t *testing.T) {
			path := filepath.Join(shared, rf.path)
			f, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if rf.arch != "" {
				if arch, err := f.String("general.architecture"); err != nil || arch != rf.arch {
					t.Errorf("architecture %q, %v; want %q", arch, err, rf.arch)
				}
			}
			counts := map[ggml.Type]int{}
			var end uint64
			for i := range f.Tensors {
				tt := &f.Tensors[i]
				counts[tt.Type]++
				if uint64(len(tt.Data)) != tt.Size() {
					t.Errorf("%s: %d bytes of data, size %d", tt.Name, len(tt.Data), tt.Size())
				}
				end = max(end, f.DataOffset+tt.Offset+tt.Size())
			}
			if !reflect.DeepEqual(counts, rf.types) {
				t.Errorf("tensor types %v, want %v", counts, rf.types)
			}
			if len(f.Tensors) > 0 && alignUp(end, f.Alignment) != uint64(st.Size()) {
				t.Errorf("tensor data ends at %d (aligned %d), file is %d bytes", end, alignUp(end, f.Alignment), st.Size())
			}
			tokens, err := f.Strings("tokenizer.ggml.tokens")
			if err != nil || len(tokens) == 0 {
				t.Errorf("no vocabulary: %v", err)
			}
			if err := f.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if err := f.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

// TestRewriteRealFiles feeds every shared file through the Writer (same
// metadata, tensors in file order) and expects the original bytes back: the
// Writer lays files out exactly as llama.cpp's gguf writer and llama-quantize
// do.
func TestRewriteRealFiles(t *testing.T) {
	shared := testshared.Dir(t)
	paths, _ := filepath.Glob(filepath.Join(shared, "models", "*.gguf"))
	vocab, _ := filepath.Glob(filepath.Join(shared, "testdata", "vocab", "*.gguf"))
	paths = append(paths, vocab...)
	if len(paths) < 10 {
		t.Fatalf("only %d shared GGUF files", len(paths))
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			orig, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(orig)
			if err != nil {
				t.Fatal(err)
			}
			got, err := rewrite(f)
			if err != nil {
				t.Fatal(err)
			}
			if f.Version != 3 {
				// The Writer writes version 3; the rest must match.
				binaryPutU32(got[4:], f.Version)
			}
			if !bytes.Equal(got, orig) {
				i := 0
				for i < len(got) && i < len(orig) && got[i] == orig[i] {
					i++
				}
				t.Errorf("rewritten file differs from the original at byte %d (lengths %d, %d)", i, len(got), len(orig))
			}
		})
	}
}

func binaryPutU32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

// rewrite writes f again with a Writer.
func rewrite(f *File) ([]byte, error) {
	w := &Writer{Alignment: f.Alignment}
	for _, kv := range f.KVs {
		w.Set(kv.Key, kv.Value)
	}
	for i := range f.Tensors {
		tt := &f.Tensors[i]
		if err := w.AddTensor(tt.Name, tt.Type, tt.Dims, tt.Data); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if _, err := w.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.gguf")); err == nil || errors.Is(err, ErrFormat) {
		t.Errorf("Open of a missing file: %v", err)
	}
	empty := filepath.Join(dir, "empty.gguf")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(empty); !errors.Is(err, ErrFormat) {
		t.Errorf("Open of an empty file: %v", err)
	}
	bad := filepath.Join(dir, "bad.gguf")
	if err := os.WriteFile(bad, []byte("GGUF\x09\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(bad); !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "version 9") {
		t.Errorf("Open of a version-9 file: %v", err)
	}
	good := filepath.Join(dir, "good.gguf")
	data, _ := buildFile(t, 0, 3)
	if err := os.WriteFile(good, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(good)
	if err != nil {
		t.Fatal(err)
	}
	if tt, ok := f.Tensor("output.weight"); !ok || len(tt.Data) != int(tt.Size()) {
		t.Error("output.weight missing from the opened file")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestTensorHelpers(t *testing.T) {
	tt := Tensor{Type: ggml.Q8_0, Dims: []uint64{64, 3, 2}}
	if tt.Elements() != 384 || tt.Rows() != 6 || tt.Cols() != 64 || tt.Size() != 6*2*34 || tt.Shape() != "[64 3 2]" {
		t.Errorf("helpers: elements %d rows %d cols %d size %d shape %s", tt.Elements(), tt.Rows(), tt.Cols(), tt.Size(), tt.Shape())
	}
	var empty Tensor
	if empty.Rows() != 1 || empty.Cols() != 0 || empty.Size() != 0 {
		t.Error("helpers of a tensor without dims")
	}
}
