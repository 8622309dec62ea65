package servebench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is a run's report plus its raw per-request records (for charts
// and custom analysis).
type Result struct {
	Report  Report
	Records []Record
}

// Report is the summary of a run. Latencies are in milliseconds; every Dist
// uses Percentile.
type Report struct {
	Workload    string  `json:"workload"`
	URL         string  `json:"url"`
	Model       string  `json:"model"`
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	MaxTokens   int     `json:"max_tokens"`
	Percentiles string  `json:"percentiles"`
	// WallS is from the start of the run to the end of its last request.
	WallS float64 `json:"wall_s"`
	// Requests counts requests that ran to an outcome; Canceled ones (the
	// run was interrupted) are counted apart and nowhere else.
	Requests  int `json:"requests"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Canceled  int `json:"canceled,omitempty"`
	// Errors counts failed requests by class: HTTP status code or
	// transport, timeout, not_sse, bad_chunk, stream_error, incomplete.
	Errors       map[string]int `json:"errors,omitempty"`
	ErrorSamples []string       `json:"error_samples,omitempty"`

	// TTFT, ITL, E2E and TPOT (time per output token after the first:
	// (E2E−TTFT)/(tokens−1)) over successful requests.
	TTFT Dist `json:"ttft_ms"`
	ITL  Dist `json:"itl_ms"`
	E2E  Dist `json:"e2e_ms"`
	TPOT Dist `json:"tpot_ms"`

	OutputTokens int64 `json:"output_tokens"`
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	// PromptTokensPerRequest is the mean prompt length.
	PromptTokensPerRequest float64 `json:"prompt_tokens_per_request"`
	OutputTokensPerS       float64 `json:"output_tokens_per_s"`
	RequestsPerS           float64 `json:"requests_per_s"`
	// CacheHitRate is Σ cached_tokens / Σ prompt_tokens (nil without
	// usage).
	CacheHitRate *float64 `json:"cache_hit_rate"`
	// UsageMissing counts successful responses without a usage chunk
	// (their output tokens are counted as content chunks).
	UsageMissing int `json:"usage_missing,omitempty"`

	// Server is kvserve's per-request timing extension, when present.
	Server *ServerReport `json:"server,omitempty"`

	// ByLabel breaks successful requests down by workload label.
	ByLabel []LabelReport `json:"by_label,omitempty"`
}

// ServerReport summarises the server-side timings of the responses that
// carried them.
type ServerReport struct {
	Count    int  `json:"count"`
	Overhead Dist `json:"overhead_ms"`
	Queue    Dist `json:"queue_ms"`
	TTFT     Dist `json:"ttft_ms"`
	Engine   Dist `json:"engine_ms"`
	Handler  Dist `json:"handler_ms"`
	// ClientExtraTTFT is, per request, the client's TTFT minus the
	// server's: the part of the wait the server's clock does not see,
	// which starts when its handler starts — connecting, the request
	// waiting unread in the server's socket, the first chunk's way back
	// and the client's own reading of it.
	ClientExtraTTFT Dist `json:"client_extra_ttft_ms"`
}

// LabelReport is one label's share of a run.
type LabelReport struct {
	Label                  string   `json:"label"`
	Requests               int      `json:"requests"`
	TTFT                   Dist     `json:"ttft_ms"`
	E2E                    Dist     `json:"e2e_ms"`
	PromptTokensPerRequest float64  `json:"prompt_tokens_per_request"`
	CacheHitRate           *float64 `json:"cache_hit_rate"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (r *runner) result() *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep := Report{
		Workload:    r.cfg.Workload.Name(),
		URL:         r.endpoint,
		Model:       r.cfg.Model,
		MaxTokens:   r.cfg.MaxTokens,
		Percentiles: PercentileMethod,
	}
	if r.cfg.Rate > 0 {
		rep.Rate = r.cfg.Rate
	} else {
		rep.Concurrency = r.cfg.Concurrency
	}
	if !r.lastEnd.IsZero() {
		rep.WallS = r.lastEnd.Sub(r.start).Seconds()
	}
	rep.Fill(r.records)
	return &Result{Report: rep, Records: r.records}
}

// Fill computes rep's counts, latencies, token figures and rates from
// records (rep.WallS must be set for the rates).
func (rep *Report) Fill(records []Record) {
	var ttft, itl, e2e, tpot []float64
	var srv ServerReport
	var ovh, que, sttft, eng, hnd, extra []float64
	labels := map[string]*labelAcc{}
	for i := range records {
		rec := &records[i]
		if rec.Err == "canceled" {
			rep.Canceled++
			continue
		}
		rep.Requests++
		if rec.Err != "" {
			rep.Failed++
			if rep.Errors == nil {
				rep.Errors = map[string]int{}
			}
			rep.Errors[rec.Err]++
			if len(rep.ErrorSamples) < 5 {
				rep.ErrorSamples = append(rep.ErrorSamples, trimMsg(rec.Err+": "+rec.ErrMsg))
			}
			continue
		}
		rep.Succeeded++
		if rec.OutputChunks > 0 {
			ttft = append(ttft, ms(rec.TTFT))
		}
		for _, d := range rec.ITLs {
			itl = append(itl, ms(d))
		}
		e2e = append(e2e, ms(rec.E2E))
		if rec.OutputTokens > 1 && rec.OutputChunks > 0 {
			tpot = append(tpot, ms(rec.E2E-rec.TTFT)/float64(rec.OutputTokens-1))
		}
		rep.OutputTokens += int64(rec.OutputTokens)
		rep.PromptTokens += int64(rec.PromptTokens)
		rep.CachedTokens += int64(rec.CachedTokens)
		if !rec.HasUsage {
			rep.UsageMissing++
		}
		if s := rec.Server; s != nil {
			srv.Count++
			if s.OverheadMS != nil {
				ovh = append(ovh, *s.OverheadMS)
			}
			if s.QueueMS != nil {
				que = append(que, *s.QueueMS)
			}
			if s.TTFTMS != nil {
				sttft = append(sttft, *s.TTFTMS)
				if rec.OutputChunks > 0 {
					extra = append(extra, ms(rec.TTFT)-*s.TTFTMS)
				}
			}
			if s.EngineMS != nil {
				eng = append(eng, *s.EngineMS)
			}
			if s.HandlerMS != nil {
				hnd = append(hnd, *s.HandlerMS)
			}
		}
		la := labels[rec.Label]
		if la == nil {
			la = &labelAcc{}
			labels[rec.Label] = la
		}
		la.add(rec)
	}
	rep.TTFT, rep.ITL, rep.E2E, rep.TPOT = Summarize(ttft), Summarize(itl), Summarize(e2e), Summarize(tpot)
	if rep.Succeeded > 0 {
		rep.PromptTokensPerRequest = float64(rep.PromptTokens) / float64(rep.Succeeded)
	}
	rep.CacheHitRate = hitRate(rep.CachedTokens, rep.PromptTokens)
	if rep.WallS > 0 {
		rep.OutputTokensPerS = float64(rep.OutputTokens) / rep.WallS
		rep.RequestsPerS = float64(rep.Succeeded) / rep.WallS
	}
	if srv.Count > 0 {
		srv.Overhead, srv.Queue, srv.TTFT, srv.Engine, srv.Handler = Summarize(ovh), Summarize(que), Summarize(sttft), Summarize(eng), Summarize(hnd)
		srv.ClientExtraTTFT = Summarize(extra)
		rep.Server = &srv
	}
	names := make([]string, 0, len(labels))
	for n := range labels {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		rep.ByLabel = append(rep.ByLabel, labels[n].report(n))
	}
}

type labelAcc struct {
	n              int
	ttft, e2e      []float64
	prompt, cached int64
}

func (a *labelAcc) add(rec *Record) {
	a.n++
	if rec.OutputChunks > 0 {
		a.ttft = append(a.ttft, ms(rec.TTFT))
	}
	a.e2e = append(a.e2e, ms(rec.E2E))
	a.prompt += int64(rec.PromptTokens)
	a.cached += int64(rec.CachedTokens)
}

func (a *labelAcc) report(label string) LabelReport {
	return LabelReport{
		Label:                  label,
		Requests:               a.n,
		TTFT:                   Summarize(a.ttft),
		E2E:                    Summarize(a.e2e),
		PromptTokensPerRequest: float64(a.prompt) / float64(a.n),
		CacheHitRate:           hitRate(a.cached, a.prompt),
	}
}

func hitRate(cached, prompt int64) *float64 {
	if prompt <= 0 {
		return nil
	}
	v := float64(cached) / float64(prompt)
	return &v
}

func trimMsg(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// WriteTable prints the report for people.
func (rep *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	mode := fmt.Sprintf("concurrency %d", rep.Concurrency)
	if rep.Rate > 0 {
		mode = fmt.Sprintf("rate %.3g sessions/s (Poisson)", rep.Rate)
	}
	fmt.Fprintf(&b, "workload %s · model %s · %s · max_tokens %d\n", rep.Workload, rep.Model, mode, rep.MaxTokens)
	fmt.Fprintf(&b, "endpoint %s\n", rep.URL)
	fmt.Fprintf(&b, "requests %d: %d ok, %d failed", rep.Requests, rep.Succeeded, rep.Failed)
	if rep.Canceled > 0 {
		fmt.Fprintf(&b, ", %d canceled", rep.Canceled)
	}
	fmt.Fprintf(&b, " · wall %.1f s\n", rep.WallS)
	if len(rep.Errors) > 0 {
		keys := make([]string, 0, len(rep.Errors))
		for k := range rep.Errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s ×%d", k, rep.Errors[k])
		}
		fmt.Fprintf(&b, "errors: %s\n", strings.Join(parts, ", "))
		for _, s := range rep.ErrorSamples {
			fmt.Fprintf(&b, "  e.g. %s\n", s)
		}
	}
	b.WriteByte('\n')
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "latency (ms)\tn\tp50\tp90\tp99\tmean\tmax\t")
	row := func(name string, d Dist) {
		if d.Count == 0 {
			fmt.Fprintf(tw, "%s\t0\t-\t-\t-\t-\t-\t\n", name)
			return
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t\n", name, d.Count, num(d.P50), num(d.P90), num(d.P99), num(d.Mean), num(d.Max))
	}
	row("TTFT", rep.TTFT)
	row("inter-token", rep.ITL)
	row("end-to-end", rep.E2E)
	row("per output token", rep.TPOT)
	if s := rep.Server; s != nil {
		for _, r := range []struct {
			name string
			d    Dist
		}{{"server overhead", s.Overhead}, {"server queue", s.Queue}, {"server TTFT", s.TTFT}, {"server engine span", s.Engine}, {"server handler busy", s.Handler}, {"client TTFT - server's", s.ClientExtraTTFT}} {
			if r.d.Count > 0 {
				row(r.name, r.d)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteByte('\n')
	fmt.Fprintf(&b, "throughput  %.1f output tokens/s · %.2f requests/s\n", rep.OutputTokensPerS, rep.RequestsPerS)
	fmt.Fprintf(&b, "tokens      prompt %d (%.0f per request) · cached %d · output %d\n",
		rep.PromptTokens, rep.PromptTokensPerRequest, rep.CachedTokens, rep.OutputTokens)
	fmt.Fprintf(&b, "cache hit   %s of prompt tokens\n", pct(rep.CacheHitRate))
	if rep.UsageMissing > 0 {
		fmt.Fprintf(&b, "note        %d responses had no usage chunk (output counted as chunks)\n", rep.UsageMissing)
	}
	if rep.Server == nil && rep.Succeeded > 0 {
		b.WriteString("server      no kvserve timing extension in the responses\n")
	}
	if len(rep.ByLabel) > 1 {
		b.WriteByte('\n')
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "by label\tn\tTTFT p50\tTTFT p99\tE2E p50\tprompt tok\tcache hit\t")
		for _, l := range rep.ByLabel {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%.0f\t%s\t\n", l.Label, l.Requests, num(l.TTFT.P50), num(l.TTFT.P99),
				num(l.E2E.P50), l.PromptTokensPerRequest, pct(l.CacheHitRate))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b, "\npercentiles: %s\n", rep.Percentiles)
	_, err := io.WriteString(w, b.String())
	return err
}

func num(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func pct(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", *p*100)
}
