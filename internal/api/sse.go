package api

import (
	"encoding/json"
	"net/http"
)

// SSE writes a server-sent event stream. Events are buffered until Flush,
// so a batch of engine outputs becomes one write to the connection.
type SSE struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     []byte
	started bool
	err     error
}

// NewSSE returns a stream writer on w. Nothing is sent until the first
// Flush, so an error can still be written with its status before then.
func NewSSE(w http.ResponseWriter) *SSE {
	return &SSE{w: w, rc: http.NewResponseController(w)}
}

// Started reports whether the stream's headers were sent.
func (s *SSE) Started() bool { return s.started }

// Data buffers the event "data: <payload>\n\n".
func (s *SSE) Data(payload []byte) {
	s.buf = append(s.buf, "data: "...)
	s.buf = append(s.buf, payload...)
	s.buf = append(s.buf, '\n', '\n')
}

// Event buffers "event: <name>\ndata: <payload>\n\n".
func (s *SSE) Event(name string, payload []byte) {
	s.buf = append(s.buf, "event: "...)
	s.buf = append(s.buf, name...)
	s.buf = append(s.buf, '\n')
	s.Data(payload)
}

// JSON buffers an event whose data is v encoded as JSON; name "" writes a
// data-only event.
func (s *SSE) JSON(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if name == "" {
		s.Data(b)
	} else {
		s.Event(name, b)
	}
	return nil
}

// Buffer returns the pending bytes for callers that append events
// themselves (see AppendJSONString); SetBuffer stores them back.
func (s *SSE) Buffer() []byte { return s.buf }

// SetBuffer replaces the pending bytes.
func (s *SSE) SetBuffer(b []byte) { s.buf = b }

// Flush sends the headers (first time) and the buffered events. It
// returns the first write error (the client went away), after which
// everything is dropped.
func (s *SSE) Flush() error {
	if s.err != nil {
		return s.err
	}
	if !s.started {
		h := s.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("Connection", "keep-alive")
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
