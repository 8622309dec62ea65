package model_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/tensor"
)

// TestAgainstFloat64Reference compares the engine's forward pass with a
// deliberately plain float64 implementation of each architecture, written
// from the architectures' definitions and sharing no code with the model
// package. It is the only end-to-end check for qwen3, which the llama.cpp
// build the golden files came from predates; for llama and qwen2 it
// complements the golden tests.
func TestAgainstFloat64Reference(t *testing.T) {
	for _, arch := range []string{"llama", "qwen2", "qwen3"} {
		t.Run(arch, func(t *testing.T) {
			path := writeSynthetic(t, arch, 11)
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := model.Load(f)
			if err != nil {
				t.Fatal(err)
			}
			ref := newRefModel(t, f, m)
			pool := tensor.NewPool(2)
			defer pool.Close()
			r, err := model.NewRunner(m, pool, 64, tensor.F32)
			if err != nil {
				t.Fatal(err)
			}
			cache := model.NewSeqCache(&m.Config, tensor.F32, 16)
			cache.Reserve(64)
			tokens := []int32{7, 300, 41, 99, 250, 3, 17, 480, 133, 64, 12, 200}
			logits := make([]float32, m.Config.Vocab)
			// Prefill the first 8 tokens in one pass, then decode one at a time.
			seqs := [][]int32{tokens[:8], tokens[8:9], tokens[9:10], tokens[10:11], tokens[11:12]}
			pos := 0
			for _, chunk := range seqs {
				if err := r.Forward(context.Background(), []model.Seq{{Cache: cache, Pos: pos, Tokens: chunk, Logits: logits}}); err != nil {
					t.Fatal(err)
				}
				pos += len(chunk)
				want := ref.logits(tokens[:pos])
				var maxDiff, scale float64
				for i, w := range want {
					maxDiff = max(maxDiff, math.Abs(float64(logits[i])-w))
					scale = max(scale, math.Abs(w))
				}
				if maxDiff > 1e-4*scale+1e-4 {
					t.Fatalf("after %d tokens: logits differ from the float64 reference by %.3g (largest logit %.3g)", pos, maxDiff, scale)
				}
			}
		})
	}
}

func writeSynthetic(t *testing.T, arch string, seed uint64) string {
	t.Helper()
	shape, err := synth.LookupShape("tiny", arch)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := synth.New(shape, synth.FileF32)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tiny-"+arch+".gguf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sm.WriteTo(out, synth.Options{Seed: seed}); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// refModel is the float64 reference.
type refModel struct {
	cfg    model.Config
	get    func(name string) []float64
	layers int
}

func newRefModel(t *testing.T, f *gguf.File, m *model.Model) *refModel {
	return &refModel{cfg: m.Config, layers: m.Config.Layers, get: func(name string) []float64 {
		ts, ok := f.Tensor(name)
		if !ok {
			return nil
		}
		if ts.Type != tensor.F32 {
			t.Fatalf("reference model needs F32 tensors, %s is %s", name, ts.Type)
		}
		out := make([]float64, len(ts.Data)/4)
		for i := range out {
			out[i] = float64(math.Float32frombits(uint32(ts.Data[4*i]) | uint32(ts.Data[4*i+1])<<8 | uint32(ts.Data[4*i+2])<<16 | uint32(ts.Data[4*i+3])<<24))
		}
		return out
	}}
}

// matvec computes W·x for W stored as rows of len(x).
func matvec(w, x []float64) []float64 {
	n := len(x)
	out := make([]float64, len(w)/n)
	for r := range out {
		var s float64
		for c := 0; c < n; c++ {
			s += w[r*n+c] * x[c]
		}
		out[r] = s
	}
	return out
}

func rmsnorm(x, w []float64, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	scale := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v * scale * w[i]
	}
	return out
}

// rope rotates one head at position pos.
func rope(x []float64, pos int, base float64, neox bool) {
	d := len(x)
	for i := 0; i < d/2; i++ {
		theta := float64(pos) * math.Pow(base, -2*float64(i)/float64(d))
		c, s := math.Cos(theta), math.Sin(theta)
		a, b := 2*i, 2*i+1
		if neox {
			a, b = i, i+d/2
		}
		x[a], x[b] = x[a]*c-x[b]*s, x[a]*s+x[b]*c
	}
}

func addInto(x, b []float64) {
	for i := range b {
		x[i] += b[i]
	}
}

// logits runs the whole sequence from scratch and returns the last
// position's logits.
func (r *refModel) logits(tokens []int32) []float64 {
	c := &r.cfg
	E, hd := c.Embed, c.HeadDim
	eps := float64(c.NormEps)
	emb := r.get("token_embd.weight")
	xs := make([][]float64, len(tokens))
	for i, tok := range tokens {
		xs[i] = append([]float64(nil), emb[int(tok)*E:(int(tok)+1)*E]...)
	}
	neox := c.Arch != model.ArchLlama
	for l := 0; l < r.layers; l++ {
		p := "blk." + itoa(l) + "."
		qs, ks, vs := make([][]float64, len(xs)), make([][]float64, len(xs)), make([][]float64, len(xs))
		for i, x := range xs {
			h := rmsnorm(x, r.get(p+"attn_norm.weight"), eps)
			q, k, v := matvec(r.get(p+"attn_q.weight"), h), matvec(r.get(p+"attn_k.weight"), h), matvec(r.get(p+"attn_v.weight"), h)
			if b := r.get(p + "attn_q.bias"); b != nil {
				addInto(q, b)
				addInto(k, r.get(p+"attn_k.bias"))
				addInto(v, r.get(p+"attn_v.bias"))
			}
			for hh := 0; hh < c.Heads; hh++ {
				head := q[hh*hd : (hh+1)*hd]
				if qn := r.get(p + "attn_q_norm.weight"); qn != nil {
					copy(head, rmsnorm(head, qn, eps))
				}
				rope(head, i, float64(c.Rope.Base), neox)
			}
			for hh := 0; hh < c.KVHeads; hh++ {
				head := k[hh*hd : (hh+1)*hd]
				if kn := r.get(p + "attn_k_norm.weight"); kn != nil {
					copy(head, rmsnorm(head, kn, eps))
				}
				rope(head, i, float64(c.Rope.Base), neox)
			}
			qs[i], ks[i], vs[i] = q, k, v
		}
		group := c.Heads / c.KVHeads
		for i := range xs {
			attn := make([]float64, c.Heads*hd)
			for hh := 0; hh < c.Heads; hh++ {
				kvh := hh / group
				q := qs[i][hh*hd : (hh+1)*hd]
				scores := make([]float64, i+1)
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					var s float64
					for d := 0; d < hd; d++ {
						s += q[d] * ks[j][kvh*hd+d]
					}
					scores[j] = s / math.Sqrt(float64(hd))
					mx = max(mx, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - mx)
					sum += scores[j]
				}
				for j := range scores {
					for d := 0; d < hd; d++ {
						attn[hh*hd+d] += scores[j] / sum * vs[j][kvh*hd+d]
					}
				}
			}
			addInto(xs[i], matvec(r.get(p+"attn_output.weight"), attn))
			h := rmsnorm(xs[i], r.get(p+"ffn_norm.weight"), eps)
			g, u := matvec(r.get(p+"ffn_gate.weight"), h), matvec(r.get(p+"ffn_up.weight"), h)
			for j := range g {
				g[j] = g[j] / (1 + math.Exp(-g[j])) * u[j]
			}
			addInto(xs[i], matvec(r.get(p+"ffn_down.weight"), g))
		}
	}
	last := rmsnorm(xs[len(xs)-1], r.get("output_norm.weight"), eps)
	out := r.get("output.weight")
	if out == nil {
		out = emb
	}
	return matvec(out, last)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
