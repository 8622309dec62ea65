// Package chat renders a conversation into a model's prompt text with the
// model's own chat template: the Jinja source stored in a GGUF file under
// tokenizer.chat_template.
//
// # Why it looks the way it does
//
// Chat templates were written for one renderer: Python's Jinja2 as Hugging
// Face transformers configures it (trim_blocks, lstrip_blocks, loop
// controls, a tojson that keeps key order and does not escape, raise_exception
// and strftime_now). The prompt a model sees must be that renderer's output
// byte for byte — a stray space changes the tokens, the model's behaviour,
// and which KV blocks of an earlier request can be reused. So this package
// does three things around the jinja library it renders with:
//
//   - it shapes the conversation the way templates expect it (OpenAI-style
//     message dicts, tool calls under function.name/arguments, tools as
//     {"type": "function", "function": {…}}), with JSON from clients — tool
//     schemas, tool-call arguments — parsed in its own key order;
//   - it replaces tojson with an implementation of Python's json.dumps
//     (indent, separators, float formatting, no HTML escaping);
//   - it probes each template once, at Parse, for what it can render:
//     whether a tool call's arguments must be a JSON object or may stay the
//     client's text, whether an assistant turn that only calls tools must
//     have content None (DeepSeek R1) or "", whether there is a system role
//     and tool support at all.
//
// Arguments stay the client's text wherever the template can print text
// (Hermes, DeepSeek R1, Functionary, Firefunction): re-rendering an earlier
// assistant turn then reproduces exactly what the model generated, so its KV
// blocks are reused. Templates that can only print an object (Llama 3.x, Qwen
// 2.5, Mistral, Command R) get the parsed object, re-serialized by json.dumps
// rules.
//
// The golden tests render every template in shared/testdata/chat-templates
// and compare with files produced by Python's Jinja2 itself
// (testdata/gen_golden.py).
//
// # The other direction: what the model writes back
//
// Parsing a generation — content, reasoning and tool calls in the family's
// own syntax — is package outparse's job (outparse.ForTemplate); the two
// share only the conversation's data, package conv.
package chat

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"

	"github.com/kvserve/kvserve/internal/chat/conv"
)

// The conversation's data, shared with the output parser (package outparse),
// is defined in package conv.
type (
	Message  = conv.Message
	ToolCall = conv.ToolCall
	Tool     = conv.Tool
)

// The template families (see conv), under the names Template.Family has
// always returned them by.
const (
	FamilyChatML         = conv.FamilyChatML
	FamilyHermes         = conv.FamilyHermes
	FamilyLlama3         = conv.FamilyLlama3
	FamilyFunctionaryV31 = conv.FamilyFunctionaryV31
	FamilyFunctionaryV32 = conv.FamilyFunctionaryV32
	FamilyFirefunctionV2 = conv.FamilyFirefunctionV2
	FamilyDeepSeekR1     = conv.FamilyDeepSeekR1
	FamilyMistral        = conv.FamilyMistral
	FamilyCommandR       = conv.FamilyCommandR
	FamilyCommandR7B     = conv.FamilyCommandR7B
	FamilyGemma          = conv.FamilyGemma
	FamilyPhi3           = conv.FamilyPhi3
	FamilyUnknown        = conv.FamilyUnknown
)

// RenderOptions are the per-request inputs of a render besides the messages.
type RenderOptions struct {
	// Tools are the functions offered to the model (none: tools is left
	// undefined, which every template reads as "no tools").
	Tools []Tool
	// AddGenerationPrompt ends the prompt with the opening of an assistant
	// turn.
	AddGenerationPrompt bool
	// BOS and EOS are the text of the model's begin- and end-of-sequence
	// tokens (bos_token, eos_token). Many templates write BOS themselves: the
	// caller must then not add another when tokenizing.
	BOS, EOS string
	// Now is the time templates see through strftime_now and date_string;
	// zero means time.Now().
	Now time.Time
	// Extra holds further template variables, and overrides the ones this
	// package sets: e.g. enable_thinking (Qwen 3), tools_in_user_message or
	// date_string (Llama 3.x), builtin_tools. Values are Go values (maps are
	// rendered with sorted keys) or json.RawMessage (key order kept).
	Extra map[string]any
}

// Caps describes what a template can render, found by probing it at Parse.
type Caps struct {
	// SystemRole: a system message appears in the prompt (Gemma 2 refuses it).
	SystemRole bool
	// Tools: tool definitions appear in the prompt.
	Tools bool
	// ToolCalls: an assistant turn's tool calls appear in the prompt.
	ToolCalls bool
	// ObjectArguments: tool-call arguments are passed as a parsed object,
	// because the template cannot print them as text.
	ObjectArguments bool
	// NoneContent: an assistant turn with tool calls and no text gets content
	// None instead of "", because the template looks for tool calls only
	// there.
	NoneContent bool
}

// Template is a compiled chat template. It is immutable after Parse and safe
// for concurrent Render calls.
type Template struct {
	src          string
	tmpl         *jinja.Template
	family       string
	caps         Caps
	usesToolPlan bool
}

// ChatML is the template used when a model has none: the ChatML layout
// (Qwen, Hermes, many fine-tunes), without tool support.
const ChatML = `{%- for message in messages %}
{{- '<|im_start|>' + message.role + '\n' }}
{%- if message.content is string %}{{ message.content }}{% endif %}
{{- '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// Parse compiles a chat template. An empty (or all-space) src selects the
// ChatML fallback. Parse renders a few probe conversations to learn the
// template's capabilities (see Caps).
func Parse(src string) (t *Template, err error) {
	if strings.TrimSpace(src) == "" {
		src = ChatML
	}
	defer func() {
		if r := recover(); r != nil {
			t, err = nil, fmt.Errorf("chat: compile template: internal error: %v", r)
		}
	}()
	tmpl, err := jinja.Compile(rewriteFilters(src))
	if err != nil {
		return nil, fmt.Errorf("chat: compile template: %w", err)
	}
	t = &Template{
		src:          src,
		tmpl:         tmpl,
		family:       conv.DetectFamily(src),
		usesToolPlan: strings.Contains(src, "tool_plan"),
	}
	t.caps = t.probe()
	return t, nil
}

// Family returns the template's family (one of the Family constants), found
// by looking for each family's marker strings in the source.
func (t *Template) Family() string { return t.family }

// Caps returns what the template can render.
func (t *Template) Caps() Caps { return t.caps }

// Source returns the template's Jinja source.
func (t *Template) Source() string { return t.src }

// Render renders msgs into prompt text. Errors raised by the template itself
// (raise_exception: "System role not supported", roles that do not
// alternate…) are returned with their message.
//
// For a template that cannot render tools, the tools are described in the
// system prompt instead, and earlier tool calls and results are written as
// text (see toolFallback).
func (t *Template) Render(msgs []Message, opts RenderOptions) (string, error) {
	msgs, opts, err := t.toolFallback(msgs, opts)
	if err != nil {
		return "", err
	}
	return t.renderTemplate(msgs, opts)
}

// renderTemplate renders exactly what the template itself produces (what
// Python's Jinja2 would), without the tool fallback.
func (t *Template) renderTemplate(msgs []Message, opts RenderOptions) (string, error) {
	data, err := t.renderData(msgs, opts, t.caps)
	if err != nil {
		return "", err
	}
	out, err := t.run(data)
	if err != nil {
		return "", fmt.Errorf("chat: render: %w", err)
	}
	return out, nil
}

// run renders data, turning a panic in the template engine into an error.
func (t *Template) run(data map[string]jinja.Value) (out string, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("internal error in the template engine: %v", r)
		}
	}()
	return t.tmpl.RenderValues(data)
}

// renderData builds the template variables.
func (t *Template) renderData(msgs []Message, opts RenderOptions, caps Caps) (map[string]jinja.Value, error) {
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	list := make([]jinja.Value, 0, len(msgs))
	for i, m := range msgs {
		v, err := t.messageValue(m, caps)
		if err != nil {
			return nil, fmt.Errorf("chat: message %d: %w", i, err)
		}
		list = append(list, v)
	}
	data := map[string]jinja.Value{
		"messages":              jinja.NewList(list),
		"bos_token":             jinja.NewString(opts.BOS),
		"eos_token":             jinja.NewString(opts.EOS),
		"add_generation_prompt": jinja.NewBool(opts.AddGenerationPrompt),
		"date_string":           jinja.NewString(strftime(now, "%d %b %Y")),
		"tools_in_user_message": jinja.NewBool(false),
		"strftime_now": jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
			if len(args) == 0 || !args[0].IsString() {
				return jinja.Undefined(), fmt.Errorf("strftime_now: want a format string")
			}
			return jinja.NewString(strftime(now, args[0].AsString())), nil
		}),
		tojsonName: jinja.NewCallable(tojsonName, tojsonFilter),
	}
	var tools jinja.Value
	if len(opts.Tools) > 0 {
		items := make([]jinja.Value, 0, len(opts.Tools))
		for i, tool := range opts.Tools {
			v, err := toolValue(tool)
			if err != nil {
				return nil, fmt.Errorf("chat: tool %d (%s): %w", i, tool.Name, err)
			}
			items = append(items, v)
		}
		tools = jinja.NewList(items)
		data["tools"] = tools
	}
	if t.family == FamilyFirefunctionV2 {
		// Firefunction v2 reads the tools as one JSON string and a date
		// (the values llama.cpp gives it).
		functions := ""
		if len(opts.Tools) > 0 {
			var b strings.Builder
			if err := writeJSON(&b, tools, &jsonOptions{hasIndent: true, indent: "  ", itemSep: ",", keySep: ": "}, 0); err != nil {
				return nil, fmt.Errorf("chat: tools: %w", err)
			}
			functions = b.String()
		}
		data["functions"] = jinja.NewString(functions)
		data["datetime"] = jinja.NewString(strftime(now.UTC(), "%b %d %Y %H:%M:%S GMT"))
	}
	for k, v := range opts.Extra {
		if raw, ok := v.(json.RawMessage); ok {
			pv, err := parseJSON(raw)
			if err != nil {
				return nil, fmt.Errorf("chat: extra variable %q: %w", k, err)
			}
			data[k] = pv
			continue
		}
		data[k] = jinja.FromGoValue(v)
	}
	return data, nil
}

// messageValue shapes one message as templates expect it: role, content,
// then the optional keys only when set (templates test "'tool_calls' in
// message" and "message.tool_calls is defined").
func (t *Template) messageValue(m Message, caps Caps) (jinja.Value, error) {
	d := jinja.NewDict()
	dict := d.AsDict()
	dict.Set("role", jinja.NewString(m.Role))
	if len(m.ToolCalls) > 0 && m.Content == "" && caps.NoneContent {
		dict.Set("content", jinja.None())
	} else {
		dict.Set("content", jinja.NewString(m.Content))
	}
	if m.ReasoningContent != "" {
		dict.Set("reasoning_content", jinja.NewString(m.ReasoningContent))
		if t.usesToolPlan {
			dict.Set("tool_plan", jinja.NewString(m.ReasoningContent))
		}
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]jinja.Value, 0, len(m.ToolCalls))
		for _, tc := range m.ToolCalls {
			args := jinja.NewString(tc.Arguments)
			if strings.TrimSpace(tc.Arguments) == "" {
				args = jinja.NewString("{}")
			}
			if caps.ObjectArguments {
				if v, err := parseJSON([]byte(args.AsString())); err == nil && v.IsDict() {
					args = v
				}
			}
			fn := jinja.NewDict()
			fn.AsDict().Set("name", jinja.NewString(tc.Name))
			fn.AsDict().Set("arguments", args)
			c := jinja.NewDict()
			c.AsDict().Set("id", jinja.NewString(tc.ID))
			c.AsDict().Set("type", jinja.NewString("function"))
			c.AsDict().Set("function", fn)
			calls = append(calls, c)
		}
		dict.Set("tool_calls", jinja.NewList(calls))
	}
	if m.ToolCallID != "" {
		dict.Set("tool_call_id", jinja.NewString(m.ToolCallID))
	}
	if m.Name != "" {
		dict.Set("name", jinja.NewString(m.Name))
	}
	return d, nil
}

// toolValue shapes a tool as {"type": "function", "function": {"name",
// "description", "parameters"}}. A tool without a schema gets an empty
// object schema, which every template can print.
func toolValue(tool Tool) (jinja.Value, error) {
	params := []byte(`{"type": "object", "properties": {}}`)
	if len(strings.TrimSpace(string(tool.Parameters))) > 0 {
		params = tool.Parameters
	}
	pv, err := parseJSON(params)
	if err != nil {
		return jinja.Undefined(), fmt.Errorf("parameters: %w", err)
	}
	fn := jinja.NewDict()
	fn.AsDict().Set("name", jinja.NewString(tool.Name))
	fn.AsDict().Set("description", jinja.NewString(tool.Description))
	fn.AsDict().Set("parameters", pv)
	d := jinja.NewDict()
	d.AsDict().Set("type", jinja.NewString("function"))
	d.AsDict().Set("function", fn)
	return d, nil
}

// Probe values: unlikely strings to look for in the output.
const (
	probeTool   = "kvserve_probe_tool"
	probeArgKey = "kvserve_probe_arg"
	probeArgs   = `{"` + probeArgKey + `": 1}`
	probeSystem = "kvserve probe system"
	probeCallID = "call12345" // 9 characters: Mistral's templates insist
)

// probe learns the template's capabilities by rendering small conversations
// and looking for the probe strings in the output. A render that fails
// counts as "cannot".
func (t *Template) probe() Caps {
	var c Caps
	render := func(msgs []Message, tools []Tool, caps Caps) string {
		data, err := t.renderData(msgs, RenderOptions{Tools: tools, BOS: "", EOS: "", Now: time.Unix(0, 0).UTC()}, caps)
		if err != nil {
			return ""
		}
		out, err := t.run(data)
		if err != nil {
			return ""
		}
		return out
	}
	c.SystemRole = strings.Contains(render([]Message{
		{Role: "system", Content: probeSystem},
		{Role: "user", Content: "hi"},
	}, nil, c), probeSystem)
	tool := Tool{Name: probeTool, Description: "probe", Parameters: json.RawMessage(`{"type": "object", "properties": {"` + probeArgKey + `": {"type": "integer", "description": "probe"}}, "required": []}`)}
	c.Tools = strings.Contains(render([]Message{{Role: "user", Content: "hi"}}, []Tool{tool}, c), probeTool)

	conv := []Message{
		{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: probeCallID, Name: probeTool, Arguments: probeArgs}}},
		{Role: "tool", Content: "probe result", ToolCallID: probeCallID, Name: probeTool},
	}
	for _, none := range []bool{false, true} {
		asText := render(conv, []Tool{tool}, Caps{NoneContent: none})
		asObject := render(conv, []Tool{tool}, Caps{NoneContent: none, ObjectArguments: true})
		textOK := strings.Contains(asText, probeArgs)
		objectOK := strings.Contains(asObject, `"`+probeArgKey+`": 1`)
		if textOK || objectOK {
			c.ToolCalls = true
			c.NoneContent = none
			c.ObjectArguments = !textOK
			break
		}
	}
	return c
}
