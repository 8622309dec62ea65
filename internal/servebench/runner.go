package servebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one load-generation run. The zero value of each field
// means its default.
type Config struct {
	// URL is the server's base URL ("http://127.0.0.1:8080", with or
	// without "/v1") or the full chat-completions endpoint.
	URL string
	// Model is the "model" of every request. When empty, the first model
	// of GET /v1/models is used.
	Model string
	// APIKey, when set, is sent as "Authorization: Bearer <key>".
	APIKey string
	// Workload generates the sessions (required).
	Workload Workload
	// Concurrency is the number of closed-loop workers, each running one
	// session at a time (tool pauses included, as an agent holds its
	// place). Default 1 when Rate is zero.
	Concurrency int
	// Rate, when positive, switches to open-loop arrivals: sessions start
	// as a Poisson process of Rate per second, however many are in flight.
	// For single-turn workloads a session is a request.
	Rate float64
	// Requests caps the number of requests sent. Default 100 when
	// Duration is zero.
	Requests int
	// Duration stops new requests (and tool pauses) after this long;
	// requests in flight then run to completion.
	Duration time.Duration
	// MaxTokens is each request's max_tokens. Default 128.
	MaxTokens int
	// IgnoreEOS sends "ignore_eos": true (vLLM, llama.cpp and kvserve
	// extension) so every request generates MaxTokens tokens.
	IgnoreEOS bool
	// Seed drives the arrival process (the workload has its own).
	Seed uint64
	// Timeout bounds one request, headers to last byte. Default 10 min.
	Timeout time.Duration
	// Client sends the requests. Default: a client with enough idle
	// connections per host for the concurrency.
	Client *http.Client
	// Log, when set, receives a progress line every ProgressEvery.
	Log           func(format string, args ...any)
	ProgressEvery time.Duration
}

// Record is the measurement of one request. Durations are from the moment
// the request was sent.
type Record struct {
	Label string
	// Start is when the request was sent, from the start of the run.
	Start time.Duration
	// TTFT is the time to the first chunk with content, reasoning or a
	// tool-call fragment; zero when none arrived.
	TTFT time.Duration
	// E2E is the time to the end of the stream ([DONE] or the last event).
	E2E time.Duration
	// ITLs are the gaps between consecutive chunks that carry output.
	ITLs []time.Duration
	// OutputChunks counts chunks with output; OutputTokens is
	// usage.completion_tokens, or OutputChunks without usage.
	OutputChunks, OutputTokens int
	PromptTokens, CachedTokens int
	HasUsage                   bool
	Server                     *ServerTiming
	// Status is the HTTP status (0 when none was received).
	Status int
	// Err is the error class ("" on success): an HTTP status code such as
	// "429", or "transport", "timeout", "canceled", "not_sse",
	// "bad_chunk", "stream_error", "incomplete".
	Err    string
	ErrMsg string
}

// Run sends the workload to the server and returns its measurements. It
// returns an error only when the run cannot start (bad URL, no model);
// failed requests are counted in the result. Cancelling ctx stops the run
// and returns what was measured so far.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Workload == nil {
		return nil, errors.New("servebench: no workload")
	}
	endpoint, base, err := endpoints(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Rate < 0 || cfg.Concurrency < 0 || cfg.Requests < 0 || cfg.Duration < 0 || cfg.MaxTokens < 0 {
		return nil, errors.New("servebench: negative rate, concurrency, requests, duration or max tokens")
	}
	if cfg.Rate == 0 && cfg.Concurrency == 0 {
		cfg.Concurrency = 1
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		cfg.Requests = 100
	}
	if cfg.MaxTokens == 0 {
		cfg.MaxTokens = 128
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = max(cfg.Concurrency, 64)
		tr.MaxIdleConns = tr.MaxIdleConnsPerHost
		cfg.Client = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	if cfg.Model == "" {
		m, err := firstModel(ctx, cfg.Client, base, cfg.APIKey)
		if err != nil {
			return nil, err
		}
		cfg.Model = m
	}
	r := &runner{cfg: cfg, endpoint: endpoint, start: time.Now()}
	if cfg.Duration > 0 {
		r.deadline = r.start.Add(cfg.Duration)
	}
	stopProgress := r.progress(ctx)
	if cfg.Rate > 0 {
		r.openLoop(ctx)
	} else {
		r.closedLoop(ctx)
	}
	stopProgress()
	return r.result(), nil
}

// endpoints derives the chat-completions URL and the API base (".../v1").
func endpoints(raw string) (endpoint, base string, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("servebench: bad URL %q: want http(s)://host[:port][/v1]", raw)
	}
	p := strings.TrimSuffix(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		u.Path = p
		b := *u
		b.Path = strings.TrimSuffix(p, "/chat/completions")
		return u.String(), b.String(), nil
	case strings.HasSuffix(p, "/v1"):
	default:
		p += "/v1"
	}
	u.Path = p
	base = u.String()
	u.Path = p + "/chat/completions"
	return u.String(), base, nil
}

// firstModel asks GET {base}/models for the served models.
func firstModel(ctx context.Context, c *http.Client, base, key string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/models", nil)
	if err != nil {
		return "", fmt.Errorf("servebench: list models: %w", err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("servebench: list models (or pass a model name): %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("servebench: list models: %s (pass a model name)", resp.Status)
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&list); err != nil {
		return "", fmt.Errorf("servebench: list models: %w", err)
	}
	if len(list.Data) == 0 || list.Data[0].ID == "" {
		return "", errors.New("servebench: list models: the server lists none (pass a model name)")
	}
	return list.Data[0].ID, nil
}

type runner struct {
	cfg      Config
	endpoint string
	start    time.Time
	deadline time.Time

	started  atomic.Int64 // requests started
	inflight atomic.Int64

	mu      sync.Mutex
	records []Record
	lastEnd time.Time
}

// take reserves the next request; false when the run is over.
func (r *runner) take(ctx context.Context) bool {
	if ctx.Err() != nil || (!r.deadline.IsZero() && !time.Now().Before(r.deadline)) {
		return false
	}
	if r.cfg.Requests > 0 && r.started.Add(1) > int64(r.cfg.Requests) {
		return false
	}
	if r.cfg.Requests == 0 {
		r.started.Add(1)
	}
	return true
}

// exhausted reports whether no further request may start.
func (r *runner) exhausted(ctx context.Context) bool {
	return ctx.Err() != nil || (!r.deadline.IsZero() && !time.Now().Before(r.deadline)) ||
		(r.cfg.Requests > 0 && r.started.Load() >= int64(r.cfg.Requests))
}

// sleep waits d; false if the run ends first. A pause that would outlast
// the run's deadline waits until the deadline (the session's worker stays
// idle, as it would have been) and then reports the end.
func (r *runner) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	ok := true
	if !r.deadline.IsZero() {
		if left := time.Until(r.deadline); left < d {
			d, ok = max(left, 0), false
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return ok
	case <-ctx.Done():
		return false
	}
}

// session runs one session to its end or the run's.
func (r *runner) session(ctx context.Context, s Session) {
	var prev *Reply
	for {
		turn, ok := s.Next(prev)
		if !ok || !r.sleep(ctx, turn.Pause) || !r.take(ctx) {
			return
		}
		rep := r.do(ctx, turn)
		prev = &rep
	}
}

func (r *runner) closedLoop(ctx context.Context) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range r.cfg.Concurrency {
		wg.Go(func() {
			for !r.exhausted(ctx) {
				r.session(ctx, r.cfg.Workload.Session(int(next.Add(1)-1)))
			}
		})
	}
	wg.Wait()
}

func (r *runner) openLoop(ctx context.Context) {
	rng := rngFor(r.cfg.Seed, "arrivals", 0)
	var wg sync.WaitGroup
	at := r.start
	for i := 0; !r.exhausted(ctx); i++ {
		if !r.sleep(ctx, time.Until(at)) {
			break
		}
		if r.exhausted(ctx) {
			break
		}
		s := r.cfg.Workload.Session(i)
		wg.Go(func() { r.session(ctx, s) })
		at = at.Add(expDuration(rng, r.cfg.Rate))
	}
	wg.Wait()
}

// expDuration draws an exponential inter-arrival time for a Poisson
// process of rate per second.
func expDuration(rng *rand.Rand, rate float64) time.Duration {
	return time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
}

// chatRequest is the request body.
type chatRequest struct {
	Model         string          `json:"model"`
	Messages      []Message       `json:"messages"`
	Tools         json.RawMessage `json:"tools,omitempty"`
	Stream        bool            `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens int  `json:"max_tokens,omitempty"`
	IgnoreEOS bool `json:"ignore_eos,omitempty"`
	KVServe   *struct {
		SessionID string `json:"session_id"`
	} `json:"kvserve,omitempty"`
}

// Body returns the JSON body the runner sends for req.
func Body(model string, maxTokens int, ignoreEOS bool, req Request) ([]byte, error) {
	body := chatRequest{Model: model, Messages: req.Messages, Tools: req.Tools, Stream: true, MaxTokens: maxTokens, IgnoreEOS: ignoreEOS}
	body.StreamOptions.IncludeUsage = true
	if req.SessionID != "" {
		body.KVServe = &struct {
			SessionID string `json:"session_id"`
		}{req.SessionID}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body); err != nil {
		return nil, fmt.Errorf("servebench: encode request: %w", err)
	}
	return b.Bytes(), nil
}

// do sends one request, reads its stream and records it.
func (r *runner) do(ctx context.Context, turn Turn) Reply {
	r.inflight.Add(1)
	defer r.inflight.Add(-1)
	rec, reply := r.send(ctx, turn)
	end := time.Now()
	r.mu.Lock()
	r.records = append(r.records, rec)
	if end.After(r.lastEnd) {
		r.lastEnd = end
	}
	r.mu.Unlock()
	return reply
}

func (r *runner) send(ctx context.Context, turn Turn) (Record, Reply) {
	rec := Record{Label: turn.Label}
	fail := func(class, msg string) (Record, Reply) {
		rec.Err, rec.ErrMsg = class, msg
		return rec, Reply{}
	}
	body, err := Body(r.cfg.Model, r.cfg.MaxTokens, r.cfg.IgnoreEOS, turn.Request)
	if err != nil {
		return fail("encode", err.Error())
	}
	rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, r.endpoint, bytes.NewReader(body))
	if err != nil {
		return fail("transport", err.Error())
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if r.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.APIKey)
	}
	t0 := time.Now()
	rec.Start = t0.Sub(r.start)
	classify := func(err error) (Record, Reply) {
		switch {
		case ctx.Err() != nil:
			return fail("canceled", err.Error())
		case errors.Is(rctx.Err(), context.DeadlineExceeded):
			return fail("timeout", err.Error())
		}
		return fail("transport", err.Error())
	}
	resp, err := r.cfg.Client.Do(req)
	if err != nil {
		return classify(err)
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return fail(strconv.Itoa(resp.StatusCode), strings.TrimSpace(string(msg)))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
		return fail("not_sse", "Content-Type "+resp.Header.Get("Content-Type"))
	}

	var (
		sr      = NewSSEReader(resp.Body)
		c       Chunk
		content strings.Builder
		last    time.Time
		done    bool
	)
	for !done {
		ev, err := sr.Next()
		now := time.Now()
		if err == io.EOF {
			break
		}
		if err != nil {
			if ctx.Err() != nil || rctx.Err() != nil {
				return classify(err)
			}
			return fail("incomplete", err.Error())
		}
		rec.E2E = now.Sub(t0)
		if bytes.Equal(bytes.TrimSpace(ev.Data), []byte("[DONE]")) {
			done = true
			break
		}
		if err := ParseChunk(ev.Data, &c); err != nil {
			return fail("bad_chunk", err.Error())
		}
		if c.Error != nil {
			return fail("stream_error", c.Error.Message)
		}
		output := false
		for i := range c.Choices {
			d := &c.Choices[i].Delta
			if d.HasOutput() {
				output = true
			}
			if c.Choices[i].Index == 0 {
				content.WriteString(d.Content)
			}
		}
		if output {
			if rec.OutputChunks == 0 {
				rec.TTFT = now.Sub(t0)
			} else {
				rec.ITLs = append(rec.ITLs, now.Sub(last))
			}
			last = now
			rec.OutputChunks++
		}
		if u := c.Usage; u != nil {
			rec.HasUsage = true
			rec.PromptTokens, rec.OutputTokens, rec.CachedTokens = u.PromptTokens, u.CompletionTokens, u.CachedTokens()
			if u.KVServe != nil {
				rec.Server = u.KVServe
			}
		}
		if c.KVServe != nil {
			rec.Server = c.KVServe
		}
	}
	if !done {
		return fail("incomplete", "stream ended without [DONE]")
	}
	if !rec.HasUsage {
		rec.OutputTokens = rec.OutputChunks
	}
	return rec, Reply{OK: true, Content: content.String()}
}

// progress logs a line every ProgressEvery until the returned func is
// called.
func (r *runner) progress(ctx context.Context) func() {
	if r.cfg.Log == nil {
		return func() {}
	}
	every := r.cfg.ProgressEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r.mu.Lock()
			done, failed := len(r.records), 0
			for i := range r.records {
				if r.records[i].Err != "" {
					failed++
				}
			}
			r.mu.Unlock()
			r.cfg.Log("%5.0fs  done %d  failed %d  in flight %d", time.Since(r.start).Seconds(), done, failed, r.inflight.Load())
		}
	})
	return func() { close(stop); wg.Wait() }
}
