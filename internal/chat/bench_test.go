package chat

import (
	"testing"
)

// BenchmarkRender renders the tool-call conversation of the golden cases
// with tool definitions, the per-request cost of building a prompt.
func BenchmarkRender(b *testing.B) {
	spec := loadSpec(b)
	var tools []Tool
	for _, tl := range spec.Tools {
		tools = append(tools, Tool{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
	}
	var msgs []Message
	for _, c := range spec.Cases {
		if c.Name == "tool_call" {
			msgs = c.Messages
		}
	}
	for _, stem := range []string{"Qwen-Qwen2.5-7B-Instruct", "meta-llama-Llama-3.1-8B-Instruct", "meetkai-functionary-medium-v3.2"} {
		b.Run(stem, func(b *testing.B) {
			tmpl := parseShared(b, stem)
			opts := RenderOptions{Tools: tools, AddGenerationPrompt: true, Now: spec.Now}
			for b.Loop() {
				if _, err := tmpl.Render(msgs, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkParse(b *testing.B) {
	tmpl := parseShared(b, "meetkai-functionary-medium-v3.2")
	for b.Loop() {
		if _, err := Parse(tmpl.Source()); err != nil {
			b.Fatal(err)
		}
	}
}
