package outparse

import (
	"fmt"
	"strings"

	"github.com/kvserve/kvserve/internal/chat/conv"
	"github.com/kvserve/kvserve/internal/chat/pyjson"
)

// This file describes, per template family, how a model writes tool calls
// and reasoning in its output: the strings that start a tool-call section,
// a small program of steps that reads one section (see section.go), the
// reasoning tags, and the text a forced call must have. The descriptions are
// read-only tables shared by every parser.

// stepOp is one instruction of a section program.
type stepOp uint8

const (
	opWS        stepOp = iota // skip whitespace
	opLit                     // the literal s must follow
	opOptLit                  // the literal s may follow
	opLoop                    // s follows: consume it and jump to step `to`; s2 follows: consume it and go on
	opItem                    // a new call starts here (inside an array or a repeated block)
	opObject                  // a JSON object holding one call, with the keys in `keys`
	opName                    // a tool name, up to (not including) the byte `delim`
	opArgs                    // the call's arguments: a JSON value, streamed
	opRecipient               // Functionary v3.2: optional ">>>", then "all" or a tool name, then '\n'
	opPython                  // after <|python_tag|>: a JSON call, a built-in name.call(...), or code
)

// step is one instruction of a section program.
type step struct {
	op    stepOp
	s, s2 string
	to    int
	keys  *callKeys
	delim byte
}

// callKeys names the keys of a JSON call object.
type callKeys struct {
	name  []string // the function's name
	args  []string // its arguments
	other []string // allowed, skipped (an id, "type": "function")
	// python: the object may be a Python dict ({'name': …}), read whole.
	python bool
}

// trigger is a string that, in content, starts a tool-call section (prog
// set) or is a bare marker that is dropped (prog nil).
type trigger struct {
	lit  string
	prog []step
	// atStart: recognized only at the start of the output (after spaces) or
	// right after a tool call.
	atStart bool
	// inclusive: the literal belongs to the section's text and the program
	// reads it (Llama 3's "{").
	inclusive bool
	// needTools: only when the request has tools.
	needTools bool
}

// toolFormat is a family's output syntax.
type toolFormat struct {
	triggers []trigger
	// think are the reasoning tags; thinkFamily says the family itself uses
	// them (else they are the common <think> convention).
	think       [2]string
	thinkFamily bool
	// shortIDs: tool-call ids are 9 alphanumerics (Mistral's templates
	// refuse any other id when the conversation comes back).
	shortIDs bool
	// markers are the special-token texts the parser must see in the
	// detokenized output.
	markers []string
	// forced returns the text around the arguments of a forced call.
	forced func(name, jsonName string) (prefix, suffix string, err error)
}

var (
	hermesKeys  = &callKeys{name: []string{"name"}, args: []string{"arguments", "parameters"}, python: true}
	llamaKeys   = &callKeys{name: []string{"name"}, args: []string{"parameters", "arguments"}, other: []string{"type"}}
	mistralKeys = &callKeys{name: []string{"name"}, args: []string{"arguments"}, other: []string{"id"}}
	r7bKeys     = &callKeys{name: []string{"tool_name"}, args: []string{"parameters"}, other: []string{"tool_call_id"}}
	cohereKeys  = &callKeys{name: []string{"tool_name"}, args: []string{"parameters"}}
)

const (
	thinkOpen  = "<think>"
	thinkClose = "</think>"

	dsCallsBegin = "<｜tool▁calls▁begin｜>"
	dsCallsEnd   = "<｜tool▁calls▁end｜>"
	dsCallBegin  = "<｜tool▁call▁begin｜>"
	dsCallEnd    = "<｜tool▁call▁end｜>"
	dsSep        = "<｜tool▁sep｜>"
)

// pythonProg reads what follows <|python_tag|>.
var pythonProg = []step{{op: opWS}, {op: opPython}}

// jsonCallProg reads one bare JSON call object (Llama 3, and after
// <|python_tag|>).
var jsonCallProg = []step{{op: opObject, keys: llamaKeys}}

var hermesFormat = &toolFormat{
	triggers: []trigger{{lit: "<tool_call>", needTools: true, prog: []step{
		{op: opWS}, {op: opObject, keys: hermesKeys}, {op: opWS}, {op: opLit, s: "</tool_call>"},
	}}},
	think:   [2]string{thinkOpen, thinkClose},
	markers: []string{"<tool_call>", "</tool_call>", thinkOpen, thinkClose},
	forced: func(_, jn string) (string, string, error) {
		return "<tool_call>\n{\"name\": " + jn + ", \"arguments\": ", "}\n</tool_call>", nil
	},
}

var llama3Format = &toolFormat{
	triggers: []trigger{
		{lit: "{", atStart: true, inclusive: true, needTools: true, prog: jsonCallProg},
		{lit: "<|python_tag|>", needTools: true, prog: pythonProg},
	},
	think:   [2]string{thinkOpen, thinkClose},
	markers: []string{"<|python_tag|>"},
	forced: func(_, jn string) (string, string, error) {
		return "{\"name\": " + jn + ", \"parameters\": ", "}", nil
	},
}

var mistralFormat = &toolFormat{
	triggers: []trigger{{lit: "[TOOL_CALLS]", needTools: true, prog: []step{
		{op: opWS}, {op: opLit, s: "["},
		{op: opItem}, {op: opWS}, {op: opObject, keys: mistralKeys}, {op: opWS},
		{op: opLoop, s: ",", s2: "]", to: 2},
	}}},
	think:    [2]string{thinkOpen, thinkClose},
	shortIDs: true,
	markers:  []string{"[TOOL_CALLS]"},
	forced: func(_, jn string) (string, string, error) {
		return "[TOOL_CALLS][{\"name\": " + jn + ", \"arguments\": ", "}]", nil
	},
}

var functionaryV31Format = &toolFormat{
	triggers: []trigger{
		{lit: "<function=", needTools: true, prog: []step{
			{op: opName, delim: '>'}, {op: opLit, s: ">"}, {op: opArgs}, {op: opWS}, {op: opLit, s: "</function>"},
		}},
		{lit: "<|python_tag|>", needTools: true, prog: pythonProg},
	},
	think:   [2]string{thinkOpen, thinkClose},
	markers: []string{"<|python_tag|>"},
	forced: func(name, _ string) (string, string, error) {
		if strings.ContainsAny(name, "<>") {
			return "", "", fmt.Errorf("tool name %q cannot be written as <function=name>", name)
		}
		return "<function=" + name + ">", "</function>", nil
	},
}

// recipientProg reads one ">>>recipient\n…" block of Functionary v3.2.
var recipientProg = []step{{op: opRecipient}, {op: opArgs}}

var functionaryV32Format = &toolFormat{
	triggers: []trigger{
		// The generation prompt ends with ">>>": the output starts with
		// the recipient.
		{lit: "", atStart: true, inclusive: true, prog: recipientProg},
		{lit: ">>>", inclusive: true, prog: recipientProg},
	},
	think: [2]string{thinkOpen, thinkClose},
	forced: func(name, _ string) (string, string, error) {
		if name == "all" {
			return "", "", fmt.Errorf("tool name %q is Functionary's plain-text recipient", name)
		}
		return name + "\n", "", nil
	},
}

var firefunctionFormat = &toolFormat{
	triggers: []trigger{{lit: "functools[", needTools: true, prog: []step{
		{op: opItem}, {op: opWS}, {op: opObject, keys: mistralKeys}, {op: opWS},
		{op: opLoop, s: ",", s2: "]", to: 0},
	}}},
	think: [2]string{thinkOpen, thinkClose},
	forced: func(_, jn string) (string, string, error) {
		return " functools[{\"name\": " + jn + ", \"arguments\": ", "}]", nil
	},
}

var deepseekProg = []step{
	{op: opWS}, {op: opLit, s: dsCallBegin},
	{op: opItem}, {op: opOptLit, s: "function"}, {op: opLit, s: dsSep}, {op: opName, delim: '\n'}, {op: opLit, s: "\n"},
	{op: opWS}, {op: opOptLit, s: "```json"}, {op: opArgs}, {op: opWS}, {op: opOptLit, s: "```"}, {op: opWS},
	{op: opLit, s: dsCallEnd}, {op: opWS},
	{op: opLoop, s: dsCallBegin, s2: dsCallsEnd, to: 2},
}

var deepseekFormat = &toolFormat{
	triggers: []trigger{
		{lit: dsCallsBegin, needTools: true, prog: deepseekProg},
		// Variants the R1 distills are known to write (llama.cpp accepts
		// them too).
		{lit: "<｜tool_calls_begin｜>", needTools: true, prog: deepseekProg},
		{lit: "<｜tool calls begin｜>", needTools: true, prog: deepseekProg},
		{lit: "<｜tool\\_calls\\_begin｜>", needTools: true, prog: deepseekProg},
	},
	think:       [2]string{thinkOpen, thinkClose},
	thinkFamily: true,
	markers:     []string{thinkOpen, thinkClose, dsCallsBegin, dsCallsEnd, dsCallBegin, dsCallEnd, dsSep},
	forced: func(name, _ string) (string, string, error) {
		return dsCallsBegin + dsCallBegin + "function" + dsSep + name + "\n```json\n", "\n```" + dsCallEnd + dsCallsEnd, nil
	},
}

var commandR7BFormat = &toolFormat{
	triggers: []trigger{
		{lit: "<|START_ACTION|>", needTools: true, prog: []step{
			{op: opWS}, {op: opLit, s: "["},
			{op: opItem}, {op: opWS}, {op: opObject, keys: r7bKeys}, {op: opWS},
			{op: opLoop, s: ",", s2: "]", to: 2},
			{op: opWS}, {op: opLit, s: "<|END_ACTION|>"},
		}},
		{lit: "<|START_RESPONSE|>"},
		{lit: "<|END_RESPONSE|>"},
	},
	think:       [2]string{"<|START_THINKING|>", "<|END_THINKING|>"},
	thinkFamily: true,
	markers:     []string{"<|START_THINKING|>", "<|END_THINKING|>", "<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>"},
	forced: func(_, jn string) (string, string, error) {
		return "<|START_ACTION|>[\n    {\"tool_call_id\": \"0\", \"tool_name\": " + jn + ", \"parameters\": ", "}\n]<|END_ACTION|>", nil
	},
}

var commandRFormat = &toolFormat{
	triggers: []trigger{{lit: "Action:", needTools: true, prog: []step{
		{op: opWS}, {op: opOptLit, s: "```json"}, {op: opWS}, {op: opLit, s: "["},
		{op: opItem}, {op: opWS}, {op: opObject, keys: cohereKeys}, {op: opWS},
		{op: opLoop, s: ",", s2: "]", to: 4},
		{op: opWS}, {op: opOptLit, s: "```"},
	}}},
	think: [2]string{thinkOpen, thinkClose},
	forced: func(_, jn string) (string, string, error) {
		return "Action:\n```json\n[\n    {\n        \"tool_name\": " + jn + ",\n        \"parameters\": ", "\n    }\n]```", nil
	},
}

// Template is what decides a model's output syntax: its chat template's
// family and source. *chat.Template implements it.
type Template interface {
	Family() string
	Source() string
}

// Syntax is the output syntax of the model a chat template belongs to: how
// it writes tool calls and reasoning. The zero value is not usable; make one
// with ForTemplate.
type Syntax struct {
	f   *toolFormat
	src string // the template's source, for ReasoningTags
}

// ForTemplate returns the output syntax of the model of template t, by its
// family (see conv.DetectFamily).
func ForTemplate(t Template) Syntax {
	return Syntax{f: formatFor(t.Family()), src: t.Source()}
}

// formatFor returns the output syntax of a family. Families without a
// tool-call syntax of their own (ChatML, Gemma, Phi-3, unknown) get the
// Hermes one, the most common convention among fine-tunes.
func formatFor(family string) *toolFormat {
	switch family {
	case conv.FamilyLlama3:
		return llama3Format
	case conv.FamilyMistral:
		return mistralFormat
	case conv.FamilyFunctionaryV31:
		return functionaryV31Format
	case conv.FamilyFunctionaryV32:
		return functionaryV32Format
	case conv.FamilyFirefunctionV2:
		return firefunctionFormat
	case conv.FamilyDeepSeekR1:
		return deepseekFormat
	case conv.FamilyCommandR7B:
		return commandR7BFormat
	case conv.FamilyCommandR:
		return commandRFormat
	}
	return hermesFormat
}

// ReasoningTags returns the tags a model of this template's family writes
// around its reasoning: <think> and </think>, or Command R7B's
// <|START_THINKING|> and <|END_THINKING|>. ok reports whether the template
// itself knows about reasoning (DeepSeek R1, Command R7B, or a template that
// mentions the tags, as Qwen 3's and QwQ's do); when it is false the tags
// are the common <think> convention, which the parser still recognizes at
// the start of the output.
func (sx Syntax) ReasoningTags() (open, close string, ok bool) {
	f := sx.f
	ok = f.thinkFamily || strings.Contains(sx.src, f.think[0]) || strings.Contains(sx.src, f.think[1])
	return f.think[0], f.think[1], ok
}

// PromptOpensReasoning reports whether a rendered prompt ends inside an open
// reasoning block: it ends with the open tag, maybe followed by spaces (the
// DeepSeek R1 distills' generation prompt ends with "<think>\n"). Then the
// output starts inside the reasoning: set Options.ReasoningOpen.
func (sx Syntax) PromptOpensReasoning(prompt string) bool {
	open, _, _ := sx.ReasoningTags()
	return strings.HasSuffix(strings.TrimRight(prompt, " \t\r\n"), open)
}

// OutputMarkers returns the texts of special tokens the output parser must
// see: when detokenizing a generation for NewParser, render these tokens as
// their text (end-of-generation tokens are not needed and must not be
// rendered).
func (sx Syntax) OutputMarkers() []string {
	f := sx.f
	out := append([]string(nil), f.markers...)
	open, close, _ := sx.ReasoningTags()
	for _, m := range []string{open, close} {
		found := false
		for _, x := range out {
			found = found || x == m
		}
		if !found {
			out = append(out, m)
		}
	}
	return out
}

// ForcedCall returns the exact text before and after the arguments JSON of
// one call of tool, in this template's family format, for a grammar that
// forces tool_choice (a named function, or "required" with one tool): the
// model then generates prefix, an arguments object valid for the tool's
// schema, and suffix, and the parser returns that call. For example
// Hermes/Qwen: "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
// and "}\n</tool_call>".
//
// The text is the model's own tool-call syntax, so the forced call reads to
// the model like one it wrote. If the prompt opened reasoning
// (PromptOpensReasoning), the grammar must let the model close it first (or
// the caller prepends the close tag): the parser reads a call only outside
// reasoning.
func (sx Syntax) ForcedCall(tool conv.Tool) (prefix, suffix string, err error) {
	name := tool.Name
	if name == "" {
		return "", "", fmt.Errorf("outparse: forced call: empty tool name")
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] == 0x7f {
			return "", "", fmt.Errorf("outparse: forced call: tool name %q holds a control character", name)
		}
	}
	var b strings.Builder
	pyjson.WriteString(&b, name, false)
	prefix, suffix, err = sx.f.forced(name, b.String())
	if err != nil {
		return "", "", fmt.Errorf("outparse: forced call: %w", err)
	}
	return prefix, suffix, nil
}
