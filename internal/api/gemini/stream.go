package gemini

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"

	"github.com/kvserve/kvserve/internal/api"
)

// streamWriter writes a streamGenerateContent response: each chunk as a
// server-sent event "data: {…}" (alt=sse), or as an element of one JSON
// array. Chunks are buffered until flush, so a batch of engine outputs is
// one write to the connection.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	array   bool
	buf     []byte
	chunks  int
	started bool
	err     error
}

// begin appends the framing before a chunk to the buffer and returns it.
func (s *streamWriter) begin() []byte {
	switch {
	case !s.array:
		return append(s.buf, "data: "...)
	case s.chunks == 0:
		return append(s.buf, '[')
	}
	return append(s.buf, "\n,\r\n"...)
}

// end stores a chunk begun with begin.
func (s *streamWriter) end(b []byte) {
	if !s.array {
		b = append(b, '\n', '\n')
	}
	s.buf = b
	s.chunks++
}

// flush sends the headers (first time) and the buffered bytes; after a
// write error (the client went away) everything is dropped.
func (s *streamWriter) flush() error {
	if s.err != nil {
		return s.err
	}
	if !s.started {
		h := s.w.Header()
		if s.array {
			h.Set("Content-Type", "application/json; charset=UTF-8")
		} else {
			h.Set("Content-Type", "text/event-stream")
		}
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		s.w.WriteHeader(http.StatusOK)
		s.started = true
	}
	if len(s.buf) > 0 {
		if _, err := s.w.Write(s.buf); err != nil {
			s.err = err
			return err
		}
		s.buf = s.buf[:0]
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
		return err
	}
	return nil
}

// close ends the stream (the array's closing bracket).
func (s *streamWriter) close() {
	if s.array {
		if s.chunks == 0 {
			s.buf = append(s.buf, '[')
		}
		s.buf = append(s.buf, "\n]\n"...)
	}
	_ = s.flush()
}

// fail ends a started stream with an error, as Google does: in an SSE
// stream a bare JSON error object in a write of its own (which the SDKs
// look for), in an array its last element.
func (s *streamWriter) fail(e *api.Error) {
	if s.array {
		b := appendError(s.begin(), e)
		s.end(b)
		s.close()
		return
	}
	if s.flush() != nil {
		return
	}
	s.buf = append(appendError(s.buf, e), '\n')
	_ = s.flush()
}

// Part kinds of a streamed candidate.
const (
	partText uint8 = iota
	partThought
	partCall
)

// streamPart is one pending part of a candidate's next chunk.
type streamPart struct {
	kind uint8
	text []byte
	call int
}

// callState is a function call being streamed: its arguments are
// collected and the call is sent whole when it ends.
type callState struct {
	id, name string
	args     []byte
	done     bool
}

// candState is one candidate of a stream: what its next chunk carries.
type candState struct {
	parts     []streamPart
	nparts    int
	calls     []callState
	lps       []api.TokenLogprob
	finish    string
	finishMsg string
	dirty     bool
	finished  bool
	malformed bool
}

// addText appends text of kind to the pending parts, merging it with the
// last part when that is of the same kind.
func (cs *candState) addText(kind uint8, text string) {
	if text == "" {
		return
	}
	cs.dirty = true
	if cs.nparts > 0 && cs.parts[cs.nparts-1].kind == kind {
		p := &cs.parts[cs.nparts-1]
		p.text = append(p.text, text...)
		return
	}
	p := cs.next()
	p.kind = kind
	p.text = append(p.text[:0], text...)
}

// next returns a new pending part, reusing the buffers of earlier chunks.
func (cs *candState) next() *streamPart {
	if cs.nparts == len(cs.parts) {
		cs.parts = append(cs.parts, streamPart{})
	}
	cs.nparts++
	return &cs.parts[cs.nparts-1]
}

// endCall queues call i, or marks the candidate malformed when its
// arguments are not a JSON object.
func (cs *candState) endCall(i int) {
	if i < 0 || i >= len(cs.calls) || cs.calls[i].done {
		return
	}
	cs.calls[i].done = true
	if !validArgs(string(cs.calls[i].args)) {
		cs.malformed = true
		return
	}
	p := cs.next()
	p.kind, p.call = partCall, i
	cs.dirty = true
}

// genStream is the state of one streamGenerateContent response.
type genStream struct {
	c      *api.Call
	run    *api.Run
	out    *streamWriter
	opts   options
	cands  []candState
	suffix []byte // ],"modelVersion":…,"responseId":…
	done   bool   // the last chunk is written
	// scratch compacts function call arguments.
	scratch bytes.Buffer
}

// streamGenerate writes run as a stream of GenerateContentResponse
// chunks: one per batch of engine outputs, carrying each candidate's new
// text, thoughts (when asked for) and completed function calls; the last
// one carries the finish reasons and usageMetadata.
func streamGenerate(c *api.Call, run *api.Run, opts options) error {
	g := &genStream{
		c: c, run: run, opts: opts,
		out:   &streamWriter{w: c.W, rc: http.NewResponseController(c.W), array: isArrayStream(c.R)},
		cands: make([]candState, run.N()),
	}
	sfx := []byte(`],"modelVersion":`)
	sfx = api.AppendJSONString(sfx, run.Model().ID)
	sfx = append(sfx, `,"responseId":`...)
	sfx = api.AppendJSONString(sfx, newResponseID())
	g.suffix = sfx
	left := run.N()
	for {
		evs, err := run.Next()
		for _, e := range evs {
			cs := &g.cands[e.Index]
			switch e.Kind {
			case api.EventText:
				cs.addText(partText, e.Text)
			case api.EventReasoning:
				if opts.includeThoughts {
					cs.addText(partThought, e.Text)
				}
			case api.EventLogprobs:
				if opts.logprobs {
					cs.lps = append(cs.lps, *e.Logprob)
				}
			case api.EventToolCallBegin:
				for len(cs.calls) <= e.ToolCall {
					cs.calls = append(cs.calls, callState{})
				}
				cs.calls[e.ToolCall] = callState{id: e.ToolCallID, name: e.ToolName}
			case api.EventToolCallArgs:
				if e.ToolCall < len(cs.calls) {
					cs.calls[e.ToolCall].args = append(cs.calls[e.ToolCall].args, e.Text...)
				}
			case api.EventToolCallEnd:
				cs.endCall(e.ToolCall)
			case api.EventFinish:
				left--
				if e.Finish == api.FinishError {
					run.Cancel()
					if !g.out.started {
						return engineFailure(e.Err)
					}
					g.writeChunk(false)
					g.out.fail(engineFailure(e.Err))
					return nil
				}
				g.finish(cs, e)
			}
		}
		g.writeChunk(left == 0)
		if err == io.EOF {
			break
		}
		if err != nil { // the client went away
			return nil
		}
		if g.out.flush() != nil {
			run.Cancel()
			return nil
		}
	}
	g.out.close()
	return nil
}

// finish records a candidate's end: calls that never ended are sent if
// their arguments are complete, and a call that cannot be parsed makes
// the finish reason MALFORMED_FUNCTION_CALL.
func (g *genStream) finish(cs *candState, e api.Event) {
	for i := range cs.calls {
		cs.endCall(i)
	}
	cs.finish = finishReason(e.Finish)
	if (cs.malformed || (e.Finish == api.FinishToolCalls && e.Err != nil)) && e.Finish != api.FinishLength {
		cs.finish = malformedCall
		cs.finishMsg = "the model's function call could not be parsed as a call with a JSON object of arguments"
	}
	cs.finished, cs.dirty = true, true
}

// writeChunk buffers one chunk with every candidate that has something to
// say; last adds the usage and timings.
func (g *genStream) writeChunk(last bool) {
	if g.done {
		return
	}
	has := last
	for i := range g.cands {
		has = has || g.cands[i].dirty
	}
	if !has {
		return
	}
	g.done = last
	b := g.out.begin()
	b = append(b, `{"candidates":[`...)
	first := true
	for i := range g.cands {
		cs := &g.cands[i]
		if !cs.dirty {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = g.appendCandidate(b, i, cs)
	}
	b = append(b, g.suffix...)
	if last {
		u, _ := json.Marshal(toUsage(g.run.Usage()))
		b = append(b, `,"usageMetadata":`...)
		b = append(b, u...)
		t, _ := json.Marshal(g.c.Timings())
		b = append(b, `,"kvserve":`...)
		b = append(b, t...)
	}
	b = append(b, '}')
	g.out.end(b)
}

// appendCandidate appends candidate i's pending parts and resets them.
func (g *genStream) appendCandidate(b []byte, i int, cs *candState) []byte {
	b = append(b, `{"content":{"parts":[`...)
	if cs.nparts == 0 {
		b = append(b, `{"text":""}`...)
	}
	for j := 0; j < cs.nparts; j++ {
		p := &cs.parts[j]
		if j > 0 {
			b = append(b, ',')
		}
		switch p.kind {
		case partText:
			b = append(b, `{"text":`...)
			b = api.AppendJSONString(b, p.text)
			b = append(b, '}')
		case partThought:
			b = append(b, `{"text":`...)
			b = api.AppendJSONString(b, p.text)
			b = append(b, `,"thought":true}`...)
		case partCall:
			call := &cs.calls[p.call]
			b = append(b, `{"functionCall":{`...)
			if call.id != "" {
				b = append(b, `"id":`...)
				b = api.AppendJSONString(b, call.id)
				b = append(b, ',')
			}
			b = append(b, `"name":`...)
			b = api.AppendJSONString(b, call.name)
			b = append(b, `,"args":`...)
			// Compact, as the non-streamed response is (validArgs checked it).
			g.scratch.Reset()
			if json.Compact(&g.scratch, call.args) == nil {
				b = append(b, g.scratch.Bytes()...)
			} else {
				b = append(b, trimSpace(call.args)...)
			}
			b = append(b, `}}`...)
		}
	}
	b = append(b, `],"role":"model"}`...)
	if cs.finish != "" {
		b = append(b, `,"finishReason":"`...)
		b = append(b, cs.finish...)
		b = append(b, '"')
		if cs.finishMsg != "" {
			b = append(b, `,"finishMessage":`...)
			b = api.AppendJSONString(b, cs.finishMsg)
		}
	}
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(i), 10)
	if g.opts.logprobs && len(cs.lps) > 0 {
		lr := toLogprobs(cs.lps, g.opts.topLogprobs > 0)
		lj, _ := json.Marshal(lr)
		b = append(b, `,"avgLogprobs":`...)
		b = strconv.AppendFloat(b, lr.LogProbabilitySum/float64(len(cs.lps)), 'g', -1, 64)
		b = append(b, `,"logprobsResult":`...)
		b = append(b, lj...)
		cs.lps = cs.lps[:0]
	}
	b = append(b, '}')
	cs.nparts, cs.dirty = 0, false
	cs.finish, cs.finishMsg = "", ""
	return b
}

// trimSpace trims JSON whitespace around b.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\n' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\n' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}
