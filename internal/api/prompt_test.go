package api_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/engine"
)

// segText decodes each segment of p.
func segText(m *api.Model, p *api.Prompt) []string {
	var out []string
	for _, s := range p.Segments {
		out = append(out, s.Retention.String()+":"+m.Tokenizer.Decode(p.Tokens[s.Start:s.End]))
	}
	return out
}

// checkCover checks the segments tile the prompt.
func checkCover(t *testing.T, p *api.Prompt) {
	t.Helper()
	at := 0
	for _, s := range p.Segments {
		if s.Start != at || s.End <= s.Start {
			t.Fatalf("segments %+v do not tile %d tokens", p.Segments, len(p.Tokens))
		}
		at = s.End
	}
	if at != len(p.Tokens) {
		t.Fatalf("segments %+v end at %d of %d tokens", p.Segments, at, len(p.Tokens))
	}
}

func TestSegments(t *testing.T) {
	env := apitest.New(t, apitest.Options{})
	m := env.Model
	conv := []chat.Message{
		{Role: "system", Content: "Rules."},
		{Role: "user", Content: "One"},
		{Role: "assistant", Content: "Two"},
		{Role: "user", Content: "Three"},
	}
	tools := []chat.Tool{{Name: "lookup", Parameters: []byte(`{"type":"object"}`)}}
	tests := []struct {
		name string
		req  api.Request
		want []engine.Retention
		// ends[i] is a suffix the decoded text of segment i must have.
		ends []string
	}{
		{"no system", api.Request{Messages: conv[1:]}, []engine.Retention{engine.RetentionSession}, nil},
		{"system", api.Request{Messages: conv},
			[]engine.Retention{engine.RetentionPersistent, engine.RetentionSession}, []string{"Rules.<|im_end|>\n"}},
		{"tools", api.Request{Messages: conv[1:], Tools: tools},
			[]engine.Retention{engine.RetentionPersistent, engine.RetentionSession}, []string{"</tool_call><|im_end|>\n"}},
		{"hint", api.Request{Messages: conv, Hints: engine.Hints{Retention: engine.RetentionEphemeral}},
			[]engine.Retention{engine.RetentionPersistent, engine.RetentionEphemeral}, nil},
		{"long breakpoint", api.Request{Messages: conv, Breakpoints: []api.Breakpoint{{Message: 2, TTL: time.Hour}}},
			[]engine.Retention{engine.RetentionPersistent, engine.RetentionSession}, []string{"Two<|im_end|>\n"}},
		{"short breakpoint", api.Request{Messages: conv, Breakpoints: []api.Breakpoint{{Message: 2, TTL: 5 * time.Minute}}},
			[]engine.Retention{engine.RetentionPersistent, engine.RetentionSession}, []string{"Rules.<|im_end|>\n"}},
		{"tools breakpoint", api.Request{Messages: conv[1:], Tools: tools, Breakpoints: []api.Breakpoint{{Message: -1, TTL: time.Hour}}},
			[]engine.Retention{engine.RetentionPersistent, engine.RetentionSession}, []string{"</tool_call><|im_end|>\n"}},
		{"raw prompt", api.Request{Prompt: "Once upon a time"}, []engine.Retention{engine.RetentionSession}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := m.BuildPrompt(&tc.req)
			if err != nil {
				t.Fatal(err)
			}
			checkCover(t, p)
			if len(p.Segments) != len(tc.want) {
				t.Fatalf("segments %q", segText(m, p))
			}
			for i, s := range p.Segments {
				if s.Retention != tc.want[i] {
					t.Fatalf("segment %d is %v, want %v: %q", i, s.Retention, tc.want[i], segText(m, p))
				}
				if i < len(tc.ends) && !strings.HasSuffix(m.Tokenizer.Decode(p.Tokens[s.Start:s.End]), tc.ends[i]) {
					t.Fatalf("segment %d does not end with %q: %q", i, tc.ends[i], segText(m, p))
				}
			}
		})
	}
}

// TestReasoningSegment uses Qwen 3's template, which keeps the reasoning of
// the turns after the last user message: that span is ephemeral.
func TestReasoningSegment(t *testing.T) {
	env := apitest.New(t, apitest.Options{})
	_, file, _, _ := runtime.Caller(0)
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "synth", "templates", "qwen3.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := chat.Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	m := *env.Model
	m.Template = tmpl
	reasoning := "I should look this up with the tool."
	req := api.Request{
		Messages: []chat.Message{
			{Role: "system", Content: "Rules."},
			{Role: "user", Content: "Weather?"},
			{Role: "assistant", ReasoningContent: reasoning, ToolCalls: []chat.ToolCall{{ID: "c1", Name: "weather", Arguments: `{"city":"Paris"}`}}},
			{Role: "tool", Content: "sunny", ToolCallID: "c1"},
		},
		Tools: []chat.Tool{{Name: "weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}}}`)}},
	}
	p, err := m.BuildPrompt(&req)
	if err != nil {
		t.Fatal(err)
	}
	checkCover(t, p)
	segs := segText(&m, p)
	var eph []string
	for i, s := range p.Segments {
		if s.Retention == engine.RetentionEphemeral {
			eph = append(eph, segs[i])
		}
	}
	if len(eph) != 1 || !strings.Contains(eph[0], "tool.") || p.Segments[0].Retention != engine.RetentionPersistent {
		t.Fatalf("segments %q", segs)
	}
	if strings.Contains(eph[0], "Weather") || strings.Contains(eph[0], "sunny") {
		t.Fatalf("ephemeral segment covers more than the reasoning: %q", eph[0])
	}
}
