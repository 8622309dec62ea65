package model_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/tensor"
)

// benchModel opens the SmolLM2-135M-shaped Q8_0 model the decode benchmarks
// run on: $KVSERVE_BENCH_MODEL, else the synthetic models directory beside the
// checkout (../synth-models, as `kvserve model synth` writes it), else a copy
// synthesized into a temporary directory (a few seconds).
func benchModel(b *testing.B) *model.Model {
	b.Helper()
	path := os.Getenv("KVSERVE_BENCH_MODEL")
	if path == "" {
		_, file, _, _ := runtime.Caller(0)
		path = filepath.Join(filepath.Dir(file), "..", "..", "..", "synth-models", "smollm2-135m-q8_0.gguf")
		if _, err := os.Stat(path); err != nil {
			path = synthSmolLM2(b)
		}
	}
	// The weights as `kvserve serve` places them by default on a machine
	// with transparent huge pages; KVSERVE_BENCH_MEMORY=mmap for the mapping.
	placement := gguf.HugePages
	if os.Getenv("KVSERVE_BENCH_MEMORY") == "mmap" {
		placement = gguf.Mapped
	}
	mf, err := model.Open(path, placement, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { mf.Close() })
	return mf.Model
}

func synthSmolLM2(b *testing.B) string {
	shape, err := synth.LookupShape("smollm2-135m", "")
	if err != nil {
		b.Fatal(err)
	}
	sm, err := synth.New(shape, synth.FileQ8_0)
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "smollm2-135m-q8_0.gguf")
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := sm.WriteTo(out, synth.Options{Seed: 1}); err != nil {
		b.Fatal(err)
	}
	if err := out.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// processCPU is the CPU time (user + system) of the whole process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchKVType is the KV element type of BenchmarkDecode: f16, or
// $KVSERVE_BENCH_KV (f16, q8_0 or f32).
func benchKVType(b *testing.B) tensor.DType {
	switch kv := os.Getenv("KVSERVE_BENCH_KV"); kv {
	case "", "f16":
		return tensor.F16
	case "q8_0":
		return tensor.Q8_0
	case "f32":
		return tensor.F32
	default:
		b.Fatalf("KVSERVE_BENCH_KV=%q: want f16, q8_0 or f32", kv)
		return 0
	}
}

// BenchmarkDecode measures steady-state batched decode as the engine runs
// it: n sequences with 128 tokens of context each (prefilled once), then
// passes of one new token per sequence, every sequence asking for logits.
// The context stays between 128 and 256 tokens (each sequence's cache is cut
// back when it fills), as in `kvserve bench engine --scenario batch-decode`.
// It reports tokens per second of wall time, CPU milliseconds per pass
// (process CPU time, which includes the pool's spinning; steadier than wall
// time on a shared machine) and the 10th percentile of the passes' wall
// times (steadier still when the machine's speed drifts during the run).
// Keys and values are f16 unless KVSERVE_BENCH_KV says otherwise:
//
//	go test ./internal/model -run '^$' -bench Decode -benchtime 100x
//	KVSERVE_BENCH_KV=q8_0 go test ./internal/model -run '^$' -bench 'Decode/' -benchtime 100x
func BenchmarkDecode(b *testing.B) {
	m := benchModel(b)
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("batch%d", n), func(b *testing.B) {
			benchDecode(b, m, n)
		})
	}
}

func benchDecode(b *testing.B, m *model.Model, n int) {
	const prompt, maxCtx = 128, 256
	ctx := context.Background()
	pool := tensor.NewPool(2)
	defer pool.Close()
	kvType := benchKVType(b)
	r, err := model.NewRunner(m, pool, 512, kvType)
	if err != nil {
		b.Fatal(err)
	}
	caches := make([]model.Cache, n)
	for i := range caches {
		c := model.NewSeqCache(&m.Config, kvType, 16)
		c.Reserve(maxCtx)
		caches[i] = c
		p := make([]int32, prompt)
		for j := range p {
			p[j] = int32(100 + 7*i + 3*j)
		}
		if err := r.Forward(ctx, []model.Seq{{Cache: c, Tokens: p}}); err != nil {
			b.Fatal(err)
		}
	}
	decodePasses(b, r, caches, prompt, maxCtx, func(pos, i int) int32 { return int32(200 + i + pos) })
}

// decodePasses times b.N forward passes of one new token (tok(pos, i)) for
// each sequence i of caches, all at position pos: start, start+1, …, and
// back to start when end is reached (the same positions are rewritten). It
// reports tokens per second of wall time, process CPU milliseconds per pass
// and the 10th percentile of the passes' wall times.
func decodePasses(b *testing.B, r *model.Runner, caches []model.Cache, start, end int, tok func(pos, i int) int32) {
	ctx := context.Background()
	n := len(caches)
	logits := make([][]float32, n)
	for i := range logits {
		logits[i] = make([]float32, r.Model().Config.Vocab)
	}
	batch := make([]model.Seq, n)
	pos := start
	cpu0 := processCPU()
	var passMS []float64
	for b.Loop() {
		if pos == end {
			pos = start
		}
		for i := range batch {
			batch[i] = model.Seq{Cache: caches[i], Pos: pos, Tokens: []int32{tok(pos, i)}, Logits: logits[i]}
		}
		t0 := time.Now()
		if err := r.Forward(ctx, batch); err != nil {
			b.Fatal(err)
		}
		passMS = append(passMS, float64(time.Since(t0).Microseconds())/1e3)
		pos++
	}
	cpu := processCPU() - cpu0
	slices.Sort(passMS)
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "tok/s")
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/pass")
	b.ReportMetric(passMS[len(passMS)/10], "p10-ms/pass")
}

// BenchmarkDecodeSharedPrefix measures batched decode of 1, 4 and 16
// sequences that continue one 2,048-token prefix, each after its own
// 16-token question: shared/, their caches holding the prefix in the same
// blocks (as the engine's pool hands out a cached prefix, read once per
// group of tokens), and copied/, each holding its own copy of the same keys
// and values (what a cache without prefix sharing holds). Metrics as
// BenchmarkDecode's:
//
//	go test ./internal/model -run '^$' -bench DecodeSharedPrefix -benchtime 100x
func BenchmarkDecodeSharedPrefix(b *testing.B) {
	const prefixLen, question, maxGen, bs = 2048, 16, 64, 16
	m := benchModel(b)
	ctx := context.Background()
	pool := tensor.NewPool(2)
	defer pool.Close()
	r, err := model.NewRunner(m, pool, 512, tensor.F16)
	if err != nil {
		b.Fatal(err)
	}
	cfg := &m.Config
	tok := func(i int) int32 { return int32(100 + (i*7919)%(cfg.Vocab-100)) }
	base := model.NewSeqCache(cfg, tensor.F16, bs)
	base.Reserve(prefixLen)
	prefix := make([]int32, prefixLen)
	for i := range prefix {
		prefix[i] = tok(i)
	}
	for pos := 0; pos < prefixLen; pos += 512 {
		if err := r.Forward(ctx, []model.Seq{{Cache: base, Pos: pos, Tokens: prefix[pos : pos+512]}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bm := range []struct {
		n    int
		mode string
	}{{1, "shared"}, {4, "shared"}, {4, "copied"}, {16, "shared"}, {16, "copied"}} {
		n, mode := bm.n, bm.mode
		b.Run(fmt.Sprintf("batch%d/%s", n, mode), func(b *testing.B) {
			shared := prefixLen / bs
			if mode == "copied" {
				shared = 0
			}
			caches := make([]model.Cache, n)
			for i := range caches {
				own := model.NewSeqCache(cfg, tensor.F16, bs)
				own.Reserve(prefixLen + question + maxGen)
				for l := range cfg.Layers {
					for blk := shared; blk < prefixLen/bs; blk++ {
						k, v := base.Block(l, blk)
						ok, ov := own.Block(l, blk)
						copy(ok, k)
						copy(ov, v)
					}
				}
				caches[i] = &forkCache{base: base, shared: shared, own: own}
				q := make([]int32, question)
				for j := range q {
					q[j] = tok(prefixLen + 31*i + j)
				}
				if err := r.Forward(ctx, []model.Seq{{Cache: caches[i], Pos: prefixLen, Tokens: q}}); err != nil {
					b.Fatal(err)
				}
			}
			decodePasses(b, r, caches, prefixLen+question, prefixLen+question+maxGen, func(pos, i int) int32 { return tok(pos + i) })
		})
	}
}
