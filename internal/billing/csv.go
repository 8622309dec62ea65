package billing

import (
	"strconv"
	"time"

	"github.com/kvserve/kvserve/internal/ledger"
)

// CSVHeader names the columns of CSVRow.
var CSVHeader = []string{"seq", "kind", "id", "start", "end", "tenant", "principal", "key_id", "model", "worker", "dialect", "route",
	"priority", "prompt_tokens", "uncached_tokens", "cached_tokens", "cached_g1_tokens", "cached_g2_tokens", "cached_g3_tokens",
	"cache_write_tokens", "output_tokens", "reasoning_tokens", "ttft_ms", "duration_ms", "outcome", "status", "error", "cache_token_hours"}

// CSVRow is a record as CSV fields, in CSVHeader's order.
func CSVRow(r ledger.Record) []string {
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	tm := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	t := r.Tokens
	return []string{strconv.FormatUint(r.Seq, 10), string(r.Kind), r.ID, tm(r.Start), tm(r.End), r.Tenant, r.Principal, r.KeyID,
		r.Model, r.Worker, r.Dialect, r.Route, strconv.Itoa(r.Priority), i(t.Prompt), i(t.Uncached), i(t.Cached), i(t.CachedG1),
		i(t.CachedG2), i(t.CachedG3), i(t.CacheWrite), i(t.Output), i(t.Reasoning), f(r.TTFTMs), f(r.DurationMs),
		string(r.Outcome), strconv.Itoa(r.Status), r.Error, f(r.TokenHours)}
}
