package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/kvserve/kvserve/internal/tensor"
)

// Writer builds a GGUF v3 file: metadata in the order added, then tensors in
// the order added, each aligned. It is used for synthetic models and tests.
type Writer struct {
	Alignment uint64 // 0 means DefaultAlignment
	kvs       []KV
	tensors   []writerTensor
}

type writerTensor struct {
	name string
	typ  tensor.DType
	dims []uint64
	data []byte
}

// Scalar and array constructors with the exact GGUF value types, so files
// match what other tools write (e.g. u32 vs i32 matters to some readers).

func Uint32(v uint32) Value          { return Value{Type: TypeUint32, V: v} }
func Int32(v int32) Value            { return Value{Type: TypeInt32, V: v} }
func Uint64(v uint64) Value          { return Value{Type: TypeUint64, V: v} }
func Float32(v float32) Value        { return Value{Type: TypeFloat32, V: v} }
func Bool(v bool) Value              { return Value{Type: TypeBool, V: v} }
func String(v string) Value          { return Value{Type: TypeString, V: v} }
func Strings(v []string) Value       { return Value{Type: TypeArray, ElemType: TypeString, V: v} }
func Float32Array(v []float32) Value { return Value{Type: TypeArray, ElemType: TypeFloat32, V: v} }
func Int32Array(v []int32) Value     { return Value{Type: TypeArray, ElemType: TypeInt32, V: v} }

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
// hold exactly the tensor's bytes.
func (w *Writer) AddTensor(name string, typ tensor.DType, dims []uint64, data []byte) error {
	if len(dims) == 0 || len(dims) > MaxDims {
		return fmt.Errorf("gguf: tensor %q: %d dimensions", name, len(dims))
	}
	if !typ.Known() {
		return fmt.Errorf("gguf: tensor %q: unknown type %s", name, typ)
	}
	if dims[0]%uint64(typ.BlockSize()) != 0 {
		return fmt.Errorf("gguf: tensor %q: row length %d is not a multiple of the %s block size", name, dims[0], typ)
	}
	rows := uint64(1)
	for _, d := range dims[1:] {
		rows *= d
	}
	if want := uint64(typ.RowBytes(int(dims[0]))) * rows; uint64(len(data)) != want {
		return fmt.Errorf("gguf: tensor %q: %d bytes of data, want %d", name, len(data), want)
	}
	w.tensors = append(w.tensors, writerTensor{name, typ, append([]uint64(nil), dims...), data})
	return nil
}

type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	var n int
	n, e.err = e.w.Write(b)
	e.n += uint64(n)
}

func (e *encoder) u32(v uint32) { e.bytes(binary.LittleEndian.AppendUint32(nil, v)) }
func (e *encoder) u64(v uint64) { e.bytes(binary.LittleEndian.AppendUint64(nil, v)) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.bytes([]byte(s)) }

func (e *encoder) value(v Value) error {
	switch v.Type {
	case TypeArray:
		e.u32(uint32(v.ElemType))
		n := arrayLen(v.V)
		e.u64(uint64(n))
		if sub, ok := v.V.([]Value); ok {
			for _, x := range sub {
				if err := e.value(x); err != nil {
					return err
				}
			}
			return nil
		}
		return e.array(v)
	default:
		return e.scalar(v.Type, v.V)
	}
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

// WriteTo writes the file to out.
func (w *Writer) WriteTo(out io.Writer) (int64, error) {
	align := w.Alignment
	if align == 0 {
		align = DefaultAlignment
	}
	if align != DefaultAlignment {
		w.Set("general.alignment", Uint32(uint32(align)))
	}
	e := &encoder{w: bufio.NewWriterSize(out, 1<<20)}
	e.bytes([]byte(Magic))
	e.u32(3)
	e.u64(uint64(len(w.tensors)))
	e.u64(uint64(len(w.kvs)))
	for _, kv := range w.kvs {
		e.str(kv.Key)
		e.u32(uint32(kv.Value.Type))
		if err := e.value(kv.Value); err != nil {
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
		offset = alignUp(offset+uint64(len(t.data)), align)
	}
	pad := func() {
		if r := e.n % align; r != 0 {
			e.bytes(make([]byte, align-r))
		}
	}
	pad()
	for _, t := range w.tensors {
		e.bytes(t.data)
		pad()
	}
	if e.err == nil {
		e.err = e.w.Flush()
	}
	return int64(e.n), e.err
}
