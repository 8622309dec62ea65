// Package outparse parses what a model generates, in its family's own
// output syntax; package chat renders the prompt it answers. The two share
// only the conversation's data (package conv). ForTemplate gives the syntax
// of a template's model family; its NewParser parses one generation,
// ForcedCall gives the text a grammar-forced call must have, and
// OutputMarkers the special tokens the parser must see as text.
//
// A model answers in its own syntax: reasoning between tags, plain text, and
// tool calls written the way its fine-tune taught it (<tool_call>{…}</tool_call>,
// [TOOL_CALLS][…], <function=name>{…}</function>…; see toolformat.go). The
// StreamParser turns the text, as it is detokenized, into typed events:
// content and reasoning deltas, and tool calls whose arguments are streamed
// as they are generated — which is what OpenAI-style clients expect.
//
// Three rules shape it:
//
//   - It never takes back an event. Text that might still be the start of a
//     tag or a call is held back — only the shortest suffix that could still
//     become one — and a call is announced (ToolCallBegin) only once it is
//     unambiguous: its syntax has started, its name is one of the request's
//     tools, and its arguments have begun. Until then the text may turn out
//     to be content after all, and is then emitted as content.
//   - Whatever the chunking, the events are the same as for the whole text
//     pushed at once (up to how deltas are split).
//   - Arguments are the model's own bytes, passed through: the concatenated
//     ToolCallArgs deltas of a call are exactly the arguments JSON the model
//     wrote, in its key order and spacing. Re-rendering the turn with a
//     template that prints arguments as text then gives back the very tokens
//     the model generated, so their KV blocks are reused. Only where the
//     model wrote no JSON object do we write one: arguments given as a JSON
//     string are decoded; a missing "arguments" key gives {}; a call written
//     as a Python dict (Hermes 2 Pro) is converted, once complete; Llama's
//     built-in calls and raw code after <|python_tag|> become objects.
//
// Whitespace next to structure (tags, calls) is dropped; whitespace between
// content bytes is kept. Every other input byte is either in exactly one
// event or part of a tag or of a tool call's syntax.

package outparse

import (
	"errors"
	"math/rand/v2"
	"strings"

	"github.com/kvserve/kvserve/internal/chat/conv"
)

// EventKind says what an Event carries.
type EventKind uint8

const (
	// Content is a delta of the answer's text.
	Content EventKind = iota + 1
	// Reasoning is a delta of the model's reasoning (its <think> text).
	Reasoning
	// ToolCallBegin starts a tool call: ID, Name and Index are set.
	ToolCallBegin
	// ToolCallArgs is a delta of the current call's arguments JSON.
	ToolCallArgs
	// ToolCallEnd ends the current call.
	ToolCallEnd
)

// String returns the kind's name, as in "tool_call_args".
func (k EventKind) String() string {
	switch k {
	case Content:
		return "content"
	case Reasoning:
		return "reasoning"
	case ToolCallBegin:
		return "tool_call_begin"
	case ToolCallArgs:
		return "tool_call_args"
	case ToolCallEnd:
		return "tool_call_end"
	}
	return "invalid"
}

// Event is one piece of a parsed generation.
type Event struct {
	Kind EventKind
	// Text is the delta of Content, Reasoning and ToolCallArgs events.
	Text string
	// Index is the tool call's index within this response (0, 1, … for
	// parallel calls), on the three tool-call kinds (0 on the others).
	Index int
	// ID is the call's id, on ToolCallBegin: generated, in the family's
	// style ("call_" and 24 alphanumerics; 9 alphanumerics for Mistral,
	// whose templates insist on it), unless Options.NewID is set.
	ID string
	// Name is the function's name, on ToolCallBegin.
	Name string
	// Broken is set on a ToolCallEnd whose arguments are not a complete
	// JSON value: the output ended inside them (a token limit) or went
	// wrong after the call had been announced. The deltas sent so far are
	// a prefix of valid JSON.
	Broken bool
}

// Options configures a StreamParser. The zero value parses content and
// leaves reasoning tags in it.
type Options struct {
	// Tools are the request's tools: only these names are tool calls; text
	// that merely looks like a call of another name stays content. No
	// tools: no tool calls.
	Tools []conv.Tool
	// ReasoningOpen: the generation prompt already opened reasoning (the
	// DeepSeek R1 distills; Qwen 3 with thinking; see
	// Syntax.PromptOpensReasoning): the output starts inside it.
	ReasoningOpen bool
	// ParseReasoning splits reasoning into Reasoning events; else the
	// reasoning, tags included, stays in the content as the model wrote it.
	// Either way nothing inside the reasoning is read as a tool call.
	ParseReasoning bool
	// Forced: the request forced a tool call (tool_choice "required" or a
	// named function). Finish reports ErrNoToolCall if the output holds no
	// complete call. Calls are read only outside reasoning: with
	// ReasoningOpen, the forced output must close the reasoning first.
	Forced bool
	// NewID, if set, makes the tool-call ids (tests; deterministic replays).
	NewID func() string
}

// ErrNoToolCall is returned by Finish when a forced tool call was expected
// and the output holds none (or only a truncated one).
var ErrNoToolCall = errors.New("outparse: the output holds no complete tool call")

type parserState uint8

const (
	stContent parserState = iota
	stReasoning
	stSection
)

// trace labels, for tests that check where every input byte went.
type traceLabel uint8

const (
	lContent   traceLabel = iota
	lReasoning            // reasoning text
	lArgs                 // arguments passed through
	lSkip                 // whitespace next to structure, tags, markers
	lSyntax               // the syntax of a tool call (and arguments we rewrote)
	lSynth                // arguments text we wrote (not input bytes)
)

type traceItem struct {
	label traceLabel
	text  string
}

// StreamParser parses one generation incrementally. It is not safe for
// concurrent use; make one per generated sequence with Syntax.NewParser.
//
// The parser keeps the unconsumed input in buf: bytes before out have been
// emitted or skipped; bytes from out to cur have been read but not yet
// decided (a tool call that is not yet unambiguous: "tentative"); bytes
// from cur on have not been read. When nothing is tentative, out == cur and
// the consumed prefix is dropped.
type StreamParser struct {
	f      *toolFormat
	opts   Options
	buf    string
	cur    int
	out    int
	state  parserState
	events []Event
	done   bool

	started     bool // a non-space byte has been read: reasoning can no longer open
	afterStruct bool // structure came last: drop the whitespace that follows
	atStart     bool // only whitespace since the start or the last call

	// The current tool-call section.
	prog      []step
	pc        int
	tentative bool // the bytes from out to cur may still turn out to be content
	trigEnd   int  // on rollback, content runs through here
	itemMark  int  // start of the current call inside a section
	secCalls  int  // calls announced in this section

	// The current call.
	tool      int // index in opts.Tools, -1 while unknown
	callOpen  bool
	callIndex int
	obj       objState
	arg       argState
	scan      jsonScan
	sdec      strDecoder
	word      []byte // a key or name being read
	scratch   []byte

	nextIndex int // index of the next call
	complete  int // calls completed with valid arguments

	trace *[]traceItem // tests only
}

// NewParser returns a parser for one generation of a model in this syntax.
func (sx Syntax) NewParser(o Options) *StreamParser {
	p := &StreamParser{f: sx.f, opts: o, atStart: true, tool: -1}
	if o.ReasoningOpen {
		p.state = stReasoning
		p.started = true
		p.afterStruct = o.ParseReasoning
	}
	return p
}

// Push parses the next piece of generated text and returns the events it
// completes. It holds back only text that may still become a tag or a tool
// call. The returned slice is reused by the next Push or Finish.
func (p *StreamParser) Push(text string) []Event {
	p.events = p.events[:0]
	if p.done || text == "" {
		return p.events
	}
	if p.cur == len(p.buf) && !p.tentative {
		p.buf, p.cur, p.out = text, 0, 0
	} else {
		p.buf += text
	}
	p.run(false)
	p.compact()
	return p.events
}

// Finish ends the generation: it flushes what was held back and closes an
// open call. A tool call that is not yet unambiguous (an unknown name,
// invalid syntax, cut off) becomes content; a call already announced is
// ended, with Broken set if its arguments are incomplete. With
// Options.Forced it returns ErrNoToolCall if no call completed.
// Later calls return nothing.
func (p *StreamParser) Finish() ([]Event, error) {
	p.events = p.events[:0]
	if p.done {
		return p.events, nil
	}
	p.run(true)
	if p.callOpen { // defensive: every path closes its call at the end
		p.endCall(true)
	}
	if p.out < len(p.buf) { // defensive: nothing may be lost
		p.emit(Content, len(p.buf))
	}
	p.done = true
	p.buf, p.cur, p.out = "", 0, 0
	if p.opts.Forced && p.complete == 0 {
		return p.events, ErrNoToolCall
	}
	return p.events, nil
}

func (p *StreamParser) run(eof bool) {
	for {
		cur, out, state, pc, n := p.cur, p.out, p.state, p.pc, len(p.events)
		switch p.state {
		case stContent:
			p.content(eof)
		case stReasoning:
			p.reasoning(eof)
		case stSection:
			p.section(eof)
		}
		if p.cur == cur && p.out == out && p.state == state && p.pc == pc && len(p.events) == n {
			return
		}
	}
}

// compact drops the consumed input when nothing is tentative.
func (p *StreamParser) compact() {
	if !p.tentative && p.out == p.cur && p.cur > 0 {
		p.buf = p.buf[p.cur:]
		p.cur, p.out = 0, 0
	}
}

// emit sends buf[out:end] as an event of the kind (Content, Reasoning or
// ToolCallArgs).
func (p *StreamParser) emit(kind EventKind, end int) {
	if end <= p.out {
		return
	}
	text := p.buf[p.out:end]
	ev := Event{Kind: kind, Text: text}
	switch kind {
	case Content:
		p.record(lContent, text)
	case Reasoning:
		p.record(lReasoning, text)
	default:
		p.record(lArgs, text)
		ev.Index = p.callIndex
	}
	p.events = append(p.events, ev)
	p.out = end
	if p.cur < end {
		p.cur = end
	}
}

// skip drops buf[out:end].
func (p *StreamParser) skip(end int, label traceLabel) {
	if end <= p.out {
		return
	}
	p.record(label, p.buf[p.out:end])
	p.out = end
	if p.cur < end {
		p.cur = end
	}
}

func (p *StreamParser) record(label traceLabel, text string) {
	if p.trace != nil {
		*p.trace = append(*p.trace, traceItem{label, text})
	}
}

func skipSpace(s string) int {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// trimSpaceEnd returns the length of s without its trailing whitespace.
func trimSpaceEnd(s string) int {
	n := len(s)
	for n > 0 && isSpace(s[n-1]) {
		n--
	}
	return n
}

// partialAt returns the start of the longest suffix of s that is a proper
// prefix of lit, or len(s).
func partialAt(s, lit string) int {
	if lit == "" {
		return len(s)
	}
	from := max(0, len(s)-len(lit)+1)
	for i := from; i < len(s); i++ {
		j := strings.IndexByte(s[i:], lit[0])
		if j < 0 {
			break
		}
		i += j
		if strings.HasPrefix(lit, s[i:]) {
			return i
		}
	}
	return len(s)
}

// content reads plain text, looking for the start of reasoning (at the
// start of the output only), markers and tool-call sections.
func (p *StreamParser) content(eof bool) {
	s := p.buf[p.cur:]
	if s == "" {
		return
	}
	base := p.cur
	if !p.started {
		i := skipSpace(s)
		if i == len(s) && !eof {
			return
		}
		open := p.f.think[0]
		rest := s[i:]
		if strings.HasPrefix(rest, open) {
			end := base + i + len(open)
			if p.opts.ParseReasoning {
				p.skip(end, lSkip)
			} else {
				p.emit(Content, end)
			}
			p.started = true
			p.state = stReasoning
			p.afterStruct = p.opts.ParseReasoning
			return
		}
		if len(rest) < len(open) && strings.HasPrefix(open, rest) && !eof {
			return
		}
		if i < len(s) {
			p.started = true
		}
	}

	found, hold := -1, len(s)
	var trig *trigger
	for k := range p.f.triggers {
		tr := &p.f.triggers[k]
		if tr.needTools && len(p.opts.Tools) == 0 {
			continue
		}
		if tr.atStart {
			if !p.atStart {
				continue
			}
			i := skipSpace(s)
			rest := s[i:]
			switch {
			case i == len(s) && !eof:
				hold = min(hold, i)
			case i == len(s):
			case strings.HasPrefix(rest, tr.lit):
				if found < 0 || i < found {
					found, trig = i, tr
				}
			case len(rest) < len(tr.lit) && strings.HasPrefix(tr.lit, rest) && !eof:
				hold = min(hold, i)
			}
			continue
		}
		if j := strings.Index(s, tr.lit); j >= 0 && (found < 0 || j < found) {
			found, trig = j, tr
		}
		if !eof {
			hold = min(hold, partialAt(s, tr.lit))
		}
	}
	stop := hold
	if found >= 0 {
		stop = found
	}
	seg := s[:stop]
	lead := 0
	if p.afterStruct {
		lead = skipSpace(seg)
	}
	trail := max(lead, trimSpaceEnd(seg))
	if found < 0 && eof {
		trail = len(seg)
	}
	p.skip(base+lead, lSkip)
	if trail > lead {
		p.emit(Content, base+trail)
		p.afterStruct, p.atStart = false, false
	}
	if found < 0 {
		p.cur = base + trail
		if eof && trail < len(seg) { // all whitespace after structure
			p.skip(base+len(seg), lSkip)
		}
		return
	}
	if trig.prog == nil { // a marker
		p.skip(base+found+len(trig.lit), lSkip)
		p.afterStruct, p.atStart = true, true
		return
	}
	// A section starts; the whitespace before it goes with it.
	p.state = stSection
	p.prog, p.pc = trig.prog, 0
	p.tentative = true
	p.secCalls = 0
	p.trigEnd = base + found + len(trig.lit)
	p.cur = p.trigEnd
	if trig.inclusive {
		p.cur = base + found
	}
	p.itemMark = p.cur
	p.resetCall()
}

// reasoning reads reasoning text up to the close tag.
func (p *StreamParser) reasoning(eof bool) {
	s := p.buf[p.cur:]
	if s == "" {
		return
	}
	base := p.cur
	closeTag := p.f.think[1]
	verbatim := !p.opts.ParseReasoning
	j := strings.Index(s, closeTag)
	stop := len(s)
	switch {
	case j >= 0:
		stop = j
	case !eof:
		stop = partialAt(s, closeTag)
	}
	if verbatim {
		if j >= 0 {
			p.emit(Content, base+j+len(closeTag))
			p.state, p.atStart = stContent, true
			return
		}
		p.emit(Content, base+stop)
		return
	}
	seg := s[:stop]
	lead := 0
	if p.afterStruct {
		lead = skipSpace(seg)
	}
	trail := max(lead, trimSpaceEnd(seg))
	if j < 0 && eof {
		trail = len(seg)
	}
	p.skip(base+lead, lSkip)
	if trail > lead {
		p.emit(Reasoning, base+trail)
		p.afterStruct = false
	}
	if j >= 0 {
		p.skip(base+j+len(closeTag), lSkip)
		p.state = stContent
		p.afterStruct, p.atStart = true, true
		return
	}
	p.cur = base + trail
}

// resetCall clears the per-call state.
func (p *StreamParser) resetCall() {
	p.tool = -1
	p.obj = objState{}
	p.arg = argState{}
	p.word = p.word[:0]
}

// commit announces the current call: the bytes read so far are its syntax.
func (p *StreamParser) commit() {
	p.tentative = false
	p.callOpen = true
	p.callIndex = p.nextIndex
	p.nextIndex++
	p.secCalls++
	id := ""
	if p.opts.NewID != nil {
		id = p.opts.NewID()
	} else {
		id = randomID(p.f.shortIDs)
	}
	p.events = append(p.events, Event{Kind: ToolCallBegin, Index: p.callIndex, ID: id, Name: p.opts.Tools[p.tool].Name})
	if p.arg.early { // the arguments came before the name
		p.skip(p.arg.start, lSyntax)
		if p.arg.str {
			p.skip(p.arg.end, lSyntax)
			p.argText(decodeString(p.buf[p.arg.start+1 : p.arg.end-1]))
		} else {
			p.emit(ToolCallArgs, p.arg.end)
		}
	}
	p.skip(p.cur, lSyntax)
}

// argText sends arguments text that is not the input's own bytes.
func (p *StreamParser) argText(s string) {
	if s != "" {
		p.record(lSynth, s)
		p.events = append(p.events, Event{Kind: ToolCallArgs, Text: s, Index: p.callIndex})
	}
}

// endCall ends the announced call.
func (p *StreamParser) endCall(broken bool) {
	p.events = append(p.events, Event{Kind: ToolCallEnd, Index: p.callIndex, Broken: broken})
	p.callOpen = false
	if !broken {
		p.complete++
	}
}

// endSection returns to content after a section's last step.
func (p *StreamParser) endSection() {
	p.state = stContent
	p.tentative = false
	p.afterStruct, p.atStart = true, true
}

// fail handles input that does not fit the section's syntax.
func (p *StreamParser) fail() {
	if p.callOpen {
		p.endCall(true)
	}
	p.state = stContent
	switch {
	case p.tentative && p.secCalls == 0:
		// Nothing here was a call: it is all content, through the
		// trigger; scanning goes on after it.
		p.emit(Content, max(p.trigEnd, p.out))
		p.cur = p.out
		p.afterStruct, p.atStart = false, false
	case p.tentative:
		// A later item of a section: content from its start.
		p.cur = p.itemMark
		p.afterStruct, p.atStart = true, false
	default:
		// After a complete call: what does not fit is content.
		p.afterStruct, p.atStart = true, false
	}
	p.tentative = false
}

const idChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomID makes a tool-call id: "call_" and 24 alphanumerics, or 9
// alphanumerics for the families that require that.
func randomID(short bool) string {
	var b [29]byte
	n := copy(b[:], "call_")
	size := 29
	if short {
		n, size = 0, 9
	}
	for i := n; i < size; i++ {
		b[i] = idChars[rand.N(len(idChars))]
	}
	return string(b[:size])
}

// MessageBuilder folds parser events into an assistant conv.Message: content,
// reasoning and tool calls with their full arguments. The zero value is
// ready to use.
type MessageBuilder struct {
	content, reasoning strings.Builder
	calls              []conv.ToolCall
	args               []strings.Builder
	broken             []bool
}

// Add folds events in.
func (b *MessageBuilder) Add(events ...Event) {
	for _, ev := range events {
		switch ev.Kind {
		case Content:
			b.content.WriteString(ev.Text)
		case Reasoning:
			b.reasoning.WriteString(ev.Text)
		case ToolCallBegin:
			for len(b.calls) <= ev.Index {
				b.calls = append(b.calls, conv.ToolCall{})
				b.args = append(b.args, strings.Builder{})
				b.broken = append(b.broken, false)
			}
			b.calls[ev.Index].ID, b.calls[ev.Index].Name = ev.ID, ev.Name
		case ToolCallArgs:
			if ev.Index < len(b.args) {
				b.args[ev.Index].WriteString(ev.Text)
			}
		case ToolCallEnd:
			if ev.Index < len(b.broken) {
				b.broken[ev.Index] = ev.Broken
			}
		}
	}
}

// Message returns the assistant message built so far.
func (b *MessageBuilder) Message() conv.Message {
	m := conv.Message{Role: "assistant", Content: b.content.String(), ReasoningContent: b.reasoning.String()}
	for i, c := range b.calls {
		c.Arguments = b.args[i].String()
		m.ToolCalls = append(m.ToolCalls, c)
	}
	return m
}

// Broken reports whether call i ended with incomplete arguments.
func (b *MessageBuilder) Broken(i int) bool { return i < len(b.broken) && b.broken[i] }

// ParseMessage parses a whole generation at once into an assistant message
// (see NewParser; the error is Finish's).
func (sx Syntax) ParseMessage(text string, o Options) (conv.Message, error) {
	p := sx.NewParser(o)
	var b MessageBuilder
	b.Add(p.Push(text)...)
	evs, err := p.Finish()
	b.Add(evs...)
	return b.Message(), err
}
