package openai

import (
	"encoding/json"
	"errors"
	"io"
	"strconv"

	"github.com/kvserve/kvserve/internal/api"
)

// chatCompletions serves POST /v1/chat/completions.
func chatCompletions(c *api.Call) error {
	var body chatRequest
	if err := c.Decode(&body); err != nil {
		return err
	}
	req, err := body.toRequest()
	if err != nil {
		return err
	}
	run, err := c.Start(req)
	if err != nil {
		return err
	}
	if body.Stream {
		includeUsage := body.StreamOptions != nil && body.StreamOptions.IncludeUsage
		return streamChat(c, run, includeUsage, body.Logprobs)
	}
	choices, err := run.Collect()
	if err != nil {
		return err
	}
	resp := chatResponse{
		ID:                newID("chatcmpl-"),
		Object:            "chat.completion",
		Created:           run.Created().Unix(),
		Model:             run.Model().ID,
		SystemFingerprint: fingerprint,
		ServiceTier:       run.ServiceTier(),
		Choices:           make([]chatChoice, len(choices)),
	}
	for i, ch := range choices {
		if ch.Finish == api.FinishError {
			return engineFailure(ch.Err)
		}
		msg := responseMessage{Role: "assistant", ReasoningContent: ch.Reasoning}
		if ch.Text != "" || len(ch.ToolCalls) == 0 {
			text := ch.Text
			msg.Content = &text
		}
		for j, tc := range ch.ToolCalls {
			var call toolCallJSON
			call.ID, call.Type = tc.ID, "function"
			call.Function.Name = tc.Name
			call.Function.Arguments, _ = json.Marshal(tc.Arguments)
			_ = j
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		cc := chatChoice{Index: i, Message: msg, FinishReason: finishReason(ch.Finish)}
		if body.Logprobs {
			cc.Logprobs = &chatLogprobs{Content: toChatLogprobs(ch.Logprobs)}
		}
		resp.Choices[i] = cc
	}
	resp.Usage = toUsage(run.Usage())
	t := c.Timings()
	resp.Kvserve = &t
	return api.WriteJSON(c.W, 200, resp)
}

// fingerprint is the system_fingerprint of every response.
const fingerprint = "kvserve"

// engineFailure is the error of a sample the engine failed.
func engineFailure(err error) error {
	if err == nil {
		err = errors.New("generation failed")
	}
	return &api.Error{Code: api.CodeInternal, Message: "generation failed", Err: err}
}

// finishReason maps a finish reason to OpenAI's strings.
func finishReason(f api.FinishReason) string {
	switch f {
	case api.FinishLength:
		return "length"
	case api.FinishToolCalls:
		return "tool_calls"
	case api.FinishNone:
		return ""
	}
	return "stop"
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint"`
	ServiceTier       string       `json:"service_tier,omitempty"`
	Choices           []chatChoice `json:"choices"`
	Usage             *usageJSON   `json:"usage"`
	Kvserve           *api.Timings `json:"kvserve,omitempty"`
}

type chatChoice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	Logprobs     *chatLogprobs   `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

type responseMessage struct {
	Role             string         `json:"role"`
	Content          *string        `json:"content"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCallJSON `json:"tool_calls,omitempty"`
	Refusal          *string        `json:"refusal"`
}

type chatLogprobs struct {
	Content []logprobJSON `json:"content"`
}

type logprobJSON struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []topLogprob `json:"top_logprobs"`
}

type topLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func byteInts(b []byte) []int {
	out := make([]int, len(b))
	for i, c := range b {
		out[i] = int(c)
	}
	return out
}

func toChatLogprobs(lps []api.TokenLogprob) []logprobJSON {
	out := make([]logprobJSON, len(lps))
	for i, lp := range lps {
		out[i] = logprobJSON{Token: lp.Text, Logprob: lp.Logprob, Bytes: byteInts(lp.Bytes), TopLogprobs: make([]topLogprob, len(lp.Top))}
		for j, t := range lp.Top {
			out[i].TopLogprobs[j] = topLogprob{Token: t.Text, Logprob: t.Logprob, Bytes: byteInts(t.Bytes)}
		}
	}
	return out
}

type usageJSON struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func toUsage(u api.Usage) *usageJSON {
	out := &usageJSON{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	out.PromptTokensDetails.CachedTokens = u.CachedTokens
	out.CompletionTokensDetails.ReasoningTokens = u.ReasoningTokens
	return out
}

// chatStream writes chat.completion.chunk events. Deltas of one choice
// within one batch of engine outputs are merged into one chunk; a choice's
// logprobs ride on its next text chunk.
type chatStream struct {
	c        *api.Call
	sse      *api.SSE
	prefix   []byte // {"id":…,"object":"chat.completion.chunk","created":…,"model":…,"system_fingerprint":…,"choices":[
	pending  []pendingDelta
	started  []bool
	logprobs bool
	usage    bool
}

type pendingDelta struct {
	content, reasoning []byte
	lps                []api.TokenLogprob
	has                bool
}

func streamChat(c *api.Call, run *api.Run, includeUsage, logprobs bool) error {
	s := &chatStream{c: c, sse: api.NewSSE(c.W), logprobs: logprobs, usage: includeUsage}
	n := run.N()
	s.pending = make([]pendingDelta, n)
	s.started = make([]bool, n)
	p := []byte(`{"id":`)
	p = api.AppendJSONString(p, newID("chatcmpl-"))
	p = append(p, `,"object":"chat.completion.chunk","created":`...)
	p = strconv.AppendInt(p, run.Created().Unix(), 10)
	p = append(p, `,"model":`...)
	p = api.AppendJSONString(p, run.Model().ID)
	p = append(p, `,"system_fingerprint":"`+fingerprint+`"`...)
	if tier := run.ServiceTier(); tier != "" {
		p = append(p, `,"service_tier":`...)
		p = api.AppendJSONString(p, tier)
	}
	p = append(p, `,"choices":[`...)
	s.prefix = p

	// The role chunk of every choice goes out at once, as OpenAI does.
	for i := 0; i < n; i++ {
		s.roleChunk(i)
	}
	if err := s.sse.Flush(); err != nil {
		run.Cancel()
		return nil
	}
	left := n
	for {
		evs, err := run.Next()
		for _, e := range evs {
			switch e.Kind {
			case api.EventText:
				d := &s.pending[e.Index]
				d.content = append(d.content, e.Text...)
				d.has = true
			case api.EventReasoning:
				d := &s.pending[e.Index]
				d.reasoning = append(d.reasoning, e.Text...)
				d.has = true
			case api.EventLogprobs:
				if s.logprobs {
					d := &s.pending[e.Index]
					d.lps = append(d.lps, *e.Logprob)
					d.has = true
				}
			case api.EventToolCallBegin:
				s.flushDelta(e.Index)
				s.toolChunk(e, true)
			case api.EventToolCallArgs:
				s.flushDelta(e.Index)
				s.toolChunk(e, false)
			case api.EventFinish:
				s.flushDelta(e.Index)
				left--
				if e.Finish == api.FinishError {
					s.errorEvent(engineFailure(e.Err))
					continue
				}
				s.finishChunk(e, left == 0 && !s.usage)
			}
		}
		for i := range s.pending {
			s.flushDelta(i)
		}
		if err == io.EOF {
			break
		}
		if err != nil { // the client went away
			return nil
		}
		if ferr := s.sse.Flush(); ferr != nil {
			run.Cancel()
			return nil
		}
	}
	if s.usage {
		s.usageChunk(run.Usage())
	}
	s.sse.Data([]byte("[DONE]"))
	_ = s.sse.Flush()
	return nil
}

func (s *chatStream) begin(index int) []byte {
	b := append(s.sse.Buffer(), "data: "...)
	b = append(b, s.prefix...)
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(index), 10)
	return b
}

func (s *chatStream) end(b []byte) {
	b = append(b, ']')
	if s.usage {
		b = append(b, `,"usage":null`...)
	}
	b = append(b, "}\n\n"...)
	s.sse.SetBuffer(b)
}

func (s *chatStream) roleChunk(i int) {
	b := s.begin(i)
	b = append(b, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`...)
	s.end(b)
}

// flushDelta writes choice i's merged text/reasoning/logprobs delta.
func (s *chatStream) flushDelta(i int) {
	d := &s.pending[i]
	if !d.has {
		return
	}
	b := s.begin(i)
	b = append(b, `,"delta":{`...)
	comma := false
	if len(d.content) > 0 || len(d.reasoning) == 0 {
		b = append(b, `"content":`...)
		b = api.AppendJSONString(b, d.content)
		comma = true
	}
	if len(d.reasoning) > 0 {
		if comma {
			b = append(b, ',')
		}
		b = append(b, `"reasoning_content":`...)
		b = api.AppendJSONString(b, d.reasoning)
	}
	b = append(b, `},"logprobs":`...)
	if len(d.lps) > 0 {
		lj, _ := json.Marshal(chatLogprobs{Content: toChatLogprobs(d.lps)})
		b = append(b, lj...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"finish_reason":null}`...)
	s.end(b)
	d.content, d.reasoning, d.lps, d.has = d.content[:0], d.reasoning[:0], d.lps[:0], false
}

func (s *chatStream) toolChunk(e api.Event, first bool) {
	b := s.begin(e.Index)
	b = append(b, `,"delta":{"tool_calls":[{"index":`...)
	b = strconv.AppendInt(b, int64(e.ToolCall), 10)
	if first {
		b = append(b, `,"id":`...)
		b = api.AppendJSONString(b, e.ToolCallID)
		b = append(b, `,"type":"function","function":{"name":`...)
		b = api.AppendJSONString(b, e.ToolName)
		b = append(b, `,"arguments":`...)
	} else {
		b = append(b, `,"function":{"arguments":`...)
	}
	b = api.AppendJSONString(b, e.Text)
	b = append(b, `}}]},"logprobs":null,"finish_reason":null}`...)
	s.end(b)
}

func (s *chatStream) finishChunk(e api.Event, last bool) {
	b := s.begin(e.Index)
	b = append(b, `,"delta":{},"logprobs":null,"finish_reason":`...)
	b = api.AppendJSONString(b, finishReason(e.Finish))
	b = append(b, '}', ']')
	if s.usage {
		b = append(b, `,"usage":null`...)
	}
	if last {
		tj, _ := json.Marshal(s.c.Timings())
		b = append(b, `,"kvserve":`...)
		b = append(b, tj...)
	}
	b = append(b, "}\n\n"...)
	s.sse.SetBuffer(b)
}

func (s *chatStream) usageChunk(u api.Usage) {
	b := append(s.sse.Buffer(), "data: "...)
	b = append(b, s.prefix...)
	b = append(b, `],"usage":`...)
	uj, _ := json.Marshal(toUsage(u))
	b = append(b, uj...)
	tj, _ := json.Marshal(s.c.Timings())
	b = append(b, `,"kvserve":`...)
	b = append(b, tj...)
	b = append(b, "}\n\n"...)
	s.sse.SetBuffer(b)
}

// errorEvent writes an error in the stream, as OpenAI does mid-stream.
func (s *chatStream) errorEvent(err error) {
	_ = s.sse.JSON("", toErrorBody(api.AsError(err)))
}
