package api

import (
	"github.com/kvserve/kvserve/internal/chat/outparse"
)

// outputParser splits a sample's text into answer, reasoning and tool
// calls, in the model's own format (*outparse.StreamParser), or passes it
// through (raw completions).
type outputParser interface {
	// Push takes the next piece of text and returns what it completes. The
	// result is valid until the next call.
	Push(text string) []outparse.Event
	// Finish flushes what is held back at the end of the sample; the error
	// reports a forced tool call that did not complete.
	Finish() ([]outparse.Event, error)
}

// plainParser passes all text through as content.
type plainParser struct{ out [1]outparse.Event }

func (p *plainParser) Push(text string) []outparse.Event {
	p.out[0] = outparse.Event{Kind: outparse.Content, Text: text}
	return p.out[:]
}

func (p *plainParser) Finish() ([]outparse.Event, error) { return nil, nil }

// newOutputParser returns the parser for one sample of a request: the
// template's tool-call and reasoning parser for chat requests, a
// pass-through for raw prompts.
func newOutputParser(m *Model, req *Request, p *Prompt) outputParser {
	if req.Messages == nil || m.Template == nil {
		return &plainParser{}
	}
	out := outparse.ForTemplate(m.Template)
	o := outparse.Options{
		ParseReasoning: true,
		ReasoningOpen:  out.PromptOpensReasoning(p.Text),
		Forced:         req.ToolChoice.Mode == ToolRequired || req.ToolChoice.Mode == ToolNamed,
	}
	if req.ToolChoice.Mode != ToolNone {
		o.Tools = req.Tools
	}
	return out.NewParser(o)
}

// markerTokens returns the control tokens of the model's vocabulary whose
// text the output parser must see (Llama 3's <|python_tag|>, Mistral's
// [TOOL_CALLS], …): the detokenizer renders control tokens as nothing, so
// the run renders these itself.
func markerTokens(m *Model) map[int32]string {
	if m.Template == nil {
		return nil
	}
	var out map[int32]string
	for _, text := range outparse.ForTemplate(m.Template).OutputMarkers() {
		id, ok := m.Tokenizer.TokenID(text)
		if !ok || !m.Tokenizer.IsControl(id) || m.Tokenizer.IsEOG(id) {
			continue
		}
		if out == nil {
			out = map[int32]string{}
		}
		out[id] = text
	}
	return out
}
