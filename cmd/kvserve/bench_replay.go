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

	"github.com/kvserve/kvserve/internal/sim"
)

func newBenchReplayCmd() *cobra.Command {
	var (
		tracePath, capacities, policy, profilePath string
		g2f, g3f                                   float64
		stretch                                    float64
		asJSON                                     bool
	)
	cmd := &cobra.Command{
		Use:   "replay --trace F.jsonl [--capacity TOKENS[,TOKENS…]] [--policy lru|value] [--g2 TOKENS] [--g3 TOKENS] [--json]",
		Short: "Prefix hit rate of a trace per KV capacity: the real KV manager in virtual time, and the offline optimum",
		Long: `For each capacity, replays the Mooncake-format trace through the real scheduler and KV manager on the
simulator's virtual clock (kvserve sim replay) and reports the token-weighted prefix hit rate, next to the
offline optimum (Belady's MIN over the trace's 512-token blocks, as ../shared/traces/README.md counts it).
With --g2, a host-memory tier of that many tokens sits below the pool, and with --g3 a disk tier below
that (bookkeeping only: the simulator's blocks hold no data); their hits count as hits and are reported
per tier. The optimum is then that of one cache as large as all the tiers together.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tracePath == "" {
				return errors.New("bench replay: --trace is required")
			}
			if policy != "lru" && policy != "value" {
				return fmt.Errorf("bench replay: --policy %q: want lru or value", policy)
			}
			var caps []int64
			for _, c := range strings.Split(capacities, ",") {
				v, err := strconv.ParseFloat(strings.TrimSpace(c), 64)
				if err != nil || v < 1 || v > 1e12 || math.IsNaN(v) {
					return fmt.Errorf("bench replay: --capacity %q: want token counts such as 1e6,3e6", c)
				}
				caps = append(caps, int64(v))
			}
			f, err := os.Open(tracePath)
			if err != nil {
				return fmt.Errorf("bench replay: %w", err)
			}
			trace, err := sim.ReadTrace(f)
			f.Close()
			if err != nil {
				return err
			}
			if !(g2f >= 0 && g2f <= 1e12 && g3f >= 0 && g3f <= 1e12) {
				return errors.New("bench replay: --g2 and --g3 are token counts such as 1e6 (0: none)")
			}
			g2, g3 := int64(g2f), int64(g3f)
			type row struct {
				Capacity int64   `json:"capacity_tokens"`
				HitRate  float64 `json:"hit_rate"`
				G2Rate   float64 `json:"g2_hit_rate"` // of the prompt tokens, onboarded from G2
				G3Rate   float64 `json:"g3_hit_rate"` // ... from G3
				Optimum  float64 `json:"optimum"`
				WallS    float64 `json:"wall_s"`
			}
			var rows []row
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(out, "%s, policy %s, G2 %d tokens, G3 %d tokens\n%12s %9s %9s %9s %9s\n", filepath.Base(tracePath), policy, g2, g3,
					"capacity", "hit rate", "from G2", "from G3", "optimum")
			}
			for _, c := range caps {
				res, err := replayTrace(cmd.Context(), trace, replaySettings{profilePath: profilePath, kvTokens: c,
					hostTokens: g2, diskTokens: g3, stretch: stretch, lru: policy == "lru"})
				if err != nil {
					return err
				}
				r := row{Capacity: c, HitRate: res.HitRate, Optimum: sim.OptimalHitRate(trace, c+g2+g3), WallS: res.WallS}
				if res.PromptTokens > 0 {
					r.G2Rate = float64(res.HostHitTokens) / float64(res.PromptTokens)
					r.G3Rate = float64(res.DiskHitTokens) / float64(res.PromptTokens)
				}
				rows = append(rows, r)
				if !asJSON {
					fmt.Fprintf(out, "%12d %9.4f %9.4f %9.4f %9.4f\n", r.Capacity, r.HitRate, r.G2Rate, r.G3Rate, r.Optimum)
				}
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"trace": filepath.Base(tracePath), "policy": policy, "g2_tokens": g2, "g3_tokens": g3, "rows": rows})
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tracePath, "trace", "", "Mooncake-format JSON-lines trace (required)")
	f.StringVar(&capacities, "capacity", "1e5,1e6,3e6,1e7", "KV pool sizes in tokens, comma-separated")
	f.StringVar(&policy, "policy", "value", "eviction policy: value or lru")
	f.Float64Var(&g2f, "g2", 0, "host-memory tier (G2) size in tokens, e.g. 1e6 (0: none)")
	f.Float64Var(&g3f, "g3", 0, "disk tier (G3) size in tokens, e.g. 3e6 (0: none)")
	f.StringVar(&profilePath, "sim-profile", "", "cost profile for the simulator (default: the built-in one)")
	f.Float64Var(&stretch, "stretch", 1000, "multiply the gaps between arrivals by this (the default keeps requests from overlapping on a CPU profile)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
