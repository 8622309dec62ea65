package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/kvserve/kvserve/internal/ggml"
)

// Writer builds a GGUF v3 file: metadata in the order added, then tensors in
// the order added, each aligned. It is used for synthetic models and tests.
//
// Tensor data is either held in memory (AddTensor) or produced while the file
// is written (AddTensorFunc), so a model larger than RAM can be streamed to
// disk one tensor at a time.
type Writer struct {
	Alignment uint64 // 0 means DefaultAlignment
	kvs       []KV
	tensors   []writerTensor
	names     map[string]bool
}

type writerTensor struct {
	name string
	typ  ggml.Type
	dims []uint64
	size uint64
	data []byte
	fill func(io.Writer) error
}

// MaxNameLen is the longest tensor name llama.cpp accepts (GGML_MAX_NAME is
// 64 including the terminating NUL); the Writer refuses longer names so that
// every file it writes loads there.
const MaxNameLen = 63

// Value constructors with the exact GGUF value types, so files match what
// other tools write (u32 and i32 are different to some readers).

// Uint8 returns a uint8 value.
func Uint8(v uint8) Value { return Value{Type: TypeUint8, V: v} }

// Int8 returns an int8 value.
func Int8(v int8) Value { return Value{Type: TypeInt8, V: v} }

// Uint16 returns a uint16 value.
func Uint16(v uint16) Value { return Value{Type: TypeUint16, V: v} }

// Int16 returns an int16 value.
func Int16(v int16) Value { return Value{Type: TypeInt16, V: v} }

// Uint32 returns a uint32 value.
func Uint32(v uint32) Value { return Value{Type: TypeUint32, V: v} }

// Int32 returns an int32 value.
func Int32(v int32) Value { return Value{Type: TypeInt32, V: v} }

// Uint64 returns a uint64 value.
func Uint64(v uint64) Value { return Value{Type: TypeUint64, V: v} }

// Int64 returns an int64 value.
func Int64(v int64) Value { return Value{Type: TypeInt64, V: v} }

// Float32 returns a float32 value.
func Float32(v float32) Value { return Value{Type: TypeFloat32, V: v} }

// Float64 returns a float64 value.
func Float64(v float64) Value { return Value{Type: TypeFloat64, V: v} }

// Bool returns a bool value.
func Bool(v bool) Value { return Value{Type: TypeBool, V: v} }

// String returns a string value.
func String(v string) Value { return Value{Type: TypeString, V: v} }

// Strings returns an array of strings.
func Strings(v []string) Value { return Value{Type: TypeArray, ElemType: TypeString, V: v} }

// Float32Array returns an array of float32.
func Float32Array(v []float32) Value { return Value{Type: TypeArray, ElemType: TypeFloat32, V: v} }

// Int32Array returns an array of int32.
func Int32Array(v []int32) Value { return Value{Type: TypeArray, ElemType: TypeInt32, V: v} }

// Uint32Array returns an array of uint32.
func Uint32Array(v []uint32) Value { return Value{Type: TypeArray, ElemType: TypeUint32, V: v} }

// Arrays returns an array of arrays; every element must itself be an array.
func Arrays(v []Value) Value { return Value{Type: TypeArray, ElemType: TypeArray, V: v} }

// Set adds or replaces a metadata entry.
func (w *Writer) Set(key string, v Value) {
	for i := range w.kvs {
		if w.kvs[i].Key == key {
			w.kvs[i].Value = v
			return
		}
	}
	w.kvs = append(w.kvs, KV{Key: key, Value: v})
}

// AddTensor adds a tensor. dims are GGML order (row length first); data must
// hold exactly the tensor's bytes. The Writer keeps a reference to data until
// WriteTo.
func (w *Writer) AddTensor(name string, typ ggml.Type, dims []uint64, data []byte) error {
	t, err := w.newTensor(name, typ, dims)
	if err != nil {
		return err
	}
	if uint64(len(data)) != t.size {
		return fmt.Errorf("gguf: tensor %q: %d bytes of data, want %d", name, len(data), t.size)
	}
	t.data = data
	w.add(t)
	return nil
}

// AddTensorFunc adds a tensor whose data is produced at WriteTo time: fill is
// called once, in tensor order, and must write exactly the tensor's bytes
// (TensorSize) to its writer; writing more, or returning having written fewer,
// fails WriteTo. Use it for tensors too large to keep in memory all at once.
func (w *Writer) AddTensorFunc(name string, typ ggml.Type, dims []uint64, fill func(io.Writer) error) error {
	if fill == nil {
		return fmt.Errorf("gguf: tensor %q: nil fill function", name)
	}
	t, err := w.newTensor(name, typ, dims)
	if err != nil {
		return err
	}
	t.fill = fill
	w.add(t)
	return nil
}

// TensorSize returns the number of bytes of a tensor of type typ with
// dimensions dims (GGML order), or an error if the shape is invalid for the
// type.
func TensorSize(typ ggml.Type, dims []uint64) (uint64, error) {
	n, err := shapeSize(typ, dims)
	if err != nil {
		return 0, fmt.Errorf("gguf: %w", err)
	}
	return n, nil
}

func shapeSize(typ ggml.Type, dims []uint64) (uint64, error) {
	if len(dims) == 0 || len(dims) > MaxDims {
		return 0, fmt.Errorf("%d dimensions (1..%d allowed)", len(dims), MaxDims)
	}
	if !typ.Known() || typ.Internal() {
		return 0, fmt.Errorf("unknown tensor type %s", typ)
	}
	elems := uint64(1)
	for i, d := range dims {
		if d == 0 || d > math.MaxInt32 {
			return 0, fmt.Errorf("dimension %d is %d (must be 1..%d)", i, d, math.MaxInt32)
		}
		if elems > math.MaxInt64/d {
			return 0, fmt.Errorf("element count of %v overflows", dims)
		}
		elems *= d
	}
	if dims[0]%uint64(typ.BlockSize()) != 0 {
		return 0, fmt.Errorf("row length %d is not a multiple of the %s block size %d", dims[0], typ, typ.BlockSize())
	}
	rows := elems / dims[0]
	rowBytes := uint64(typ.RowBytes(int(dims[0])))
	if rowBytes > math.MaxInt64/rows {
		return 0, fmt.Errorf("byte size of %v overflows", dims)
	}
	return rowBytes * rows, nil
}

func (w *Writer) newTensor(name string, typ ggml.Type, dims []uint64) (writerTensor, error) {
	if name == "" || len(name) > MaxNameLen {
		return writerTensor{}, fmt.Errorf("gguf: tensor name %q: must be 1..%d bytes", name, MaxNameLen)
	}
	if w.names[name] {
		return writerTensor{}, fmt.Errorf("gguf: duplicate tensor name %q", name)
	}
	size, err := TensorSize(typ, dims)
	if err != nil {
		return writerTensor{}, fmt.Errorf("gguf: tensor %q: %w", name, err)
	}
	return writerTensor{name: name, typ: typ, dims: append([]uint64(nil), dims...), size: size}, nil
}

func (w *Writer) add(t writerTensor) {
	if w.names == nil {
		w.names = make(map[string]bool)
	}
	w.names[t.name] = true
	w.tensors = append(w.tensors, t)
}

// DataSize returns the number of bytes the tensor data section will take,
// padding included; with the header it is the size of the written file.
func (w *Writer) DataSize() uint64 {
	align := w.alignment()
	var n uint64
	for _, t := range w.tensors {
		n = alignUp(n+t.size, align)
	}
	return n
}

func (w *Writer) alignment() uint64 {
	if w.Alignment == 0 {
		return DefaultAlignment
	}
	return w.Alignment
}

// encoder writes little-endian values, remembering the first error and the
// number of bytes written.
type encoder struct {
	w       *bufio.Writer
	n       uint64
	err     error
	scratch [8]byte
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(b)
	e.n += uint64(n)
}

func (e *encoder) u32(v uint32) {
	binary.LittleEndian.PutUint32(e.scratch[:4], v)
	e.bytes(e.scratch[:4])
}

func (e *encoder) u64(v uint64) {
	binary.LittleEndian.PutUint64(e.scratch[:8], v)
	e.bytes(e.scratch[:8])
}

func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.WriteString(s)
	e.n += uint64(n)
}

func (e *encoder) value(v Value, depth int) error {
	if v.Type != TypeArray {
		return e.scalar(v.Type, v.V)
	}
	if depth >= maxArrayNesting {
		return fmt.Errorf("arrays nested deeper than %d", maxArrayNesting)
	}
	if sub, ok := v.V.([]Value); ok {
		if v.ElemType != TypeArray {
			return fmt.Errorf("array of %s holds []Value; only arrays of arrays may", v.ElemType)
		}
		e.u32(uint32(v.ElemType))
		e.u64(uint64(len(sub)))
		for i, x := range sub {
			if x.Type != TypeArray {
				return fmt.Errorf("element %d of an array of arrays is a %s", i, x.Type)
			}
			if err := e.value(x, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if v.ElemType == TypeArray {
		return fmt.Errorf("array of arrays must hold []Value, not %T", v.V)
	}
	e.u32(uint32(v.ElemType))
	e.u64(uint64(arrayLen(v.V)))
	return e.array(v)
}

func (e *encoder) scalar(t ValueType, x any) error {
	le := binary.LittleEndian
	var ok bool
	switch t {
	case TypeUint8:
		var v uint8
		v, ok = x.(uint8)
		e.bytes([]byte{v})
	case TypeInt8:
		var v int8
		v, ok = x.(int8)
		e.bytes([]byte{byte(v)})
	case TypeBool:
		var v bool
		v, ok = x.(bool)
		b := byte(0)
		if v {
			b = 1
		}
		e.bytes([]byte{b})
	case TypeUint16:
		var v uint16
		v, ok = x.(uint16)
		e.bytes(le.AppendUint16(nil, v))
	case TypeInt16:
		var v int16
		v, ok = x.(int16)
		e.bytes(le.AppendUint16(nil, uint16(v)))
	case TypeUint32:
		var v uint32
		v, ok = x.(uint32)
		e.u32(v)
	case TypeInt32:
		var v int32
		v, ok = x.(int32)
		e.u32(uint32(v))
	case TypeFloat32:
		var v float32
		v, ok = x.(float32)
		e.u32(math.Float32bits(v))
	case TypeUint64:
		var v uint64
		v, ok = x.(uint64)
		e.u64(v)
	case TypeInt64:
		var v int64
		v, ok = x.(int64)
		e.u64(uint64(v))
	case TypeFloat64:
		var v float64
		v, ok = x.(float64)
		e.u64(math.Float64bits(v))
	case TypeString:
		var v string
		v, ok = x.(string)
		e.str(v)
	default:
		return fmt.Errorf("gguf: cannot write value type %s", t)
	}
	if !ok {
		return fmt.Errorf("gguf: value %T does not match type %s", x, t)
	}
	return nil
}

func (e *encoder) array(v Value) error {
	var err error
	each := func(n int, f func(i int) any) {
		for i := 0; i < n && err == nil; i++ {
			err = e.scalar(v.ElemType, f(i))
		}
	}
	switch a := v.V.(type) {
	case []uint8:
		each(len(a), func(i int) any { return a[i] })
	case []int8:
		each(len(a), func(i int) any { return a[i] })
	case []bool:
		each(len(a), func(i int) any { return a[i] })
	case []uint16:
		each(len(a), func(i int) any { return a[i] })
	case []int16:
		each(len(a), func(i int) any { return a[i] })
	case []uint32:
		each(len(a), func(i int) any { return a[i] })
	case []int32:
		each(len(a), func(i int) any { return a[i] })
	case []float32:
		each(len(a), func(i int) any { return a[i] })
	case []uint64:
		each(len(a), func(i int) any { return a[i] })
	case []int64:
		each(len(a), func(i int) any { return a[i] })
	case []float64:
		each(len(a), func(i int) any { return a[i] })
	case []string:
		each(len(a), func(i int) any { return a[i] })
	default:
		return fmt.Errorf("gguf: cannot write array %T", v.V)
	}
	return err
}

// WriteTo writes the file to out. Tensors added with AddTensorFunc have their
// fill functions called here, in order. WriteTo may be called once.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	align := w.alignment()
	if align&(align-1) != 0 || align > maxAlignment {
		return 0, fmt.Errorf("gguf: alignment %d is not a power of two up to %d", align, maxAlignment)
	}
	if align != DefaultAlignment {
		w.Set(KeyAlignment, Uint32(uint32(align)))
	}
	e := &encoder{w: bufio.NewWriterSize(out, 1<<20)}
	e.bytes([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		if err := e.value(kv.Value, 0); err != nil {
			return int64(e.n), fmt.Errorf("gguf: write %q: %w", kv.Key, err)
		}
	}
	var offset uint64
	for _, t := range w.tensors {
		e.str(t.name)
		e.u32(uint32(len(t.dims)))
		for _, d := range t.dims {
			e.u64(d)
		}
		e.u32(uint32(t.typ))
		e.u64(offset)
		offset = alignUp(offset+t.size, align)
	}
	zeros := make([]byte, align)
	pad := func() {
		if r := e.n % align; r != 0 {
			e.bytes(zeros[:align-r])
		}
	}
	if len(w.tensors) > 0 {
		// A file without tensors ends after its header, as gguf-py writes
		// vocabulary-only files; llama.cpp reads both forms.
		pad()
	}
	for _, t := range w.tensors {
		if e.err != nil {
			break
		}
		if t.fill == nil {
			e.bytes(t.data)
		} else {
			cw := &limitedWriter{e: e, left: t.size}
			if err := t.fill(cw); err != nil {
				return int64(e.n), fmt.Errorf("gguf: write tensor %q: %w", t.name, err)
			}
			if cw.over {
				return int64(e.n), fmt.Errorf("gguf: write tensor %q: fill wrote more than the tensor's %d bytes", t.name, t.size)
			}
			if cw.left != 0 && e.err == nil {
				return int64(e.n), fmt.Errorf("gguf: write tensor %q: fill wrote %d of the tensor's %d bytes", t.name, t.size-cw.left, t.size)
			}
		}
		pad()
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	if e.err != nil {
		return int64(e.n), fmt.Errorf("gguf: write: %w", e.err)
	}
	return int64(e.n), nil
}

// errTooMuch is returned to a fill function that writes past its tensor.
var errTooMuch = errors.New("gguf: write past the end of the tensor")

// limitedWriter passes at most left bytes of one tensor's data to the file.
type limitedWriter struct {
	e    *encoder
	left uint64
	over bool
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if uint64(len(p)) > l.left {
		l.over = true
		return 0, errTooMuch
	}
	before := l.e.n
	l.e.bytes(p)
	n := int(l.e.n - before)
	l.left -= uint64(n)
	if l.e.err != nil {
		return n, l.e.err
	}
	return n, nil
}
