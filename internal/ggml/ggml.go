// Package ggml names GGML's tensor element types: their numeric ids (as GGUF
// files store them), names and block layouts. It is a leaf so that code which
// only reads or writes GGUF files does not link the compute kernels;
// tensor.DType is this Type.
package ggml

import "fmt"

// Type is a tensor element type, numbered by GGML's type ids as a GGUF file
// stores them.
type Type uint32

// The GGML type ids. Only some are computed with (see Supported); the rest are
// named so that files using them get a precise error and so their sizes can be
// validated.
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35

	// Q8_K16 is kvserve's own, never in a file: the type the IQ2 types
	// are widened to at load (tensor.Widen). Its id is out of GGML's range.
	Q8_K16 Type = 1 << 16
)

type typeInfo struct {
	name      string
	blockSize int // elements per block
	typeSize  int // bytes per block
}

// typeTable lists the layout of every GGML type whose size is known, so that a
// reader can validate tensor extents even for types it cannot compute with.
var typeTable = map[Type]typeInfo{
	F32:     {"F32", 1, 4},
	F16:     {"F16", 1, 2},
	Q4_0:    {"Q4_0", 32, 2 + 16},
	Q4_1:    {"Q4_1", 32, 2 + 2 + 16},
	Q5_0:    {"Q5_0", 32, 2 + 4 + 16},
	Q5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16},
	Q8_0:    {"Q8_0", 32, 2 + 32},
	Q8_1:    {"Q8_1", 32, 4 + 32},
	Q2_K:    {"Q2_K", 256, 256/16 + 256/4 + 2 + 2},
	Q3_K:    {"Q3_K", 256, 256/8 + 256/4 + 12 + 2},
	Q4_K:    {"Q4_K", 256, 2 + 2 + 12 + 256/2},
	Q5_K:    {"Q5_K", 256, 2 + 2 + 12 + 256/8 + 256/2},
	Q6_K:    {"Q6_K", 256, 256/2 + 256/4 + 256/16 + 2},
	Q8_K:    {"Q8_K", 256, 4 + 256 + 256/16*2},
	IQ2_XXS: {"IQ2_XXS", 256, 2 + 256/8*2},
	IQ2_XS:  {"IQ2_XS", 256, 2 + 256/8*2 + 256/32},
	IQ3_XXS: {"IQ3_XXS", 256, 2 + 256/4 + 256/8},
	IQ1_S:   {"IQ1_S", 256, 2 + 256/8 + 256/16},
	IQ4_NL:  {"IQ4_NL", 32, 2 + 16},
	IQ3_S:   {"IQ3_S", 256, 2 + 256/4 + 256/8 + 256/32 + 4},
	IQ2_S:   {"IQ2_S", 256, 2 + 256/4 + 256/16},
	IQ4_XS:  {"IQ4_XS", 256, 2 + 2 + 256/64 + 256/2},
	I8:      {"I8", 1, 1},
	I16:     {"I16", 1, 2},
	I32:     {"I32", 1, 4},
	I64:     {"I64", 1, 8},
	F64:     {"F64", 1, 8},
	IQ1_M:   {"IQ1_M", 256, 256/8 + 256/16 + 256/32},
	BF16:    {"BF16", 1, 2},
	TQ1_0:   {"TQ1_0", 256, 2 + 4*13},
	TQ2_0:   {"TQ2_0", 256, 2 + 64},
	Q8_K16:  {"Q8_K16", 256, 256 + 256/16 + 4},
}

// Internal reports whether the type is kvserve's own, which a GGUF file
// never holds.
func (t Type) Internal() bool { return t == Q8_K16 }

// Known reports whether the type's block layout is known.
func (t Type) Known() bool {
	_, ok := typeTable[t]
	return ok
}

// Supported reports whether kvserve's kernels (internal/tensor) can compute
// with weights of this type. The list lives here, beside the layouts, so that
// a GGUF reader can reject a file early without linking the kernels; a type
// gains a kernel in tensor and its entry here together.
func (t Type) Supported() bool {
	switch t {
	case F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
		IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, Q8_K16:
		return true
	}
	return false
}

// String returns GGML's name for the type, or "type(N)" for an unknown id.
func (t Type) String() string {
	if info, ok := typeTable[t]; ok {
		return info.name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements in one block of the type (1 for plain
// types). It is 0 for an unknown type.
func (t Type) BlockSize() int { return typeTable[t].blockSize }

// TypeSize is the number of bytes of one block of the type. It is 0 for an
// unknown type.
func (t Type) TypeSize() int { return typeTable[t].typeSize }

// RowBytes returns the byte size of n consecutive elements, which must be a
// multiple of the block size.
func (t Type) RowBytes(n int) int {
	info := typeTable[t]
	if info.blockSize == 0 {
		return 0
	}
	return n / info.blockSize * info.typeSize
}

// ParseType maps a type name such as "q8_0" or "F16" (any case) to its Type.
func ParseType(name string) (Type, error) {
	for t, info := range typeTable {
		if !t.Internal() && equalFold(info.name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("ggml: unknown type %q", name)
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		ca, cb := a[i], b[i]
		if 'A' <= ca && ca <= 'Z' {
			ca += 'a' - 'A'
		}
		if 'A' <= cb && cb <= 'Z' {
			cb += 'a' - 'A'
		}
		if ca != cb {
			return false
		}
	}
	return true
}
