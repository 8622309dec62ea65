package anthropic

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"hash"
	"strconv"

	"github.com/kvserve/kvserve/internal/api"
)

// blockKind is the type of a response content block.
type blockKind uint8

const (
	noBlock blockKind = iota
	textBlock
	thinkingBlock
	toolBlock
)

// contentJSON is a content block of a non-streamed message.
type contentJSON struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// blocks turns a run's events into content blocks: each block is opened
// when the first event of its kind arrives, filled by deltas and closed
// when something else starts or the sample ends. Streamed, it writes the
// content_block_start / _delta / _stop events (deltas merged per batch of
// engine outputs); otherwise it collects the blocks. The one state machine
// makes the streamed and non-streamed responses agree block for block.
type blocks struct {
	sse     *api.SSE // nil: not streamed
	content []contentJSON

	kind  blockKind // the open block's kind (noBlock: none open)
	index int       // the open block's index
	n     int       // blocks opened so far
	pend  []byte    // streamed: delta not yet written; else the block's text
	sig   hash.Hash // the open thinking block's signature digest

	toolID, toolName string
	call             int // the core's index of the open tool call
	firstCall        int // the core's index of the first tool call, or -1
	disableParallel  bool

	pinged   bool
	finished bool
	finish   api.FinishReason
	stopSeq  string
	err      error
}

func newBlocks(sse *api.SSE, disableParallel bool) *blocks {
	return &blocks{sse: sse, firstCall: -1, disableParallel: disableParallel, content: []contentJSON{}}
}

// add takes one event of the run (which has one sample).
func (b *blocks) add(e *api.Event) {
	switch e.Kind {
	case api.EventText:
		if e.Text == "" {
			return
		}
		if b.kind != textBlock {
			b.open(textBlock)
		}
		b.pend = append(b.pend, e.Text...)
	case api.EventReasoning:
		if e.Text == "" {
			return
		}
		if b.kind != thinkingBlock {
			b.open(thinkingBlock)
		}
		b.pend = append(b.pend, e.Text...)
	case api.EventToolCallBegin:
		if b.firstCall >= 0 && b.disableParallel {
			return // only the first call is kept
		}
		if b.firstCall < 0 {
			b.firstCall = e.ToolCall
		}
		b.toolID, b.toolName, b.call = newID("toolu_"), e.ToolName, e.ToolCall
		b.open(toolBlock)
	case api.EventToolCallArgs:
		if b.kind == toolBlock && e.ToolCall == b.call {
			b.pend = append(b.pend, e.Text...)
		}
	case api.EventToolCallEnd:
		if b.kind == toolBlock && e.ToolCall == b.call {
			b.close()
		}
	case api.EventFinish:
		b.close()
		b.finished = true
		b.finish, b.stopSeq, b.err = e.Finish, e.StopSequence, e.Err
	}
}

// open closes the open block and starts one of kind k.
func (b *blocks) open(k blockKind) {
	b.close()
	b.kind, b.index = k, b.n
	b.n++
	b.pend = b.pend[:0]
	if k == thinkingBlock {
		if b.sig == nil {
			b.sig = sha256.New()
		}
		b.sig.Reset()
		b.sig.Write([]byte("kvserve thinking\x00"))
	}
	if b.sse == nil {
		return
	}
	buf := b.begin("content_block_start")
	buf = append(buf, `{"type":"content_block_start","index":`...)
	buf = strconv.AppendInt(buf, int64(b.index), 10)
	switch k {
	case textBlock:
		buf = append(buf, `,"content_block":{"type":"text","text":""}}`...)
	case thinkingBlock:
		buf = append(buf, `,"content_block":{"type":"thinking","thinking":"","signature":""}}`...)
	case toolBlock:
		buf = append(buf, `,"content_block":{"type":"tool_use","id":`...)
		buf = api.AppendJSONString(buf, b.toolID)
		buf = append(buf, `,"name":`...)
		buf = api.AppendJSONString(buf, b.toolName)
		buf = append(buf, `,"input":{}}}`...)
	}
	b.end(buf)
	b.ping()
}

// ping writes the ping event that follows the first content_block_start
// (or precedes message_delta when there is no block).
func (b *blocks) ping() {
	if b.pinged || b.sse == nil {
		return
	}
	b.pinged = true
	b.end(append(b.begin("ping"), `{"type":"ping"}`...))
}

// flush writes the open block's pending delta (streamed only).
func (b *blocks) flush() {
	if b.sse == nil || b.kind == noBlock || len(b.pend) == 0 {
		return
	}
	buf := b.begin("content_block_delta")
	buf = append(buf, `{"type":"content_block_delta","index":`...)
	buf = strconv.AppendInt(buf, int64(b.index), 10)
	switch b.kind {
	case textBlock:
		buf = append(buf, `,"delta":{"type":"text_delta","text":`...)
	case thinkingBlock:
		buf = append(buf, `,"delta":{"type":"thinking_delta","thinking":`...)
	case toolBlock:
		buf = append(buf, `,"delta":{"type":"input_json_delta","partial_json":`...)
	}
	buf = api.AppendJSONString(buf, b.pend)
	buf = append(buf, "}}"...)
	b.end(buf)
	if b.kind == thinkingBlock {
		b.sig.Write(b.pend)
	}
	b.pend = b.pend[:0]
}

// close ends the open block.
func (b *blocks) close() {
	if b.kind == noBlock {
		return
	}
	k := b.kind
	b.kind = noBlock
	if b.sse == nil {
		b.content = append(b.content, b.collected(k))
		return
	}
	b.kind = k
	b.flush()
	b.kind = noBlock
	if k == thinkingBlock {
		buf := b.begin("content_block_delta")
		buf = append(buf, `{"type":"content_block_delta","index":`...)
		buf = strconv.AppendInt(buf, int64(b.index), 10)
		buf = append(buf, `,"delta":{"type":"signature_delta","signature":`...)
		buf = api.AppendJSONString(buf, b.signature())
		buf = append(buf, "}}"...)
		b.end(buf)
	}
	buf := b.begin("content_block_stop")
	buf = append(buf, `{"type":"content_block_stop","index":`...)
	buf = strconv.AppendInt(buf, int64(b.index), 10)
	buf = append(buf, '}')
	b.end(buf)
}

// collected is the non-streamed block of kind k from the pending text.
func (b *blocks) collected(k blockKind) contentJSON {
	text := string(b.pend)
	switch k {
	case thinkingBlock:
		b.sig.Write(b.pend)
		sig := b.signature()
		return contentJSON{Type: "thinking", Thinking: &text, Signature: &sig}
	case toolBlock:
		// The arguments are the model's JSON; a call cut short (by
		// max_tokens) has an incomplete object, which becomes {}.
		input := json.RawMessage("{}")
		if args := bytes.TrimSpace(b.pend); len(args) > 0 && args[0] == '{' && json.Valid(args) {
			input = json.RawMessage(bytes.Clone(args))
		}
		return contentJSON{Type: "tool_use", ID: b.toolID, Name: b.toolName, Input: input}
	}
	return contentJSON{Type: "text", Text: &text}
}

// signature returns the open thinking block's signature: a digest of its
// text (kvserve does not check signatures sent back).
func (b *blocks) signature() string {
	var sum [sha256.Size]byte
	return base64.StdEncoding.EncodeToString(b.sig.Sum(sum[:0]))
}

// begin starts an SSE event in the stream's buffer.
func (b *blocks) begin(name string) []byte {
	buf := append(b.sse.Buffer(), "event: "...)
	buf = append(buf, name...)
	return append(buf, "\ndata: "...)
}

// end finishes an SSE event begun with begin.
func (b *blocks) end(buf []byte) {
	b.sse.SetBuffer(append(buf, '\n', '\n'))
}

// stopReason maps a finish to Anthropic's stop_reason.
func stopReason(f api.FinishReason, stopSeq string) string {
	switch f {
	case api.FinishLength:
		return "max_tokens"
	case api.FinishToolCalls:
		return "tool_use"
	}
	if stopSeq != "" {
		return "stop_sequence"
	}
	return "end_turn"
}
