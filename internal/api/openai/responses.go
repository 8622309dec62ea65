package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat"
)

// The Responses API (POST /v1/responses), enough for Codex-style agents:
// input as a string or as items (messages, function calls and their
// outputs, reasoning), instructions, function tools, text formats, and the
// typed stream events. Nothing is stored: previous_response_id is refused,
// since continuing a conversation needs the client to send it back (which
// agents do anyway, and which keeps the prompt's prefix cache-friendly).

// responsesRequest is the body of POST /v1/responses.
type responsesRequest struct {
	samplingFields
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	Tools              []responsesTool `json:"tools"`
	ToolChoice         json.RawMessage `json:"tool_choice"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	Stream             bool            `json:"stream"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Reasoning          *struct {
		Effort *string `json:"effort"`
	} `json:"reasoning"`
	Text *struct {
		Format *struct {
			Type   string          `json:"type"`
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	} `json:"text"`
	Metadata json.RawMessage `json:"metadata"`
}

// responsesTool is a Responses API tool: the function fields are flat.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// inputItem is one item of input.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
	Summary   []struct {
		Text string `json:"text"`
	} `json:"summary"`
}

// itemText reads a message's content: a string or content parts
// (input_text, output_text, text).
func itemText(raw json.RawMessage, param string) (string, error) {
	var mc messageContent
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", nil
	}
	if err := mc.UnmarshalJSON(raw); err != nil {
		return "", api.InvalidParam(param, "content must be a string or an array of text parts")
	}
	return mc.text, nil
}

// reasoningText reads a reasoning item's text: its content parts, else its
// summary.
func reasoningText(it *inputItem) string {
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(it.Content, &parts) == nil && len(parts) > 0 {
		var sb strings.Builder
		for _, p := range parts {
			sb.WriteString(p.Text)
		}
		return sb.String()
	}
	var sb strings.Builder
	for _, s := range it.Summary {
		sb.WriteString(s.Text)
	}
	return sb.String()
}

// toMessages maps instructions and input onto a conversation.
func (b *responsesRequest) toMessages() ([]chat.Message, error) {
	var msgs []chat.Message
	if b.Instructions != nil && *b.Instructions != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: *b.Instructions})
	}
	raw := bytes.TrimSpace(b.Input)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, api.InvalidParam("input", "input is required")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, api.InvalidParam("input", "invalid input")
		}
		return append(msgs, chat.Message{Role: "user", Content: s}), nil
	}
	var items []inputItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, api.InvalidParam("input", "input must be a string or an array of items")
	}
	if len(items) == 0 {
		return nil, api.InvalidParam("input", "input must not be empty")
	}
	pendingReasoning := ""
	// lastAssistant returns the assistant message that function calls
	// attach to, opening one if the last message is not an assistant's.
	lastAssistant := func() *chat.Message {
		if n := len(msgs); n > 0 && msgs[n-1].Role == "assistant" {
			return &msgs[n-1]
		}
		msgs = append(msgs, chat.Message{Role: "assistant", ReasoningContent: pendingReasoning})
		pendingReasoning = ""
		return &msgs[len(msgs)-1]
	}
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		switch it.Type {
		case "message", "":
			text, err := itemText(it.Content, param+".content")
			if err != nil {
				return nil, err
			}
			role := it.Role
			switch role {
			case "user", "assistant", "system", "developer":
			default:
				return nil, api.InvalidParam(param+".role", "unknown role %q", it.Role)
			}
			m := chat.Message{Role: role, Content: text}
			if role == "assistant" {
				m.ReasoningContent, pendingReasoning = pendingReasoning, ""
			}
			msgs = append(msgs, m)
		case "function_call":
			if it.Name == "" {
				return nil, api.InvalidParam(param+".name", "function_call needs a name")
			}
			args := it.Arguments
			if strings.TrimSpace(args) == "" {
				args = "{}"
			}
			a := lastAssistant()
			a.ToolCalls = append(a.ToolCalls, chat.ToolCall{ID: it.CallID, Name: it.Name, Arguments: args})
		case "function_call_output":
			out, err := itemText(it.Output, param+".output")
			if err != nil {
				return nil, err
			}
			msgs = append(msgs, chat.Message{Role: "tool", Content: out, ToolCallID: it.CallID})
		case "reasoning":
			pendingReasoning += reasoningText(&it)
		default:
			return nil, api.InvalidParam(param+".type", "input items of type %q are not supported", it.Type)
		}
	}
	return msgs, nil
}

func (b *responsesRequest) toRequest() (*api.Request, error) {
	if b.Model == "" {
		return nil, api.InvalidParam("model", "model is required")
	}
	if b.PreviousResponseID != nil && *b.PreviousResponseID != "" {
		return nil, api.InvalidParam("previous_response_id", "this server stores no responses: send the whole conversation as input")
	}
	msgs, err := b.toMessages()
	if err != nil {
		return nil, err
	}
	r := &api.Request{Model: b.Model, Messages: msgs}
	for i, t := range b.Tools {
		if t.Type != "function" {
			return nil, api.InvalidParam(fmt.Sprintf("tools[%d].type", i), "tools of type %q are not supported (function only)", t.Type)
		}
		params := t.Parameters
		if string(bytes.TrimSpace(params)) == "null" {
			params = nil
		}
		r.Tools = append(r.Tools, chat.Tool{Name: t.Name, Description: t.Description, Parameters: params})
	}
	if r.ToolChoice, err = parseToolChoice(b.ToolChoice); err != nil {
		return nil, err
	}
	if b.N != nil && *b.N != 1 {
		return nil, api.InvalidParam("n", "the Responses API makes one response")
	}
	if err := b.samplingFields.apply(r); err != nil {
		return nil, err
	}
	if b.MaxOutputTokens != nil {
		if *b.MaxOutputTokens < 1 {
			return nil, api.InvalidParam("max_output_tokens", "max_output_tokens must be at least 1")
		}
		r.MaxTokens = *b.MaxOutputTokens
	}
	if b.Reasoning != nil && b.Reasoning.Effort != nil {
		on := *b.Reasoning.Effort != "none" && *b.Reasoning.Effort != "minimal"
		r.Reasoning = &on
	}
	if b.Text != nil && b.Text.Format != nil {
		f := b.Text.Format
		rf := &responseFormat{Type: f.Type}
		if f.Type == "json_schema" {
			rf.JSONSchema = &struct {
				Name   string          `json:"name"`
				Schema json.RawMessage `json:"schema"`
				Strict *bool           `json:"strict"`
			}{Name: f.Name, Schema: f.Schema}
		}
		if err := rf.apply(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Response objects.

type responseObject struct {
	ID                string          `json:"id"`
	Object            string          `json:"object"`
	CreatedAt         int64           `json:"created_at"`
	Status            string          `json:"status"`
	Error             any             `json:"error"`
	IncompleteDetails any             `json:"incomplete_details"`
	Instructions      *string         `json:"instructions"`
	MaxOutputTokens   *int            `json:"max_output_tokens"`
	Model             string          `json:"model"`
	ServiceTier       string          `json:"service_tier,omitempty"`
	Output            []any           `json:"output"`
	ParallelToolCalls bool            `json:"parallel_tool_calls"`
	PreviousResponse  *string         `json:"previous_response_id"`
	Store             bool            `json:"store"`
	Temperature       float32         `json:"temperature"`
	TopP              float32         `json:"top_p"`
	ToolChoice        any             `json:"tool_choice"`
	Tools             []responsesTool `json:"tools"`
	Truncation        string          `json:"truncation"`
	Text              any             `json:"text"`
	Reasoning         any             `json:"reasoning"`
	Metadata          json.RawMessage `json:"metadata"`
	Usage             *responsesUsage `json:"usage"`
	Kvserve           *api.Timings    `json:"kvserve,omitempty"`
}

type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type messageItem struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Status  string       `json:"status"`
	Role    string       `json:"role"`
	Content []outputText `json:"content"`
}

type outputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

type reasoningItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Summary []any           `json:"summary"`
	Content []reasoningPart `json:"content"`
}

type reasoningPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type functionCallItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
	Status    string `json:"status"`
}

func newResponseObject(b *responsesRequest, req *api.Request, run *api.Run) *responseObject {
	tools := b.Tools
	if tools == nil {
		tools = []responsesTool{}
	}
	meta := b.Metadata
	if len(bytes.TrimSpace(meta)) == 0 || string(bytes.TrimSpace(meta)) == "null" {
		meta = json.RawMessage(`{}`)
	}
	var toolChoice any = "auto"
	switch req.ToolChoice.Mode {
	case api.ToolNone:
		toolChoice = "none"
	case api.ToolRequired:
		toolChoice = "required"
	case api.ToolNamed:
		toolChoice = map[string]string{"type": "function", "name": req.ToolChoice.Name}
	}
	format := map[string]any{"type": "text"}
	switch req.ResponseFormat.Type {
	case api.FormatJSONObject:
		format = map[string]any{"type": "json_object"}
	case api.FormatJSONSchema:
		format = map[string]any{"type": "json_schema", "name": req.ResponseFormat.Name, "schema": req.ResponseFormat.Schema}
	}
	topP := req.Sampling.TopP
	if topP == 0 {
		topP = 1
	}
	return &responseObject{
		ID: newID("resp_"), Object: "response", CreatedAt: run.Created().Unix(), Status: "in_progress",
		Instructions: b.Instructions, MaxOutputTokens: b.MaxOutputTokens, Model: run.Model().ID, ServiceTier: run.ServiceTier(), Output: []any{},
		ParallelToolCalls: true, Temperature: req.Sampling.Temperature, TopP: topP, ToolChoice: toolChoice,
		Tools: tools, Truncation: "disabled", Text: map[string]any{"format": format},
		Reasoning: map[string]any{"effort": nil, "summary": nil}, Metadata: meta,
	}
}

func toResponsesUsage(u api.Usage) *responsesUsage {
	out := &responsesUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	out.InputTokensDetails.CachedTokens = u.CachedTokens
	out.OutputTokensDetails.ReasoningTokens = u.ReasoningTokens
	return out
}

// finishResponse sets the final status of a response.
func finishResponse(resp *responseObject, f api.FinishReason) {
	resp.Status = "completed"
	if f == api.FinishLength {
		resp.Status = "incomplete"
		resp.IncompleteDetails = map[string]string{"reason": "max_output_tokens"}
	}
}

// responses serves POST /v1/responses.
func responses(c *api.Call) error {
	var body responsesRequest
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
	resp := newResponseObject(&body, req, run)
	if body.Stream {
		return streamResponse(c, run, resp)
	}
	choices, err := run.Collect()
	if err != nil {
		return err
	}
	ch := choices[0]
	if ch.Finish == api.FinishError {
		return engineFailure(ch.Err)
	}
	if ch.Reasoning != "" {
		resp.Output = append(resp.Output, reasoningItem{Type: "reasoning", ID: newID("rs_"), Summary: []any{},
			Content: []reasoningPart{{Type: "reasoning_text", Text: ch.Reasoning}}})
	}
	if ch.Text != "" || len(ch.ToolCalls) == 0 {
		resp.Output = append(resp.Output, messageItem{Type: "message", ID: newID("msg_"), Status: "completed", Role: "assistant",
			Content: []outputText{{Type: "output_text", Text: ch.Text, Annotations: []any{}}}})
	}
	for _, tc := range ch.ToolCalls {
		resp.Output = append(resp.Output, functionCallItem{Type: "function_call", ID: newID("fc_"), CallID: tc.ID, Name: tc.Name, Arguments: tc.Arguments, Status: "completed"})
	}
	finishResponse(resp, ch.Finish)
	resp.Usage = toResponsesUsage(run.Usage())
	t := c.Timings()
	resp.Kvserve = &t
	return api.WriteJSON(c.W, 200, resp)
}

// responseStream writes the typed events of a streamed response.
type responseStream struct {
	sse  *api.SSE
	seq  int
	resp *responseObject
	// The open output item.
	kind    api.EventKind // EventText (message), EventReasoning, EventToolCallBegin, or 0
	itemID  string
	index   int
	text    strings.Builder
	call    functionCallItem
	scratch []byte
}

// event writes one typed event; fields are added to {"type", "sequence_number"}.
func (s *responseStream) event(typ string, fields map[string]any) {
	fields["type"] = typ
	fields["sequence_number"] = s.seq
	s.seq++
	_ = s.sse.JSON(typ, fields)
}

// delta writes a text delta event without reflection: it is the hot path.
func (s *responseStream) delta(typ string, contentIndex bool, delta string) {
	b := s.scratch[:0]
	b = append(b, `{"type":"`...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = fmt.Appendf(b, "%d", s.seq)
	s.seq++
	b = append(b, `,"item_id":`...)
	b = api.AppendJSONString(b, s.itemID)
	b = fmt.Appendf(b, `,"output_index":%d`, s.index)
	if contentIndex {
		b = append(b, `,"content_index":0`...)
	}
	b = append(b, `,"delta":`...)
	b = api.AppendJSONString(b, delta)
	b = append(b, '}')
	s.sse.Event(typ, b)
	s.scratch = b
}

func (s *responseStream) open(kind api.EventKind, e api.Event) {
	s.close()
	s.kind, s.index = kind, len(s.resp.Output)
	s.text.Reset()
	switch kind {
	case api.EventText:
		s.itemID = newID("msg_")
		s.event("response.output_item.added", map[string]any{"output_index": s.index,
			"item": messageItem{Type: "message", ID: s.itemID, Status: "in_progress", Role: "assistant", Content: []outputText{}}})
		s.event("response.content_part.added", map[string]any{"item_id": s.itemID, "output_index": s.index, "content_index": 0,
			"part": outputText{Type: "output_text", Text: "", Annotations: []any{}}})
	case api.EventReasoning:
		s.itemID = newID("rs_")
		s.event("response.output_item.added", map[string]any{"output_index": s.index,
			"item": reasoningItem{Type: "reasoning", ID: s.itemID, Summary: []any{}, Content: []reasoningPart{}}})
		s.event("response.content_part.added", map[string]any{"item_id": s.itemID, "output_index": s.index, "content_index": 0,
			"part": reasoningPart{Type: "reasoning_text", Text: ""}})
	case api.EventToolCallBegin:
		s.itemID = newID("fc_")
		s.call = functionCallItem{Type: "function_call", ID: s.itemID, CallID: e.ToolCallID, Name: e.ToolName, Status: "in_progress"}
		s.event("response.output_item.added", map[string]any{"output_index": s.index, "item": s.call})
	}
}

// close finishes the open item.
func (s *responseStream) close() {
	text := s.text.String()
	switch s.kind {
	case api.EventText:
		part := outputText{Type: "output_text", Text: text, Annotations: []any{}}
		s.event("response.output_text.done", map[string]any{"item_id": s.itemID, "output_index": s.index, "content_index": 0, "text": text})
		s.event("response.content_part.done", map[string]any{"item_id": s.itemID, "output_index": s.index, "content_index": 0, "part": part})
		item := messageItem{Type: "message", ID: s.itemID, Status: "completed", Role: "assistant", Content: []outputText{part}}
		s.event("response.output_item.done", map[string]any{"output_index": s.index, "item": item})
		s.resp.Output = append(s.resp.Output, item)
	case api.EventReasoning:
		part := reasoningPart{Type: "reasoning_text", Text: text}
		s.event("response.reasoning_text.done", map[string]any{"item_id": s.itemID, "output_index": s.index, "content_index": 0, "text": text})
		s.event("response.content_part.done", map[string]any{"item_id": s.itemID, "output_index": s.index, "content_index": 0, "part": part})
		item := reasoningItem{Type: "reasoning", ID: s.itemID, Summary: []any{}, Content: []reasoningPart{part}}
		s.event("response.output_item.done", map[string]any{"output_index": s.index, "item": item})
		s.resp.Output = append(s.resp.Output, item)
	case api.EventToolCallBegin:
		s.call.Arguments, s.call.Status = text, "completed"
		s.event("response.function_call_arguments.done", map[string]any{"item_id": s.itemID, "output_index": s.index, "arguments": text})
		s.event("response.output_item.done", map[string]any{"output_index": s.index, "item": s.call})
		s.resp.Output = append(s.resp.Output, s.call)
	}
	s.kind = 0
}

func streamResponse(c *api.Call, run *api.Run, resp *responseObject) error {
	s := &responseStream{sse: api.NewSSE(c.W), resp: resp}
	s.event("response.created", map[string]any{"response": resp})
	s.event("response.in_progress", map[string]any{"response": resp})
	if s.sse.Flush() != nil {
		run.Cancel()
		return nil
	}
	for {
		evs, err := run.Next()
		for _, e := range evs {
			switch e.Kind {
			case api.EventText, api.EventReasoning:
				if s.kind != e.Kind {
					s.open(e.Kind, e)
				}
				s.text.WriteString(e.Text)
				if e.Kind == api.EventText {
					s.delta("response.output_text.delta", true, e.Text)
				} else {
					s.delta("response.reasoning_text.delta", true, e.Text)
				}
			case api.EventToolCallBegin:
				s.open(api.EventToolCallBegin, e)
			case api.EventToolCallArgs:
				if s.kind == api.EventToolCallBegin {
					s.text.WriteString(e.Text)
					s.delta("response.function_call_arguments.delta", false, e.Text)
				}
			case api.EventToolCallEnd:
				s.close()
			case api.EventFinish:
				if s.kind == 0 && len(resp.Output) == 0 {
					s.open(api.EventText, e) // an empty answer is still a message
				}
				s.close()
				if e.Finish == api.FinishError {
					resp.Status = "failed"
					resp.Error = map[string]string{"code": "server_error", "message": "generation failed"}
					s.event("response.failed", map[string]any{"response": resp})
					continue
				}
				finishResponse(resp, e.Finish)
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil
		}
		if s.sse.Flush() != nil {
			run.Cancel()
			return nil
		}
	}
	if resp.Status != "failed" {
		resp.Usage = toResponsesUsage(run.Usage())
		t := c.Timings()
		resp.Kvserve = &t
		typ := "response.completed"
		if resp.Status == "incomplete" {
			typ = "response.incomplete"
		}
		s.event(typ, map[string]any{"response": resp})
	}
	_ = s.sse.Flush()
	return nil
}
