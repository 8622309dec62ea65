package model

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/tensor"
)

// Options are Load's choices beyond the file.
type Options struct {
	// WidenLimit bounds the memory of the copies of widened matrices
	// (tensor.Widen; see PlanWidening): 0 widens none, NoWidenLimit all.
	WidenLimit int64
	// WidenedFrom, if not nil, is a model loaded from the same file with
	// the same WidenLimit whose widened matrices this one shares instead
	// of widening its own (they are in memory of their own, read-only
	// once packed): the load probe's second placement of one model.
	WidenedFrom *Model
}

// NoWidenLimit widens every matrix of a type Widen converts.
const NoWidenLimit = math.MaxInt64

// Widening is which of a file's weight matrices Load widens (tensor.Widen)
// within a memory limit; the others are computed in their own bytes,
// streamed (see tensor.StreamedDirect: on CPUs without a direct kernel for
// the type their rows are widened again for every product).
type Widening struct {
	// Names are the tensors widened.
	Names map[string]bool
	// Types lists, per type of the file's matrices that Widen converts (in
	// the file's order), what becomes of them.
	Types []WidenedType
	// Private says the plan is for weights in private memory, where some
	// types are as fast in their own bytes (tensor.StreamedPreferred).
	Private bool
}

// WidenedType is what a Widening does with the matrices of one type.
type WidenedType struct {
	Type tensor.DType
	// Widened and WidenedBytes count the matrices widened and the memory of
	// their copies.
	Widened      int
	WidenedBytes int64
	// Streamed counts the matrices left in their own bytes,
	// StreamedBytes their size and StreamedWideBytes what widening them
	// would take.
	Streamed          int
	StreamedBytes     int64
	StreamedWideBytes int64
	// Own is set where this CPU computes the type as fast in its own bytes
	// (tensor.StreamedPreferred): all its matrices are streamed, whatever
	// the limit.
	Own bool
}

// Bytes is the memory of all widened copies.
func (w Widening) Bytes() int64 {
	var n int64
	for _, t := range w.Types {
		n += t.WidenedBytes
	}
	return n
}

// Streamed counts the matrices left in their own bytes.
func (w Widening) Streamed() int {
	n := 0
	for _, t := range w.Types {
		n += t.Streamed
	}
	return n
}

// PlanWidening chooses which of f's weight matrices to widen within limit
// bytes of copies. Widening only pays for a matrix the kernels multiply
// with: a token embedding apart from the output projection (its rows are
// only looked up) stays as it is. The others go in order of the least
// memory a byte of theirs takes widened (Q5_0's copy is half as large again,
// IQ2_XXS's four times: a limit then keeps the most matrices at full
// speed), in the file's order among equals, each one that still fits. A
// type this CPU computes as fast in its own bytes (tensor.StreamedPreferred;
// private: the weights are in private memory, packed where their kernels
// have a layout) is never widened.
func PlanWidening(f *gguf.File, limit int64, private bool) Widening {
	_, hasOutput := f.Tensor("output.weight")
	type cand struct {
		t          *gguf.Tensor
		own, wide  int64
		byTypeSlot int
	}
	w := Widening{Names: map[string]bool{}, Private: private}
	var cands []cand
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if len(t.Dims) != 2 || !isWeightMatrix(t.Name) || t.Name == "token_embd.weight" && hasOutput {
			continue
		}
		if _, ok := tensor.WidenedType(t.Type); !ok {
			continue
		}
		slot := slices.IndexFunc(w.Types, func(wt WidenedType) bool { return wt.Type == t.Type })
		if slot < 0 {
			slot = len(w.Types)
			w.Types = append(w.Types, WidenedType{Type: t.Type, Own: tensor.StreamedPreferred(t.Type, private)})
		}
		wide := int64(tensor.WidenedRowBytes(t.Type, t.Cols())) * int64(t.Rows())
		if wt := &w.Types[slot]; wt.Own {
			wt.Streamed++
			wt.StreamedBytes += int64(t.Size())
			wt.StreamedWideBytes += wide
			continue
		}
		cands = append(cands, cand{t, int64(t.Size()), wide, slot})
	}
	slices.SortStableFunc(cands, func(a, b cand) int {
		// a.wide/a.own < b.wide/b.own, without division
		return cmp.Compare(float64(a.wide)*float64(b.own), float64(b.wide)*float64(a.own))
	})
	left := limit
	for _, c := range cands {
		wt := &w.Types[c.byTypeSlot]
		if c.wide <= left {
			left -= c.wide
			w.Names[c.t.Name] = true
			wt.Widened++
			wt.WidenedBytes += c.wide
			continue
		}
		wt.Streamed++
		wt.StreamedBytes += c.own
		wt.StreamedWideBytes += c.wide
	}
	return w
}

// isWeightMatrix reports whether a tensor of the name is one Load reads as
// a weight matrix.
func isWeightMatrix(name string) bool {
	switch name {
	case "token_embd.weight", "output.weight":
		return true
	}
	if !strings.HasPrefix(name, "blk.") {
		return false
	}
	for _, s := range []string{".attn_q.weight", ".attn_k.weight", ".attn_v.weight", ".attn_output.weight", ".ffn_gate.weight", ".ffn_up.weight", ".ffn_down.weight"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// widen converts the weight matrices plan names to the type whose kernels
// compute their products (tensor.Widen), into memory of their own, which,
// writable whatever the placement, is packed for the kernels too; it adds
// the copies' size to WidenedBytes. With from, it takes from's widened
// matrices instead (see Options.WidenedFrom). It returns the first bytes of
// the widened matrices' original data.
func (m *Model) widen(f *gguf.File, plan Widening, from *Model) (map[*byte]bool, error) {
	sources := map[*byte]bool{}
	for name := range plan.Names {
		if t, ok := f.Tensor(name); ok && len(t.Data) > 0 {
			sources[&t.Data[0]] = true
		}
	}
	if from != nil {
		return sources, m.shareWidened(from, sources)
	}
	var n atomic.Int64
	m.eachMatrix(func(w *tensor.Matrix) {
		if len(w.Data) == 0 || !sources[&w.Data[0]] { // read-only here
			return
		}
		wide := tensor.Widen(*w)
		n.Add(int64(wide.Bytes()))
		*w = tensor.Pack(wide)
	})
	m.WidenedBytes = n.Load()
	return sources, nil
}

// shareWidened sets m's matrices whose data starts at one of sources (its
// widened ones) to from's, matrix for matrix in the same order; from must
// have widened the same matrices of a file of the same shape.
func (m *Model) shareWidened(from *Model, sources map[*byte]bool) error {
	mine, theirs := m.matrices(), from.matrices()
	if len(mine) != len(theirs) || !maps.Equal(m.Widening.Names, from.Widening.Names) {
		return fmt.Errorf("model: widened matrices to share come from another model or another widening limit")
	}
	for i, w := range mine {
		if len(w.Data) == 0 || !sources[&w.Data[0]] {
			continue
		}
		wt, ok := tensor.WidenedType(w.Type)
		if o := theirs[i]; !ok || o.Type != wt || o.Rows != w.Rows || o.Cols != w.Cols {
			return fmt.Errorf("model: matrix %d to share is %v %d×%d, not %v %d×%d widened", i, o.Type, o.Rows, o.Cols, w.Type, w.Rows, w.Cols)
		}
		*w = *theirs[i]
	}
	if m.Config.TiedEmbed {
		m.Output = m.TokenEmbed
	}
	m.WidenedBytes = from.WidenedBytes
	return nil
}
