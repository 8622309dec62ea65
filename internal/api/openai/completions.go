package openai

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"

	"github.com/kvserve/kvserve/internal/api"
)

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingFields
	Model         string          `json:"model"`
	Prompt        json.RawMessage `json:"prompt"`
	MaxTokens     *int            `json:"max_tokens"`
	Logprobs      *int            `json:"logprobs"`
	Echo          bool            `json:"echo"`
	Suffix        *string         `json:"suffix"`
	BestOf        *int            `json:"best_of"`
	Stream        bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat *responseFormat `json:"response_format"`
}

// defaultCompletionTokens is OpenAI's max_tokens default for completions.
const defaultCompletionTokens = 16

// parsePrompt reads prompt: a string, an array of one string, an array of
// token ids, or an array of one array of token ids.
func parsePrompt(raw json.RawMessage, r *api.Request) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return api.InvalidParam("prompt", "prompt is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return api.InvalidParam("prompt", "prompt must not be empty")
		}
		r.Prompt = s
		return nil
	}
	var ids []int32
	if json.Unmarshal(raw, &ids) == nil {
		if len(ids) == 0 {
			return api.InvalidParam("prompt", "prompt must not be empty")
		}
		r.PromptTokens = ids
		return nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil {
		if len(strs) != 1 {
			return api.InvalidParam("prompt", "only one prompt per request is supported (got %d)", len(strs))
		}
		return parsePrompt(json.RawMessage(strconv.Quote(strs[0])), r)
	}
	var lists [][]int32
	if json.Unmarshal(raw, &lists) == nil {
		if len(lists) != 1 {
			return api.InvalidParam("prompt", "only one prompt per request is supported (got %d)", len(lists))
		}
		if len(lists[0]) == 0 {
			return api.InvalidParam("prompt", "prompt must not be empty")
		}
		r.PromptTokens = lists[0]
		return nil
	}
	return api.InvalidParam("prompt", "prompt must be a string, an array of token ids, or an array of one of those")
}

func (c *completionRequest) toRequest() (*api.Request, error) {
	if c.Model == "" {
		return nil, api.InvalidParam("model", "model is required")
	}
	r := &api.Request{Model: c.Model, MaxTokens: defaultCompletionTokens}
	if err := parsePrompt(c.Prompt, r); err != nil {
		return nil, err
	}
	if err := c.samplingFields.apply(r); err != nil {
		return nil, err
	}
	if c.MaxTokens != nil {
		if *c.MaxTokens < 1 {
			return nil, api.InvalidParam("max_tokens", "max_tokens must be at least 1")
		}
		r.MaxTokens = *c.MaxTokens
	}
	if c.Logprobs != nil {
		if *c.Logprobs < 0 || *c.Logprobs > 5 {
			return nil, api.InvalidParam("logprobs", "logprobs must be in [0, 5]")
		}
		r.Sampling.Logprobs = true
		r.Sampling.TopLogprobs = *c.Logprobs
	}
	if c.Suffix != nil && *c.Suffix != "" {
		return nil, api.InvalidParam("suffix", "suffix is not supported")
	}
	if c.BestOf != nil && *c.BestOf != max(r.N, 1) {
		return nil, api.InvalidParam("best_of", "best_of other than n is not supported")
	}
	if c.Echo && c.Logprobs != nil {
		return nil, api.InvalidParam("echo", "echo with logprobs (prompt logprobs) is not supported")
	}
	if err := c.ResponseFormat.apply(r); err != nil {
		return nil, err
	}
	return r, nil
}

// completions serves POST /v1/completions.
func completions(c *api.Call) error {
	var body completionRequest
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
	echo := ""
	if body.Echo {
		echo = run.Prompt().Text
		if echo == "" {
			echo = run.Model().Tokenizer.Decode(run.Prompt().Tokens)
		}
	}
	if body.Stream {
		return streamCompletion(c, run, body.StreamOptions != nil && body.StreamOptions.IncludeUsage, body.Logprobs != nil, echo)
	}
	choices, err := run.Collect()
	if err != nil {
		return err
	}
	resp := completionResponse{
		ID: newID("cmpl-"), Object: "text_completion", Created: run.Created().Unix(),
		Model: run.Model().ID, SystemFingerprint: fingerprint, Choices: make([]completionChoice, len(choices)),
	}
	for i, ch := range choices {
		if ch.Finish == api.FinishError {
			return engineFailure(ch.Err)
		}
		cc := completionChoice{Index: i, Text: echo + ch.Text, FinishReason: strPtr(finishReason(ch.Finish))}
		if body.Logprobs != nil {
			cc.Logprobs = toCompletionLogprobs(ch.Logprobs, len(echo))
		}
		resp.Choices[i] = cc
	}
	resp.Usage = toUsage(run.Usage())
	t := c.Timings()
	resp.Kvserve = &t
	return api.WriteJSON(c.W, 200, resp)
}

type completionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []completionChoice `json:"choices"`
	Usage             *usageJSON         `json:"usage"`
	Kvserve           *api.Timings       `json:"kvserve,omitempty"`
}

type completionChoice struct {
	Index        int                 `json:"index"`
	Text         string              `json:"text"`
	Logprobs     *completionLogprobs `json:"logprobs"`
	FinishReason *string             `json:"finish_reason"`
}

// completionLogprobs is the legacy logprobs object.
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func toCompletionLogprobs(lps []api.TokenLogprob, offset int) *completionLogprobs {
	out := &completionLogprobs{
		Tokens: make([]string, len(lps)), TokenLogprobs: make([]float64, len(lps)),
		TopLogprobs: make([]map[string]float64, len(lps)), TextOffset: make([]int, len(lps)),
	}
	for i, lp := range lps {
		out.Tokens[i] = lp.Text
		out.TokenLogprobs[i] = lp.Logprob
		out.TextOffset[i] = offset
		offset += len(lp.Text)
		top := make(map[string]float64, len(lp.Top))
		for _, t := range lp.Top {
			if _, dup := top[t.Text]; !dup {
				top[t.Text] = t.Logprob
			}
		}
		out.TopLogprobs[i] = top
	}
	return out
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// streamCompletion writes text_completion chunks.
func streamCompletion(c *api.Call, run *api.Run, includeUsage, logprobs bool, echo string) error {
	sse := api.NewSSE(c.W)
	id := newID("cmpl-")
	base := completionResponse{ID: id, Object: "text_completion", Created: run.Created().Unix(), Model: run.Model().ID, SystemFingerprint: fingerprint}
	n := run.N()
	text := make([][]byte, n)
	lps := make([][]api.TokenLogprob, n)
	offsets := make([]int, n)
	chunk := func(i int, t string, lp []api.TokenLogprob, finish string) {
		ch := base
		cc := completionChoice{Index: i, Text: t, FinishReason: strPtr(finish)}
		if logprobs && len(lp) > 0 {
			cc.Logprobs = toCompletionLogprobs(lp, offsets[i])
			offsets[i] += len(t)
		}
		ch.Choices = []completionChoice{cc}
		_ = sse.JSON("", ch)
	}
	if echo != "" {
		for i := 0; i < n; i++ {
			chunk(i, echo, nil, "")
			offsets[i] = len(echo)
		}
	}
	flush := func(i int) {
		if len(text[i]) > 0 || len(lps[i]) > 0 {
			chunk(i, string(text[i]), lps[i], "")
			text[i], lps[i] = text[i][:0], lps[i][:0]
		}
	}
	left := n
	for {
		evs, err := run.Next()
		for _, e := range evs {
			switch e.Kind {
			case api.EventText, api.EventReasoning:
				text[e.Index] = append(text[e.Index], e.Text...)
			case api.EventLogprobs:
				lps[e.Index] = append(lps[e.Index], *e.Logprob)
			case api.EventFinish:
				flush(e.Index)
				left--
				if e.Finish == api.FinishError {
					_ = sse.JSON("", toErrorBody(api.AsError(engineFailure(e.Err))))
					continue
				}
				ch := base
				ch.Choices = []completionChoice{{Index: e.Index, FinishReason: strPtr(finishReason(e.Finish))}}
				if left == 0 && !includeUsage {
					t := c.Timings()
					ch.Kvserve = &t
				}
				_ = sse.JSON("", ch)
			}
		}
		for i := range text {
			flush(i)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil
		}
		if sse.Flush() != nil {
			run.Cancel()
			return nil
		}
	}
	if includeUsage {
		ch := base
		ch.Choices = []completionChoice{}
		ch.Usage = toUsage(run.Usage())
		t := c.Timings()
		ch.Kvserve = &t
		_ = sse.JSON("", ch)
	}
	sse.Data([]byte("[DONE]"))
	_ = sse.Flush()
	return nil
}
