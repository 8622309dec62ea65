package model_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// TestPackedWeights: a model opened into private memory (the huge-pages
// placement) has its weights packed for the CPU's kernels where they have
// a packed layout, and gives bit-identical logits to the same file mapped
// read-only — for prompts and a batch of decodes, through the embedding
// lookups and the output product (tiny-qwen2-q8_0 ties the two: one packed
// matrix serves both; tiny-q4_0, tiny-f16 and tiny-bf16: Q4_0, F16 and BF16
// have packed layouts on AVX2; tiny-q4_k_m, tiny-q6_k, tiny-iq4_xs,
// tiny-q3_k_m, tiny-q2_k: Q2_K to Q6_K and IQ4_XS have theirs at the VNNI
// level).
func TestPackedWeights(t *testing.T) {
	for _, name := range []string{"tiny-q8_0", "tiny-qwen2-q8_0", "tiny-q4_0", "tiny-q4_k_m", "tiny-q6_k", "tiny-iq4_xs", "tiny-q3_k_m", "tiny-q2_k", "tiny-f16", "tiny-bf16"} {
		t.Run(name, func(t *testing.T) {
			path := modelPath(t, name)
			mapped, err := model.Open(path, gguf.Mapped, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer mapped.Close()
			private, err := model.Open(path, gguf.HugePages, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer private.Close()
			if !private.GGUF.Private() {
				t.Skip("no private copy of the weights on this system")
			}
			packed := 0
			pm := private.Model
			if pm.TokenEmbed.Packed() {
				packed++
			}
			if !pm.Config.TiedEmbed && pm.Output.Packed() {
				packed++
			}
			for _, ly := range pm.Layers {
				for _, w := range []tensor.Matrix{ly.Q, ly.K, ly.V, ly.O, ly.Gate, ly.Up, ly.Down} {
					if w.Packed() {
						packed++
					}
				}
			}
			if packed == 0 {
				t.Skip("no packed layout for these weights on this CPU")
			}
			if mapped.Model.Layers[0].Q.Packed() || mapped.Model.TokenEmbed.Packed() {
				t.Fatal("mapped weights packed")
			}
			if pm.TokenEmbed.Packed() != pm.Output.Packed() && pm.Config.TiedEmbed {
				t.Fatal("tied embeddings packed for one use only")
			}
			want, got := decodeLogits(t, mapped.Model), decodeLogits(t, private.Model)
			for i := range want {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("sequence %d: logits differ with %d packed matrices", i, packed)
				}
			}
		})
	}
}

// decodeLogits prefills three prompts together and decodes four steps of
// the three at once, returning each sequence's logits after every pass.
func decodeLogits(t *testing.T, m *model.Model) [][]float32 {
	ctx := context.Background()
	pool := tensor.NewPool(2)
	defer pool.Close()
	r, err := model.NewRunner(m, pool, 256, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(9, 9))
	const seqs, steps = 3, 4
	caches := make([]*model.SeqCache, seqs)
	batch := make([]model.Seq, seqs)
	for i := range batch {
		caches[i] = model.NewSeqCache(&m.Config, tensor.F16, 16)
		caches[i].Reserve(64)
		p := make([]int32, 10+7*i)
		for j := range p {
			p[j] = int32(3 + rng.IntN(m.Config.Vocab-3))
		}
		batch[i] = model.Seq{Cache: caches[i], Tokens: p}
	}
	var out [][]float32
	for step := 0; step <= steps; step++ {
		logits := make([][]float32, seqs)
		for i := range batch {
			logits[i] = make([]float32, m.Config.Vocab)
			batch[i].Logits = logits[i]
		}
		if err := r.Forward(ctx, batch); err != nil {
			t.Fatal(err)
		}
		out = append(out, logits...)
		for i := range batch {
			batch[i] = model.Seq{Cache: caches[i], Pos: batch[i].Pos + len(batch[i].Tokens), Tokens: []int32{int32(3 + rng.IntN(m.Config.Vocab-3))}}
		}
	}
	return out
}

// TestWidenedWeights: a file's Q5_0, Q4_1, Q5_1 and IQ4_NL matrices are
// widened to Q8_0 at load (tensor.Widen), IQ2_XXS's to Q8_K16 and IQ3_S's to
// Q6_K, into memory of their own, so packed for the CPU's kernels whatever
// the placement; the mapped and the private placement then give the same
// logits, and the private copy has given back the original bytes (their
// tensors' Data is gone). A token embedding apart from the output
// projection, only looked up, stays as it is. Where this CPU computes the
// type as fast in its own bytes (tensor.StreamedPreferred: in either
// placement, or packed in private memory), its matrices stay as they are
// instead, in that placement.
func TestWidenedWeights(t *testing.T) {
	for _, tc := range []struct {
		file string
		typ  tensor.DType
	}{
		{"tiny-q5_0", tensor.Q5_0}, {"tiny-q4_1", tensor.Q4_1}, {"tiny-q5_1", tensor.Q5_1}, {"tiny-iq4_nl", tensor.IQ4_NL},
		{"tiny-iq2_xxs", tensor.IQ2_XXS}, {"tiny-iq3_m", tensor.IQ3_S},
	} {
		path := modelPath(t, tc.file)
		mapped, err := model.Open(path, gguf.Mapped, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer mapped.Close()
		m := mapped.Model
		_, untied := mapped.GGUF.Tensor("output.weight")
		own := tensor.StreamedPreferred(tc.typ, false)
		if own {
			t.Logf("%s: %v computed in its own bytes on this CPU, not widened", tc.file, tc.typ)
			if len(m.Widening.Types) != 1 || !m.Widening.Types[0].Own || m.Widening.Types[0].Streamed == 0 {
				t.Fatalf("%s: plan %+v, want all of %v's matrices left in their own bytes", tc.file, m.Widening.Types, tc.typ)
			}
		}
		widens := func(ts gguf.Tensor) bool {
			return !own && ts.Type == tc.typ && !(untied && ts.Name == "token_embd.weight")
		}
		var want int64
		for _, ts := range mapped.GGUF.Tensors {
			if widens(ts) != m.Widening.Names[ts.Name] {
				t.Fatalf("%s: %s (%v) widened %v", tc.file, ts.Name, ts.Type, m.Widening.Names[ts.Name])
			}
			if widens(ts) {
				want += int64(tensor.WidenedRowBytes(tc.typ, ts.Cols()) * ts.Rows())
			}
		}
		if (want == 0) != own || m.WidenedBytes != want {
			t.Fatalf("%s: widened %d bytes, want %d", tc.file, m.WidenedBytes, want)
		}
		wt, _ := tensor.WidenedType(tc.typ)
		widened, kept := 0, 0
		for i, ly := range m.Layers {
			for _, w := range []tensor.Matrix{ly.Q, ly.K, ly.V, ly.O, ly.Gate, ly.Up, ly.Down} {
				if w.Type == tc.typ && !own || (w.Type == wt && (own || w.Packed() != tensor.Packable(wt))) {
					t.Fatalf("%s layer %d: a matrix loaded as %v, packed %v", tc.file, i, w.Type, w.Packed())
				}
				if w.Type == wt {
					widened++
				}
				if w.Type == tc.typ {
					kept++
				}
			}
		}
		if widened == 0 && kept == 0 {
			t.Fatalf("%s: no layer matrix is %v or %v", tc.file, wt, tc.typ)
		}
		private, err := model.Open(path, gguf.HugePages, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer private.Close()
		same := m // the mapped model of the private copy's plan
		if private.GGUF.Private() {
			ownPrivate := tensor.StreamedPreferred(tc.typ, true)
			if pw := private.Model.Widening; ownPrivate && (len(pw.Types) != 1 || !pw.Types[0].Own || len(pw.Names) != 0) {
				t.Fatalf("%s: private plan %+v, want all of %v's matrices left in their own bytes", tc.file, pw, tc.typ)
			}
			for _, ts := range private.GGUF.Tensors {
				if widened := widens(ts) && !ownPrivate; widened != (ts.Data == nil) {
					t.Fatalf("%s: private copy's %s (%v) has %d bytes after load", tc.file, ts.Name, ts.Type, len(ts.Data))
				}
			}
			if ownPrivate != own {
				// Packed in private memory, widened on a mapping: the
				// same bits where the widened kernels' float steps are
				// the streamed ones', not for the minima's products
				// (Q4_1, Q5_1: the widened copy adds them by the F16
				// kernels). The load probe's mapping, which shares the
				// copy's plan, computes in its own bytes too.
				t.Logf("%s: %v computed in its own bytes on this CPU only packed in private memory", tc.file, tc.typ)
				shared, err := model.OpenWith(path, gguf.Mapped, nil, model.Options{WidenLimit: model.NoWidenLimit, WidenedFrom: private.Model})
				if err != nil {
					t.Fatal(err)
				}
				defer shared.Close()
				if sw := shared.Model.Widening; len(sw.Names) != 0 || !sw.Types[0].Own {
					t.Fatalf("%s: the probe's mapping plans %+v, want the private copy's", tc.file, sw)
				}
				if tc.typ == tensor.Q4_1 || tc.typ == tensor.Q5_1 {
					same = shared.Model
				} else {
					compareLogits(t, tc.file+" (the probe's mapping)", decodeLogits(t, shared.Model), decodeLogits(t, private.Model))
				}
			}
		}
		compareLogits(t, tc.file, decodeLogits(t, same), decodeLogits(t, private.Model))
	}
}

// compareLogits fails t unless two placements' logits hold the same bits.
func compareLogits(t *testing.T, file string, want, got [][]float32) {
	t.Helper()
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Fatalf("%s sequence %d: logits differ between the placements", file, i)
		}
	}
}

// TestWidenedShared: a model loaded with WidenedFrom (the load probe's
// mapping beside a private copy) takes the other model's widened matrices
// instead of widening its own — the same memory, the same logits as a model
// that widens its own, still after the other is closed — and refuses a
// model that widened other matrices.
func TestWidenedShared(t *testing.T) {
	for _, file := range []string{"tiny-iq2_xxs", "tiny-iq3_m"} { // widened on every CPU
		path := modelPath(t, file)
		private, err := model.Open(path, gguf.HugePages, nil)
		if err != nil {
			t.Fatal(err)
		}
		shared, err := model.OpenWith(path, gguf.Mapped, nil, model.Options{WidenLimit: model.NoWidenLimit, WidenedFrom: private.Model})
		if err != nil {
			t.Fatal(err)
		}
		defer shared.Close()
		own, err := model.Open(path, gguf.Mapped, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer own.Close()
		if shared.Model.WidenedBytes != private.Model.WidenedBytes || shared.Model.WidenedBytes == 0 {
			t.Fatalf("%s: shared widened bytes %d, the private copy's %d", file, shared.Model.WidenedBytes, private.Model.WidenedBytes)
		}
		names := []string{"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"}
		sharedN := 0
		for i := range shared.Model.Layers {
			s, p := &shared.Model.Layers[i], &private.Model.Layers[i]
			for j, pair := range [][2]*tensor.Matrix{{&s.Q, &p.Q}, {&s.K, &p.K}, {&s.V, &p.V}, {&s.O, &p.O}, {&s.Gate, &p.Gate}, {&s.Up, &p.Up}, {&s.Down, &p.Down}} {
				name := fmt.Sprintf("blk.%d.%s.weight", i, names[j])
				widened := shared.Model.Widening.Names[name]
				if same := &pair[0].Data[0] == &pair[1].Data[0]; same != widened {
					t.Fatalf("%s: %s widened %v, shares the private copy's memory %v", file, name, widened, same)
				}
				if widened {
					sharedN++
				}
			}
		}
		if sharedN == 0 {
			t.Fatalf("%s: no widened matrix shared with the private copy", file)
		}
		want := decodeLogits(t, own.Model)
		private.Close()
		runtime.GC()
		got := decodeLogits(t, shared.Model)
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Fatalf("%s sequence %d: logits with shared widened matrices differ from a model's own", file, i)
			}
		}
		unwidened, err := model.OpenWith(path, gguf.Mapped, nil, model.Options{WidenLimit: 0})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := model.OpenWith(path, gguf.Mapped, nil, model.Options{WidenLimit: model.NoWidenLimit, WidenedFrom: unwidened.Model}); err == nil {
			t.Errorf("%s: shared the matrices of a model that widened none", file)
		}
		unwidened.Close()
	}
}
