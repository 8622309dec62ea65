package servebench

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// fakeBackend is an OpenAI-compatible chat-completions server with real
// behaviour and controlled timings: it checks requests the way a strict
// server does, "tokenizes" prompts into whitespace-separated words, keeps a
// prefix cache of full 16-word blocks across requests, makes prefill cost
// time per uncached word, and streams max_tokens words one chunk each at a
// fixed interval, then the usage chunk (with kvserve's timing extension)
// and [DONE].
type fakeBackend struct {
	Model string
	// TTFT is the fixed time to the first token; PerToken adds prefill
	// time for each uncached prompt word.
	TTFT     time.Duration
	PerToken time.Duration
	// ITL is the gap between output chunks.
	ITL time.Duration
	// Timing adds "kvserve": {...} to the usage chunk.
	Timing bool
	// ServerLate is how much later than the client's send the timing
	// extension says the request arrived (its ttft_ms is that much less).
	ServerLate time.Duration
	// Split writes each event in pieces with flushes and comment lines in
	// between; CRLF ends lines with CRLF.
	Split, CRLF bool
	// Fault, when set, picks a failure for request n (0-based): "" none,
	// "429", "500", "error-event", "cut", "garbage", "json", "hang".
	Fault func(n int) string

	mu       sync.Mutex
	n        int
	cache    [][]string
	prompt   int
	cached   int
	bodies   [][]byte
	sessions map[string]int
}

const fakeBlock = 16

// words flattens a request into the fake's tokens.
func fakeTokens(req *fakeRequest) []string {
	var toks []string
	toks = append(toks, strings.Fields(string(req.Tools))...)
	for _, m := range req.Messages {
		toks = append(toks, "<"+m.Role+">")
		toks = append(toks, strings.Fields(m.Content)...)
		for _, c := range m.ToolCalls {
			toks = append(toks, c.ID, c.Function.Name)
			toks = append(toks, strings.Fields(c.Function.Arguments)...)
		}
	}
	return toks
}

type fakeRequest struct {
	Model         string          `json:"model"`
	Messages      []Message       `json:"messages"`
	Tools         json.RawMessage `json:"tools"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens int  `json:"max_tokens"`
	IgnoreEOS bool `json:"ignore_eos"`
	KVServe   *struct {
		SessionID string `json:"session_id"`
	} `json:"kvserve"`
}

// validate applies the OpenAI rules a strict server checks.
func (req *fakeRequest) validate(model string) error {
	if req.Model != model {
		return fmt.Errorf("model %q not found", req.Model)
	}
	if !req.Stream || req.StreamOptions == nil || !req.StreamOptions.IncludeUsage {
		return fmt.Errorf("want stream with include_usage")
	}
	if len(req.Messages) == 0 || req.MaxTokens <= 0 {
		return fmt.Errorf("no messages or max_tokens")
	}
	if len(req.Tools) > 0 && !json.Valid(req.Tools) {
		return fmt.Errorf("bad tools")
	}
	pending := map[string]bool{}
	for i, m := range req.Messages {
		switch m.Role {
		case "system":
			if i != 0 {
				return fmt.Errorf("system message at %d", i)
			}
		case "user":
		case "assistant":
			for _, c := range m.ToolCalls {
				if c.ID == "" || c.Type != "function" || !json.Valid([]byte(c.Function.Arguments)) {
					return fmt.Errorf("bad tool call %+v", c)
				}
				pending[c.ID] = true
			}
		case "tool":
			if !pending[m.ToolCallID] {
				return fmt.Errorf("tool message %d answers no call (%q)", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
		default:
			return fmt.Errorf("role %q", m.Role)
		}
	}
	if last := req.Messages[len(req.Messages)-1].Role; last != "user" && last != "tool" {
		return fmt.Errorf("last message is %s", last)
	}
	return nil
}

// lookup returns the cached prefix length of toks and stores toks.
func (f *fakeBackend) lookup(toks []string) int {
	best := 0
	for _, c := range f.cache {
		n := 0
		for n < len(c) && n < len(toks) && c[n] == toks[n] {
			n++
		}
		best = max(best, n)
	}
	f.cache = append(f.cache, toks)
	return best / fakeBlock * fakeBlock
}

// reply is the fake's deterministic output for a request.
func fakeReply(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("w%d ", i)
	}
	return out
}

func (f *fakeBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model"}]}`, f.Model)
		return
	}
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req fakeRequest
	var raw json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&raw); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := req.validate(f.Model); err != nil {
		http.Error(w, `{"error":{"message":"`+err.Error()+`"}}`, http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	n := f.n
	f.n++
	fault := ""
	if f.Fault != nil {
		fault = f.Fault(n)
	}
	f.bodies = append(f.bodies, raw)
	toks := fakeTokens(&req)
	cached := 0
	if fault == "" {
		cached = f.lookup(toks)
		f.prompt += len(toks)
		f.cached += cached
	}
	if req.KVServe != nil {
		if f.sessions == nil {
			f.sessions = map[string]int{}
		}
		f.sessions[req.KVServe.SessionID]++
	}
	f.mu.Unlock()

	switch fault {
	case "429", "500":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(map[string]int{"429": 429, "500": 500}[fault])
		fmt.Fprint(w, `{"error":{"message":"fake failure","type":"server_error"}}`)
		return
	case "json":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[]}`)
		return
	case "hang":
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher := w.(http.Flusher)
	nl := "\n"
	if f.CRLF {
		nl = "\r\n"
	}
	send := func(data string) {
		ev := "data: " + data + nl + nl
		if f.Split {
			half := len(ev) / 2
			fmt.Fprint(w, ev[:half])
			flusher.Flush()
			fmt.Fprint(w, ev[half:]+": keep-alive"+nl+nl)
		} else {
			fmt.Fprint(w, ev)
		}
		flusher.Flush()
	}
	sleep := func(d time.Duration) bool {
		if d <= 0 {
			return true
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-r.Context().Done():
			return false
		}
	}
	start := time.Now()
	send(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
	if !sleep(f.TTFT + time.Duration(len(toks)-cached)*f.PerToken) {
		return
	}
	ttft := time.Since(start)
	out := fakeReply(req.MaxTokens)
	for i, word := range out {
		if i > 0 && !sleep(f.ITL) {
			return
		}
		b, _ := json.Marshal(word)
		send(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":` + string(b) + `},"finish_reason":null}]}`)
		switch {
		case fault == "cut" && i == 1:
			return
		case fault == "error-event" && i == 1:
			send(`{"error":{"message":"engine failed","type":"server_error"}}`)
			return
		case fault == "garbage" && i == 1:
			send(`{"choices":[`)
			return
		}
	}
	send(`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`)
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`,
		len(toks), len(out), len(toks)+len(out), cached)
	timing := ""
	if f.Timing {
		timing = fmt.Sprintf(`,"kvserve":{"overhead_ms":1.5,"queue_ms":0.25,"ttft_ms":%g,"engine_ms":%g}`,
			float64(ttft-f.ServerLate)/1e6, float64(time.Since(start))/1e6)
	}
	send(`{"id":"x","object":"chat.completion.chunk","choices":[],"usage":` + usage + timing + `}`)
	send("[DONE]")
}

// pipeListener is an in-memory net.Listener over net.Pipe, so that an
// http.Server and client run inside a testing/synctest bubble.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial() (net.Conn, error) {
	s, c := net.Pipe()
	select {
	case l.conns <- s:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
