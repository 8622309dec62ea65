package servebench

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// MaxSSELine is the longest line (in bytes) an SSEReader accepts; a longer
// one is an error rather than unbounded memory growth.
const MaxSSELine = 16 << 20

// ErrSSELineTooLong is returned when a line exceeds MaxSSELine.
var ErrSSELineTooLong = errors.New("servebench: sse: line too long")

// SSEEvent is one dispatched server-sent event.
type SSEEvent struct {
	// Type is the event's "event:" field, "" when the stream did not set
	// one (the spec's default type "message").
	Type string
	// Data is the event's data lines joined by "\n". It aliases the
	// reader's buffer and is valid only until the next call to Next.
	Data []byte
	// ID is the last event ID seen so far in the stream.
	ID string
}

// SSEReader parses a text/event-stream as the WHATWG HTML "server-sent
// events" section defines it: lines end in LF, CRLF or a lone CR; a line
// starting with ':' is a comment; "field: value" lines set fields (one
// leading space of the value dropped); "data" lines accumulate, joined by
// LF; an empty line dispatches the event, unless its data is empty. An
// event left unterminated at the end of the stream is discarded, as the
// spec says. A leading UTF-8 byte-order mark is skipped.
//
// The reader reuses its buffers: parsing allocates only for "event" and
// "id" fields, which OpenAI-style streams do not send.
type SSEReader struct {
	br      *bufio.Reader
	line    []byte
	data    []byte
	typ     string
	id      string
	started bool // BOM checked
	skipLF  bool // previous line ended in CR: a following LF belongs to it
	hasData bool
}

// NewSSEReader returns a reader that parses r.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{br: bufio.NewReaderSize(r, 32<<10)}
}

// Next returns the next event. At the end of the stream it returns io.EOF
// (or io.ErrUnexpectedEOF when a partial event was cut off); other read
// errors are returned as they come.
func (s *SSEReader) Next() (SSEEvent, error) {
	for {
		line, err := s.readLine()
		if err != nil {
			if err == io.EOF && (s.hasData || len(line) > 0) {
				return SSEEvent{}, io.ErrUnexpectedEOF
			}
			return SSEEvent{}, err
		}
		if len(line) == 0 {
			if !s.hasData {
				s.typ = ""
				continue
			}
			ev := SSEEvent{Type: s.typ, ID: s.id}
			d := s.data
			if n := len(d); n > 0 && d[n-1] == '\n' {
				d = d[:n-1]
			}
			ev.Data = d
			s.data = s.data[:0]
			s.hasData = false
			s.typ = ""
			return ev, nil
		}
		s.field(line)
	}
}

// field processes one non-empty line.
func (s *SSEReader) field(line []byte) {
	if line[0] == ':' {
		return // comment
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		s.data = append(s.data, value...)
		s.data = append(s.data, '\n')
		s.hasData = true
	case "event":
		s.typ = string(value)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			s.id = string(value)
		}
	}
	// "retry" and unknown fields are ignored.
}

// readLine returns the next line without its terminator. The returned slice
// aliases s.line. At the end of the stream it returns what was read with
// io.EOF.
func (s *SSEReader) readLine() ([]byte, error) {
	s.line = s.line[:0]
	for {
		buf, err := s.br.Peek(1)
		if len(buf) == 0 {
			if err == nil {
				err = io.EOF
			}
			return s.line, err
		}
		buf, _ = s.br.Peek(s.br.Buffered())
		if !s.started {
			s.started = true
			if bytes.HasPrefix(buf, []byte("\xef\xbb\xbf")) {
				_, _ = s.br.Discard(3)
				continue
			} else if len(buf) < 3 && bytes.HasPrefix([]byte("\xef\xbb\xbf"), buf) {
				// Too few bytes buffered to tell: wait for more.
				if more, _ := s.br.Peek(3); bytes.Equal(more, []byte("\xef\xbb\xbf")) {
					_, _ = s.br.Discard(3)
				}
				continue
			}
		}
		if s.skipLF {
			s.skipLF = false
			if buf[0] == '\n' {
				_, _ = s.br.Discard(1)
				continue
			}
		}
		i := bytes.IndexAny(buf, "\r\n")
		if i < 0 {
			if len(s.line)+len(buf) > MaxSSELine {
				return nil, ErrSSELineTooLong
			}
			s.line = append(s.line, buf...)
			_, _ = s.br.Discard(len(buf))
			continue
		}
		if len(s.line)+i > MaxSSELine {
			return nil, ErrSSELineTooLong
		}
		s.line = append(s.line, buf[:i]...)
		if buf[i] == '\r' {
			if i+1 < len(buf) {
				if buf[i+1] == '\n' {
					i++
				}
			} else {
				s.skipLF = true
			}
		}
		_, _ = s.br.Discard(i + 1)
		return s.line, nil
	}
}
