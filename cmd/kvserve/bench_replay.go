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
		g2                                         int64
		stretch                                    float64
		asJSON                                     bool
	)
	cmd := &cobra.Command{
		Use:   "replay --trace F.jsonl [--capacity TOKENS[,TOKENS…]] [--policy lru|value] [--g2 TOKENS] [--json]",
		Short: "Prefix hit rate of a trace per KV capacity: the real KV manager in virtual time, and the offline optimum",
		Long: `For each capacity, replays the Mooncake-format trace through the real scheduler and KV manager on the
simulator's virtual clock (kvserve sim replay) and reports the token-weighted prefix hit rate, next to the
offline optimum (Belady's MIN over the trace's 512-token blocks, as ../shared/traces/README.md counts it).
With --g2, a host-memory tier of that many tokens sits below the pool; its hits count as hits.`,
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
			type row struct {
				Capacity int64   `json:"capacity_tokens"`
				HitRate  float64 `json:"hit_rate"`
				Optimum  float64 `json:"optimum"`
				WallS    float64 `json:"wall_s"`
			}
			var rows []row
			out := cmd.OutOrStdout()
			if !asJSON {
				fmt.Fprintf(out, "%s, policy %s, G2 %d tokens\n%12s %9s %9s\n", filepath.Base(tracePath), policy, g2, "capacity", "hit rate", "optimum")
			}
			for _, c := range caps {
				res, err := replayTrace(cmd.Context(), trace, replaySettings{profilePath: profilePath, kvTokens: c,
					hostTokens: g2, stretch: stretch, lru: policy == "lru"})
				if err != nil {
					return err
				}
				r := row{Capacity: c, HitRate: res.HitRate, Optimum: sim.OptimalHitRate(trace, c+g2), WallS: res.WallS}
				rows = append(rows, r)
				if !asJSON {
					fmt.Fprintf(out, "%12d %9.4f %9.4f\n", r.Capacity, r.HitRate, r.Optimum)
				}
			}
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(map[string]any{"trace": filepath.Base(tracePath), "policy": policy, "g2_tokens": g2, "rows": rows})
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&tracePath, "trace", "", "Mooncake-format JSON-lines trace (required)")
	f.StringVar(&capacities, "capacity", "1e5,1e6,3e6,1e7", "KV pool sizes in tokens, comma-separated")
	f.StringVar(&policy, "policy", "value", "eviction policy: value or lru")
	f.Int64Var(&g2, "g2", 0, "host-memory tier (G2) size in tokens (0: none)")
	f.StringVar(&profilePath, "sim-profile", "", "cost profile for the simulator (default: the built-in one)")
	f.Float64Var(&stretch, "stretch", 1000, "multiply the gaps between arrivals by this (the default keeps requests from overlapping on a CPU profile)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
