package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"

	"github.com/kvserve/kvserve/internal/ggml"
)

// ErrFormat is wrapped by every error about the content of a file, so callers
// can tell a malformed file from an I/O failure.
var ErrFormat = errors.New("malformed GGUF")

// Limits that no real model file comes near; they bound work on hostile input
// beyond what the file length already bounds.
const (
	maxKeyLen          = 1 << 16
	maxArrayNesting    = 2
	maxTensorCount     = 1 << 20
	maxAlignment       = 1 << 20
	minKVBytes         = 8 + 1 + 4 + 1         // key length, 1-byte key, type, 1-byte value
	minTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8 // name length, 1-byte name, n_dims, 1 dim, type, offset
)

// KeyAlignment is the metadata key holding the data alignment.
const KeyAlignment = "general.alignment"

// File is a parsed GGUF file. Its tensors' Data slices point into the bytes it
// was parsed from; they stay valid while those bytes do (for Open, until
// Close).
type File struct {
	Version   uint32
	Alignment uint64
	// KVs are the metadata entries in file order.
	KVs []KV
	// Tensors are the tensor descriptions in file order.
	Tensors []Tensor
	// DataOffset is where the tensor data section starts in the file.
	DataOffset uint64

	index   map[string]int // metadata key → position in KVs
	tensors map[string]int // tensor name → position in Tensors
	closer  func() error
	protect func(writable bool) error // for a private copy (Private)
	discard func(b []byte) int64      // gives back a private copy's pages
}

// Private reports whether the tensor data is a private copy of the file
// (the HugePages placement), which Rewrite may change in place, rather
// than a read-only mapping of it.
func (f *File) Private() bool { return f.protect != nil }

// Release gives back the memory of the named tensors' data in a private
// copy (Private), which the caller no longer reads (the model loader's
// widened matrices, whose kernels read a wider copy): the whole pages
// inside each. Their Data becomes nil, so a later reader finds nothing
// rather than the zeros the kernel maps in its place. It returns the bytes
// given back: 0 for a mapped file, whose pages are the page cache's.
func (f *File) Release(names ...string) int64 {
	if f.discard == nil {
		return 0
	}
	var n int64
	for _, name := range names {
		if i, ok := f.tensors[name]; ok && f.Tensors[i].Data != nil {
			n += f.discard(f.Tensors[i].Data)
			f.Tensors[i].Data = nil
		}
	}
	return n
}

// Rewrite runs fn with the tensor data of a private copy writable, and
// makes it read-only again after. A file that is not Private cannot be
// rewritten: Rewrite returns an error without calling fn.
func (f *File) Rewrite(fn func()) error {
	if f.protect == nil {
		return fmt.Errorf("gguf: rewrite: the tensor data is a read-only mapping of the file")
	}
	if err := f.protect(true); err != nil {
		return fmt.Errorf("gguf: rewrite: %w", err)
	}
	fn()
	if err := f.protect(false); err != nil {
		return fmt.Errorf("gguf: rewrite: %w", err)
	}
	return nil
}

func formatErr(format string, args ...any) error {
	return fmt.Errorf("gguf: %w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// decoder reads little-endian values from a byte slice with bounds checks.
// ctx names the metadata key or tensor being read, for error messages; what
// strings are only combined with it when an error is reported, so reading a
// 150,000-entry vocabulary does not build 150,000 messages.
type decoder struct {
	buf []byte
	off uint64
	ctx string
}

func (d *decoder) remaining() uint64 { return uint64(len(d.buf)) - d.off }

func (d *decoder) label(what string) string {
	if d.ctx == "" {
		return what
	}
	return fmt.Sprintf("%s of %q", what, d.ctx)
}

func (d *decoder) need(n uint64, what string) error {
	if n > d.remaining() {
		return formatErr("truncated at byte %d reading %s (need %d bytes, %d left)", d.off, d.label(what), n, d.remaining())
	}
	return nil
}

func (d *decoder) u8(what string) (uint8, error) {
	if err := d.need(1, what); err != nil {
		return 0, err
	}
	v := d.buf[d.off]
	d.off++
	return v, nil
}

func (d *decoder) u16(what string) (uint16, error) {
	if err := d.need(2, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint16(d.buf[d.off:])
	d.off += 2
	return v, nil
}

func (d *decoder) u32(what string) (uint32, error) {
	if err := d.need(4, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(d.buf[d.off:])
	d.off += 4
	return v, nil
}

func (d *decoder) u64(what string) (uint64, error) {
	if err := d.need(8, what); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(d.buf[d.off:])
	d.off += 8
	return v, nil
}

// strBytes reads a length-prefixed string and returns a view of its bytes.
func (d *decoder) strBytes(what string) ([]byte, error) {
	if err := d.need(8, what); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(d.buf[d.off:])
	if n > d.remaining()-8 {
		return nil, formatErr("truncated at byte %d reading %s (length %d, %d bytes left)", d.off, d.label(what), n, d.remaining()-8)
	}
	d.off += 8
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b, nil
}

func (d *decoder) str(what string) (string, error) {
	b, err := d.strBytes(what)
	return string(b), err
}

// Parse parses a whole GGUF file held in data. The returned File refers to
// data for tensor contents. Every error about the content wraps ErrFormat.
func Parse(data []byte) (*File, error) {
	d := &decoder{buf: data}
	if err := d.need(4, "magic"); err != nil {
		return nil, err
	}
	if string(data[:4]) != Magic {
		return nil, formatErr("wrong magic %q, want %q (not a GGUF file)", data[:4], Magic)
	}
	d.off = 4
	f := &File{Alignment: DefaultAlignment}
	var err error
	if f.Version, err = d.u32("version"); err != nil {
		return nil, err
	}
	if f.Version != 2 && f.Version != 3 {
		return nil, formatErr("unsupported GGUF version %d (supported: 2, 3)", f.Version)
	}
	nTensors, err := d.u64("tensor count")
	if err != nil {
		return nil, err
	}
	nKV, err := d.u64("metadata count")
	if err != nil {
		return nil, err
	}
	// Each metadata entry takes at least 8+1+4+1 bytes, each tensor info at
	// least 8+1+4+8+4+8: counts beyond what the file can hold are lies, and
	// bounding them by the bytes left bounds the memory allocated for them.
	if nKV > d.remaining()/minKVBytes {
		return nil, formatErr("metadata count %d cannot fit in a %d-byte file", nKV, len(data))
	}
	if nTensors > maxTensorCount || nTensors > d.remaining()/minTensorInfoBytes {
		return nil, formatErr("tensor count %d is absurd for a %d-byte file", nTensors, len(data))
	}

	f.KVs = make([]KV, 0, nKV)
	f.index = make(map[string]int, nKV)
	for i := uint64(0); i < nKV; i++ {
		d.ctx = ""
		kb, err := d.strBytes("metadata key")
		if err != nil {
			return nil, fmt.Errorf("%w (entry %d of %d)", err, i, nKV)
		}
		if len(kb) == 0 || len(kb) > maxKeyLen || !utf8.Valid(kb) {
			return nil, formatErr("metadata key %d is empty, longer than %d bytes or not UTF-8", i, maxKeyLen)
		}
		key := string(kb)
		if _, dup := f.index[key]; dup {
			return nil, formatErr("duplicate metadata key %q", key)
		}
		d.ctx = key
		vt, err := d.u32("value type")
		if err != nil {
			return nil, err
		}
		v, err := d.value(ValueType(vt), 0)
		if err != nil {
			return nil, err
		}
		f.index[key] = len(f.KVs)
		f.KVs = append(f.KVs, KV{Key: key, Value: v})
	}
	d.ctx = ""

	if v, ok := f.Get(KeyAlignment); ok {
		a, ok := v.AsInt64()
		if !ok || a <= 0 || a > maxAlignment || a&(a-1) != 0 {
			return nil, formatErr("%s %v is not a power of two up to %d", KeyAlignment, v.V, maxAlignment)
		}
		f.Alignment = uint64(a)
	}

	f.Tensors = make([]Tensor, 0, nTensors)
	f.tensors = make(map[string]int, nTensors)
	for i := uint64(0); i < nTensors; i++ {
		t, err := d.tensorInfo(i)
		if err != nil {
			return nil, err
		}
		if _, dup := f.tensors[t.Name]; dup {
			return nil, formatErr("duplicate tensor name %q", t.Name)
		}
		f.tensors[t.Name] = len(f.Tensors)
		f.Tensors = append(f.Tensors, t)
	}
	d.ctx = ""

	f.DataOffset = alignUp(d.off, f.Alignment)
	if f.DataOffset > uint64(len(data)) && nTensors > 0 {
		return nil, formatErr("data section starts at %d, past the end of the %d-byte file", f.DataOffset, len(data))
	}
	dataLen := uint64(len(data)) - min(f.DataOffset, uint64(len(data)))
	for i := range f.Tensors {
		t := &f.Tensors[i]
		size := t.Size()
		if t.Offset%f.Alignment != 0 {
			return nil, formatErr("tensor %q offset %d is not aligned to %d", t.Name, t.Offset, f.Alignment)
		}
		if t.Offset > dataLen || size > dataLen-t.Offset {
			return nil, formatErr("tensor %q (%d bytes at offset %d) extends past the end of the file (data section is %d bytes)",
				t.Name, size, t.Offset, dataLen)
		}
		start := f.DataOffset + t.Offset
		t.Data = data[start : start+size : start+size]
	}
	if err := checkOverlap(f.Tensors); err != nil {
		return nil, err
	}
	return f, nil
}

// checkOverlap rejects files whose tensors share bytes: every writer lays
// tensors out one after the other, so overlapping extents mean corruption
// (or a file crafted to make two weights alias each other).
func checkOverlap(ts []Tensor) error {
	if len(ts) < 2 {
		return nil
	}
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return ts[order[a]].Offset < ts[order[b]].Offset })
	for k := 1; k < len(order); k++ {
		prev, cur := &ts[order[k-1]], &ts[order[k]]
		if cur.Offset < prev.Offset+uint64(len(prev.Data)) {
			return formatErr("tensors %q (offset %d, %d bytes) and %q (offset %d) overlap",
				prev.Name, prev.Offset, len(prev.Data), cur.Name, cur.Offset)
		}
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

func (d *decoder) tensorInfo(i uint64) (Tensor, error) {
	var t Tensor
	d.ctx = ""
	nb, err := d.strBytes("tensor name")
	if err != nil {
		return t, fmt.Errorf("%w (tensor %d)", err, i)
	}
	if len(nb) == 0 || len(nb) > maxKeyLen || !utf8.Valid(nb) {
		return t, formatErr("tensor %d name is empty, longer than %d bytes or not UTF-8", i, maxKeyLen)
	}
	name := string(nb)
	t.Name = name
	d.ctx = name
	nDims, err := d.u32("dimension count")
	if err != nil {
		return t, err
	}
	if nDims == 0 || nDims > MaxDims {
		return t, formatErr("tensor %q has %d dimensions (1..%d allowed)", name, nDims, MaxDims)
	}
	if err := d.need(8*uint64(nDims), "dimensions"); err != nil {
		return t, err
	}
	t.Dims = make([]uint64, nDims)
	elems := uint64(1)
	for j := range t.Dims {
		t.Dims[j], _ = d.u64("dimension")
		if t.Dims[j] == 0 || t.Dims[j] > math.MaxInt32 {
			return t, formatErr("tensor %q dimension %d is %d (must be 1..%d)", name, j, t.Dims[j], math.MaxInt32)
		}
		if elems > math.MaxInt64/t.Dims[j] {
			return t, formatErr("tensor %q element count overflows (dims %v)", name, t.Dims)
		}
		elems *= t.Dims[j]
	}
	typ, err := d.u32("type")
	if err != nil {
		return t, err
	}
	t.Type = ggml.Type(typ)
	if !t.Type.Known() || t.Type.Internal() {
		return t, formatErr("tensor %q has unknown type id %d", name, typ)
	}
	if bs := uint64(t.Type.BlockSize()); t.Dims[0]%bs != 0 {
		return t, formatErr("tensor %q row length %d is not a multiple of the %s block size %d", name, t.Dims[0], t.Type, bs)
	}
	rowBytes := uint64(t.Type.RowBytes(int(t.Dims[0])))
	if rows := elems / t.Dims[0]; rowBytes > math.MaxInt64/rows {
		return t, formatErr("tensor %q byte size overflows (dims %v)", name, t.Dims)
	}
	if t.Offset, err = d.u64("offset"); err != nil {
		return t, err
	}
	return t, nil
}

// value decodes one metadata value of type vt.
func (d *decoder) value(vt ValueType, depth int) (Value, error) {
	v := Value{Type: vt}
	var err error
	switch vt {
	case TypeUint8:
		var x uint8
		x, err = d.u8("value")
		v.V = x
	case TypeInt8:
		var x uint8
		x, err = d.u8("value")
		v.V = int8(x)
	case TypeUint16:
		var x uint16
		x, err = d.u16("value")
		v.V = x
	case TypeInt16:
		var x uint16
		x, err = d.u16("value")
		v.V = int16(x)
	case TypeUint32:
		var x uint32
		x, err = d.u32("value")
		v.V = x
	case TypeInt32:
		var x uint32
		x, err = d.u32("value")
		v.V = int32(x)
	case TypeFloat32:
		var x uint32
		x, err = d.u32("value")
		v.V = math.Float32frombits(x)
	case TypeBool:
		var x uint8
		x, err = d.u8("value")
		if err == nil && x > 1 {
			return v, formatErr("metadata %q: bool value %d is neither 0 nor 1", d.ctx, x)
		}
		v.V = x == 1
	case TypeString:
		var s string
		s, err = d.str("string value")
		v.V = s
	case TypeUint64:
		var x uint64
		x, err = d.u64("value")
		v.V = x
	case TypeInt64:
		var x uint64
		x, err = d.u64("value")
		v.V = int64(x)
	case TypeFloat64:
		var x uint64
		x, err = d.u64("value")
		v.V = math.Float64frombits(x)
	case TypeArray:
		return d.array(depth)
	default:
		return v, formatErr("metadata %q has unknown value type %d", d.ctx, uint32(vt))
	}
	return v, err
}

func (d *decoder) array(depth int) (Value, error) {
	v := Value{Type: TypeArray}
	if depth >= maxArrayNesting {
		return v, formatErr("metadata %q: arrays nested deeper than %d", d.ctx, maxArrayNesting)
	}
	et, err := d.u32("array element type")
	if err != nil {
		return v, err
	}
	v.ElemType = ValueType(et)
	n, err := d.u64("array length")
	if err != nil {
		return v, err
	}
	// Bound the allocation by what the file can hold: every element takes at
	// least its fixed size, or 8 bytes for a string length, 12 for an array.
	minSize := uint64(v.ElemType.size())
	switch v.ElemType {
	case TypeString:
		minSize = 8
	case TypeArray:
		minSize = 12
	}
	if minSize == 0 {
		return v, formatErr("metadata %q: array of unknown element type %d", d.ctx, et)
	}
	if n > d.remaining()/minSize {
		return v, formatErr("metadata %q: array of %d %s elements cannot fit in the %d bytes left", d.ctx, n, v.ElemType, d.remaining())
	}
	if sz := v.ElemType.size(); sz > 0 {
		raw := d.buf[d.off : d.off+n*uint64(sz)]
		if v.ElemType == TypeBool {
			for i, b := range raw {
				if b > 1 {
					return v, formatErr("metadata %q: bool element %d is %d, neither 0 nor 1", d.ctx, i, b)
				}
			}
		}
		d.off += n * uint64(sz)
		v.V = decodeFixedArray(v.ElemType, raw, int(n))
		return v, nil
	}
	switch v.ElemType {
	case TypeString:
		out, err := d.strings(n)
		if err != nil {
			return v, err
		}
		v.V = out
	case TypeArray:
		out := make([]Value, n)
		for i := range out {
			if out[i], err = d.array(depth + 1); err != nil {
				return v, err
			}
		}
		v.V = out
	}
	return v, nil
}

// strings reads an array of n strings. It checks every length first and then
// copies the whole array in one allocation that the returned strings share:
// a vocabulary of 150,000 tokens costs two allocations, not 150,000.
func (d *decoder) strings(n uint64) ([]string, error) {
	start := d.off
	for i := uint64(0); i < n; i++ {
		if _, err := d.strBytes("string element"); err != nil {
			return nil, fmt.Errorf("%w (element %d of %d)", err, i, n)
		}
	}
	all := string(d.buf[start:d.off])
	out := make([]string, n)
	var p uint64
	for i := range out {
		l := binary.LittleEndian.Uint64(d.buf[start+p:])
		p += 8
		out[i] = all[p : p+l]
		p += l
	}
	return out, nil
}

func decodeFixedArray(t ValueType, raw []byte, n int) any {
	le := binary.LittleEndian
	switch t {
	case TypeUint8:
		return append([]uint8(nil), raw...)
	case TypeInt8:
		out := make([]int8, n)
		for i := range out {
			out[i] = int8(raw[i])
		}
		return out
	case TypeBool:
		out := make([]bool, n)
		for i := range out {
			out[i] = raw[i] != 0
		}
		return out
	case TypeUint16:
		out := make([]uint16, n)
		for i := range out {
			out[i] = le.Uint16(raw[2*i:])
		}
		return out
	case TypeInt16:
		out := make([]int16, n)
		for i := range out {
			out[i] = int16(le.Uint16(raw[2*i:]))
		}
		return out
	case TypeUint32:
		out := make([]uint32, n)
		for i := range out {
			out[i] = le.Uint32(raw[4*i:])
		}
		return out
	case TypeInt32:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(le.Uint32(raw[4*i:]))
		}
		return out
	case TypeFloat32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		return out
	case TypeUint64:
		out := make([]uint64, n)
		for i := range out {
			out[i] = le.Uint64(raw[8*i:])
		}
		return out
	case TypeInt64:
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(le.Uint64(raw[8*i:]))
		}
		return out
	case TypeFloat64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		return out
	}
	return nil
}

// Close releases the file mapping, if the File came from Open. Tensor data
// must not be used afterwards.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	c := f.closer
	f.closer = nil
	return c()
}

// Get returns the metadata value stored under key.
func (f *File) Get(key string) (Value, bool) {
	i, ok := f.index[key]
	if !ok {
		return Value{}, false
	}
	return f.KVs[i].Value, true
}

// Tensor returns the tensor with the given name.
func (f *File) Tensor(name string) (*Tensor, bool) {
	i, ok := f.tensors[name]
	if !ok {
		return nil, false
	}
	return &f.Tensors[i], true
}

// String returns the string stored under key.
func (f *File) String(key string) (string, error) {
	v, ok := f.Get(key)
	if !ok {
		return "", fmt.Errorf("gguf: missing metadata %q", key)
	}
	s, ok := v.V.(string)
	if !ok {
		return "", fmt.Errorf("gguf: metadata %q is %s, want string", key, v.Type)
	}
	return s, nil
}

// Int returns the integer stored under key, whatever its integer width.
func (f *File) Int(key string) (int64, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("gguf: missing metadata %q", key)
	}
	i, ok := v.AsInt64()
	if !ok {
		return 0, fmt.Errorf("gguf: metadata %q is %s, want an integer", key, v.Type)
	}
	return i, nil
}

// Float returns the number stored under key, whatever its numeric type.
func (f *File) Float(key string) (float64, error) {
	v, ok := f.Get(key)
	if !ok {
		return 0, fmt.Errorf("gguf: missing metadata %q", key)
	}
	x, ok := v.AsFloat64()
	if !ok {
		return 0, fmt.Errorf("gguf: metadata %q is %s, want a number", key, v.Type)
	}
	return x, nil
}

// Bool returns the boolean stored under key.
func (f *File) Bool(key string) (bool, error) {
	v, ok := f.Get(key)
	if !ok {
		return false, fmt.Errorf("gguf: missing metadata %q", key)
	}
	b, ok := v.V.(bool)
	if !ok {
		return false, fmt.Errorf("gguf: metadata %q is %s, want bool", key, v.Type)
	}
	return b, nil
}

// IntOr returns the integer under key, or def when the key is absent. A
// present key of the wrong type is an error.
func (f *File) IntOr(key string, def int64) (int64, error) {
	if _, ok := f.Get(key); !ok {
		return def, nil
	}
	return f.Int(key)
}

// FloatOr returns the number under key, or def when the key is absent.
func (f *File) FloatOr(key string, def float64) (float64, error) {
	if _, ok := f.Get(key); !ok {
		return def, nil
	}
	return f.Float(key)
}

// BoolOr returns the boolean under key, or def when the key is absent.
func (f *File) BoolOr(key string, def bool) (bool, error) {
	if _, ok := f.Get(key); !ok {
		return def, nil
	}
	return f.Bool(key)
}

// StringOr returns the string under key, or def when the key is absent.
func (f *File) StringOr(key string, def string) (string, error) {
	if _, ok := f.Get(key); !ok {
		return def, nil
	}
	return f.String(key)
}

// Strings returns the string array stored under key.
func (f *File) Strings(key string) ([]string, error) {
	v, ok := f.Get(key)
	if !ok {
		return nil, fmt.Errorf("gguf: missing metadata %q", key)
	}
	s, ok := v.V.([]string)
	if !ok {
		return nil, fmt.Errorf("gguf: metadata %q is %s of %s, want array of string", key, v.Type, v.ElemType)
	}
	return s, nil
}

// Float32s returns the float32 array stored under key.
func (f *File) Float32s(key string) ([]float32, error) {
	v, ok := f.Get(key)
	if !ok {
		return nil, fmt.Errorf("gguf: missing metadata %q", key)
	}
	s, ok := v.V.([]float32)
	if !ok {
		return nil, fmt.Errorf("gguf: metadata %q is %s of %s, want array of float32", key, v.Type, v.ElemType)
	}
	return s, nil
}

// Ints returns the integer array stored under key, widened to int64,
// whatever the width of its elements.
func (f *File) Ints(key string) ([]int64, error) {
	v, ok := f.Get(key)
	if !ok {
		return nil, fmt.Errorf("gguf: missing metadata %q", key)
	}
	if v.Type != TypeArray {
		return nil, fmt.Errorf("gguf: metadata %q is %s, want an integer array", key, v.Type)
	}
	var out []int64
	switch a := v.V.(type) {
	case []int32:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []uint32:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int8:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []uint8:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int16:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []uint16:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int64:
		out = append(out, a...)
	case []uint64:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	default:
		return nil, fmt.Errorf("gguf: metadata %q is an array of %s, want integers", key, v.ElemType)
	}
	return out, nil
}
