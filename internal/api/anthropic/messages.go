package anthropic

import (
	"errors"
	"io"

	"github.com/kvserve/kvserve/internal/api"
)

// messageJSON is a non-streamed message (and, empty, the message of
// message_start).
type messageJSON struct {
	ID           string        `json:"id"`
	Type         string        `json:"type"`
	Role         string        `json:"role"`
	Model        string        `json:"model"`
	Content      []contentJSON `json:"content"`
	StopReason   *string       `json:"stop_reason"`
	StopSequence *string       `json:"stop_sequence"`
	Usage        usageJSON     `json:"usage"`
	Kvserve      *api.Timings  `json:"kvserve,omitempty"`
}

// messages serves POST /v1/messages.
func (d *Dialect) messages(c *api.Call) error {
	d.noteVersion(c.R)
	requestID(c.W)
	var body messagesRequest
	if err := c.Decode(&body); err != nil {
		return err
	}
	conv, err := body.toRequest(true)
	if err != nil {
		return err
	}
	run, err := c.Start(conv.req)
	if err != nil {
		return err
	}
	// Rendered while the engine prefills.
	marks := d.marks.find(run.Model(), conv.req, run.Prompt())
	run.SetCacheWriteEnd(marks.end)
	if body.Stream {
		return streamMessage(c, run, conv, marks)
	}
	b := newBlocks(nil, conv.disableParallel)
	for {
		evs, err := run.Next()
		for i := range evs {
			b.add(&evs[i])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if b.finish == api.FinishError {
		return engineFailure(b.err)
	}
	stop := stopReason(b.finish, b.stopSeq)
	resp := messageJSON{
		ID: newID("msg_"), Type: "message", Role: "assistant", Model: run.Model().ID,
		Content: b.content, StopReason: &stop, Usage: usage(run.Usage(), marks),
	}
	if b.stopSeq != "" {
		resp.StopSequence = &b.stopSeq
	}
	t := c.Timings()
	resp.Kvserve = &t
	return api.WriteJSON(c.W, 200, resp)
}

// engineFailure is the error of a sample the engine failed.
func engineFailure(err error) error {
	if err == nil {
		err = errors.New("generation failed")
	}
	return &api.Error{Code: api.CodeInternal, Message: "generation failed", Err: err}
}

// streamMessage writes the message as Anthropic's event stream:
// message_start, then per content block content_block_start,
// content_block_delta… and content_block_stop (a ping after the first
// start), then message_delta with the stop reason and usage, and
// message_stop.
//
// message_start goes out with the first generated tokens, once the engine
// has admitted the request and knows how much of the prompt it found
// cached; until then an error can still be answered with its status.
func streamMessage(c *api.Call, run *api.Run, conv *converted, marks cacheMarks) error {
	sse := api.NewSSE(c.W)
	b := newBlocks(sse, conv.disableParallel)
	evs, err := run.Next()
	if err != nil && err != io.EOF {
		return err
	}
	for _, e := range evs {
		if e.Kind == api.EventFinish && e.Finish == api.FinishError {
			return engineFailure(e.Err)
		}
	}
	start := struct {
		Type    string      `json:"type"`
		Message messageJSON `json:"message"`
	}{"message_start", messageJSON{
		ID: newID("msg_"), Type: "message", Role: "assistant", Model: run.Model().ID,
		Content: []contentJSON{}, Usage: usage(run.Usage(), marks),
	}}
	if err := sse.JSON("message_start", start); err != nil {
		return err
	}
	for {
		for i := range evs {
			b.add(&evs[i])
		}
		b.flush()
		if err == io.EOF {
			break
		}
		if err != nil { // the client went away
			return err
		}
		if ferr := sse.Flush(); ferr != nil {
			run.Cancel()
			return nil
		}
		evs, err = run.Next()
	}
	if b.finish == api.FinishError {
		e := api.AsError(engineFailure(b.err))
		_ = sse.JSON("error", errorBody{Type: "error", Error: toErrorObject(e)})
		_ = sse.Flush()
		return nil
	}
	b.ping()
	u := usage(run.Usage(), marks)
	u.CacheCreation, u.ServiceTier = nil, ""
	stop := stopReason(b.finish, b.stopSeq)
	delta := messageDelta{Type: "message_delta", Usage: u}
	delta.Delta.StopReason = &stop
	if b.stopSeq != "" {
		delta.Delta.StopSequence = &b.stopSeq
	}
	t := c.Timings()
	delta.Kvserve = &t
	_ = sse.JSON("message_delta", delta)
	sse.Event("message_stop", []byte(`{"type":"message_stop"}`))
	_ = sse.Flush()
	return nil
}

// messageDelta is the message_delta event.
type messageDelta struct {
	Type  string `json:"type"`
	Delta struct {
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage   usageJSON    `json:"usage"`
	Kvserve *api.Timings `json:"kvserve,omitempty"`
}

// countTokens serves POST /v1/messages/count_tokens: the prompt a messages
// request with the same body would run, counted.
func (d *Dialect) countTokens(c *api.Call) error {
	d.noteVersion(c.R)
	requestID(c.W)
	var body messagesRequest
	if err := c.Decode(&body); err != nil {
		return err
	}
	conv, err := body.toRequest(false)
	if err != nil {
		return err
	}
	p, err := c.Tokenize(conv.req)
	if err != nil {
		return err
	}
	return api.WriteJSON(c.W, 200, struct {
		InputTokens int `json:"input_tokens"`
	}{len(p.Tokens)})
}
