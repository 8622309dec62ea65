package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

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
	cmd.AddCommand(newSimCalibrateCmd())
	return cmd
}

func newSimCalibrateCmd() *cobra.Command {
	var (
		modelPath, modelMemory, out, kvType string
		threads, maxBatchTokens             int
		copts                               sim.CalibrateOptions
		showPasses                          bool
		passFiles                           []string
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
			mf, err := openModelWithProgress(modelPath, modelMemory, stderr)
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
	modelMemoryFlag(f, &modelMemory)
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
