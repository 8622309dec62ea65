package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/sample"
)

// CalibrateOptions configures Calibrate. The zero value of each field means
// its default.
type CalibrateOptions struct {
	// MaxPrompt is the longest prompt measured (default 2048, at most half
	// the model's context).
	MaxPrompt int
	// MaxBatch is the most sequences decoded together (default 32).
	MaxBatch int
	// Seed makes the random prompts (default 1).
	Seed uint64
	// Progress, when set, hears each phase's name.
	Progress func(phase string)
	// Extra are passes measured elsewhere on the same model and settings
	// (a server's real traffic, recorded with serve --record-passes), fitted
	// together with the calibration's own.
	Extra []Pass
	// OnlyExtra fits Extra alone: the calibration workload does not run.
	OnlyExtra bool
}

// Calibrate measures the real engine on f — prompts of many lengths alone,
// then batches of many sizes decoding at short and long contexts — and
// fits a Cost to its passes. cfg is the engine configuration to measure
// under (a server's --max-batch-tokens matters: it sets the prefill
// chunks). The profile's Model, CPU, Threads and WeightBytes are the
// caller's to fill in.
func Calibrate(ctx context.Context, f forwarder, cfg engine.Config, o CalibrateOptions) (*Profile, []Pass, error) {
	if o.OnlyExtra {
		cost, report, err := Fit(o.Extra)
		if err != nil {
			return nil, o.Extra, err
		}
		return &Profile{Shape: ShapeOf(f.Shape()), Cost: cost, Fit: report}, o.Extra, nil
	}
	rec := NewRecorder(f)
	e, err := engine.New(rec, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: calibrate: %w", err)
	}
	defer e.Close()
	shape := e.Shape()
	if o.MaxPrompt <= 0 {
		o.MaxPrompt = 2048
	}
	o.MaxPrompt = min(o.MaxPrompt, e.Config().MaxContext/2)
	if o.MaxBatch <= 0 {
		o.MaxBatch = 32
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x6b76))
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(rng.IntN(shape.Vocab))
		}
		return p
	}
	run := func(phase string, batch, promptLen, outLen int) error {
		if o.Progress != nil {
			o.Progress(phase)
		}
		streams := make([]*engine.Stream, 0, batch)
		for range batch {
			s, err := e.Submit(ctx, engine.Request{Prompt: prompt(promptLen), MaxTokens: outLen, IgnoreEOS: true,
				Sampling: sample.Params{TopP: 1}})
			if err != nil {
				return fmt.Errorf("sim: calibrate %s: %w", phase, err)
			}
			streams = append(streams, s)
		}
		var buf []engine.Output
		for _, s := range streams {
			for {
				var err error
				buf, err = s.Recv(ctx, buf[:0])
				if errors.Is(err, engine.ErrDone) {
					break
				}
				if err != nil {
					return fmt.Errorf("sim: calibrate %s: %w", phase, err)
				}
				for _, ev := range buf {
					if ev.Err != nil {
						return fmt.Errorf("sim: calibrate %s: %w", phase, ev.Err)
					}
				}
			}
		}
		return nil
	}
	// Warm the caches and the pool's threads, then start recording.
	if err := run("warm-up", 2, 64, 8); err != nil {
		return nil, nil, err
	}
	rec.reset()
	for n := 16; n <= o.MaxPrompt; n *= 2 {
		if err := run(fmt.Sprintf("prefill %d", n), 1, n, 1); err != nil {
			return nil, nil, err
		}
	}
	const outLen = 24
	for _, long := range []bool{false, true} {
		for b := 1; b <= o.MaxBatch; b *= 2 {
			ctxLen := 16
			if long {
				// Long contexts at smaller batches: the prefill of b long
				// prompts is the costly part of the calibration.
				if ctxLen = min(o.MaxPrompt, 4096/b); ctxLen < 128 {
					break
				}
			}
			if err := run(fmt.Sprintf("decode ×%d at %d", b, ctxLen), b, ctxLen, outLen); err != nil {
				return nil, nil, err
			}
		}
	}
	passes := append(rec.Passes(), o.Extra...)
	cost, report, err := Fit(passes)
	if err != nil {
		return nil, passes, err
	}
	return &Profile{Shape: ShapeOf(shape), Cost: cost, Fit: report}, passes, nil
}
