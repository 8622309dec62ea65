package gguf

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/ggml"
)

// raw builds GGUF bytes by hand, so tests can write what the Writer refuses to.
type raw struct{ b []byte }

func (r *raw) u8(v uint8) *raw   { r.b = append(r.b, v); return r }
func (r *raw) u16(v uint16) *raw { r.b = binary.LittleEndian.AppendUint16(r.b, v); return r }
func (r *raw) u32(v uint32) *raw { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *raw) u64(v uint64) *raw { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }
func (r *raw) str(s string) *raw { return r.u64(uint64(len(s))).bytes([]byte(s)) }
func (r *raw) bytes(b []byte) *raw {
	r.b = append(r.b, b...)
	return r
}
func (r *raw) pad(align int) *raw {
	for len(r.b)%align != 0 {
		r.b = append(r.b, 0)
	}
	return r
}

// header starts a version-3 file with the given counts.
func header(nTensors, nKV uint64) *raw {
	return (&raw{}).bytes([]byte(Magic)).u32(3).u64(nTensors).u64(nKV)
}

// kvU32 appends a uint32 metadata entry.
func (r *raw) kvU32(key string, v uint32) *raw { return r.str(key).u32(uint32(TypeUint32)).u32(v) }

// tinfo appends a tensor info.
func (r *raw) tinfo(name string, typ ggml.Type, offset uint64, dims ...uint64) *raw {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(offset)
}

// withData pads to 32 and appends n zero bytes of tensor data.
func (r *raw) withData(n int) []byte {
	r.pad(DefaultAlignment)
	return append(r.b, make([]byte, n)...)
}

func TestParseMalformed(t *testing.T) {
	big := uint64(1) << 62
	tests := []struct {
		name string
		data []byte
		want string // a piece of the error message naming the problem
	}{
		{"empty", nil, "reading magic"},
		{"short magic", []byte("GG"), "reading magic"},
		{"wrong magic", []byte("GGMLxxxxxxxxxxxxxxxxxxxx"), "wrong magic"},
		{"version 1", (&raw{}).bytes([]byte(Magic)).u32(1).u64(0).u64(0).b, "unsupported GGUF version 1"},
		{"version 4", (&raw{}).bytes([]byte(Magic)).u32(4).u64(0).u64(0).b, "unsupported GGUF version 4"},
		{"truncated version", []byte("GGUF\x03\x00"), "reading version"},
		{"truncated tensor count", (&raw{}).bytes([]byte(Magic)).u32(3).u32(0).b, "reading tensor count"},
		{"truncated metadata count", (&raw{}).bytes([]byte(Magic)).u32(3).u64(0).u32(0).b, "reading metadata count"},
		{"absurd metadata count", header(0, big).b, "metadata count"},
		{"metadata count one too many", header(0, 2).kvU32("a", 1).b, "metadata count 2 cannot fit"},
		{"second key past end", header(0, 2).kvU32("a", 1).u64(50).bytes([]byte("abcde")).b, "reading metadata key"},
		{"absurd tensor count", header(big, 0).b, "tensor count"},
		{"tensor count past limit", header(maxTensorCount+1, 0).bytes(make([]byte, 64<<20)).b, "tensor count"},
		{"huge key length", header(0, 1).u64(math.MaxUint64).u64(0).b, "metadata key"},
		{"key past end", header(0, 1).u64(100).bytes([]byte("abcdefgh")).b, "metadata key"},
		{"empty key", header(0, 1).str("").u32(uint32(TypeUint16)).u16(0).b, "key 0 is empty"},
		{"non-UTF-8 key", header(0, 1).str("a\xffb").u32(uint32(TypeUint8)).u8(0).b, "not UTF-8"},
		{"duplicate key", header(0, 2).kvU32("a", 1).kvU32("a", 2).b, `duplicate metadata key "a"`},
		{"unknown value type", header(0, 1).str("k").u32(13).u64(0).b, `"k" has unknown value type 13`},
		{"truncated value type", header(0, 1).str("kkkkkk").u8(4).b, `value type of "kkkkkk"`},
		{"truncated u32 value", header(0, 1).str("k").u32(uint32(TypeUint32)).u8(1).b, `value of "k"`},
		{"truncated u64 value", header(0, 1).str("k").u32(uint32(TypeUint64)).u32(1).b, `value of "k"`},
		{"huge string value", header(0, 1).str("k").u32(uint32(TypeString)).u64(math.MaxUint64).b, `string value of "k"`},
		{"string past end", header(0, 1).str("k").u32(uint32(TypeString)).u64(10).bytes([]byte("abc")).b, `string value of "k"`},
		{"bool 2", header(0, 1).str("k").u32(uint32(TypeBool)).u8(2).b, "neither 0 nor 1"},
		{"bool array element 2", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeBool)).u64(2).u8(1).u8(2).b,
			"bool element 1 is 2"},
		{"huge array length", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint8)).u64(1 << 40).b, "cannot fit"},
		{"huge u64 array", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint64)).u64(3).bytes(make([]byte, 23)).b, "cannot fit"},
		{"huge string array", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(big).b, "cannot fit"},
		{"string array element past end", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(2).
			str("ok").u64(1000).b, "element 1 of 2"},
		{"array of unknown type", header(0, 1).str("k").u32(uint32(TypeArray)).u32(42).u64(1).u64(0).b, "unknown element type 42"},
		{"truncated array header", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeUint8)).u32(0).b, "array length"},
		{"arrays nested too deep", header(0, 1).str("k").u32(uint32(TypeArray)).
			u32(uint32(TypeArray)).u64(1).
			u32(uint32(TypeArray)).u64(1).
			u32(uint32(TypeUint8)).u64(1).u8(0).b, "nested deeper than 2"},
		{"huge array of arrays", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(big).b, "cannot fit"},
		{"alignment 0", header(0, 1).kvU32(KeyAlignment, 0).b, "general.alignment 0"},
		{"alignment 48", header(0, 1).kvU32(KeyAlignment, 48).b, "general.alignment 48"},
		{"alignment 2^21", header(0, 1).kvU32(KeyAlignment, 1<<21).b, "not a power of two up to"},
		{"alignment string", header(0, 1).str(KeyAlignment).u32(uint32(TypeString)).str("32").b, "general.alignment"},
		{"truncated tensor name", header(1, 0).u64(100).bytes(make([]byte, 40)).b, "reading tensor name"},
		{"empty tensor name", header(1, 0).tinfo("", ggml.F32, 0, 8).withData(32), "tensor 0 name is empty"},
		{"non-UTF-8 tensor name", header(1, 0).tinfo("w\xc3", ggml.F32, 0, 8).withData(32), "not UTF-8"},
		{"0 dims", header(1, 0).tinfo("w", ggml.F32, 0).bytes(make([]byte, 64)).b, `"w" has 0 dimensions`},
		{"5 dims", header(1, 0).tinfo("w", ggml.F32, 0, 1, 1, 1, 1, 1).withData(32), `"w" has 5 dimensions`},
		{"truncated dims", header(1, 0).str("wwwww").u32(3).u64(4).u64(4).b, `dimensions of "wwwww"`},
		{"zero dim", header(1, 0).tinfo("w", ggml.F32, 0, 8, 0).withData(32), "dimension 1 is 0"},
		{"huge dim", header(1, 0).tinfo("w", ggml.F32, 0, 1<<40).withData(32), "dimension 0 is 1099511627776"},
		{"element count overflow", header(1, 0).tinfo("w", ggml.F32, 0, math.MaxInt32, math.MaxInt32, math.MaxInt32).withData(32),
			"element count overflows"},
		{"byte size overflow", header(1, 0).tinfo("w", ggml.F32, 0, math.MaxInt32, math.MaxInt32, 2).withData(32),
			"byte size overflows"},
		{"unknown type id 99", header(1, 0).tinfo("w", ggml.Type(99), 0, 8).withData(32), "unknown type id 99"},
		{"removed type id 31", header(1, 0).tinfo("w", ggml.Type(31), 0, 32).withData(32), "unknown type id 31"},
		{"kvserve's own type id", header(1, 0).tinfo("w", ggml.Q8_K16, 0, 256).withData(276), "unknown type id 65536"},
		{"row not a block multiple", header(1, 0).tinfo("w", ggml.Q8_0, 0, 33).withData(64), "row length 33 is not a multiple of the Q8_0 block size 32"},
		{"k-quant row of 128", header(1, 0).tinfo("w", ggml.Q4_K, 0, 128, 2).withData(512), "block size 256"},
		{"truncated type", header(1, 0).str("wwwwwwwwwwww").u32(1).u64(8).u8(0).b, `type of "wwwwwwwwwwww"`},
		{"truncated offset", header(1, 0).str("wwwwwwwwwwww").u32(1).u64(8).u32(0).u32(0).b, `offset of "wwwwwwwwwwww"`},
		{"misaligned offset", header(1, 0).tinfo("w", ggml.F32, 4, 8).withData(64), `"w" offset 4 is not aligned to 32`},
		{"misaligned with alignment 64", header(1, 1).kvU32(KeyAlignment, 64).tinfo("w", ggml.F32, 32, 8).withData(128),
			"not aligned to 64"},
		{"data past EOF", header(1, 0).tinfo("w", ggml.F32, 0, 16).withData(63), "extends past the end"},
		{"offset past EOF", header(1, 0).tinfo("w", ggml.F32, 1<<40, 8).withData(32), "extends past the end"},
		{"offset near max", header(1, 0).tinfo("w", ggml.F32, math.MaxUint64-31, 8).withData(32), "extends past the end"},
		{"data section past EOF", header(1, 0).tinfo("w", ggml.F32, 0, 1).b, "data section starts at"},
		{"duplicate tensor name", header(2, 0).tinfo("w", ggml.F32, 0, 8).tinfo("w", ggml.F32, 32, 8).withData(64),
			`duplicate tensor name "w"`},
		{"overlapping tensors", header(2, 0).tinfo("a", ggml.F32, 0, 16).tinfo("b", ggml.F32, 32, 8).withData(64),
			`"a" (offset 0, 64 bytes) and "b" (offset 32) overlap`},
		{"aliased tensors", header(2, 0).tinfo("a", ggml.F32, 0, 8).tinfo("b", ggml.F32, 0, 8).withData(64), "overlap"},
		{"tensor info after bad count", header(2, 0).tinfo("a", ggml.F32, 0, 8).withData(32), "tensor 1 name is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f *File
			var err error
			alloc := allocated(func() { f, err = Parse(tc.data) })
			if err == nil {
				t.Fatalf("parsed without error: %d tensors, %d keys", len(f.Tensors), len(f.KVs))
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "gguf: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			if limit := allocLimit(len(tc.data)); alloc > limit {
				t.Errorf("parsing %d bytes allocated %d bytes (limit %d)", len(tc.data), alloc, limit)
			}
		})
	}
}

// allocLimit is the most memory Parse may allocate for an input of n bytes.
// Every count in the file is bounded by the bytes left, and each entry costs
// a small multiple of its encoded size in Go structures (see Parse).
func allocLimit(n int) uint64 { return 16*uint64(n) + 64<<10 }

// TestParseValidEdgeCases parses unusual but valid files.
func TestParseValidEdgeCases(t *testing.T) {
	tests := []struct {
		name  string
		data  []byte
		check func(t *testing.T, f *File)
	}{
		{"no tensors, no metadata", header(0, 0).b, func(t *testing.T, f *File) {
			if len(f.KVs) != 0 || len(f.Tensors) != 0 {
				t.Error("not empty")
			}
		}},
		{"version 2", (&raw{}).bytes([]byte(Magic)).u32(2).u64(0).u64(1).kvU32("a", 7).b, func(t *testing.T, f *File) {
			if f.Version != 2 {
				t.Errorf("version %d", f.Version)
			}
		}},
		{"uint64 alignment", header(1, 1).str(KeyAlignment).u32(uint32(TypeUint64)).u64(64).
			tinfo("w", ggml.F32, 0, 8).pad(64).bytes(make([]byte, 32)).b, func(t *testing.T, f *File) {
			if f.Alignment != 64 || f.DataOffset%64 != 0 {
				t.Errorf("alignment %d data offset %d", f.Alignment, f.DataOffset)
			}
		}},
		{"tensors out of order", header(2, 0).tinfo("late", ggml.F32, 32, 8).tinfo("early", ggml.F32, 0, 8).withData(64),
			func(t *testing.T, f *File) {
				if f.Tensors[0].Name != "late" || f.Tensors[1].Offset != 0 {
					t.Error("order not kept")
				}
			}},
		{"last tensor without padding", header(1, 0).tinfo("w", ggml.F32, 0, 3).withData(12), func(t *testing.T, f *File) {
			if len(f.Tensors[0].Data) != 12 {
				t.Error("wrong size")
			}
		}},
		{"4-D tensor", header(1, 0).tinfo("w", ggml.F16, 0, 2, 3, 4, 5).withData(240), func(t *testing.T, f *File) {
			if f.Tensors[0].Elements() != 120 {
				t.Error("wrong element count")
			}
		}},
		{"array of empty arrays", header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(2).
			u32(uint32(TypeInt32)).u64(0).u32(uint32(TypeString)).u64(0).b, func(t *testing.T, f *File) {
			v, _ := f.Get("k")
			if a, ok := v.V.([]Value); !ok || len(a) != 2 {
				t.Errorf("got %#v", v)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, f)
		})
	}
}

// TestParseTruncated cuts a valid file at every byte: each prefix must fail
// with ErrFormat, except prefixes that still hold all tensor data (only the
// last tensor's trailing padding is missing).
func TestParseTruncated(t *testing.T) {
	data, _ := buildFile(t, 0, 7)
	full, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var end uint64
	for i := range full.Tensors {
		end = max(end, full.DataOffset+full.Tensors[i].Offset+full.Tensors[i].Size())
	}
	for n := 0; n < len(data); n++ {
		f, err := Parse(data[:n])
		if uint64(n) >= end {
			if err != nil {
				t.Errorf("prefix of %d bytes (all data present): %v", n, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("prefix of %d bytes (of %d) parsed: %d tensors", n, len(data), len(f.Tensors))
		}
		if !errors.Is(err, ErrFormat) {
			t.Fatalf("prefix of %d bytes: error %v does not wrap ErrFormat", n, err)
		}
	}
}

// TestParseCorrupted flips bytes of a valid file one at a time: the parser
// may accept the result or reject it, but must not panic, and what it
// accepts must be self-consistent.
func TestParseCorrupted(t *testing.T) {
	data, _ := buildFile(t, 0, 11)
	f0, _ := Parse(data)
	limit := int(f0.DataOffset) // corrupt the header, where the parser looks
	buf := make([]byte, len(data))
	for i := 0; i < limit; i++ {
		for _, x := range []byte{0xff, 0x80, 0x01} {
			copy(buf, data)
			buf[i] ^= x
			f, err := Parse(buf)
			if err != nil {
				if !errors.Is(err, ErrFormat) {
					t.Fatalf("byte %d ^ %#x: error %v does not wrap ErrFormat", i, x, err)
				}
				continue
			}
			checkConsistent(t, f, buf)
		}
	}
}

// checkConsistent checks the invariants of a successfully parsed file.
func checkConsistent(t testing.TB, f *File, data []byte) {
	t.Helper()
	if f.DataOffset%f.Alignment != 0 {
		t.Fatalf("data offset %d not aligned to %d", f.DataOffset, f.Alignment)
	}
	for i := range f.Tensors {
		tt := &f.Tensors[i]
		if uint64(len(tt.Data)) != tt.Size() {
			t.Fatalf("tensor %q: %d bytes of data, size %d", tt.Name, len(tt.Data), tt.Size())
		}
		if start := f.DataOffset + tt.Offset; start+tt.Size() > uint64(len(data)) {
			t.Fatalf("tensor %q extends past the input", tt.Name)
		}
		if got, ok := f.Tensor(tt.Name); !ok || got != tt {
			t.Fatalf("tensor %q not found by name", tt.Name)
		}
	}
	for i, kv := range f.KVs {
		if v, ok := f.Get(kv.Key); !ok || v.Type != f.KVs[i].Value.Type {
			t.Fatalf("key %q not found", kv.Key)
		}
	}
}

// TestParseAllocBound parses the densest valid files (the smallest possible
// entries, many of them) and checks that memory stays within allocLimit.
func TestParseAllocBound(t *testing.T) {
	const n = 20000
	key := func(i int) string { return strconv.FormatInt(int64(i), 36) }
	kvs := header(0, n)
	for i := range n {
		kvs.str(key(i)).u32(uint32(TypeUint8)).u8(1)
	}
	tensors := header(n, 0)
	for i := range n {
		tensors.tinfo(key(i), ggml.F32, uint64(i)*32, 1)
	}
	tensorData := tensors.withData(n * 32)
	emptyArrays := header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeArray)).u64(n)
	for range n {
		emptyArrays.u32(uint32(TypeInt8)).u64(0)
	}
	emptyStrings := header(0, 1).str("k").u32(uint32(TypeArray)).u32(uint32(TypeString)).u64(n).bytes(make([]byte, 8*n))
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"minimal metadata entries", kvs.b},
		{"minimal tensor infos", tensorData},
		{"empty nested arrays", emptyArrays.b},
		{"empty strings", emptyStrings.b},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			alloc := allocated(func() { _, err = Parse(tc.data) })
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d bytes in, %d bytes allocated (%.1f×)", len(tc.data), alloc, float64(alloc)/float64(len(tc.data)))
			if limit := allocLimit(len(tc.data)); alloc > limit {
				t.Errorf("allocated %d bytes for %d input bytes (limit %d)", alloc, len(tc.data), limit)
			}
		})
	}
}
