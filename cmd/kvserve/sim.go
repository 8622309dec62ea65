package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/sim"
)

// newSimCmd is `kvserve sim`: the simulated engine's tools.
func newSimCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Calibrate the simulated engine (kvserve serve --engine sim) on a real model",
	}
	cmd.AddCommand(newSimCalibrateCmd(), newSimReplayCmd())
	return cmd
}

func newSimCalibrateCmd() *cobra.Command {
	var (
		modelPath, out, kvType  string
		weights                 weightsMemory
		threads, maxBatchTokens int
		copts                   sim.CalibrateOptions
		showPasses              bool
		passFiles               []string
	)
	cmd := &cobra.Command{
		Use:   "calibrate --model FILE.gguf -o profile.json [flags]",
		Short: "Measure the real engine on a model and fit the simulator's cost profile",
		Long: `Runs the real engine on the model — prompts of many lengths alone, then batches of 1 to
--max-batch decoding at short and long contexts — times every forward pass and fits the
simulator's cost model to them: a fixed cost per pass, a cost per prompt token, per decoding
sequence and per attended KV position (prompt and decode apart). With --passes, the passes a server
recorded on real traffic (kvserve serve --record-passes) are fitted too. Writes the profile (with the model's shape and how well
the fit reproduces the measured passes) as JSON for kvserve serve --engine sim --sim-profile.

Calibrate with the settings you serve with (--threads, --max-batch-tokens, --kv-cache-type),
on a quiet machine.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if modelPath == "" || out == "" {
				return fmt.Errorf("sim calibrate: --model and -o are required")
			}
			t, err := kv.ParseElemType(kvType)
			if err != nil {
				return fmt.Errorf("sim calibrate: %w", err)
			}
			stderr := cmd.ErrOrStderr()
			mf, err := openModelWithProgress(modelPath, weights, 0, threads, stderr)
			if err != nil {
				return err
			}
			defer mf.Close()
			fwd, err := model.NewForwarder(mf.Model, model.ForwarderOptions{Threads: threads, MaxTokens: maxBatchTokens, KVType: t.DType()})
			if err != nil {
				return fmt.Errorf("sim calibrate: %w", err)
			}
			defer fwd.Close()
			for _, pf := range passFiles {
				ps, err := readPasses(pf)
				if err != nil {
					return fmt.Errorf("sim calibrate: %w", err)
				}
				copts.Extra = append(copts.Extra, ps...)
			}
			if copts.OnlyExtra && len(copts.Extra) == 0 {
				return fmt.Errorf("sim calibrate: --only-passes needs --passes")
			}
			copts.Progress = func(phase string) { fmt.Fprintf(stderr, "kvserve: calibrating: %s\n", phase) }
			p, passes, err := sim.Calibrate(cmd.Context(), fwd, engine.Config{MaxBatchTokens: maxBatchTokens, KVMemoryBytes: 1 << 30}, copts)
			if err != nil {
				return err
			}
			p.Model = strings.TrimSuffix(filepath.Base(modelPath), ".gguf")
			p.CPU = cpuModel()
			p.Threads = fwd.Threads()
			p.WeightBytes = mf.Model.WeightBytes
			data, err := json.MarshalIndent(p, "", "  ")
			if err != nil {
				return err
			}
			if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
				return fmt.Errorf("sim calibrate: %w", err)
			}
			c, r := p.Cost, p.Fit
			fmt.Fprintf(stderr, "kvserve: %d passes on %s (%d threads): fixed %.3f ms, %.1f µs per prompt token, %.1f µs per decoding sequence, %.2f / %.2f ns per attended position in prefill / decode; relative error median %.1f%%, p90 %.1f%%, total %+.1f%%; wrote %s\n",
				r.Passes, p.CPU, p.Threads, c.Fixed*1e3, c.PrefillToken*1e6, c.DecodeSeq*1e6, c.PrefillAttended*1e9, c.DecodeAttended*1e9,
				100*r.MedianError, 100*r.P90Error, 100*r.TotalError, out)
			if showPasses {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, ps := range passes {
					if err := enc.Encode(ps); err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&modelPath, "model", "m", "", "GGUF model file (required)")
	weightsMemoryFlags(f, &weights)
	f.StringVarP(&out, "output", "o", "", "profile file to write (required)")
	f.IntVarP(&threads, "threads", "t", 0, "compute threads (default: all cores)")
	f.IntVar(&maxBatchTokens, "max-batch-tokens", 512, "tokens per forward pass, as served")
	f.StringVar(&kvType, "kv-cache-type", "f16", "KV cache element type, as served: f16, f32, q8_0")
	f.IntVar(&copts.MaxPrompt, "max-prompt", 2048, "longest prompt measured")
	f.IntVar(&copts.MaxBatch, "max-batch", 32, "most sequences decoded together")
	f.BoolVar(&showPasses, "print-passes", false, "print every measured pass as a JSON line on stdout")
	f.StringArrayVar(&passFiles, "passes", nil, "also fit the passes a server recorded on this model (serve --record-passes FILE; repeatable)")
	f.BoolVar(&copts.OnlyExtra, "only-passes", false, "fit the --passes files alone, without running the calibration workload")
	return cmd
}

// cpuModel names the processor (Linux: /proc/cpuinfo's model name).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// recordPasses wraps fwd so that every pass is appended to path as a JSON
// line (sim.Pass); the returned func flushes and closes the file, after
// the engine has stopped.
func recordPasses(fwd engine.Forwarder, path string) (engine.Forwarder, func(), error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("--record-passes: %w", err)
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	failed := false
	rec := sim.NewStreamingRecorder(fwd, func(p sim.Pass) {
		// Called from the step loop only: no lock needed. A write error
		// stops the recording, not the serving.
		if !failed && enc.Encode(p) != nil {
			failed = true
		}
	})
	return rec, func() {
		w.Flush()
		f.Close()
	}, nil
}

// readPasses reads the JSON lines --record-passes wrote.
func readPasses(path string) ([]sim.Pass, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []sim.Pass
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var p sim.Pass
		if err := dec.Decode(&p); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: pass %d: %w", path, len(out)+1, err)
		}
		out = append(out, p)
	}
}

func newSimReplayCmd() *cobra.Command {
	var (
		tracePath, profilePath string
		kvTokens, hostTokens   int64
		diskTokens             int64
		limit                  int
		stretch                float64
		maxBatchTokens         int
		maxRunning             int
		asJSON                 bool
		eviction               string
	)
	cmd := &cobra.Command{
		Use:   "replay --trace F.jsonl [--sim-profile P] [--kv-tokens N] [--limit N] [--stretch X] [--json]",
		Short: "Replay a request trace through the simulated engine in virtual time",
		Long: `Replays a Mooncake-format trace (JSON lines: timestamp ms, input_length, output_length, hash_ids
of 512-token prefix blocks; ../shared/traces has two) through the real scheduler and KV block manager on
the simulated forward pass, in virtual time: nothing sleeps, so an hour of traffic replays in seconds to
minutes. Requests that share hash ids share prompt blocks. Reports TTFT and end-to-end percentiles in
virtual time, the prefix-cache hit rate (cached / prompt tokens) and how much faster than real time the
replay ran.

The cost profile (--sim-profile, from kvserve sim calibrate; default: the built-in one) prices each
pass; its context is widened to the trace's longest request. --stretch multiplies the gaps between
arrivals (a CPU model cannot keep up with a GPU cluster's trace; stretch it, or study the cache alone).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tracePath == "" {
				return errors.New("sim replay: --trace is required")
			}
			if eviction != "value" && eviction != "lru" {
				return fmt.Errorf("sim replay: --eviction %q: want value or lru", eviction)
			}
			if stretch <= 0 || math.IsInf(stretch, 0) || math.IsNaN(stretch) {
				return fmt.Errorf("sim replay: --stretch %v: want a positive number", stretch)
			}
			f, err := os.Open(tracePath)
			if err != nil {
				return fmt.Errorf("sim replay: %w", err)
			}
			trace, err := sim.ReadTrace(f)
			f.Close()
			if err != nil {
				return err
			}
			if limit > 0 && limit < len(trace) {
				trace = trace[:limit]
			}
			res, err := replayTrace(cmd.Context(), trace, replaySettings{profilePath: profilePath, kvTokens: kvTokens,
				hostTokens: hostTokens, diskTokens: diskTokens, stretch: stretch, maxBatchTokens: maxBatchTokens, maxRunning: maxRunning, lru: eviction == "lru"})
			if err != nil {
				return err
			}
			res.Trace = filepath.Base(tracePath)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			fmt.Fprintf(out, "%s: %d requests (%d failed) on %s, KV pool %d tokens\n", res.Trace, res.Requests, res.Failed, res.Profile, res.KVTokens)
			fmt.Fprintf(out, "prefix hit rate %.3f (%d of %d prompt tokens cached), %d output tokens\n", res.HitRate, res.CachedTokens, res.PromptTokens, res.OutputTokens)
			fmt.Fprintf(out, "TTFT p50 %.0f ms, p90 %.0f ms, p99 %.0f ms; end-to-end p50 %.0f ms (virtual time)\n", res.TTFTp50, res.TTFTp90, res.TTFTp99, res.E2Ep50)
			fmt.Fprintf(out, "replayed %.0f s of virtual time in %.1f s (%.0f× real time)\n", res.VirtualS, res.WallS, res.Speedup)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tracePath, "trace", "", "Mooncake-format JSON-lines trace (required)")
	f.StringVar(&profilePath, "sim-profile", "", "cost profile from kvserve sim calibrate (default: the built-in one)")
	f.Int64Var(&kvTokens, "kv-tokens", 1_000_000, "KV pool size in tokens")
	f.Int64Var(&hostTokens, "kv-host-tokens", 0, "host-memory tier (G2) size in tokens (0: none)")
	f.Int64Var(&diskTokens, "kv-disk-tokens", 0, "disk tier (G3) size in tokens, bookkeeping only (0: none)")
	f.IntVar(&limit, "limit", 0, "replay only the first N requests (0: all)")
	f.Float64Var(&stretch, "stretch", 1, "multiply the gaps between arrivals by this")
	f.IntVar(&maxBatchTokens, "max-batch-tokens", 0, "tokens per pass (default: the profile's)")
	f.IntVar(&maxRunning, "max-running", 0, "sequences running at once (default 256)")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.StringVar(&eviction, "eviction", "value", "eviction policy: value (retention by value, the default) or lru (the baseline)")
	return cmd
}

// replaySettings are a replay's engine settings.
type replaySettings struct {
	profilePath          string
	kvTokens, hostTokens int64
	diskTokens           int64 // G3, index-only in the simulator
	stretch              float64
	maxBatchTokens       int
	maxRunning           int
	lru                  bool
}

// replayTrace runs trace through a simulated engine in virtual time.
func replayTrace(ctx context.Context, trace []sim.TraceRequest, o replaySettings) (replayResult, error) {
	p := sim.DefaultProfile()
	if o.profilePath != "" {
		q, err := sim.ReadProfile(o.profilePath)
		if err != nil {
			return replayResult{}, err
		}
		p = *q
	}
	longest := 0
	for _, t := range trace {
		longest = max(longest, t.InputLength+max(t.OutputLength, 1))
	}
	p.Shape.Context = max(p.Shape.Context, longest)
	// The trace's tokens stand for nothing: a small vocabulary keeps the
	// sampler's work per token small.
	const vocab = 256
	clock := sim.NewVirtualClock()
	shape, err := p.Shape.Batch()
	if err != nil {
		return replayResult{}, err
	}
	perToken := int64(2 * shape.Layers * shape.KVDim * shape.KVType.RowBytes(1))
	e, _, err := sim.NewEngine(&p, sim.Options{Clock: clock, Vocab: vocab, EndOfGeneration: -1}, engine.Config{
		KVMemoryBytes: o.kvTokens * perToken, KVHostMemoryBytes: o.hostTokens * perToken, KVDiskBytes: o.diskTokens * perToken,
		MaxBatchTokens: o.maxBatchTokens,
		MaxRunning:     o.maxRunning, MaxWaiting: len(trace) + 1, LRUEviction: o.lru,
	})
	if err != nil {
		return replayResult{}, fmt.Errorf("replay: %w", err)
	}
	defer e.Close()
	arrivals := make([]sim.Arrival, len(trace))
	for i, t := range trace {
		arrivals[i] = t.Arrival(vocab, o.stretch)
	}
	start := time.Now()
	outs, err := sim.Run(ctx, e, clock, arrivals)
	if err != nil {
		return replayResult{}, err
	}
	wall := time.Since(start)
	s := sim.Summarize(outs)
	virtual := clock.Since()
	kvs, bs := e.KV().Stats(), int64(e.Config().BlockSize)
	return replayResult{Profile: p.Model, KVTokens: e.KV().NumBlocks() * e.Config().BlockSize,
		HostHitTokens: kvs.Host.Onboarded * bs, DiskHitTokens: kvs.Disk.Hits * bs,
		Requests: s.Requests, Failed: s.Failed, HitRate: s.HitRate,
		PromptTokens: s.PromptTokens, CachedTokens: s.CachedTokens, OutputTokens: s.OutputTokens,
		TTFTp50: ms(s.TTFTp50), TTFTp90: ms(s.TTFTp90), TTFTp99: ms(s.TTFTp99), E2Ep50: ms(s.E2Ep50),
		VirtualS: virtual.Seconds(), WallS: wall.Seconds(), Speedup: virtual.Seconds() / wall.Seconds()}, nil
}

// replayResult is what sim replay reports.
type replayResult struct {
	Trace        string  `json:"trace"`
	Profile      string  `json:"profile"`
	KVTokens     int     `json:"kv_tokens"`
	Requests     int     `json:"requests"`
	Failed       int     `json:"failed"`
	HitRate      float64 `json:"hit_rate"`
	PromptTokens int64   `json:"prompt_tokens"`
	CachedTokens int64   `json:"cached_tokens"`
	// HostHitTokens and DiskHitTokens were onboarded from G2 and G3 (every
	// admission, a preempted request's again included).
	HostHitTokens int64   `json:"g2_hit_tokens"`
	DiskHitTokens int64   `json:"g3_hit_tokens"`
	OutputTokens  int64   `json:"output_tokens"`
	TTFTp50       float64 `json:"ttft_p50_ms"`
	TTFTp90       float64 `json:"ttft_p90_ms"`
	TTFTp99       float64 `json:"ttft_p99_ms"`
	E2Ep50        float64 `json:"e2e_p50_ms"`
	VirtualS      float64 `json:"virtual_s"`
	WallS         float64 `json:"wall_s"`
	Speedup       float64 `json:"speedup"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
