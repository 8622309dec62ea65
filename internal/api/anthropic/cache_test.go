package anthropic

import (
	"os"
	"slices"

	"github.com/kvserve/kvserve/internal/api"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/testshared"
)

// prefixTokens returns how many leading tokens of prompt the rendering of
// msgs (with tools, no generation prompt) tokenizes to: the independent
// reference for a breakpoint's end, by re-tokenizing the prefix text.
func prefixTokens(t *testing.T, env *apitest.Env, msgs []chat.Message, tools []chat.Tool, prompt []int32) int {
	t.Helper()
	tok := env.Tokenizer
	text, err := env.Template.Render(msgs, chat.RenderOptions{Tools: tools, BOS: tok.TokenText(tok.BOS()), EOS: tok.TokenText(tok.EOS())})
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode(text, false, true)
	if tok.AddBOS() && (len(ids) == 0 || ids[0] != tok.BOS()) {
		ids = append([]int32{tok.BOS()}, ids...)
	}
	n := 0
	for n < len(ids) && n < len(prompt) && ids[n] == prompt[n] {
		n++
	}
	if n < len(ids)-1 {
		t.Fatalf("the prefix's %d tokens share only %d with the prompt", len(ids), n)
	}
	return n
}

// TestCacheControlUsage sends two requests sharing a long system prompt
// marked with cache_control: the first creates the cache up to the
// breakpoint, the second reads the shared full blocks.
func TestCacheControlUsage(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	bs := env.Engine.Config().BlockSize
	system := strings.Repeat("You are a careful assistant who keeps answers short. ", 40) // ~2000 tokens
	ask := func(user string, stream bool) message {
		body := map[string]any{
			"model": apitest.ModelName, "max_tokens": 2, "temperature": 0, "stream": stream,
			"system":   []map[string]any{{"type": "text", "text": system, "cache_control": map[string]any{"type": "ephemeral"}}},
			"messages": userMsg(user),
		}
		if !stream {
			return postMessage(t, env, body)
		}
		_, data, _ := post(t, env.URL("/v1/messages"), body)
		return readStream(t, data).msg
	}
	sys := []chat.Message{{Role: "system", Content: system}}
	a := env.ChatPrompt(t, append(sys, chat.Message{Role: "user", Content: "First question?"}), nil)
	end := prefixTokens(t, env, sys, nil, a)
	if end < 1000 {
		t.Fatalf("the system prompt is only %d tokens", end)
	}

	first := ask("First question?", false)
	u := first.Usage
	if u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens != end || u.InputTokens != len(a)-end ||
		u.CacheCreation == nil || u.CacheCreation.Ephemeral5m != end || u.CacheCreation.Ephemeral1h != 0 {
		t.Fatalf("first request: usage %+v, want %d tokens created of %d", u, end, len(a))
	}
	if r := env.Recorder.Last(t); r.Hints.TTL != 5*time.Minute {
		t.Fatalf("TTL hint %v", r.Hints.TTL)
	}

	// Later requests read the full blocks they share with any earlier one.
	seen := [][]int32{a}
	for i, user := range []string{"Another one?", "Yet another?"} {
		b := env.ChatPrompt(t, append(sys, chat.Message{Role: "user", Content: user}), nil)
		common := 0
		for _, p := range seen {
			n := 0
			for n < len(p) && n < len(b) && p[n] == b[n] {
				n++
			}
			common = max(common, n)
		}
		seen = append(seen, b)
		read := common / bs * bs
		stream := i == 1
		u = ask(user, stream).Usage
		if u.CacheReadInputTokens != read || u.CacheCreationInputTokens != max(0, end-read) || inputSum(u) != len(b) {
			t.Fatalf("request %q (streamed %v): usage %+v, want %d read (the %d shared full blocks), %d created, %d in all",
				user, stream, u, read, common/bs, max(0, end-read), len(b))
		}
		if read < end-bs {
			t.Fatalf("only %d of the system prompt's %d tokens read", read, end)
		}
	}
	env.WaitIdle(t)
}

// TestBreakpointsMapToSegments puts 1h and 5m breakpoints on tools and
// history and checks the usage split, the TTL hint and that the persistent
// segment the core makes of the 1h breakpoint ends where usage says.
func TestBreakpointsMapToSegments(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	tool := map[string]any{"name": "lookup", "input_schema": map[string]any{"type": "object"},
		"cache_control": map[string]any{"type": "ephemeral", "ttl": "1h"}}
	m := postMessage(t, env, map[string]any{
		"model": apitest.ModelName, "max_tokens": 1,
		"tools": []any{tool},
		"messages": []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Question one",
				"cache_control": map[string]any{"type": "ephemeral", "ttl": "1h"}}}},
			map[string]any{"role": "assistant", "content": "Answer one"},
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "Question two",
				"cache_control": map[string]any{"type": "ephemeral", "ttl": "5m"}}}},
		},
	})
	msgs := []chat.Message{{Role: "user", Content: "Question one"}, {Role: "assistant", Content: "Answer one"}, {Role: "user", Content: "Question two"}}
	tools := []chat.Tool{{Name: "lookup", Parameters: []byte(`{"type":"object"}`)}}
	r := env.Recorder.Last(t)
	end1h := prefixTokens(t, env, msgs[:1], tools, r.Prompt)
	end := prefixTokens(t, env, msgs, tools, r.Prompt)
	u := m.Usage
	if u.CacheCreationInputTokens != end || u.CacheCreation.Ephemeral1h != end1h || u.CacheCreation.Ephemeral5m != end-end1h ||
		u.InputTokens != len(r.Prompt)-end {
		t.Fatalf("usage %+v, want %d created (%d for 1h) of %d", u, end, end1h, len(r.Prompt))
	}
	if r.Hints.TTL != time.Hour {
		t.Fatalf("TTL hint %v", r.Hints.TTL)
	}
	if len(r.Segments) != 2 || r.Segments[0].Retention != engine.RetentionPersistent || r.Segments[0].End != end1h ||
		r.Segments[1].Retention != engine.RetentionSession {
		t.Fatalf("segments %+v, want persistent through token %d", r.Segments, end1h)
	}
	env.WaitIdle(t)
}

// TestTokensThrough checks the breakpoint positions against re-tokenizing
// each prefix of a conversation, for two template families.
func TestTokensThrough(t *testing.T) {
	for _, tmpl := range []string{"", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja"} {
		t.Run(tmpl, func(t *testing.T) {
			o := apitest.Options{}
			if tmpl != "" {
				src, err := os.ReadFile(testshared.Path(t, "testdata", "chat-templates", tmpl))
				if err != nil {
					t.Fatal(err)
				}
				o.Template = string(src)
			}
			env := newEnv(t, o)
			req := &api.Request{Model: apitest.ModelName, Messages: []chat.Message{
				{Role: "system", Content: "Rules: be kind."},
				{Role: "user", Content: "Hello there, how are you?"},
				{Role: "assistant", Content: "Fine, thanks. And you?"},
				{Role: "user", Content: "Tired. Caches!"},
			}}
			p, err := env.Model.BuildPrompt(req)
			if err != nil {
				t.Fatal(err)
			}
			prev := 0
			for msg := -1; msg < len(req.Messages); msg++ {
				prefix := req.Messages[:msg+1]
				if msg < 0 {
					prefix = req.Messages[:1]
				}
				want := prefixTokens(t, env, prefix, nil, p.Tokens)
				got := tokensThrough(env.Model, req, p, msg)
				if got != want || got < prev {
					t.Fatalf("through message %d: %d tokens, re-tokenizing says %d (previous %d)", msg, got, want, prev)
				}
				prev = got
			}
			if prev >= len(p.Tokens) || prev < len(p.Tokens)-64 {
				t.Fatalf("the whole conversation ends at token %d of %d", prev, len(p.Tokens))
			}

			// The tail walk after the generation prompt agrees, with
			// thinking on, off and by default, and where the conversation
			// ends in a tool turn (no fixed generation prompt in R1).
			var f markFinder
			on, off := true, false
			for _, reasoning := range []*bool{nil, &on, &off} {
				for _, tail := range [][]chat.Message{nil, {
					{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "f", Arguments: `{"a":1}`}}},
					{Role: "tool", ToolCallID: "call_1", Content: "42"},
				}} {
					r := *req
					r.Messages = append(slices.Clip(req.Messages), tail...)
					r.Reasoning = reasoning
					r.Tools = []chat.Tool{{Name: "f", Parameters: []byte(`{"type":"object"}`)}}
					r.Breakpoints = []api.Breakpoint{{Message: len(r.Messages) - 1, TTL: 5 * time.Minute}}
					p, err := env.Model.BuildPrompt(&r)
					if err != nil {
						t.Fatal(err)
					}
					slow := tokensThrough(env.Model, &r, p, len(r.Messages)-1)
					if got := f.find(env.Model, &r, p); got.end != slow || got.end1h != 0 {
						t.Fatalf("reasoning %v, %d tail turns: marks %+v, the render says %d", reasoning, len(tail), got, slow)
					}
					// The tiny vocabulary spells ASCII generation prompts:
					// there the tail walk must be what answered.
					if suffix := f.suffix(env.Model, &r); len(tail) == 0 && !strings.Contains(tmpl, "DeepSeek") {
						if n, ok := tokensBeforeTail(env.Tokenizer, p.Tokens, p.Text, len(p.Text)-len(suffix)); suffix == "" || !ok || n != slow {
							t.Fatalf("tail walk after %q: %d, %v", suffix, n, ok)
						}
					}
				}
			}
		})
	}
}
