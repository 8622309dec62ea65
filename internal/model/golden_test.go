package model_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/testshared"
)

type refFile struct {
	Model string    `json:"model"`
	NCtx  int       `json:"n_ctx"`
	Cases []refCase `json:"cases"`
}

type refCase struct {
	PromptTokens    []int32     `json:"prompt_tokens"`
	GeneratedTokens []int32     `json:"generated_tokens"`
	TopProbs        [][]refProb `json:"top_probs"`
	Stop            string      `json:"stop"`
}

type refProb struct {
	ID int32   `json:"id"`
	P  float64 `json:"p"`
}

// Tolerances on top-5 probabilities, per weight type, absolute.
//
// Why these numbers: llama.cpp and this engine do the same arithmetic on the
// same rounded operands (f16 K/V, f16 queries and softmax weights,
// activations quantised to Q8_0/Q8_K or rounded to f16/bf16 before the dot
// products), so they differ only in float summation order and in libm
// details, i.e. by an ulp or so per operation. A model amplifies such ulps
// wherever a value sits near a rounding boundary of one of those roundings:
// one activation landing on the other side of a Q8_0 step changes it by 1/127
// of its block's range. TestNoiseFloor (run with KVSERVE_NOISE=1) measures
// that amplification directly: it perturbs the input embeddings by ±1 ulp
// (±2^-22 relative, four random sign patterns) and compares the engine with
// itself. Worst top-5 |Δp| per file:
//
//	file              self-noise  vs llama.cpp
//	aidreams260K-f32   2.7e-4      0.9e-4
//	tiny-f32           3.2e-4      1.8e-4
//	tiny-f16           1.5e-3      0.8e-3
//	tiny-bf16          4.4e-3      5.6e-3
//	tiny-q8_0          1.8e-2      0.9e-2
//	tiny-q4_0          1.8e-2      1.8e-2
//	tiny-q4_k_m        2.8e-2      1.7e-2
//	tiny-q6_k          2.3e-2      1.0e-2
//	tiny-qwen2-f32     8.2e-4      1.5e-4
//	tiny-qwen2-q8_0    2.1e-2      2.7e-2
//	tiny-q5_0          2.4e-2      1.2e-2
//	tiny-q5_k_m        4.4e-2      2.3e-2
//	tiny-q4_1          2.4e-2      1.4e-2
//	tiny-q5_1          1.8e-2      1.5e-2
//	tiny-iq4_nl        3.7e-2      1.5e-2
//	tiny-q3_k_m        5.4e-2      3.8e-2
//	tiny-q2_k          2.5e-2      1.4e-2
//	tiny-iq4_xs        5.2e-2      1.6e-2
//	tiny-iq3_xxs       3.4e-2      2.4e-2
//	tiny-iq3_m         4.5e-2      3.3e-2
//	tiny-iq2_xxs       2.1e-2      2.3e-2
//	tiny-iq2_xs        3.3e-2      2.6e-2
//	tiny-iq2_m         4.3e-2      2.4e-2
//	tiny-iq1_s         2.9e-2      3.3e-2
//	tiny-iq1_m         3.5e-2      2.1e-2
//
// The difference to llama.cpp is of the size a single ulp of input noise
// produces in the same file (at most 1.3× the worst of four draws). Each
// tolerance is about 1.5× the worst self-noise of its type; a real defect (a
// wrong scale, a missing bias, a mis-rotated head, a wrong block layout)
// moves probabilities by 1e-1 and flips greedy tokens far from ties, which
// the greedy check below catches on its own.
var probTolerance = map[tensor.DType]float64{
	tensor.F32:     1.5e-3,
	tensor.F16:     2.5e-3,
	tensor.BF16:    1e-2,
	tensor.Q8_0:    3.5e-2,
	tensor.Q4_0:    3.5e-2,
	tensor.Q5_0:    3.5e-2,
	tensor.Q4_1:    3.5e-2,
	tensor.Q5_1:    3.5e-2,
	tensor.IQ4_NL:  5.5e-2,
	tensor.Q3_K:    8e-2,
	tensor.Q2_K:    4.5e-2,
	tensor.IQ4_XS:  8e-2,
	tensor.IQ3_XXS: 5e-2,
	tensor.IQ3_S:   6.5e-2,
	tensor.IQ2_XXS: 3.5e-2,
	tensor.IQ2_XS:  5e-2,
	tensor.IQ2_S:   6.5e-2,
	tensor.IQ1_S:   4.5e-2,
	tensor.IQ1_M:   5.5e-2,
	tensor.Q4_K:    4.5e-2,
	tensor.Q5_K:    6.5e-2,
	tensor.Q6_K:    4.5e-2,
}

// nearTie is the reference's top-1/top-2 probability gap below which a
// different greedy choice is accepted (issue 2's rule).
const nearTie = 0.02

var goldenModels = []string{
	"aidreams260K-f32",
	"tiny-f32", "tiny-f16", "tiny-bf16", "tiny-q8_0", "tiny-q4_0", "tiny-q4_k_m", "tiny-q6_k",
	"tiny-qwen2-f32", "tiny-qwen2-q8_0",
	// the repository's own (testdata/README.md)
	"tiny-q5_0", "tiny-q5_k_m", "tiny-q4_1", "tiny-q5_1", "tiny-iq4_nl", "tiny-q3_k_m", "tiny-q2_k", "tiny-iq4_xs",
	"tiny-iq3_xxs", "tiny-iq3_m", "tiny-iq2_xxs", "tiny-iq2_xs", "tiny-iq2_m", "tiny-iq1_s", "tiny-iq1_m",
}

// modelPath is the path of test model name (no extension): the
// repository's own testdata/ if it is there, else the shared data's.
func modelPath(t testing.TB, name string) string {
	t.Helper()
	if p := testshared.Own(t, "models", name+".gguf"); fileExists(p) {
		return p
	}
	return testshared.Path(t, "models", name+".gguf")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// goldenFiles reads the reference outputs of golden model name and returns
// them with the model file's path (modelPath): from the shared data, or
// from the repository's own testdata/ for the files it made itself.
func goldenFiles(t testing.TB, name string) (refFile, string) {
	t.Helper()
	refPath := testshared.Own(t, "reference", name+".json")
	if !fileExists(refPath) {
		refPath = testshared.Path(t, "testdata", "reference", name+".json")
	}
	raw, err := os.ReadFile(refPath)
	if err != nil {
		t.Fatal(err)
	}
	var ref refFile
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatalf("%s: %v", refPath, err)
	}
	return ref, modelPath(t, strings.TrimSuffix(ref.Model, ".gguf"))
}

func loadModel(t testing.TB, path string) (*model.Model, func()) {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(f)
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	return m, func() { f.Close() }
}

// weightType is the type of the bulk of a model's matrices (its FFN), which
// decides the tolerance.
// (the file's type: the loader may have widened it).
func weightType(t testing.TB, path string) tensor.DType {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tt, ok := f.Tensor("blk.0.ffn_gate.weight")
	if !ok {
		t.Fatalf("%s: no blk.0.ffn_gate.weight", path)
	}
	return tt.Type
}

func TestGolden(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, name := range goldenModels {
		t.Run(name, func(t *testing.T) {
			ref, path := goldenFiles(t, name)
			m, closeFn := loadModel(t, path)
			defer closeFn()
			tol := probTolerance[weightType(t, path)]
			worst := checkCases(t, m, pool, ref, tol)
			t.Logf("%s: worst top-5 probability difference %.2e (tolerance %.1e)", name, worst, tol)
		})
	}
}

// TestGoldenStreamed runs the golden cases of the files with matrices of a
// type the loader widens (tensor.Widen) with none widened (a WidenLimit of
// 0): computed in their own bytes, streamed, they must match llama.cpp
// within streamedTolerance times the type's tolerance.
//
// Streamed, the IQ1 and IQ3 types run Q8_K16's kernels instead of Q6_K's,
// and Q4_1's and Q5_1's minima are summed in another order: the same
// integer sums, other float steps. On these tiny random models that alone
// moves the top-5 probabilities (teacher-forced, streamed against widened)
// by up to 5.3e-2 (IQ1_M; IQ3_M 3.8e-2, IQ1_S 2.4e-2, IQ3_XXS 2.2e-2, Q4_1
// 1.6e-2, Q5_1 1.4e-2), more than an ulp of input noise does (TestNoiseFloor:
// IQ1_M 3.5e-2 over 24 draws): IQ1_M streamed is 5.9e-2 from llama.cpp.
const streamedTolerance = 1.25

func TestGoldenStreamed(t *testing.T) {
	pool := tensor.NewPool(2)
	defer pool.Close()
	for _, name := range goldenModels {
		ref, path := goldenFiles(t, name)
		f, err := gguf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		m, err := model.LoadWith(f, model.Options{WidenLimit: 0})
		if err != nil {
			t.Fatal(err)
		}
		if m.Widening.Streamed() == 0 {
			f.Close()
			continue
		}
		t.Run(name, func(t *testing.T) {
			if m.WidenedBytes != 0 {
				t.Fatalf("%d bytes widened with a limit of 0", m.WidenedBytes)
			}
			tol := streamedTolerance * probTolerance[weightType(t, path)]
			worst := checkCases(t, m, pool, ref, tol)
			t.Logf("%s, %d matrices streamed: worst top-5 probability difference %.2e (tolerance %.1e)", name, m.Widening.Streamed(), worst, tol)
		})
		f.Close()
	}
}

// checkCases runs every reference case of ref on m (checkCase) and returns
// the largest probability difference.
func checkCases(t *testing.T, m *model.Model, pool *tensor.Pool, ref refFile, tol float64) float64 {
	t.Helper()
	r, err := model.NewRunner(m, pool, 128, tensor.F16)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for ci, c := range ref.Cases {
		worst = max(worst, checkCase(t, r, ci, c, tol))
	}
	return worst
}

// checkCase runs one reference case twice: free-running greedy generation,
// which must reproduce the reference tokens up to the first near-tie, and
// teacher-forced on the reference tokens, where every position's top-5
// probabilities must match. It returns the largest probability difference.
func checkCase(t *testing.T, r *model.Runner, ci int, c refCase, tol float64) float64 {
	ctx := context.Background()
	cfg := &r.Model().Config
	logits := make([]float32, cfg.Vocab)
	probs := make([]float64, cfg.Vocab)

	// Free-running greedy.
	cache := model.NewSeqCache(cfg, tensor.F16, 16)
	cache.Reserve(len(c.PromptTokens) + len(c.GeneratedTokens))
	seq := model.Seq{Cache: cache, Tokens: c.PromptTokens, Logits: logits}
	for i, want := range c.GeneratedTokens {
		if err := r.Forward(ctx, []model.Seq{seq}); err != nil {
			t.Fatal(err)
		}
		got := argmax(logits)
		if got != want {
			top := c.TopProbs[i]
			if top[0].P-top[1].P >= nearTie {
				t.Errorf("case %d: greedy token %d is %d, reference %d (reference top-2 %.4f vs %.4f is not a near-tie)",
					ci, i, got, want, top[0].P, top[1].P)
			} else {
				t.Logf("case %d: greedy diverges at token %d at a near-tie (%.4f vs %.4f)", ci, i, top[0].P, top[1].P)
			}
			break
		}
		seq.Pos += len(seq.Tokens)
		seq.Tokens = []int32{got}
	}

	// Teacher-forced probabilities.
	cache = model.NewSeqCache(cfg, tensor.F16, 16)
	cache.Reserve(len(c.PromptTokens) + len(c.GeneratedTokens))
	seq = model.Seq{Cache: cache, Tokens: c.PromptTokens, Logits: logits}
	var worst float64
	for i, top := range c.TopProbs {
		if err := r.Forward(ctx, []model.Seq{seq}); err != nil {
			t.Fatal(err)
		}
		softmax64(probs, logits)
		for _, p := range top {
			d := math.Abs(probs[p.ID] - p.P)
			worst = max(worst, d)
			if d > tol {
				t.Errorf("case %d position %d: p(%d) = %.6f, reference %.6f (diff %.2e > %.0e)", ci, i, p.ID, probs[p.ID], p.P, d, tol)
			}
		}
		seq.Pos += len(seq.Tokens)
		seq.Tokens = []int32{c.GeneratedTokens[i]}
	}
	return worst
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func softmax64(dst []float64, logits []float32) {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	var sum float64
	for i, v := range logits {
		dst[i] = math.Exp(float64(v) - mx)
		sum += dst[i]
	}
	for i := range dst {
		dst[i] /= sum
	}
}
