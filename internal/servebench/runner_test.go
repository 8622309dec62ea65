package servebench

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// bubble runs the fake backend and a client over in-memory pipes inside a
// synctest bubble, so every time the runner measures is exact fake time.
func bubble(t *testing.T, f *fakeBackend, fn func(c *http.Client)) {
	synctest.Test(t, func(t *testing.T) {
		l := newPipeListener()
		srv := &http.Server{Handler: f}
		var wg sync.WaitGroup
		wg.Go(func() { _ = srv.Serve(l) })
		tr := &http.Transport{
			DialContext:         func(context.Context, string, string) (net.Conn, error) { return l.dial() },
			MaxIdleConnsPerHost: 64,
		}
		// Deferred, so that a failing test (t.Fatal exits the goroutine)
		// still leaves no goroutine behind in the bubble.
		defer func() {
			tr.CloseIdleConnections()
			_ = srv.Close()
			wg.Wait()
		}()
		fn(&http.Client{Transport: tr})
	})
}

func run(t *testing.T, c *http.Client, cfg Config) *Result {
	t.Helper()
	cfg.Client = c
	if cfg.URL == "" {
		cfg.URL = "http://fake"
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestRunTimingsExact checks TTFT, inter-token gaps, end-to-end latency and
// time per output token against the fake's exact timings: the role chunk
// (empty content) and the finish and usage chunks must not count.
func TestRunTimingsExact(t *testing.T) {
	f := &fakeBackend{Model: "m", TTFT: 100 * time.Millisecond, ITL: 10 * time.Millisecond, Timing: true, ServerLate: 2 * time.Millisecond}
	bubble(t, f, func(c *http.Client) {
		w := mustWorkload(t, "chat", WorkloadOptions{Seed: 1, PromptScale: 0.1})
		res := run(t, c, Config{Model: "m", Workload: w, Concurrency: 1, Requests: 4, MaxTokens: 5, IgnoreEOS: true})
		rep := res.Report
		if !strings.Contains(string(f.bodies[0]), `"ignore_eos":true`) {
			t.Fatalf("body %s", f.bodies[0])
		}
		if rep.Requests != 4 || rep.Succeeded != 4 || rep.Failed != 0 {
			t.Fatalf("%+v", rep)
		}
		for _, r := range res.Records {
			if r.TTFT != 100*time.Millisecond || r.E2E != 140*time.Millisecond || len(r.ITLs) != 4 || r.OutputTokens != 5 {
				t.Fatalf("record %+v", r)
			}
			for _, d := range r.ITLs {
				if d != 10*time.Millisecond {
					t.Fatalf("ITL %v", d)
				}
			}
		}
		if rep.TTFT.P50 != 100 || rep.TTFT.P99 != 100 || rep.ITL.Count != 16 || rep.ITL.P99 != 10 || rep.E2E.P50 != 140 || rep.TPOT.P50 != 10 {
			t.Fatalf("dists: ttft %+v itl %+v e2e %+v tpot %+v", rep.TTFT, rep.ITL, rep.E2E, rep.TPOT)
		}
		// Four back-to-back requests of 140 ms: 0.56 s of wall time.
		wall := 0.56
		if rep.WallS != wall || rep.OutputTokens != 20 || rep.OutputTokensPerS != 20/wall || rep.RequestsPerS != 4/wall {
			t.Fatalf("wall %v, output %d, %v tok/s", rep.WallS, rep.OutputTokens, rep.OutputTokensPerS)
		}
		if rep.Server == nil || rep.Server.Count != 4 || rep.Server.Overhead.P50 != 1.5 || rep.Server.Queue.P99 != 0.25 ||
			rep.Server.TTFT.P50 != 98 || rep.Server.Engine.P99 != 140 || rep.Server.ClientExtraTTFT.P50 != 2 || rep.Server.ClientExtraTTFT.Max != 2 {
			t.Fatalf("server %+v", rep.Server)
		}
		if rep.PromptTokens != int64(f.prompt) || rep.CachedTokens != int64(f.cached) {
			t.Fatalf("tokens %d/%d, fake counted %d/%d", rep.CachedTokens, rep.PromptTokens, f.cached, f.prompt)
		}
	})
}

// TestRunCacheHitRate runs shared-prefix traffic against the fake's prefix
// cache: later requests of a group hit their system prompt, and the
// reported rate is exactly Σcached/Σprompt as the server counted them;
// prefill cost per uncached token shows as warm TTFT < cold TTFT.
func TestRunCacheHitRate(t *testing.T) {
	f := &fakeBackend{Model: "m", TTFT: 5 * time.Millisecond, PerToken: 50 * time.Microsecond, ITL: time.Millisecond}
	bubble(t, f, func(c *http.Client) {
		w := mustWorkload(t, "shared-prefix", WorkloadOptions{Seed: 1, Groups: 3, PrefixTokens: 800, QuestionTokens: 40})
		res := run(t, c, Config{Model: "m", Workload: w, Concurrency: 2, Requests: 30, MaxTokens: 3})
		rep := res.Report
		if rep.Succeeded != 30 || rep.CacheHitRate == nil {
			t.Fatalf("%+v", rep)
		}
		want := float64(f.cached) / float64(f.prompt)
		if *rep.CacheHitRate != want || want < 0.7 {
			t.Fatalf("hit rate %v, fake %v", *rep.CacheHitRate, want)
		}
		var cold, warm *LabelReport
		for i := range rep.ByLabel {
			switch rep.ByLabel[i].Label {
			case "prefix-cold":
				cold = &rep.ByLabel[i]
			case "prefix-warm":
				warm = &rep.ByLabel[i]
			}
		}
		if cold == nil || warm == nil || cold.Requests != 3 || warm.Requests != 27 || *cold.CacheHitRate != 0 ||
			*warm.CacheHitRate < 0.8 || warm.TTFT.P50 >= cold.TTFT.P50 {
			t.Fatalf("by label %+v", rep.ByLabel)
		}
		if rep.Server != nil {
			t.Fatal("the fake sent no timing extension")
		}
	})
}

// TestRunAgentPauses runs agent sessions one at a time and checks that
// each turn starts exactly the scaled tool pause after the previous one
// ended, that sessions carry their ids, and that the bodies are the same as
// a replay of the workload with the fake's replies.
func TestRunAgentPauses(t *testing.T) {
	f := &fakeBackend{Model: "m", TTFT: 20 * time.Millisecond, ITL: 2 * time.Millisecond}
	o := WorkloadOptions{Seed: 5, PromptScale: 0.02, TimeScale: 0.1}
	bubble(t, f, func(c *http.Client) {
		res := run(t, c, Config{Model: "m", Workload: mustWorkload(t, "agent", o), Concurrency: 1, Requests: 40, MaxTokens: 4})
		if res.Report.Succeeded != 40 {
			t.Fatalf("%+v", res.Report)
		}
		// Replay: the same sessions fed the fake's reply.
		w := mustWorkload(t, "agent", o)
		reply := strings.Join(fakeReply(4), "")
		var turns []Turn
		for i := 0; len(turns) < 40; i++ {
			s := w.Session(i)
			var prev *Reply
			for len(turns) < 40 {
				turn, ok := s.Next(prev)
				if !ok {
					break
				}
				turns = append(turns, turn)
				prev = &Reply{OK: true, Content: reply}
			}
		}
		pauses := 0
		for j, turn := range turns {
			body, err := Body("m", 4, false, turn.Request)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(string(body)) != string(f.bodies[j]) {
				t.Fatalf("request %d differs from the replay:\n%s\n%s", j, body, f.bodies[j])
			}
			r := res.Records[j]
			if r.Label != turn.Label {
				t.Fatalf("request %d label %q, want %q", j, r.Label, turn.Label)
			}
			if j > 0 {
				p := res.Records[j-1]
				if gap := r.Start - (p.Start + p.E2E); gap != turn.Pause {
					t.Fatalf("request %d started %v after the previous, want pause %v", j, gap, turn.Pause)
				}
			}
			if turn.Pause > 0 {
				pauses++
			}
		}
		if pauses < 10 {
			t.Fatalf("only %d pauses", pauses)
		}
		if len(f.sessions) < 3 {
			t.Fatalf("session ids seen: %v", f.sessions)
		}
	})
}

// TestRunOpenLoop checks Poisson arrivals: sessions start at the seeded
// exponential inter-arrival times, whatever is in flight.
func TestRunOpenLoop(t *testing.T) {
	f := &fakeBackend{Model: "m", TTFT: 300 * time.Millisecond, ITL: 10 * time.Millisecond}
	bubble(t, f, func(c *http.Client) {
		w := mustWorkload(t, "chat", WorkloadOptions{Seed: 1, PromptScale: 0.05})
		res := run(t, c, Config{Model: "m", Workload: w, Rate: 20, Requests: 50, MaxTokens: 2, Seed: 7})
		if res.Report.Succeeded != 50 || res.Report.Rate != 20 {
			t.Fatalf("%+v", res.Report)
		}
		rng := rngFor(7, "arrivals", 0)
		var at time.Duration
		starts := map[time.Duration]bool{}
		for _, r := range res.Records {
			starts[r.Start] = true
		}
		var sum time.Duration
		for i := range 50 {
			if !starts[at] {
				t.Fatalf("no request started at arrival %d (%v)", i, at)
			}
			d := expDuration(rng, 20)
			at += d
			sum += d
		}
		// 50 draws of mean 50 ms.
		if mean := sum / 50; mean < 30*time.Millisecond || mean > 75*time.Millisecond {
			t.Fatalf("mean inter-arrival %v", mean)
		}
	})
}

// TestRunDuration checks a time-bounded run: no request starts after the
// deadline, those in flight finish.
func TestRunDuration(t *testing.T) {
	f := &fakeBackend{Model: "m", TTFT: 100 * time.Millisecond, ITL: 10 * time.Millisecond}
	bubble(t, f, func(c *http.Client) {
		w := mustWorkload(t, "chat", WorkloadOptions{Seed: 1, PromptScale: 0.05})
		res := run(t, c, Config{Model: "m", Workload: w, Concurrency: 2, Duration: time.Second, MaxTokens: 5})
		// Requests of 140 ms start at 0, 140, ..., 980 ms on each worker.
		if res.Report.Succeeded != 16 || res.Report.WallS != 1.12 {
			t.Fatalf("%d requests in %v s", res.Report.Succeeded, res.Report.WallS)
		}
	})
}

// TestRunDurationPause: a tool pause that would outlast the deadline ends
// the worker at the deadline; it does not start a fresh session instead.
func TestRunDurationPause(t *testing.T) {
	f := &fakeBackend{Model: "m", TTFT: 100 * time.Millisecond, ITL: 10 * time.Millisecond}
	bubble(t, f, func(c *http.Client) {
		w := mustWorkload(t, "agent", WorkloadOptions{Seed: 1, PromptScale: 0.02, TimeScale: 1})
		res := run(t, c, Config{Model: "m", Workload: w, Concurrency: 1, Duration: time.Second, MaxTokens: 5})
		if res.Report.Succeeded != 1 || res.Records[0].Label != "agent-first" {
			t.Fatalf("%d requests: %+v", res.Report.Succeeded, res.Records)
		}
	})
}

// TestRunFailures checks every failure class is counted under its name
// and the run goes on.
func TestRunFailures(t *testing.T) {
	faults := []string{"", "429", "", "500", "error-event", "cut", "garbage", "json", "hang", "429", ""}
	f := &fakeBackend{Model: "m", TTFT: 10 * time.Millisecond, ITL: time.Millisecond,
		Fault: func(n int) string { return faults[n%len(faults)] }}
	bubble(t, f, func(c *http.Client) {
		w := mustWorkload(t, "chat", WorkloadOptions{Seed: 1, PromptScale: 0.05})
		res := run(t, c, Config{Model: "m", Workload: w, Concurrency: 1, Requests: len(faults), MaxTokens: 4, Timeout: 2 * time.Second})
		rep := res.Report
		want := map[string]int{"429": 2, "500": 1, "stream_error": 1, "incomplete": 1, "bad_chunk": 1, "not_sse": 1, "timeout": 1}
		if rep.Succeeded != 3 || rep.Failed != 8 || len(rep.Errors) != len(want) {
			t.Fatalf("%d ok %d failed, errors %v", rep.Succeeded, rep.Failed, rep.Errors)
		}
		for k, n := range want {
			if rep.Errors[k] != n {
				t.Fatalf("errors %v, want %v", rep.Errors, want)
			}
		}
		if len(rep.ErrorSamples) == 0 || !strings.Contains(rep.ErrorSamples[0], "fake failure") {
			t.Fatalf("samples %q", rep.ErrorSamples)
		}
		// Failed requests do not enter the latency figures.
		if rep.TTFT.Count != 3 || rep.E2E.Count != 3 {
			t.Fatalf("ttft %+v e2e %+v", rep.TTFT, rep.E2E)
		}
	})
}

// TestRunCancel: cancelling the context ends the run promptly; requests in
// flight are counted as canceled, not failed.
func TestRunCancel(t *testing.T) {
	f := &fakeBackend{Model: "m", TTFT: time.Hour}
	bubble(t, f, func(c *http.Client) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		w := mustWorkload(t, "chat", WorkloadOptions{Seed: 1, PromptScale: 0.05})
		res, err := Run(ctx, Config{URL: "http://fake", Client: c, Model: "m", Workload: w, Concurrency: 3, Requests: 10})
		if err != nil {
			t.Fatal(err)
		}
		if res.Report.Canceled != 3 || res.Report.Failed != 0 || res.Report.Requests != 0 {
			t.Fatalf("%+v", res.Report)
		}
	})
}

// TestRunLoopback runs against the fake over real loopback HTTP with
// events split across writes, comment lines and CRLF line ends, discovers
// the model from /v1/models, and checks the results against the fake's
// own accounting. Timings are real here, so only lower bounds are exact.
func TestRunLoopback(t *testing.T) {
	f := &fakeBackend{Model: "fake-model", TTFT: 20 * time.Millisecond, ITL: 3 * time.Millisecond, Split: true, CRLF: true, Timing: true,
		Fault: func(n int) string {
			if n%9 == 8 {
				return "429"
			}
			return ""
		}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	w := mustWorkload(t, "shared-prefix", WorkloadOptions{Seed: 3, Groups: 4, PrefixTokens: 300, QuestionTokens: 30})
	var logs []string
	res, err := Run(context.Background(), Config{URL: srv.URL + "/v1/", Workload: w, Concurrency: 4, Requests: 36, MaxTokens: 6,
		APIKey: "k", Log: func(format string, args ...any) { logs = append(logs, format) }, ProgressEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Report
	if rep.Model != "fake-model" || rep.Requests != 36 || rep.Failed != 4 || rep.Errors["429"] != 4 || rep.Succeeded != 32 {
		t.Fatalf("%+v", rep)
	}
	// A chunk delivered late shortens the next client-side gap, so single
	// gaps have no exact lower bound; the first token and the whole stream
	// (20 ms + 5 gaps of 3 ms after the request was sent) do.
	if rep.TTFT.Min < 20 || rep.E2E.Min < 35 || rep.ITL.Mean < 2 || rep.ITL.Count != 32*5 || rep.OutputTokens != 32*6 {
		t.Fatalf("ttft %+v e2e %+v itl %+v output %d", rep.TTFT, rep.E2E, rep.ITL, rep.OutputTokens)
	}
	if want := float64(f.cached) / float64(f.prompt); rep.CacheHitRate == nil || *rep.CacheHitRate != want {
		t.Fatalf("hit rate %v, want %v", rep.CacheHitRate, want)
	}
	if rep.Server == nil || rep.Server.Count != 32 {
		t.Fatalf("server %+v", rep.Server)
	}
	if len(logs) == 0 {
		t.Fatal("no progress lines")
	}
	var sb strings.Builder
	if err := rep.WriteTable(&sb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TTFT", "inter-token", "end-to-end", "server overhead", "429 ×4", "cache hit", "prefix-warm", "linear interpolation"} {
		if !strings.Contains(sb.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, sb.String())
		}
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil || back.TTFT != rep.TTFT || back.Errors["429"] != 4 {
		t.Fatalf("JSON round trip: %v", err)
	}
}

func TestEndpoints(t *testing.T) {
	tests := []struct{ in, endpoint, base string }{
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/chat/completions", "http://127.0.0.1:8080/v1"},
		{"http://127.0.0.1:8080/", "http://127.0.0.1:8080/v1/chat/completions", "http://127.0.0.1:8080/v1"},
		{"http://h/v1", "http://h/v1/chat/completions", "http://h/v1"},
		{"https://h/api/v1/", "https://h/api/v1/chat/completions", "https://h/api/v1"},
		{"http://h/v1/chat/completions", "http://h/v1/chat/completions", "http://h/v1"},
		{"http://h/prefix", "http://h/prefix/v1/chat/completions", "http://h/prefix/v1"},
	}
	for _, tt := range tests {
		e, b, err := endpoints(tt.in)
		if err != nil || e != tt.endpoint || b != tt.base {
			t.Errorf("endpoints(%q) = %q, %q, %v", tt.in, e, b, err)
		}
	}
	for _, bad := range []string{"", "127.0.0.1:8080", "ftp://h", "http://", "://x"} {
		if _, _, err := endpoints(bad); err == nil {
			t.Errorf("endpoints(%q): want error", bad)
		}
	}
}

// TestRunNoModel: without a model name and without /v1/models the run
// refuses to start, saying what to do.
func TestRunNoModel(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, err := Run(context.Background(), Config{URL: srv.URL, Workload: mustWorkload(t, "chat", WorkloadOptions{})})
	if err == nil || !strings.Contains(err.Error(), "model") {
		t.Fatalf("err = %v", err)
	}
}
