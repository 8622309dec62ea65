package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/billing"
	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/internal/pricing"
)

func newReportCmd() *cobra.Command {
	var (
		dataDir, server, apiKey, from, to, tenantID, groupBy, priceBook, records string
		asJSON, printBook                                                        bool
	)
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Tokens, cost and what caching saved, from the usage ledger",
		Long: `Totals the usage ledger — every request's tokens (uncached, cached by tier, written to
the cache, output, reasoning) and every context cache's storage — priced by a price book,
with what the same requests would have cost with nothing cached.

Against a running server, give --url (and an --api-key with usage.read; an admin key sees
every tenant): it asks GET /v1/usage. Without --url it reads the data directory's ledger,
which only a stopped server lets go of.

--records jsonl|csv writes the records themselves instead (an export).`,
		Example: `  kvserve report --group-by day,model
  kvserve report --url http://127.0.0.1:8080 --api-key $KEY --from 2026-12-01 --group-by tenant
  kvserve report --records csv > usage.csv`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if printBook {
				if priceBook != "" {
					data, err := os.ReadFile(priceBook)
					if err != nil {
						return err
					}
					_, err = out.Write(data)
					return err
				}
				_, err := out.Write(pricing.DefaultYAML())
				return err
			}
			by, err := billing.ParseGroupBy(groupBy)
			if err != nil {
				return err
			}
			if records != "" && records != "jsonl" && records != "csv" {
				return fmt.Errorf("--records %q: want jsonl or csv", records)
			}
			if server != "" {
				if priceBook != "" {
					return errors.New("--price-book prices a local ledger; a server prices with its own book")
				}
				return remoteReport(cmd.Context(), out, server, apiKey, from, to, tenantID, groupBy, records, asJSON)
			}
			book, err := loadPriceBook(priceBook)
			if err != nil {
				return err
			}
			q, err := reportQuery(from, to, tenantID)
			if err != nil {
				return err
			}
			q.GroupBy = by
			return localReport(cmd.Context(), out, dataDir, book, q, records, asJSON)
		},
	}
	f := cmd.Flags()
	dataDirFlag(cmd, &dataDir)
	f.StringVar(&server, "url", "", "a running server's address (http://HOST:PORT): ask its GET /v1/usage")
	f.StringVar(&apiKey, "api-key", os.Getenv("KVSERVE_API_KEY"), "API key for --url (default $KVSERVE_API_KEY)")
	f.StringVar(&from, "from", "", "first day (2026-12-01, UTC) or time (RFC 3339) to count (default: the ledger's start)")
	f.StringVar(&to, "to", "", "last day (included) or time (excluded) to count (default: now)")
	f.StringVar(&tenantID, "tenant", "", "one tenant's usage (its id)")
	f.StringVar(&groupBy, "group-by", "", "group by any of day, model, key, tenant, dialect (comma-separated)")
	f.StringVar(&priceBook, "price-book", "", "price book (YAML) to price a local ledger with (default: the built-in example)")
	f.StringVar(&records, "records", "", "write the records instead of totals: jsonl or csv")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON (GET /v1/usage's shape)")
	f.BoolVar(&printBook, "print-price-book", false, "print the price book (the built-in one without --price-book) and exit")
	return cmd
}

// reportQuery reads the selection flags.
func reportQuery(from, to, tenantID string) (billing.Query, error) {
	var q billing.Query
	var err error
	if q.From, err = reportTime(from, false); err != nil {
		return q, fmt.Errorf("--from: %w", err)
	}
	if q.To, err = reportTime(to, true); err != nil {
		return q, fmt.Errorf("--to: %w", err)
	}
	q.Tenant = tenantID
	return q, nil
}

func reportTime(s string, end bool) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.Parse(time.DateOnly, s); err == nil {
		if end {
			d = d.AddDate(0, 0, 1)
		}
		return d, nil
	}
	return time.Parse(time.RFC3339, s)
}

// localReport reads the data directory's ledger (and its live caches).
func localReport(ctx context.Context, out io.Writer, dataDir string, book *pricing.Book, q billing.Query, records string, asJSON bool) error {
	if dataDir == "" {
		dataDir = defaultDataDir(os.Getenv)
	}
	path := filepath.Join(dataDir, ledgerFile)
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no usage ledger in %s (a server started there with --usage-ledger on writes one): %w", dataDir, err)
	}
	l, _, err := ledger.Open(path, ledger.Options{Wait: 500 * time.Millisecond})
	if errors.Is(err, ledger.ErrHeld) {
		return fmt.Errorf("a running server holds %s: ask it instead (kvserve report --url http://HOST:PORT --api-key KEY)", path)
	}
	if err != nil {
		return err
	}
	defer l.Close()
	if records != "" {
		return writeRecords(ctx, out, l, q, records)
	}
	var sum billing.Summary
	err = withState(ctx, stateSource{dataDir: dataDir}, func(st *state) error {
		caches, err := newCacheService(st, 0, nil)
		if err != nil {
			return err
		}
		sum, err = billing.Summarize(ctx, l, caches, book, q, time.Now())
		return err
	})
	if err != nil {
		return err
	}
	return printSummary(out, sum, asJSON)
}

// writeRecords exports the records q selects.
func writeRecords(ctx context.Context, out io.Writer, l *ledger.Ledger, q billing.Query, format string) error {
	f := ledger.Filter{Tenant: q.Tenant, From: q.From, To: q.To}
	if format == "jsonl" {
		enc := json.NewEncoder(out)
		return l.Records(ctx, f, func(r ledger.Record) error { return enc.Encode(r) })
	}
	cw := csv.NewWriter(out)
	if err := cw.Write(billing.CSVHeader); err != nil {
		return err
	}
	if err := l.Records(ctx, f, func(r ledger.Record) error { return cw.Write(billing.CSVRow(r)) }); err != nil {
		return err
	}
	cw.Flush()
	return cw.Error()
}

// remoteReport asks a server's GET /v1/usage (or /v1/usage/records).
func remoteReport(ctx context.Context, out io.Writer, server, apiKey, from, to, tenantID, groupBy, records string, asJSON bool) error {
	v := url.Values{}
	for k, s := range map[string]string{"from": from, "to": to, "tenant": tenantID, "group_by": groupBy, "format": records} {
		if s != "" {
			v.Set(k, s)
		}
	}
	path := "/v1/usage"
	if records != "" {
		path = "/v1/usage/records"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(server, "/")+path+"?"+v.Encode(), nil)
	if err != nil {
		return err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	if records != "" {
		_, err := io.Copy(out, resp.Body)
		return err
	}
	var sum billing.Summary
	if err := json.NewDecoder(resp.Body).Decode(&sum); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return printSummary(out, sum, asJSON)
}

// printSummary prints a summary as a table (or JSON).
func printSummary(out io.Writer, s billing.Summary, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := append(groupColumns(s.GroupBy), "requests", "failed", "prompt", "cached", "hit rate", "cache write", "output",
		"cache tok·h", "cost", "without cache", "saved", "")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	row := func(labels []string, g billing.Group) {
		cells := append(labels, fmt.Sprint(g.Requests), fmt.Sprint(g.Failed), fmt.Sprint(g.Tokens.Prompt), fmt.Sprint(g.Tokens.Cached),
			fmt.Sprintf("%.1f%%", 100*g.HitRate), fmt.Sprint(g.Tokens.CacheWrite), fmt.Sprint(g.Tokens.Output),
			fmt.Sprintf("%.1f", g.TokenHours), money(g.CostTotal), money(g.CostWithoutCache), savedCell(g), "")
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if len(s.GroupBy) == 0 {
		row(nil, s.Total)
	} else {
		for _, g := range s.Groups {
			row(groupLabels(s.GroupBy, g), g)
		}
		labels := make([]string, len(s.GroupBy))
		labels[0] = "total"
		row(labels, s.Total)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "prices in %s from the %s price book\n", s.Currency, s.PriceBook)
	return err
}

func money(x float64) string { return fmt.Sprintf("%.4f", x) }

func savedCell(g billing.Group) string {
	if g.CostWithoutCache <= 0 {
		return money(g.Savings)
	}
	return fmt.Sprintf("%s (%.0f%%)", money(g.Savings), 100*g.Savings/g.CostWithoutCache)
}

func groupColumns(by []string) []string { return append([]string(nil), by...) }

func groupLabels(by []string, g billing.Group) []string {
	out := make([]string, len(by))
	for i, d := range by {
		switch d {
		case billing.ByDay:
			out[i] = g.Day
		case billing.ByModel:
			out[i] = g.Model
		case billing.ByKey:
			out[i] = g.KeyID
		case billing.ByTenant:
			out[i] = g.Tenant
		case billing.ByDialect:
			out[i] = g.Dialect
		}
		if out[i] == "" {
			out[i] = "-"
		}
	}
	return out
}
