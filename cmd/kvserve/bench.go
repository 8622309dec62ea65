package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/enginebench"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks: in-process engine scenarios",
	}
	cmd.AddCommand(newBenchEngineCmd(), newBenchModelCmd())
	cmd.AddCommand(newBenchServeCmd(), newBenchReplayCmd(), newBenchRouterCmd())
	return cmd
}

func newBenchModelCmd() *cobra.Command {
	var modelPath string
	var weights weightsMemory
	var asJSON bool
	var o enginebench.SpeedOptions
	cmd := &cobra.Command{
		Use:   "model --model FILE [-p 512] [-n 128] [-d 0] [-t THREADS]",
		Short: "Forward-pass speed like llama-bench: prefill of -p tokens in one pass (pp), -n tokens decoded one by one (tg), after -d tokens of context",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mf, err := openModelWithProgress(modelPath, weights, 0, o.Threads, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer mf.Close()
			res, err := enginebench.Speed(cmd.Context(), mf.Model, o)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				line, err := json.Marshal(res)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(out, string(line))
				return err
			}
			depth := "" // as llama-bench writes it: pp512 @ d2048
			if res.Depth > 0 {
				depth = fmt.Sprintf(" @ d%d", res.Depth)
			}
			fmt.Fprintf(out, "| model | threads | test | t/s |\n|---|---:|---|---:|\n")
			fmt.Fprintf(out, "| %s | %d | pp%d%s | %.1f ± %.1f |\n", modelPath, res.Threads, res.PromptTokens, depth, res.PrefillTokS, res.PrefillStd)
			fmt.Fprintf(out, "| %s | %d | tg%d%s | %.1f ± %.1f |\n", modelPath, res.Threads, res.GenerateTokens, depth, res.DecodeTokS, res.DecodeStd)
			if o.Bandwidth {
				fmt.Fprintf(out, "\nmemory bandwidth %.1f GB/s (%d threads); decode reads %.1f GB/s of weights; limit %.1f tok/s, decode at %.0f%% of it\n",
					res.MemoryGBPerSec, res.Threads, res.DecodeGBPerSec, res.DecodeLimitTokS, 100*res.DecodeTokS/res.DecodeLimitTokS)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&modelPath, "model", "m", "", "GGUF model file (required)")
	weightsMemoryFlags(f, &weights)
	f.IntVarP(&o.Prompt, "prompt", "p", 512, "prefill tokens (pp)")
	f.IntVarP(&o.Generate, "n", "n", 128, "decoded tokens (tg)")
	f.IntVarP(&o.Depth, "depth", "d", 0, "tokens already in the context before pp and tg (llama-bench's -d)")
	f.IntVarP(&o.Threads, "threads", "t", 0, "compute threads (default: all cores)")
	f.IntVarP(&o.Repetitions, "repetitions", "r", 3, "measured repetitions")
	f.IntVar(&o.BlockSize, "block-size", 256, "KV block size in tokens (the server's default is 16)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object")
	f.BoolVar(&o.Bandwidth, "bandwidth", false, "also measure memory bandwidth and the decode limit it sets")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}

func newBenchEngineCmd() *cobra.Command {
	var modelPath, scenario, cpuProfile string
	var weights weightsMemory
	var asJSON bool
	var o enginebench.Options
	var names []string
	for _, s := range enginebench.Scenarios() {
		names = append(names, s.Name)
	}
	cmd := &cobra.Command{
		Use:   "engine --model FILE [--scenario NAME] [--json]",
		Short: "Run engine scenarios in process and print one result object per scenario",
		Long: "Scenarios: " + strings.Join(names, ", ") + ".\n" +
			"With no --scenario, all of them run in that order.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			scenarios := enginebench.Scenarios()
			if scenario != "" {
				s, err := enginebench.Lookup(scenario)
				if err != nil {
					return err
				}
				scenarios = []enginebench.Scenario{s}
			}
			mf, err := openModelWithProgress(modelPath, weights, 0, o.Threads, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer mf.Close()
			o.Log = func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			out := cmd.OutOrStdout()
			for _, s := range scenarios {
				res, err := s.Run(cmd.Context(), mf.Model, o)
				if err != nil {
					return fmt.Errorf("scenario %s: %w", s.Name, err)
				}
				res["scenario"] = s.Name
				if asJSON {
					line, err := json.Marshal(res)
					if err != nil {
						return err
					}
					fmt.Fprintln(out, string(line))
					continue
				}
				fmt.Fprintf(out, "%s — %s\n", s.Name, s.Description)
				keys := make([]string, 0, len(res))
				for k := range res {
					if k != "scenario" {
						keys = append(keys, k)
					}
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Fprintf(out, "  %-22s %v\n", k, res[k])
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&modelPath, "model", "m", "", "GGUF model file (required)")
	weightsMemoryFlags(f, &weights)
	f.StringVar(&scenario, "scenario", "", "run only this scenario")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile to this file (for developers)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per scenario")
	f.IntVarP(&o.Threads, "threads", "t", 0, "compute threads (default: all cores)")
	f.Float64Var(&o.Scale, "scale", 1, "scale the heavier scenarios' request counts")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}
