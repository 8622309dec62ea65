package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/enginebench"
	"github.com/kvserve/kvserve/internal/tco"
)

func newSimulateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "What a deployment will cost before you buy it",
	}
	cmd.AddCommand(newSimulateTCOCmd())
	return cmd
}

// tcoReport is simulate tco's answer (its --json shape).
type tcoReport struct {
	Scenario  tco.Scenario `json:"scenario"`
	Currency  string       `json:"currency"`
	PriceBook string       `json:"price_book"`
	Priced    []tco.Priced `json:"priced"`
	Measured  *measuredTCO `json:"measured,omitempty"`
}

// measuredTCO is the measured run and its scaling.
type measuredTCO struct {
	CPU            string        `json:"cpu"`
	Threads        int           `json:"threads"`
	Model          string        `json:"model"`
	Points         []tco.Point   `json:"points"`
	Fit            tco.Model     `json:"fit"`
	MachinePerHour float64       `json:"machine_per_hour"`
	Scaled         tco.Machine   `json:"scaled"`
	AtMeasured     []tco.Machine `json:"at_measured"`
}

func newSimulateTCOCmd() *cobra.Command {
	var (
		priceBook, fast, strong, modelPath, dataDir, lengths string
		weights                                              weightsMemory
		s                                                    = tco.Seed
		measure, asJSON                                      bool
		perHour                                              float64
		threads                                              int
	)
	cmd := &cobra.Command{
		Use:   "tco",
		Short: "A day of questions over one long document, with a context cache and without: cost and TTFT",
		Long: `The seeds' scenario by default: 10,000 questions a day over a 500,000-token document.

From the price book (a cloud API's way of pricing): for a fast model and a strong one, a
day's cost with no cache (every question sends the whole document) and with a context cache
(the document written to the cache once, stored all day, read at the cached price).

With --measure, also from this server (a self-hosted deployment's way): it times questions
over documents of a few lengths on this machine with the real engine — computed whole, and
with the document cached — fits time to first token as prefill (linear in the tokens for the
weights, quadratic for attention) and a cached question (linear in the document), scales the
fit up to the scenario's document, and prices the machine time a day takes. The fit is an
extrapolation far beyond what was measured (and beyond the model's context): read it as the
shape of the saving, not as a forecast of seconds.`,
		Example: `  kvserve simulate tco
  kvserve simulate tco --measure --measure-lengths 1024,2048,4096
  kvserve simulate tco --price-book prices.yaml --fast my-small-model --strong my-large-model --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			book, err := loadPriceBook(priceBook)
			if err != nil {
				return err
			}
			rep := tcoReport{Scenario: s, Currency: book.Currency, PriceBook: book.Source}
			for _, m := range []string{fast, strong} {
				if _, ok := book.Models[m]; !ok {
					return fmt.Errorf("the %s price book has no model %q (it has %s)", book.Source, m, strings.Join(book.Names(), ", "))
				}
				p, err := tco.Price(book, m, s)
				if err != nil {
					return err
				}
				rep.Priced = append(rep.Priced, p)
			}
			if measure {
				lens, err := parseLengths(lengths)
				if err != nil {
					return err
				}
				rep.Measured, err = measureTCO(cmd, modelPath, weights, dataDir, lens, threads, perHour, s)
				if err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return printTCO(out, rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&priceBook, "price-book", "", "price book (YAML) (default: the built-in example; kvserve report --print-price-book shows it)")
	f.StringVar(&fast, "fast", "example-fast", "the price book's fast model")
	f.StringVar(&strong, "strong", "example-strong", "the price book's strong model")
	f.Int64Var(&s.QueriesPerDay, "queries-per-day", s.QueriesPerDay, "questions a day")
	f.Int64Var(&s.DocumentTokens, "document-tokens", s.DocumentTokens, "the document's tokens")
	f.Int64Var(&s.QuestionTokens, "question-tokens", s.QuestionTokens, "each question's tokens")
	f.Int64Var(&s.OutputTokens, "output-tokens", s.OutputTokens, "each answer's tokens")
	f.Float64Var(&s.CacheHours, "cache-hours", s.CacheHours, "how long the cache is kept before it is written again")
	f.BoolVar(&measure, "measure", false, "also time the engine on this machine and scale the measurement up")
	f.StringVarP(&modelPath, "model", "m", "", "GGUF model to measure (default: the data directory's synthetic SmolLM2-135M-shaped model, generated if missing)")
	weightsMemoryFlags(f, &weights)
	f.StringVar(&dataDir, "data-dir", "", "data directory holding the synthetic model (default as for serve)")
	f.StringVar(&lengths, "measure-lengths", "1024,2048,4096", "document lengths to time (at least two; each must fit the model's context)")
	f.IntVarP(&threads, "threads", "t", 0, "compute threads (default: all cores)")
	f.Float64Var(&perHour, "machine-per-hour", 0.10, "what the measured machine costs an hour, in the price book's currency (an illustrative default for a 2-vCPU VM: put yours)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func parseLengths(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 64 {
			return nil, fmt.Errorf("--measure-lengths: %q is not a length of at least 64 tokens", f)
		}
		out = append(out, n)
	}
	if len(out) < 2 {
		return nil, errors.New("--measure-lengths: give at least two lengths to fit")
	}
	return out, nil
}

// measureTCO times the engine on documents of the given lengths and
// scales the fit up to s.
func measureTCO(cmd *cobra.Command, modelPath string, weights weightsMemory, dataDir string, lengths []int, threads int, perHour float64, s tco.Scenario) (*measuredTCO, error) {
	stderr := cmd.ErrOrStderr()
	if modelPath == "" {
		if dataDir == "" {
			dataDir = defaultDataDir(os.Getenv)
		}
		var err error
		if modelPath, err = ensureSyntheticModel(cmd.Context(), filepath.Join(dataDir, "models"), stderr); err != nil {
			return nil, err
		}
	}
	mf, err := openModelWithProgress(modelPath, weights, 0, threads, stderr)
	if err != nil {
		return nil, err
	}
	defer mf.Close()
	o := enginebench.Options{Threads: threads, Log: func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }}
	const questionLen = 50
	timings, err := enginebench.DocumentTTFT(cmd.Context(), mf.Model, o, lengths, questionLen, 2, 5)
	if err != nil {
		return nil, err
	}
	m := &measuredTCO{CPU: cpuModel(), Threads: threads, Model: filepath.Base(modelPath), MachinePerHour: perHour}
	if m.Threads == 0 {
		m.Threads = runtime.NumCPU()
	}
	for _, t := range timings {
		m.Points = append(m.Points, tco.Point{Tokens: int64(t.Tokens), Cold: t.Cold.Seconds(), Warm: t.Warm.Seconds()})
	}
	if m.Fit, err = tco.Fit(m.Points); err != nil {
		return nil, err
	}
	if m.Scaled, err = tco.Scale(m.Fit, s, perHour); err != nil {
		return nil, err
	}
	// The same day at the measured lengths: what was seen, not fitted.
	for _, p := range m.Points {
		at := s
		at.DocumentTokens, at.QuestionTokens = p.Tokens, questionLen
		exact := tco.Model{ColdA: p.Cold / float64(p.Tokens+questionLen), WarmC: p.Warm}
		r, err := tco.Scale(exact, at, perHour)
		if err != nil {
			return nil, err
		}
		m.AtMeasured = append(m.AtMeasured, r)
	}
	return m, nil
}

func printTCO(out io.Writer, r tcoReport) error {
	s := r.Scenario
	fmt.Fprintf(out, "%d questions a day (%d tokens each, %d-token answers) over a %d-token document; the cache kept %g h\n\n",
		s.QueriesPerDay, s.QuestionTokens, s.OutputTokens, s.DocumentTokens, s.CacheHours)
	fmt.Fprintf(out, "Priced by the %s price book (%s a day):\n", r.PriceBook, r.Currency)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\t\tinput\tcached input\tcache write\tstorage\toutput\ttotal\tcut\t")
	for _, p := range r.Priced {
		for i, d := range []tco.Day{p.WithoutCache, p.WithCache} {
			label, cut := "no cache", ""
			if i == 1 {
				label, cut = "context cache", fmt.Sprintf("%.1f%%", 100*p.Cut)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n", p.Model, label, d.Input, d.CachedRead, d.CacheWrite,
				d.Storage, d.Output, d.Total(), cut)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	m := r.Measured
	if m == nil {
		return nil
	}
	fmt.Fprintf(out, "\nMeasured on this server: %s, %d threads, %s (time to first token of a 50-token question):\n", m.CPU, m.Threads, m.Model)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "document tokens\tno cache\tcached\tTTFT cut\tmachine-h/day no cache\twith cache\tcut\t")
	for i, p := range m.Points {
		a := m.AtMeasured[i]
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f×\t%.2f\t%.2f\t%.1f%%\t\n", p.Tokens, secs(p.Cold), secs(p.Warm), a.TTFTCut,
			a.SecondsWithoutCache/3600, a.SecondsWithCache/3600, 100*a.Cut)
	}
	sc := m.Scaled
	fmt.Fprintf(tw, "%d (fitted)\t%s\t%s\t%.0f×\t%.1f\t%.2f\t%.1f%%\t\n", s.DocumentTokens, secs(sc.TTFTWithoutCache), secs(sc.TTFTWithCache),
		sc.TTFTCut, sc.SecondsWithoutCache/3600, sc.SecondsWithCache/3600, 100*sc.Cut)
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "At %.2f %s per machine-hour, the fitted day costs %.2f without the cache (%.1f machines busy all day) and %.2f with it (%.2f machines).\n"+
		"Fit: cold = %.3g·n + %.3g·n² s, cached = %.3g + %.3g·n s; far beyond the measured lengths, the shape of the saving, not a forecast.\n",
		m.MachinePerHour, r.Currency, sc.CostWithoutCache, sc.MachinesWithout, sc.CostWithCache, sc.MachinesWith,
		m.Fit.ColdA, m.Fit.ColdB, m.Fit.WarmC, m.Fit.WarmD)
	return err
}

func secs(s float64) string {
	switch {
	case s >= 3600:
		return fmt.Sprintf("%.1f h", s/3600)
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	default:
		return fmt.Sprintf("%.1f ms", s*1000)
	}
}
