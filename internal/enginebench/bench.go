// Package enginebench runs the engine's in-process benchmark scenarios:
// prefix-cache time to first token, cache survival across interleaved
// prompts, allocation waste and concurrency of paged vs contiguous KV,
// batched decode throughput, and shared-prefix hit rates. Each scenario
// reports one flat JSON-able object; `kvserve bench engine` prints them.
//
// Scenarios run real requests through real engines on the given model;
// prompts are random token ids (the content does not matter to the cost),
// generated with a fixed seed so runs are comparable.
package enginebench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// Options configure a benchmark run.
type Options struct {
	// Threads for the compute pool (default: all cores).
	Threads int
	// Scale shrinks the heavier scenarios' request counts (1 = as
	// specified; 0.25 = a quarter of the groups, requests...). Default 1.
	Scale float64
	// Log, when set, receives progress lines.
	Log func(format string, args ...any)
}

// Result is one scenario's figures.
type Result map[string]any

// Scenario is a named benchmark.
type Scenario struct {
	Name        string
	Description string
	Run         func(ctx context.Context, m *model.Model, o Options) (Result, error)
}

// Scenarios lists every scenario in the order `kvserve bench engine` runs
// them.
func Scenarios() []Scenario {
	return []Scenario{
		{"prefix-ttft", "TTFT of a 2,000-token cached prefix + 64 new tokens vs the same prompt cold", prefixTTFT},
		{"onboard", "TTFT of a 4,096-token prefix from the pool (G1), host memory (G2), disk (G3, also after a restart), and recomputed", onboard},
		{"interleaved", "prompt A, a different prompt B, then A + 64 tokens: is A still cached?", interleaved},
		{"waste", "KV slots allocated but unused, paged vs contiguous, mixed lengths", waste},
		{"concurrency", "sequences in flight and tokens/s at an equal KV budget, paged vs contiguous", concurrency},
		{"batch-decode", "decode tokens/s with 1 and with 16 concurrent sequences", batchDecode},
		{"shared-prefix", "64 groups × 16 prompts sharing a 2,048-token system prompt: prefix-cache hit rate", sharedPrefix},
		{"context-cache", "a 20,000-token document (or what the context holds) cached once, 200 questions of 50 tokens: TTFT and tokens computed, cache vs none", contextCache},
	}
}

// Lookup returns the scenario with the given name.
func Lookup(name string) (Scenario, error) {
	var names []string
	for _, s := range Scenarios() {
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	return Scenario{}, fmt.Errorf("enginebench: unknown scenario %q (have %v)", name, names)
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

func (o *Options) scaled(n int) int {
	s := o.Scale
	if s <= 0 {
		s = 1
	}
	return max(1, int(float64(n)*s+0.5))
}

// tokens returns n random token ids from the model's ordinary vocabulary.
func tokens(rng *rand.Rand, m *model.Model, n int) []int32 {
	out := make([]int32, n)
	lo, hi := 3, m.Config.Vocab
	if hi > 32000 {
		hi = 32000 // stay clear of special tokens at the top of real vocabularies
	}
	for i := range out {
		out[i] = int32(lo + rng.IntN(hi-lo))
	}
	return out
}

// benchEngine is an engine with the forward pass it owns.
type benchEngine struct {
	*engine.Engine
	fwd *model.Forwarder
}

// Close stops the engine, then its forward pass.
func (b *benchEngine) Close() {
	b.Engine.Close()
	b.fwd.Close()
}

func newEngine(m *model.Model, o Options, cfg engine.Config) (*benchEngine, error) {
	f, err := model.NewForwarder(m, model.ForwarderOptions{Threads: o.Threads, KVType: tensor.F16})
	if err != nil {
		return nil, err
	}
	e, err := engine.New(f, cfg)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &benchEngine{Engine: e, fwd: f}, nil
}

// outcome is what one request did.
type outcome struct {
	ttft      time.Duration // submission to the first token's sampling
	first     time.Time     // when the engine sampled the first token
	end       time.Time     // ... and the last
	arrivals  []time.Time   // ... and each (runs that ask for it)
	generated int
	usage     engine.Usage
}

// run submits r and reads its stream; it cancels the request once stopAfter
// tokens arrived (0: never), as a client that got what it wanted would.
func run(ctx context.Context, e *engine.Engine, r engine.Request, stopAfter int) (outcome, error) {
	return runTimed(ctx, e, r, stopAfter, false)
}

// runTimed is run that can also record each token's arrival time.
func runTimed(ctx context.Context, e *engine.Engine, r engine.Request, stopAfter int, record bool) (outcome, error) {
	start := time.Now()
	st, err := e.Submit(ctx, r)
	if err != nil {
		return outcome{}, err
	}
	return readTimed(ctx, st, start, stopAfter, record)
}

// readTimed reads a submitted request's stream (see runTimed).
func readTimed(ctx context.Context, st *engine.Stream, start time.Time, stopAfter int, record bool) (outcome, error) {
	var out outcome
	var buf []engine.Output
	var err error
	for {
		buf, err = st.Recv(ctx, buf[:0])
		for _, o := range buf {
			if o.Err != nil {
				return out, o.Err
			}
			if o.Token < 0 {
				continue
			}
			// The engine's own timestamps: a reader that falls behind
			// (a loaded machine, a tiny model's microsecond steps) does
			// not skew them.
			now := o.Time
			if out.generated == 0 {
				out.first = now
				out.ttft = now.Sub(start)
			}
			if record {
				out.arrivals = append(out.arrivals, now)
			}
			out.end = now
			out.generated++
			if stopAfter > 0 && out.generated == stopAfter {
				st.Cancel()
			}
		}
		if errors.Is(err, engine.ErrDone) {
			out.usage = st.Usage()
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// runAll runs requests with at most concurrency in flight and returns their
// outcomes in order.
func runAll(ctx context.Context, e *engine.Engine, reqs []engine.Request, stopAfter []int, concurrency int) ([]outcome, error) {
	return runAllTimed(ctx, e, reqs, stopAfter, concurrency, false)
}

func runAllTimed(ctx context.Context, e *engine.Engine, reqs []engine.Request, stopAfter []int, concurrency int, record bool) ([]outcome, error) {
	outs := make([]outcome, len(reqs))
	errs := make([]error, len(reqs))
	stop := func(i int) int {
		if stopAfter == nil {
			return 0
		}
		return stopAfter[i]
	}
	var wg sync.WaitGroup
	if concurrency >= len(reqs) {
		// All at once: submit every request before reading any, so they
		// reach the engine together however the readers get scheduled.
		for i := range reqs {
			start := time.Now()
			st, err := e.Submit(ctx, reqs[i])
			if err != nil {
				errs[i] = err
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				outs[i], errs[i] = readTimed(ctx, st, start, stop(i), record)
			}()
		}
		wg.Wait()
		return outs, errors.Join(errs...)
	}
	sem := make(chan struct{}, concurrency)
	for i := range reqs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			outs[i], errs[i] = runTimed(ctx, e, reqs[i], stop(i), record)
		}()
	}
	wg.Wait()
	return outs, errors.Join(errs...)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func round(x float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(x*p+0.5)) / p
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
