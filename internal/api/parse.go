package api

// parsed is one piece of a sample's output as the output parser sees it:
// answer text, reasoning, or part of a tool call.
type parsed struct {
	kind EventKind
	text string
	name string // tool name, on EventToolCallBegin
}

// outputParser splits a sample's text into answer, reasoning and tool
// calls, in the model's own format.
type outputParser interface {
	// Push takes the next piece of text and returns what it completes. The
	// result is valid until the next call.
	Push(text string) []parsed
	// Finish flushes what is held back at the end of the sample; the error
	// reports a malformed tool call.
	Finish() ([]parsed, error)
}

// plainParser passes all text through as answer text.
type plainParser struct{ out [1]parsed }

func (p *plainParser) Push(text string) []parsed {
	p.out[0] = parsed{kind: EventText, text: text}
	return p.out[:]
}

func (p *plainParser) Finish() ([]parsed, error) { return nil, nil }

// newOutputParser returns the parser for a request's samples.
func newOutputParser(m *Model, req *Request) outputParser {
	return &plainParser{}
}
