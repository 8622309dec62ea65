package enginebench

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/testshared/sharedmodel"
)

func tinyModel(t *testing.T) *model.Model {
	return sharedmodel.Load(t, "tiny-q8_0.gguf")
}

// TestBatchDecodeRuns runs the one scenario that fits the tiny model's
// 256-token context end to end and checks its figures are sane.
func TestBatchDecodeRuns(t *testing.T) {
	m := tinyModel(t)
	// The tiny model decodes a whole sequence in milliseconds: on a loaded
	// machine the goroutine submitting the 16 requests can be descheduled
	// between two submissions long enough for the first to finish before
	// the last starts. Real models' sequences take seconds; here a run may
	// be retried.
	var res Result
	var err error
	for try := 0; try < 3; try++ {
		if res, err = batchDecode(context.Background(), m, Options{Threads: 2}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"batch1_tok_s", "batch16_tok_s"} {
		v, ok := res[k].(float64)
		if !ok || v <= 0 {
			t.Fatalf("%s = %v", k, res[k])
		}
	}
	// The ratio is rounded to 2 decimals (on this tiny model batch 1 can be
	// so fast that it rounds to 0).
	ratio, ok := res["ratio"].(float64)
	if want := res["batch16_tok_s"].(float64) / res["batch1_tok_s"].(float64); !ok || math.Abs(ratio-want) > 0.005+1e-9 {
		t.Fatalf("ratio = %v, want %.4f", res["ratio"], want)
	}
	// Two threads have between about one and two cores' compute.
	if p, ok := res["compute_parallelism"].(float64); !ok || p < 0.5 || p > 2.5 {
		t.Fatalf("compute_parallelism = %v", res["compute_parallelism"])
	}
}

// TestComputeParallelismOneThread: one thread is one thread's worth.
func TestComputeParallelismOneThread(t *testing.T) {
	if p, err := computeParallelism(1); err != nil || p != 1 {
		t.Fatalf("computeParallelism(1) = %v, %v", p, err)
	}
}

// TestScenariosRefuseShortContext checks scenarios that need a longer
// context than the model has say so instead of failing obscurely.
func TestScenariosRefuseShortContext(t *testing.T) {
	m := tinyModel(t)
	for _, name := range []string{"prefix-ttft", "interleaved", "waste", "concurrency", "shared-prefix", "context-cache"} {
		s, err := Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Run(context.Background(), m, Options{Threads: 1}); err == nil || !strings.Contains(err.Error(), "context") {
			t.Errorf("%s on a 256-token model: %v", name, err)
		}
	}
	if _, err := Lookup("nope"); err == nil {
		t.Error("unknown scenario accepted")
	}
}

func TestSpeedRuns(t *testing.T) {
	m := tinyModel(t)
	res, err := Speed(context.Background(), m, SpeedOptions{Prompt: 16, Generate: 4, Threads: 1, Repetitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.PrefillTokS <= 0 || res.DecodeTokS <= 0 || res.PromptTokens != 16 || res.GenerateTokens != 4 {
		t.Fatalf("%+v", res)
	}
}

// TestSpeedDepth runs pp and tg after tokens already in the context, and
// refuses depths the model's context cannot hold.
func TestSpeedDepth(t *testing.T) {
	m := tinyModel(t)
	res, err := Speed(context.Background(), m, SpeedOptions{Prompt: 16, Generate: 4, Depth: 40, Threads: 1, Repetitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.PrefillTokS <= 0 || res.DecodeTokS <= 0 || res.Depth != 40 {
		t.Fatalf("%+v", res)
	}
	for _, depth := range []int{-1, m.Config.Context - 8} {
		if _, err := Speed(context.Background(), m, SpeedOptions{Prompt: 16, Generate: 4, Depth: depth, Threads: 1, Repetitions: 1}); err == nil {
			t.Errorf("depth %d with a %d-token context accepted", depth, m.Config.Context)
		}
	}
}
