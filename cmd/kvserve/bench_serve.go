package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/servebench"
)

func newBenchServeCmd() *cobra.Command {
	var (
		cfg       servebench.Config
		wo        servebench.WorkloadOptions
		workload  string
		asJSON    bool
		pngFile   string
		quiet     bool
		timeScale float64
	)
	cmd := &cobra.Command{
		Use:   "serve --url URL --workload shared-prefix|agent|chat [--concurrency N | --rate R] [--requests N | --duration D] [flags]",
		Short: "Load-generate against an OpenAI-compatible /v1/chat/completions server and report latency, throughput and cache hits",
		Long: `Drives an OpenAI-compatible server with streamed chat completions and reports what a client sees:
TTFT, inter-token and end-to-end latency percentiles, output tokens/s and requests/s, prompt tokens and
the prefix-cache hit rate (usage.prompt_tokens_details.cached_tokens / usage.prompt_tokens), kvserve's
server-side timings when the responses carry them, and errors by status code.

Workloads (deterministic from --seed):
  shared-prefix  groups with their own long system prompt, short questions interleaved across groups
                 (label prefix-cold: a group's first request in this run; prefix-warm: the others)
  agent          multi-turn tool-using sessions: a long shared system prompt with tool definitions, a
                 growing history, tool pauses of 2-30 s times --time-scale, one-shot sub-agents
  chat           independent prompts of mixed lengths, nothing shared

Prompt sizes aim at about 1.3 tokens per generated word (real BPE tokenizers on common English
words); the report gives the true count from usage. --prompt-scale shrinks everything for slow servers.

Closed loop (--concurrency N workers, each running one session at a time) or open loop (--rate R:
Poisson session arrivals per second). The run ends after --requests requests (default 100) or
--duration, whichever comes first; requests in flight then finish. Ctrl-C stops early and reports.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if f.Changed("concurrency") && f.Changed("rate") {
				return errors.New("bench serve: --concurrency and --rate are exclusive")
			}
			switch {
			case timeScale == 0:
				wo.TimeScale = -1 // no pauses
			default:
				wo.TimeScale = timeScale
			}
			wo.Seed = cfg.Seed
			w, err := servebench.NewWorkload(workload, wo)
			if err != nil {
				return err
			}
			cfg.Workload = w
			if cfg.APIKey == "" {
				cfg.APIKey = os.Getenv("KVSERVE_API_KEY")
			}
			if !quiet {
				errOut := cmd.ErrOrStderr()
				cfg.Log = func(format string, args ...any) { fmt.Fprintf(errOut, format+"\n", args...) }
			}
			res, err := servebench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if pngFile != "" {
				if err := writePNG(pngFile, res); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(res.Report)
			}
			return res.Report.WriteTable(out)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.URL, "url", "", "server base URL, e.g. http://127.0.0.1:8080 (required)")
	f.StringVar(&workload, "workload", "shared-prefix", "workload: "+strings.Join(servebench.WorkloadNames(), ", "))
	f.IntVarP(&cfg.Concurrency, "concurrency", "c", 0, "closed loop: this many sessions at a time (default 1)")
	f.Float64Var(&cfg.Rate, "rate", 0, "open loop: Poisson session arrivals per second")
	f.IntVarP(&cfg.Requests, "requests", "n", 0, "stop after this many requests (default 100 without --duration)")
	f.DurationVar(&cfg.Duration, "duration", 0, "stop sending after this long, e.g. 60s")
	f.StringVarP(&cfg.Model, "model", "m", "", "model name (default: the first of GET /v1/models)")
	f.StringVar(&cfg.APIKey, "api-key", "", "bearer API key (default $KVSERVE_API_KEY)")
	f.IntVar(&cfg.MaxTokens, "max-tokens", 128, "max_tokens of each request")
	f.BoolVar(&cfg.IgnoreEOS, "ignore-eos", false, `send "ignore_eos": true so every request generates --max-tokens tokens`)
	f.Uint64Var(&cfg.Seed, "seed", 1, "seed of the workload and the arrivals")
	f.Float64Var(&timeScale, "time-scale", 0.05, "multiply the agent's 2-30 s tool pauses by this (0 = no pauses)")
	f.Float64Var(&wo.PromptScale, "prompt-scale", 1, "multiply every prompt size by this (e.g. 0.1 on a slow CPU server)")
	f.IntVar(&wo.Groups, "groups", 8, "shared-prefix: number of groups")
	f.IntVar(&wo.PrefixTokens, "prefix-tokens", 0, "system prompt tokens (default 2048 for shared-prefix, 10000 with tools for agent)")
	f.IntVar(&wo.QuestionTokens, "question-tokens", 128, "shared-prefix: tokens per question")
	f.DurationVar(&cfg.Timeout, "timeout", 0, "per-request timeout (default 10m)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&pngFile, "png", "", "also draw latency CDFs and percentile bars into this PNG file")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress lines on stderr")
	_ = cmd.MarkFlagRequired("url")
	return cmd
}

func writePNG(path string, res *servebench.Result) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench serve: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("bench serve: %w", cerr)
		}
	}()
	return servebench.WritePNG(f, res)
}
