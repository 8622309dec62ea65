package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// kvMetadata serves synthetic metadata to the tokenizer loader.
type kvMetadata map[string]gguf.Value

func (m kvMetadata) Get(k string) (gguf.Value, bool) { v, ok := m[k]; return v, ok }

// synthModel returns an api.Model with a synthetic shape's real tokenizer
// and chat template (no weights, no backend): enough to build prompts.
func synthModel(b testing.TB, shape string) *api.Model {
	s, err := synth.LookupShape(shape, "")
	if err != nil {
		b.Fatal(err)
	}
	sm, err := synth.New(s, synth.FileQ8_0)
	if err != nil {
		b.Fatal(err)
	}
	md := kvMetadata{}
	for _, kv := range sm.KVs {
		md[kv.Key] = kv.Value
	}
	tok, err := tokenizer.FromMetadata(md)
	if err != nil {
		b.Fatal(err)
	}
	tmpl, err := chat.Parse(tok.ChatTemplate())
	if err != nil {
		b.Fatal(err)
	}
	return &api.Model{ID: shape, Tokenizer: tok, Template: tmpl, ContextLength: s.Context}
}

// agentRequest is an agent turn: a long system prompt, tool definitions
// and a growing history.
func agentRequest(systemWords, turns int) *api.Request {
	words := strings.Fields("the agent reads the repository map and plans each change before editing files carefully with tests")
	var sys strings.Builder
	for i := 0; i < systemWords; i++ {
		sys.WriteString(words[i%len(words)])
		sys.WriteByte(' ')
	}
	req := &api.Request{Messages: []chat.Message{{Role: "system", Content: sys.String()}}}
	for i := 0; i < 8; i++ {
		req.Tools = append(req.Tools, chat.Tool{Name: fmt.Sprintf("tool_%d", i), Description: "Does step " + fmt.Sprint(i),
			Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string","description":"file path"},"line":{"type":"integer"}},"required":["path"]}`)})
	}
	for i := 0; i < turns; i++ {
		req.Messages = append(req.Messages,
			chat.Message{Role: "user", Content: fmt.Sprintf("Step %d: fix the failing test in package %d.", i, i)},
			chat.Message{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: "tool_1", Arguments: `{"path":"main.go","line":12}`}}},
			chat.Message{Role: "tool", ToolCallID: fmt.Sprintf("call_%d", i), Content: "ok: 12 lines changed"})
	}
	req.Messages = append(req.Messages, chat.Message{Role: "user", Content: "Continue."})
	return req
}

// BenchmarkBuildPrompt measures the per-request API work before the
// engine: rendering the template, tokenizing, and finding the segment
// boundaries (a second render of the system part), for a chat turn and for
// an agent turn with a ~10k-token system prompt, 8 tools and 10 turns.
func BenchmarkBuildPrompt(b *testing.B) {
	for _, shape := range []string{"smollm2-135m", "qwen2.5-0.5b"} {
		m := synthModel(b, shape)
		for _, tc := range []struct {
			name string
			req  *api.Request
		}{
			{"chat", &api.Request{Messages: []chat.Message{{Role: "system", Content: "You are helpful."}, {Role: "user", Content: "What is a KV cache?"}}}},
			{"agent", agentRequest(8000, 10)},
		} {
			b.Run(shape+"/"+tc.name, func(b *testing.B) {
				var n int
				for b.Loop() {
					p, err := m.BuildPrompt(tc.req)
					if err != nil {
						b.Fatal(err)
					}
					n = len(p.Tokens)
				}
				b.ReportMetric(float64(n), "tokens")
			})
		}
	}
}
