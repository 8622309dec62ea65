package anthropic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/testshared"
)

func TestMessageMatchesEngine(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	msgs := []chat.Message{{Role: "system", Content: "Be brief.\nReally."}, {Role: "user", Content: "Say something about caches."}}
	prompt := env.ChatPrompt(t, msgs, nil)
	ids := env.Greedy(t, prompt, 24)
	want := env.Tokenizer.Decode(ids)

	// The system prompt as two text blocks: joined with "\n".
	m := postMessage(t, env, map[string]any{
		"model": apitest.ModelName, "max_tokens": 24, "temperature": 0,
		"system":   []map[string]any{{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Really."}},
		"messages": userMsg(msgs[1].Content),
		"metadata": map[string]any{"user_id": "user-1"},
	})
	if got := env.Recorder.Last(t).Prompt; !equalTokens(got, prompt) {
		t.Fatalf("prompt %q, want %q", env.Tokenizer.Decode(got), env.Tokenizer.Decode(prompt))
	}
	if want == "" {
		if len(m.Content) != 0 {
			t.Fatalf("content %+v for an empty answer", m.Content)
		}
	} else if len(m.Content) != 1 || m.Content[0].Type != "text" || *m.Content[0].Text != want {
		t.Fatalf("content %+v, want one text block %q", m.Content, want)
	}
	switch *m.StopReason {
	case "max_tokens":
		if m.Usage.OutputTokens != 24 {
			t.Fatalf("max_tokens after %d tokens", m.Usage.OutputTokens)
		}
	case "end_turn":
		if m.Usage.OutputTokens != len(ids)+1 {
			t.Fatalf("end_turn after %d tokens, the engine made %d and an end token", m.Usage.OutputTokens, len(ids))
		}
	default:
		t.Fatalf("stop_reason %q", *m.StopReason)
	}
	if m.StopSequence != nil {
		t.Fatalf("stop_sequence %q without stop sequences", *m.StopSequence)
	}
	u := m.Usage
	if u.InputTokens != len(prompt) || u.CacheReadInputTokens != 0 || u.CacheCreationInputTokens != 0 {
		t.Fatalf("usage %+v for a %d-token prompt without breakpoints", u, len(prompt))
	}
	if m.Kvserve == nil || m.Kvserve.OverheadMS <= 0 || m.Kvserve.TTFTMS <= 0 {
		t.Fatalf("kvserve timings %+v", m.Kvserve)
	}
	env.WaitIdle(t)
}

func equalTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestStreamEqualsNonStreamed(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{"model": apitest.ModelName, "messages": userMsg("Stream me a story."), "temperature": 0, "max_tokens": 40}
	full := postMessage(t, env, body)

	body["stream"] = true
	status, data, hdr := post(t, env.URL("/v1/messages"), body)
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") || !strings.HasPrefix(hdr.Get("Request-Id"), "req_") {
		t.Fatalf("status %d, headers %v: %s", status, hdr, data)
	}
	s := readStream(t, data)
	names := make([]string, len(s.events))
	for i, e := range s.events {
		names[i] = e.name
	}
	// The exact sequence for one text block.
	want := []string{"message_start", "content_block_start", "ping"}
	for range s.deltas {
		want = append(want, "content_block_delta")
	}
	want = append(want, "content_block_stop", "message_delta", "message_stop")
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("events %v", names)
	}
	// Outputs queued while the handler was busy arrive as one delta, so on a
	// loaded machine even 40 tokens may come as a single delta: count ≥ 1.
	if s.deltas < 1 {
		t.Fatalf("%d deltas for %d tokens", s.deltas, full.Usage.OutputTokens)
	}
	compareMessages(t, full, s.msg)
	env.WaitIdle(t)
}

// compareMessages checks that a streamed message equals the non-streamed
// one (ids aside).
func compareMessages(t *testing.T, full, got message) {
	t.Helper()
	if len(got.Content) != len(full.Content) {
		t.Fatalf("streamed %d blocks, non-streamed %d", len(got.Content), len(full.Content))
	}
	for i, b := range got.Content {
		f := full.Content[i]
		if b.Type != f.Type || b.Name != f.Name {
			t.Fatalf("block %d: streamed %s %q, non-streamed %s %q", i, b.Type, b.Name, f.Type, f.Name)
		}
		switch b.Type {
		case "text":
			if *b.Text != *f.Text {
				t.Fatalf("block %d: streamed text %q, non-streamed %q", i, *b.Text, *f.Text)
			}
		case "thinking":
			if *b.Thinking != *f.Thinking || b.Signature == nil || *b.Signature != *f.Signature {
				t.Fatalf("block %d: streamed thinking %q (%v), non-streamed %q (%v)", i, *b.Thinking, b.Signature, *f.Thinking, *f.Signature)
			}
		case "tool_use":
			var x, y any
			if json.Unmarshal(b.Input, &x) != nil || json.Unmarshal(f.Input, &y) != nil || !bytes.Equal(mustJSON(x), mustJSON(y)) {
				t.Fatalf("block %d: streamed input %s, non-streamed %s", i, b.Input, f.Input)
			}
		}
	}
	if *got.StopReason != *full.StopReason || (got.StopSequence == nil) != (full.StopSequence == nil) {
		t.Fatalf("streamed stop %v %v, non-streamed %v %v", *got.StopReason, got.StopSequence, *full.StopReason, full.StopSequence)
	}
	if got.Usage.OutputTokens != full.Usage.OutputTokens || inputSum(got.Usage) != inputSum(full.Usage) {
		t.Fatalf("streamed usage %+v, non-streamed %+v", got.Usage, full.Usage)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func inputSum(u usageJSON) int {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

func TestStopSequence(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	msgs := []chat.Message{{Role: "user", Content: "Tell me where to stop."}}
	text := env.Tokenizer.Decode(env.Greedy(t, env.ChatPrompt(t, msgs, nil), 30))
	if len(text) < 12 {
		t.Skipf("greedy text %q too short", text)
	}
	stop := text[8:11]
	want := text[:strings.Index(text, stop)]
	body := map[string]any{"model": apitest.ModelName, "messages": userMsg(msgs[0].Content), "temperature": 0, "max_tokens": 30,
		"stop_sequences": []string{"\x00never", stop}}
	full := postMessage(t, env, body)
	if full.text() != want || *full.StopReason != "stop_sequence" || full.StopSequence == nil || *full.StopSequence != stop {
		t.Fatalf("stop %q: text %q, stop_reason %q, stop_sequence %v; want %q", stop, full.text(), *full.StopReason, full.StopSequence, want)
	}
	body["stream"] = true
	_, data, _ := post(t, env.URL("/v1/messages"), body)
	s := readStream(t, data)
	compareMessages(t, full, s.msg)
	if *s.msg.StopSequence != stop {
		t.Fatalf("streamed stop_sequence %q", *s.msg.StopSequence)
	}
	env.WaitIdle(t)
}

// TestThinking serves a DeepSeek R1 distill template, whose generation
// prompt opens <think>: the random model never closes it, so its output
// is one thinking block. Thinking blocks are accepted back in history.
func TestThinking(t *testing.T) {
	src, err := os.ReadFile(testshared.Path(t, "testdata", "chat-templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, apitest.Options{Template: string(src)})
	body := map[string]any{"model": apitest.ModelName, "max_tokens": 12, "temperature": 0,
		"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024},
		"messages": []map[string]any{
			{"role": "user", "content": "Think first."},
			{"role": "assistant", "content": []map[string]any{
				{"type": "thinking", "thinking": "Earlier thoughts.", "signature": "c2lnbmF0dXJl"},
				{"type": "redacted_thinking", "data": "b3BhcXVl"},
				{"type": "text", "text": "Done."},
			}},
			{"role": "user", "content": "Again."},
		}}
	full := postMessage(t, env, body)
	if len(full.Content) != 1 || full.Content[0].Type != "thinking" || *full.Content[0].Thinking == "" {
		t.Fatalf("content %+v, want one thinking block", full.Content)
	}
	if sig := full.Content[0].Signature; sig == nil || len(*sig) < 40 {
		t.Fatalf("thinking block signature %v", sig)
	}
	prompt := env.Tokenizer.Decode(env.Recorder.Last(t).Prompt)
	if !strings.HasSuffix(prompt, "<think>\n") || !strings.Contains(prompt, "Done.") {
		t.Fatalf("prompt %q", prompt)
	}

	body["stream"] = true
	_, data, _ := post(t, env.URL("/v1/messages"), body)
	s := readStream(t, data)
	compareMessages(t, full, s.msg)
	last := s.events[len(s.events)-4] // signature_delta, content_block_stop, message_delta, message_stop
	if !strings.Contains(last.data, `"signature_delta"`) {
		t.Fatalf("the thinking block does not end with its signature: %s", last.data)
	}
	env.WaitIdle(t)
}

func TestCountTokens(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{
		"model":    apitest.ModelName,
		"system":   "You count.",
		"tools":    []any{weatherTool},
		"messages": userMsg("How many tokens is this?"),
	}
	status, data, hdr := post(t, env.URL("/v1/messages/count_tokens"), body)
	if status != 200 || !strings.HasPrefix(hdr.Get("Request-Id"), "req_") {
		t.Fatalf("status %d: %s", status, data)
	}
	var count struct {
		InputTokens *int `json:"input_tokens"`
	}
	if err := json.Unmarshal(data, &count); err != nil || count.InputTokens == nil {
		t.Fatalf("count_tokens %s: %v", data, err)
	}
	var raw map[string]any
	_ = json.Unmarshal(data, &raw)
	if len(raw) != 1 {
		t.Fatalf("count_tokens answers more than input_tokens: %s", data)
	}
	if len(env.Recorder.Requests()) != 0 {
		t.Fatal("count_tokens ran the model")
	}
	body["max_tokens"] = 1
	m := postMessage(t, env, body)
	if n := inputSum(m.Usage); n != *count.InputTokens || n != len(env.Recorder.Last(t).Prompt) {
		t.Fatalf("count_tokens %d, the message's prompt %d tokens (usage %+v)", *count.InputTokens, len(env.Recorder.Last(t).Prompt), m.Usage)
	}

	// One word of a megabyte: more than the context at the tokenizer's
	// longest token per token. A message is refused without tokenizing
	// it; counting still counts it exactly.
	body["messages"] = userMsg(strings.Repeat("a", 1<<20))
	status, data, _ = post(t, env.URL("/v1/messages"), body)
	if status != 413 || !strings.Contains(string(data), "the prompt is at least") {
		t.Fatalf("a prompt far beyond the context: status %d: %s", status, data)
	}
	delete(body, "max_tokens")
	status, data, _ = post(t, env.URL("/v1/messages/count_tokens"), body)
	count.InputTokens = nil
	if err := json.Unmarshal(data, &count); status != 200 || err != nil || count.InputTokens == nil || *count.InputTokens <= apitest.ContextLength {
		t.Fatalf("count_tokens of a prompt beyond the context: status %d: %s", status, data)
	}
	env.WaitIdle(t)
}

func TestClientDisconnectFreesBlocks(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body, _ := json.Marshal(map[string]any{"model": apitest.ModelName, "messages": userMsg("Never stop talking."),
		"max_tokens": 3000, "ignore_eos": true, "stream": true})
	req, _ := http.NewRequest("POST", env.URL("/v1/messages"), bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for i := 0; i < 12; i++ { // a few events: generation is under way
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if st := env.Engine.Now(); st.KV.Active == 0 {
		t.Fatalf("no blocks active while streaming: %+v", st)
	}
	resp.Body.Close()
	env.WaitIdle(t)
}

func TestKvserveExtension(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	postMessage(t, env, map[string]any{
		"model": apitest.ModelName, "max_tokens": 1,
		"system":   []map[string]any{{"type": "text", "text": "Rules.", "cache_control": map[string]any{"type": "ephemeral", "ttl": "1h"}}},
		"messages": userMsg("Hi"),
		"kvserve":  map[string]any{"session_id": "s-1", "ttl": "10m", "priority": 3, "expected_output_tokens": 50},
	})
	r := env.Recorder.Last(t)
	// The extension's TTL wins over the breakpoints'.
	if r.Hints.SessionID != "s-1" || r.Hints.TTL != 10*time.Minute || r.Priority != 3 || r.Hints.ExpectedOutputTokens != 50 {
		t.Fatalf("hints not passed: %+v priority %d", r.Hints, r.Priority)
	}
	env.WaitIdle(t)
}

// TestModelAlias: with aliases set, an agent's own model names reach the
// served model (answered under its real name); other names are still 404.
func TestModelAlias(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	m := *env.Model
	m.Aliases = []string{"claude-*", "my-model"}
	env.Server.SetModel(&m)
	for _, name := range []string{"claude-sonnet-4-5-20250929", "claude-3-5-haiku-latest", "my-model"} {
		resp := postMessage(t, env, map[string]any{"model": name, "max_tokens": 2, "messages": userMsg("hi")})
		if resp.Model != apitest.ModelName {
			t.Fatalf("%s: answered as %q, want the served model %q", name, resp.Model, apitest.ModelName)
		}
	}
	for _, name := range []string{"gpt-4o", "my-model-2", "xclaude-3"} {
		status, data, _ := post(t, env.URL("/v1/messages"), map[string]any{"model": name, "max_tokens": 2, "messages": userMsg("hi")})
		if status != 404 {
			t.Fatalf("%s: status %d (%s), want 404", name, status, data)
		}
	}
	env.WaitIdle(t)
}
