package servebench

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

type sseEv struct{ typ, data, id string }

// readAll parses in with r's chunking and returns the events and the final
// error.
func readAll(in io.Reader) ([]sseEv, error) {
	sr := NewSSEReader(in)
	var out []sseEv
	for {
		ev, err := sr.Next()
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return out, err
		}
		out = append(out, sseEv{ev.Type, string(ev.Data), ev.ID})
	}
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []sseEv
		err  error
	}{
		{"one event", "data: hello\n\n", []sseEv{{"", "hello", ""}}, nil},
		{"openai stream", "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n",
			[]sseEv{{"", `{"a":1}`, ""}, {"", `{"b":2}`, ""}, {"", "[DONE]", ""}}, nil},
		{"multi-line data", "data: one\ndata: two\ndata:\ndata: four\n\n", []sseEv{{"", "one\ntwo\n\nfour", ""}}, nil},
		{"comments", ": keep-alive\n\n: x\ndata: a\n: in between\ndata: b\n\n", []sseEv{{"", "a\nb", ""}}, nil},
		{"CRLF", "data: a\r\n\r\ndata: b\r\ndata: c\r\n\r\n", []sseEv{{"", "a", ""}, {"", "b\nc", ""}}, nil},
		{"lone CR", "data: a\r\rdata: b\rdata: c\r\r", []sseEv{{"", "a", ""}, {"", "b\nc", ""}}, nil},
		{"mixed endings", "data: a\r\ndata: b\n\r\ndata: c\r\n\n", []sseEv{{"", "a\nb", ""}, {"", "c", ""}}, nil},
		{"one space removed", "data:x\n\ndata:  y\n\n", []sseEv{{"", "x", ""}, {"", " y", ""}}, nil},
		{"field without colon", "data\n\n", []sseEv{{"", "", ""}}, nil},
		{"colon in value", "data: a: b\n\n", []sseEv{{"", "a: b", ""}}, nil},
		{"event type and id", "event: error\nid: 7\ndata: {}\n\ndata: x\n\n",
			[]sseEv{{"error", "{}", "7"}, {"", "x", "7"}}, nil},
		{"id with NUL ignored", "id: a\x00b\ndata: x\n\n", []sseEv{{"", "x", ""}}, nil},
		{"no data no event", "event: ping\n\nretry: 10\nfoo: bar\n\n", nil, nil},
		{"BOM", "\xef\xbb\xbfdata: x\n\n", []sseEv{{"", "x", ""}}, nil},
		{"blank lines", "\n\n\ndata: x\n\n\n\n", []sseEv{{"", "x", ""}}, nil},
		{"truncated event", "data: x\n\ndata: y\n", []sseEv{{"", "x", ""}}, io.ErrUnexpectedEOF},
		{"truncated line", "data: x\n\ndata: y", []sseEv{{"", "x", ""}}, io.ErrUnexpectedEOF},
		{"empty", "", nil, nil},
	}
	readers := map[string]func(string) io.Reader{
		"whole":    func(s string) io.Reader { return strings.NewReader(s) },
		"one byte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"half":     func(s string) io.Reader { return iotest.HalfReader(strings.NewReader(s)) },
		"data+err": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
	}
	for _, tt := range tests {
		for rname, mk := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				got, err := readAll(mk(tt.in))
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("got %q, want %q", got, tt.want)
				}
				for i := range got {
					if got[i] != tt.want[i] {
						t.Fatalf("event %d = %q, want %q", i, got[i], tt.want[i])
					}
				}
			})
		}
	}
}

// TestSSEReaderSplitEverywhere cuts a stream at every byte offset into two
// reads and checks the events do not depend on where the cut falls.
func TestSSEReaderSplitEverywhere(t *testing.T) {
	in := "\xef\xbb\xbf: hi\r\ndata: {\"choices\":[]}\r\n\r\nevent: e\rdata: a\rdata: b\r\rdata: [DONE]\n\n"
	want, err := readAll(strings.NewReader(in))
	if err != nil || len(want) != 3 {
		t.Fatalf("baseline %q %v", want, err)
	}
	for cut := 0; cut <= len(in); cut++ {
		got, err := readAll(io.MultiReader(strings.NewReader(in[:cut]), strings.NewReader(in[cut:])))
		if err != nil || len(got) != len(want) {
			t.Fatalf("cut %d: %q %v", cut, got, err)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("cut %d: event %d = %q, want %q", cut, i, got[i], want[i])
			}
		}
	}
}

func TestSSEReaderLineTooLong(t *testing.T) {
	in := "data: " + strings.Repeat("x", MaxSSELine) + "\n\n"
	_, err := readAll(strings.NewReader(in))
	if !errors.Is(err, ErrSSELineTooLong) {
		t.Fatalf("err = %v", err)
	}
}

// TestSSEReaderReadError passes a transport error through.
func TestSSEReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	got, err := readAll(io.MultiReader(strings.NewReader("data: x\n\ndata: y"), iotest.ErrReader(boom)))
	if !errors.Is(err, boom) || len(got) != 1 {
		t.Fatalf("%q %v", got, err)
	}
}

// encodeSSE writes events back as a stream, for the round-trip property.
func encodeSSE(evs []sseEv) string {
	var b strings.Builder
	for _, e := range evs {
		if e.typ != "" {
			b.WriteString("event: " + e.typ + "\n")
		}
		b.WriteString("id: " + e.id + "\n")
		for _, l := range strings.Split(e.data, "\n") {
			b.WriteString("data: " + l + "\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{
		"data: x\n\n", "data: a\r\ndata: b\r\n\r\n", "data: a\r\r", ": c\nevent: e\nid: 1\ndata\n\n",
		"\xef\xbb\xbfdata: [DONE]\n\n", "data: x\n\ndata: y",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		whole, errW := readAll(bytes.NewReader(in))
		bytewise, errB := readAll(iotest.OneByteReader(bytes.NewReader(in)))
		if (errW == nil) != (errB == nil) || len(whole) != len(bytewise) {
			t.Fatalf("chunking changed the result: %q %v vs %q %v", whole, errW, bytewise, errB)
		}
		for i := range whole {
			if whole[i] != bytewise[i] {
				t.Fatalf("event %d: %q vs %q", i, whole[i], bytewise[i])
			}
			if strings.ContainsAny(whole[i].data, "\r") || strings.ContainsAny(whole[i].typ, "\r\n") {
				t.Fatalf("line break inside a field: %q", whole[i])
			}
		}
		again, err := readAll(strings.NewReader(encodeSSE(whole)))
		if err != nil || len(again) != len(whole) {
			t.Fatalf("round trip: %q %v, want %q", again, err, whole)
		}
		for i := range again {
			if again[i] != whole[i] {
				t.Fatalf("round trip event %d: %q, want %q", i, again[i], whole[i])
			}
		}
	})
}
