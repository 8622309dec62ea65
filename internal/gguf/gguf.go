// Package gguf reads and writes GGUF model files (versions 2 and 3).
//
// A File is parsed from a byte slice that normally is the whole file mapped
// into memory: tensor data is never copied, each Tensor's Data is a view of
// the mapping. Parsing trusts nothing in the file: every count, length,
// offset and dimension is checked against the bytes that are actually there
// before anything is allocated for it, so a truncated or hostile file yields
// an error naming the problem, never a panic or an unbounded allocation.
//
// The layout (little-endian throughout):
//
//	magic "GGUF" | version u32 | tensor count u64 | metadata count u64
//	metadata: key string | value type u32 | value
//	tensor infos: name string | n_dims u32 | dims u64×n_dims | type u32 | offset u64
//	padding to general.alignment (default 32)
//	tensor data, each tensor at data start + offset (aligned)
//
// A string is a u64 byte length followed by the bytes (no terminator).
package gguf

import (
	"fmt"
	"math"

	"github.com/kvserve/kvserve/internal/ggml"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// MaxDims is the largest number of dimensions a tensor may have.
const MaxDims = 4

// ValueType is the type tag of a metadata value.
type ValueType uint32

// The metadata value types.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32",
	"float32", "bool", "string", "array", "uint64", "int64", "float64"}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("valuetype(%d)", uint32(t))
}

// size returns the encoded size of a fixed-size value type, or 0.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// Value is one metadata value. Scalars hold their Go value of the matching
// type (uint8, int8, …, float64, bool, string). Arrays hold a typed slice
// ([]uint8 … []float64, []bool, []string) or, for arrays of arrays, []Value.
type Value struct {
	Type     ValueType
	ElemType ValueType // element type when Type is TypeArray
	V        any
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// Tensor describes one tensor of a file.
type Tensor struct {
	Name string
	Type ggml.Type
	// Dims are the dimensions with the fastest-varying first (GGML's ne0,
	// ne1, …): a weight matrix of R rows of C elements has Dims [C, R].
	Dims []uint64
	// Offset is the position of the data relative to the file's data section.
	Offset uint64
	// Data is the tensor's bytes, a view of the file (not a copy).
	Data []byte
}

// Elements returns the number of elements of the tensor.
func (t *Tensor) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Rows returns the number of rows: the product of all dimensions after the
// first.
func (t *Tensor) Rows() int {
	n := 1
	for i := 1; i < len(t.Dims); i++ {
		n *= int(t.Dims[i])
	}
	return n
}

// Cols returns the length of one row, the first dimension (0 for a tensor
// without dimensions).
func (t *Tensor) Cols() int {
	if len(t.Dims) == 0 {
		return 0
	}
	return int(t.Dims[0])
}

// Size returns the number of bytes of the tensor's data as its type and
// dimensions define it.
func (t *Tensor) Size() uint64 {
	return uint64(t.Type.RowBytes(t.Cols())) * uint64(t.Rows())
}

// Shape formats the dimensions like "[576 49152]".
func (t *Tensor) Shape() string { return fmt.Sprint(t.Dims) }

// AsFloat64 returns the value of any numeric scalar as a float64.
func (v Value) AsFloat64() (float64, bool) {
	switch x := v.V.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	if i, ok := v.AsInt64(); ok {
		return float64(i), true
	}
	return 0, false
}

// AsInt64 returns the value of any integer scalar that fits in an int64.
func (v Value) AsInt64() (int64, bool) {
	switch x := v.V.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// String renders a value for humans, abbreviating long arrays.
func (v Value) String() string {
	if v.Type != TypeArray {
		if s, ok := v.V.(string); ok {
			if len(s) > 80 {
				return fmt.Sprintf("%q… (%d bytes)", s[:80], len(s))
			}
			return fmt.Sprintf("%q", s)
		}
		return fmt.Sprint(v.V)
	}
	return fmt.Sprintf("[%s × %d]", v.ElemType, arrayLen(v.V))
}

func arrayLen(a any) int {
	switch x := a.(type) {
	case []uint8:
		return len(x)
	case []int8:
		return len(x)
	case []uint16:
		return len(x)
	case []int16:
		return len(x)
	case []uint32:
		return len(x)
	case []int32:
		return len(x)
	case []float32:
		return len(x)
	case []bool:
		return len(x)
	case []string:
		return len(x)
	case []uint64:
		return len(x)
	case []int64:
		return len(x)
	case []float64:
		return len(x)
	case []Value:
		return len(x)
	}
	return 0
}
