package chat

import (
	"fmt"
	"strings"

	"github.com/kvserve/kvserve/internal/chat/pyjson"
)

// Templates without tool support (SmolLM2's ChatML, Gemma, Phi-3, many
// fine-tunes) would silently drop a request's tools: the model would never
// learn they exist. Render then describes the tools in the system prompt in
// the Hermes format, which the output parser reads for these families (see
// package outparse), and writes earlier tool calls and results into the
// conversation as text in the same format — what llama.cpp and vLLM do for
// such models too.

// toolFallback rewrites msgs and opts for a template that cannot render
// tools or tool calls. It returns them unchanged when the template can.
func (t *Template) toolFallback(msgs []Message, opts RenderOptions) ([]Message, RenderOptions, error) {
	needTools := len(opts.Tools) > 0 && !t.caps.Tools
	needCalls := !t.caps.ToolCalls && hasToolTurns(msgs)
	if !needTools && !needCalls {
		return msgs, opts, nil
	}
	out := make([]Message, 0, len(msgs)+1)
	if needTools {
		desc, err := toolSystemText(opts.Tools)
		if err != nil {
			return nil, opts, err
		}
		opts.Tools = nil
		switch {
		case len(msgs) > 0 && msgs[0].Role == "system":
			m := msgs[0]
			m.Content = strings.TrimRight(m.Content, "\n") + "\n\n" + desc
			out = append(out, m)
			msgs = msgs[1:]
		case t.caps.SystemRole:
			out = append(out, Message{Role: "system", Content: desc})
		case len(msgs) > 0 && msgs[0].Role == "user":
			m := msgs[0]
			m.Content = desc + "\n\n" + m.Content
			out = append(out, m)
			msgs = msgs[1:]
		}
	}
	for _, m := range msgs {
		if needCalls {
			switch {
			case m.Role == "assistant" && len(m.ToolCalls) > 0:
				var b strings.Builder
				b.WriteString(m.Content)
				for _, c := range m.ToolCalls {
					if b.Len() > 0 {
						b.WriteString("\n")
					}
					args := strings.TrimSpace(c.Arguments)
					if args == "" {
						args = "{}"
					}
					fmt.Fprintf(&b, "<tool_call>\n{\"name\": %s, \"arguments\": %s}\n</tool_call>", quoteJSON(c.Name), args)
				}
				m.Content, m.ToolCalls = b.String(), nil
			case m.Role == "tool":
				m = Message{Role: "user", Content: "<tool_response>\n" + m.Content + "\n</tool_response>"}
			}
		}
		out = append(out, m)
	}
	return out, opts, nil
}

func hasToolTurns(msgs []Message) bool {
	for _, m := range msgs {
		if m.Role == "tool" || len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// toolSystemText describes tools and the call format, one JSON signature
// per line, keeping each schema's key order.
func toolSystemText(tools []Tool) (string, error) {
	var b strings.Builder
	b.WriteString("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n")
	b.WriteString("You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
	for i, tool := range tools {
		v, err := toolValue(tool)
		if err != nil {
			return "", fmt.Errorf("chat: tool %d (%s): %w", i, tool.Name, err)
		}
		b.WriteString("\n")
		if err := writeJSON(&b, v, &jsonOptions{itemSep: ", ", keySep: ": "}, 0); err != nil {
			return "", fmt.Errorf("chat: tool %d (%s): %w", i, tool.Name, err)
		}
	}
	b.WriteString("\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n")
	b.WriteString("<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>")
	return b.String(), nil
}

func quoteJSON(s string) string {
	var b strings.Builder
	pyjson.WriteString(&b, s, false)
	return b.String()
}
