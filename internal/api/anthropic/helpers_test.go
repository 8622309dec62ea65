package anthropic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
)

// post and postOK are apitest.Post and apitest.PostOK.
var post = apitest.Post

func newEnv(t testing.TB, o apitest.Options) *apitest.Env {
	t.Helper()
	o.Dialects = append([]api.Dialect{New(Options{})}, o.Dialects...)
	return apitest.New(t, o)
}

// blockOut is a decoded response content block.
type blockOut struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	Thinking  *string         `json:"thinking"`
	Signature *string         `json:"signature"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

// message is a decoded non-streamed response.
type message struct {
	ID           string     `json:"id"`
	Type         string     `json:"type"`
	Role         string     `json:"role"`
	Model        string     `json:"model"`
	StopReason   *string    `json:"stop_reason"`
	StopSequence *string    `json:"stop_sequence"`
	Content      []blockOut `json:"content"`
	Usage        usageJSON  `json:"usage"`
	Kvserve      *struct {
		OverheadMS float64 `json:"overhead_ms"`
		TTFTMS     float64 `json:"ttft_ms"`
	} `json:"kvserve"`
}

// postMessage posts to /v1/messages and decodes a 200 response.
func postMessage(t testing.TB, env *apitest.Env, body any) message {
	t.Helper()
	status, data, hdr := post(t, env.URL("/v1/messages"), body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	if !strings.HasPrefix(hdr.Get("Request-Id"), "req_") {
		t.Fatalf("request-id header %q", hdr.Get("Request-Id"))
	}
	var m message
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	checkEnvelope(t, &m, data)
	return m
}

// checkEnvelope checks the fields every message has.
func checkEnvelope(t testing.TB, m *message, data []byte) {
	t.Helper()
	if !strings.HasPrefix(m.ID, "msg_") || len(m.ID) != len("msg_")+24 || m.Type != "message" || m.Role != "assistant" || m.Model != apitest.ModelName {
		t.Fatalf("bad envelope: %s", data)
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(data, &raw)
	for _, k := range []string{"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("message lacks %q: %s", k, data)
		}
	}
	var u map[string]json.RawMessage
	_ = json.Unmarshal(raw["usage"], &u)
	for _, k := range []string{"input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"} {
		if _, ok := u[k]; !ok {
			t.Fatalf("usage lacks %q: %s", k, raw["usage"])
		}
	}
}

// sseEvent is one server-sent event: its event name and its data.
type sseEvent struct {
	name string
	data string
}

// sseEvents splits an SSE body into events; every event must have an
// event: line and one data: line.
func sseEvents(t testing.TB, body []byte) []sseEvent {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var out []sseEvent
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			if name != "" {
				t.Fatalf("two event lines: %q", line)
			}
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if name == "" {
				t.Fatalf("data without an event line: %q", line)
			}
			out = append(out, sseEvent{name, strings.TrimPrefix(line, "data: ")})
			name = ""
		case line == "":
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

// streamEvent is a decoded stream event (the union of the fields used).
type streamEvent struct {
	Type         string `json:"type"`
	Index        *int   `json:"index"`
	Message      *message
	ContentBlock *blockOut `json:"content_block"`
	Delta        *struct {
		Type         string  `json:"type"`
		Text         string  `json:"text"`
		Thinking     string  `json:"thinking"`
		Signature    string  `json:"signature"`
		PartialJSON  string  `json:"partial_json"`
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
	} `json:"delta"`
	Usage *usageJSON `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// streamed is a stream reassembled into the non-streamed message's shape,
// after checking the event grammar: message_start, then for each block
// start (ping after the first), deltas of the block's kind and stop, then
// message_delta and message_stop, each event's name equal to its type.
type streamed struct {
	msg    message
	events []sseEvent
	deltas int // content_block_delta events
}

func readStream(t testing.TB, data []byte) streamed {
	t.Helper()
	evs := sseEvents(t, data)
	var s streamed
	s.events = evs
	if len(evs) < 3 {
		t.Fatalf("short stream: %s", data)
	}
	open := -1 // the open block's index
	pinged := false
	state := "start"
	for i, ev := range evs {
		var e streamEvent
		if err := json.Unmarshal([]byte(ev.data), &e); err != nil {
			t.Fatalf("event %d %s: %v", i, ev.data, err)
		}
		if e.Type != ev.name {
			t.Fatalf("event %d: name %q, type %q", i, ev.name, e.Type)
		}
		switch e.Type {
		case "message_start":
			if i != 0 || e.Message == nil {
				t.Fatalf("message_start at %d: %s", i, ev.data)
			}
			s.msg = *e.Message
			checkEnvelope(t, &s.msg, mustField(t, ev.data, "message"))
			if s.msg.StopReason != nil || len(s.msg.Content) != 0 {
				t.Fatalf("message_start with a stop reason or content: %s", ev.data)
			}
			state = "blocks"
		case "ping":
			if pinged || state != "blocks" {
				t.Fatalf("unexpected ping at %d", i)
			}
			pinged = true
		case "content_block_start":
			if state != "blocks" || open != -1 || e.Index == nil || *e.Index != len(s.msg.Content) || e.ContentBlock == nil {
				t.Fatalf("bad content_block_start at %d: %s", i, ev.data)
			}
			if !pinged && (i+1 >= len(evs) || evs[i+1].name != "ping") {
				t.Fatalf("the first content_block_start is not followed by a ping")
			}
			open = *e.Index
			cb := e.ContentBlock
			s.msg.Content = append(s.msg.Content, *cb)
			b := &s.msg.Content[open]
			switch cb.Type {
			case "text":
				if cb.Text == nil || *cb.Text != "" {
					t.Fatalf("text block starts non-empty: %s", ev.data)
				}
			case "thinking":
				if cb.Thinking == nil || *cb.Thinking != "" {
					t.Fatalf("thinking block starts non-empty: %s", ev.data)
				}
			case "tool_use":
				if string(cb.Input) != "{}" || !strings.HasPrefix(cb.ID, "toolu_") || cb.Name == "" {
					t.Fatalf("bad tool_use start: %s", ev.data)
				}
				b.Input = nil
			default:
				t.Fatalf("block type %q", cb.Type)
			}
		case "content_block_delta":
			if e.Index == nil || *e.Index != open || e.Delta == nil {
				t.Fatalf("delta outside its block at %d: %s", i, ev.data)
			}
			s.deltas++
			b := &s.msg.Content[open]
			switch {
			case e.Delta.Type == "text_delta" && b.Type == "text":
				*b.Text += e.Delta.Text
			case e.Delta.Type == "thinking_delta" && b.Type == "thinking":
				*b.Thinking += e.Delta.Thinking
			case e.Delta.Type == "signature_delta" && b.Type == "thinking":
				sig := e.Delta.Signature
				b.Signature = &sig
			case e.Delta.Type == "input_json_delta" && b.Type == "tool_use":
				b.Input = append(b.Input, e.Delta.PartialJSON...)
			default:
				t.Fatalf("delta %q in a %s block: %s", e.Delta.Type, b.Type, ev.data)
			}
		case "content_block_stop":
			if e.Index == nil || *e.Index != open {
				t.Fatalf("stop of a block not open at %d: %s", i, ev.data)
			}
			if b := &s.msg.Content[open]; b.Type == "tool_use" && len(b.Input) == 0 {
				b.Input = json.RawMessage("{}")
			}
			open = -1
		case "message_delta":
			if open != -1 || state != "blocks" || e.Delta == nil || e.Delta.StopReason == nil || e.Usage == nil {
				t.Fatalf("bad message_delta at %d: %s", i, ev.data)
			}
			if !pinged {
				t.Fatalf("no ping before message_delta")
			}
			s.msg.StopReason, s.msg.StopSequence = e.Delta.StopReason, e.Delta.StopSequence
			s.msg.Usage = *e.Usage
			state = "delta"
		case "message_stop":
			if state != "delta" || i != len(evs)-1 {
				t.Fatalf("message_stop at %d of %d", i, len(evs))
			}
			state = "stop"
		default:
			t.Fatalf("unexpected event %q: %s", e.Type, ev.data)
		}
	}
	if state != "stop" {
		t.Fatalf("stream did not end with message_stop: %s", data)
	}
	return s
}

// mustField returns the raw JSON of one field of a JSON object.
func mustField(t testing.TB, data, field string) []byte {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &raw); err != nil {
		t.Fatal(err)
	}
	return raw[field]
}

// checkErrorShape checks an Anthropic error body and returns its error.
func checkErrorShape(t testing.TB, data []byte) errorObject {
	t.Helper()
	var eb struct {
		Type  string `json:"type"`
		Error *struct {
			Type    *string `json:"type"`
			Message *string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(data, &eb); err != nil {
		t.Fatalf("error body %s: %v", data, err)
	}
	if eb.Type != "error" || eb.Error == nil || eb.Error.Type == nil || eb.Error.Message == nil || *eb.Error.Message == "" {
		t.Fatalf("not an Anthropic error: %s", data)
	}
	if !strings.HasPrefix(eb.RequestID, "req_") {
		t.Fatalf("error without request_id: %s", data)
	}
	switch *eb.Error.Type {
	case "invalid_request_error", "authentication_error", "permission_error", "not_found_error",
		"request_too_large", "rate_limit_error", "api_error", "overloaded_error":
	default:
		t.Fatalf("unknown error type %q", *eb.Error.Type)
	}
	return errorObject{Type: *eb.Error.Type, Message: *eb.Error.Message}
}

func userMsg(text string) []map[string]any {
	return []map[string]any{{"role": "user", "content": text}}
}

// text returns the concatenated text blocks of m.
func (m *message) text() string {
	var sb strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			sb.WriteString(*c.Text)
		}
	}
	return sb.String()
}
