package tensor

import "fmt"

// Matrix is a read-only, row-major 2-D weight viewed in place: Rows rows of
// Cols elements of Type, each row RowBytes(Cols) bytes, rows back to back.
// Data usually points into a memory-mapped GGUF file and is never written.
// A GGUF tensor with dims [ne0, ne1] is a Matrix with Cols = ne0, Rows = ne1.
type Matrix struct {
	Type       DType
	Rows, Cols int
	Data       []byte
}

// NewMatrix validates a weight's layout and returns a view of it: the type
// must be one the kernels support, Cols a multiple of its block size and data
// exactly rows*RowBytes(cols) bytes long.
func NewMatrix(t DType, rows, cols int, data []byte) (Matrix, error) {
	if !t.Supported() {
		return Matrix{}, fmt.Errorf("tensor: matrix of type %v: type not supported", t)
	}
	if rows <= 0 || cols <= 0 {
		return Matrix{}, fmt.Errorf("tensor: matrix %dx%d: dimensions must be positive", rows, cols)
	}
	if cols%t.BlockSize() != 0 {
		return Matrix{}, fmt.Errorf("tensor: matrix %dx%d of %v: row length is not a multiple of the block size %d", rows, cols, t, t.BlockSize())
	}
	rb := t.RowBytes(cols)
	if rb > 0 && rows > int(^uint(0)>>1)/rb {
		return Matrix{}, fmt.Errorf("tensor: matrix %dx%d of %v: too large", rows, cols, t)
	}
	if need := rows * rb; len(data) != need {
		return Matrix{}, fmt.Errorf("tensor: matrix %dx%d of %v: need %d bytes, have %d", rows, cols, t, need, len(data))
	}
	return Matrix{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}

// RowBytes returns the byte length of one row.
func (m Matrix) RowBytes() int { return m.Type.RowBytes(m.Cols) }

// Row returns the bytes of row r.
func (m Matrix) Row(r int) []byte {
	rb := m.RowBytes()
	return m.Data[r*rb : (r+1)*rb : (r+1)*rb]
}

// DequantizeRow converts row r to float32 into dst[:Cols] (an embedding
// lookup). It panics if r is out of range or dst is shorter than a row, as a
// slice index would.
func (m Matrix) DequantizeRow(dst []float32, row int) {
	if row < 0 || row >= m.Rows {
		panic(fmt.Sprintf("tensor: DequantizeRow: row %d out of range [0,%d)", row, m.Rows))
	}
	dequantize(m.Type, dst[:m.Cols], m.Row(row))
}
