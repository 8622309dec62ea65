package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/router"
	"github.com/kvserve/kvserve/internal/routerbench"
	"github.com/kvserve/kvserve/internal/sim"
)

func newBenchRouterCmd() *cobra.Command {
	var (
		workersList, policies, tracePath, workload, profilePath string
		limit                                                   int
		stretch, kvTokens, temperature, peerGbps, g2Tokens      float64
		agent                                                   routerbench.AgentOptions
		asJSON                                                  bool
	)
	cmd := &cobra.Command{
		Use:   "router --workers 8[,16,32] --policy kv[,round-robin,least-loaded] (--trace F.jsonl | --workload agent) [--json]",
		Short: "Placement policies compared on simulated workers in virtual time: TTFT, hit rate, decision time",
		Long: `Runs a workload on N simulated engines (the real scheduler and KV manager, each with its own KV pool and
virtual clock) and places every request with each policy in turn: kv (the KV-aware router: prefix
overlap per tier against load, fed by the engines' KV events), least-loaded, round-robin. Reports TTFT
percentiles (virtual time), the prefix hit rate next to that of one cache shared by every worker that
keeps every block (the bound, for the same requests in the same order), and the router's decision
time (wall time on this machine).

The workload is a Mooncake-format trace (--trace; --limit takes its first requests, --stretch
multiplies its gaps: the built-in cost profile is a CPU's, far slower than the GPU cluster the trace
came from) or agent sessions (--workload agent): a shared system prompt per tenant, 4 to 16 turns per
session after tool pauses of 2 to 30 s, sub-agents, the next turn arriving only after the previous
one ended.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var counts []int
			for _, s := range strings.Split(workersList, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 1 || n > 1024 {
					return fmt.Errorf("bench router: --workers %q: want counts from 1 to 1024, such as 8,16,32", s)
				}
				counts = append(counts, n)
			}
			var pols []router.Policy
			for _, s := range strings.Split(policies, ",") {
				p, err := router.ParsePolicy(strings.TrimSpace(s))
				if err != nil {
					return fmt.Errorf("bench router: --policy: %w", err)
				}
				pols = append(pols, p)
			}
			if !(stretch > 0) || math.IsInf(stretch, 0) {
				return fmt.Errorf("bench router: --stretch %v: want a positive number", stretch)
			}
			if !(peerGbps >= 0) || math.IsInf(peerGbps, 0) {
				return fmt.Errorf("bench router: --peer-gbps %v: want a rate in Gbit/s, or 0 for no copies between workers", peerGbps)
			}
			if !(kvTokens >= 1) || kvTokens > 1e10 {
				return fmt.Errorf("bench router: --kv-tokens %v: want a token count such as 1e6", kvTokens)
			}
			if !cmd.Flags().Changed("g2-tokens") {
				g2Tokens = 2 * kvTokens
			}
			if !(g2Tokens >= 0) || g2Tokens > 1e11 {
				return fmt.Errorf("bench router: --g2-tokens %v: want a token count such as 2e6, or 0 for none", g2Tokens)
			}
			var (
				arrivals []routerbench.Arrival
				name     string
			)
			switch {
			case tracePath != "" && workload != "":
				return errors.New("bench router: --trace and --workload are exclusive")
			case tracePath != "":
				f, err := os.Open(tracePath)
				if err != nil {
					return fmt.Errorf("bench router: %w", err)
				}
				trace, err := sim.ReadTrace(f)
				f.Close()
				if err != nil {
					return err
				}
				if limit > 0 && limit < len(trace) {
					trace = trace[:limit]
				}
				arrivals, name = routerbench.FromTrace(trace, stretch), filepath.Base(tracePath)
			case workload == "agent":
				var err error
				if arrivals, err = routerbench.Agent(agent); err != nil {
					return fmt.Errorf("bench router: %w", err)
				}
				if limit > 0 && limit < len(arrivals) {
					// Whole sessions only: a turn needs its parent.
					n := limit
					for n < len(arrivals) && arrivals[n].Parent >= 0 {
						n++
					}
					arrivals = arrivals[:n]
				}
				name = "agent"
			case workload != "":
				return fmt.Errorf("bench router: --workload %q: want agent", workload)
			default:
				return errors.New("bench router: --trace F.jsonl or --workload agent is required")
			}
			if len(arrivals) == 0 {
				return errors.New("bench router: the workload has no requests")
			}
			var prof *sim.Profile
			if profilePath != "" {
				p, err := sim.ReadProfile(profilePath)
				if err != nil {
					return err
				}
				prof = p
			}
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(out, "%s: %d requests; TTFT in virtual time; routing decisions timed on %s\n", name, len(arrivals), cpuModel())
				fmt.Fprintf(out, "%7s %-13s %10s %10s %10s %8s %8s %9s %9s\n", "workers", "policy", "TTFT p50", "p90", "p99", "hit rate", "shared", "decide50", "decide99")
			}
			var rows []routerbench.Result
			for _, n := range counts {
				for _, p := range pols {
					res, err := routerbench.Run(cmd.Context(), routerbench.Config{Workers: n, Policy: p, Profile: prof,
						KVTokens: int64(kvTokens), HostTokens: int64(g2Tokens), Router: router.Config{Temperature: temperature},
						PeerBytesPerSecond: peerGbps * 1e9 / 8}, arrivals)
					if err != nil {
						return err
					}
					rows = append(rows, res)
					if !asJSON {
						fmt.Fprintf(out, "%7d %-13s %8.0fms %8.0fms %8.0fms %8.3f %8.3f %7.1fµs %7.1fµs\n", n, p, res.TTFTp50, res.TTFTp90, res.TTFTp99,
							res.HitRate, res.SharedHitRate, res.DecisionP50, res.DecisionP99)
						if res.Failed > 0 {
							fmt.Fprintf(out, "        (%d requests failed)\n", res.Failed)
						}
					}
				}
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"workload": name, "requests": len(arrivals), "cpu": cpuModel(), "rows": rows})
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&workersList, "workers", "8", "simulated workers, or several counts comma-separated (8,16,32)")
	f.StringVar(&policies, "policy", "kv,round-robin,least-loaded", "placement policies to compare, comma-separated: kv, round-robin, least-loaded")
	f.StringVar(&tracePath, "trace", "", "Mooncake-format JSON-lines trace")
	f.StringVar(&workload, "workload", "", "synthetic workload instead of a trace: agent")
	f.IntVar(&limit, "limit", 0, "only the first N requests (agent: rounded up to whole sessions; 0: all)")
	f.Float64Var(&stretch, "stretch", 1, "multiply a trace's gaps between arrivals by this")
	f.Float64Var(&kvTokens, "kv-tokens", 1e6, "each worker's KV pool in tokens")
	f.Float64Var(&g2Tokens, "g2-tokens", 0, "each worker's host-memory tier (G2) in tokens (default: twice --kv-tokens, as a worker's --kv-host-memory auto; 0: none)")
	f.Float64Var(&peerGbps, "peer-gbps", 10, "kv policy: workers copy KV blocks another worker holds over a network of this many Gbit/s instead of computing them (0: no copies)")
	f.Float64Var(&temperature, "temperature", 0, "kv policy: softmax temperature over the placement costs (0: always the cheapest)")
	f.StringVar(&profilePath, "sim-profile", "", "cost profile from kvserve sim calibrate (default: the built-in one)")
	f.IntVar(&agent.Sessions, "sessions", 200, "agent: sessions")
	f.Float64Var(&agent.Rate, "session-rate", 1, "agent: new sessions per second")
	f.IntVar(&agent.SystemTokens, "system-tokens", 10000, "agent: tokens of each tenant's system prompt and tools")
	f.IntVar(&agent.Tenants, "tenants", 4, "agent: tenants, each with its own system prompt")
	f.Float64Var(&agent.TimeScale, "time-scale", 1, "agent: multiply the tool pauses by this")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
