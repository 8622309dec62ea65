package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/testshared"
)

func TestParallelSamples(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{"model": apitest.ModelName, "messages": userMsg("Give me options."), "n": 3, "seed": 7, "temperature": 1.0, "max_tokens": 12}
	var a, b chatResp
	postOK(t, env.URL("/v1/chat/completions"), body, &a)
	postOK(t, env.URL("/v1/chat/completions"), body, &b)
	if len(a.Choices) != 3 {
		t.Fatalf("%d choices, want 3", len(a.Choices))
	}
	distinct := map[string]bool{}
	for i, ch := range a.Choices {
		if ch.Index != i {
			t.Fatalf("choice %d has index %d", i, ch.Index)
		}
		if *ch.Message.Content != *b.Choices[i].Message.Content {
			t.Fatalf("same seed, choice %d differs: %q vs %q", i, *ch.Message.Content, *b.Choices[i].Message.Content)
		}
		distinct[*ch.Message.Content] = true
	}
	if len(distinct) < 2 {
		t.Fatalf("3 samples at temperature 1 gave identical text: %q", *a.Choices[0].Message.Content)
	}
	if a.Usage.CompletionTokens < 3 || a.Usage.CompletionTokens > 36 {
		t.Fatalf("completion tokens %d for 3 samples of ≤ 12", a.Usage.CompletionTokens)
	}
	env.WaitIdle(t)
}

func TestLogprobs(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	var resp chatResp
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "messages": userMsg("Probabilities, please."), "temperature": 0, "max_tokens": 10,
		"logprobs": true, "top_logprobs": 3,
	}, &resp)
	ch := resp.Choices[0]
	if ch.Logprobs == nil || len(ch.Logprobs.Content) != resp.Usage.CompletionTokens {
		t.Fatalf("logprobs for %d tokens, %d generated", len(ch.Logprobs.Content), resp.Usage.CompletionTokens)
	}
	var text strings.Builder
	for i, lp := range ch.Logprobs.Content {
		if len(lp.TopLogprobs) != 3 {
			t.Fatalf("token %d: %d top logprobs", i, len(lp.TopLogprobs))
		}
		// Greedy: the chosen token is the most likely one.
		if lp.Token != lp.TopLogprobs[0].Token || math.Abs(lp.Logprob-lp.TopLogprobs[0].Logprob) > 1e-6 {
			t.Fatalf("token %d: chose %q (%v), top is %q (%v)", i, lp.Token, lp.Logprob, lp.TopLogprobs[0].Token, lp.TopLogprobs[0].Logprob)
		}
		if lp.Logprob > 0 || lp.TopLogprobs[1].Logprob > lp.TopLogprobs[0].Logprob {
			t.Fatalf("token %d: bad logprobs %+v", i, lp)
		}
		var raw []byte
		for _, b := range lp.Bytes {
			raw = append(raw, byte(b))
		}
		if string(raw) != lp.Token {
			t.Fatalf("token %d: bytes %v do not spell %q", i, lp.Bytes, lp.Token)
		}
		if ch.FinishReason != "stop" || i < len(ch.Logprobs.Content)-1 {
			text.WriteString(lp.Token)
		}
	}
	if got := *ch.Message.Content; text.String() != got {
		t.Fatalf("logprob tokens spell %q, content is %q", text.String(), got)
	}
}

// generated returns the greedy completion text of prompt ids.
func generated(t *testing.T, env *apitest.Env, prompt []int32, n int) ([]int32, string) {
	ids := env.Greedy(t, prompt, n)
	return ids, env.Tokenizer.Decode(ids)
}

func TestStopStringAcrossTokens(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	msgs := []chat.Message{{Role: "user", Content: "Tell me where to stop."}}
	ids, text := generated(t, env, env.ChatPrompt(t, msgs, nil), 30)
	// Pick a stop string that straddles a token boundary: the last two
	// bytes of one token's piece and the first byte of the next.
	pos, stop := -1, ""
	off := 0
	for i := 0; i+1 < len(ids); i++ {
		p := env.Tokenizer.Decode(ids[i : i+1])
		q := env.Tokenizer.Decode(ids[i+1 : i+2])
		off += len(p)
		if len(p) >= 2 && len(q) >= 1 && i > 2 {
			stop = p[len(p)-2:] + q[:1]
			pos = strings.Index(text, stop)
			if pos >= 0 && pos < off {
				break
			}
		}
	}
	if pos < 0 {
		t.Skipf("no suitable stop string in %q", text)
	}
	want := text[:pos]
	for _, stream := range []bool{false, true} {
		body := map[string]any{"model": apitest.ModelName, "messages": userMsg(msgs[0].Content), "temperature": 0, "max_tokens": 30, "stop": []string{"\x00never", stop}, "stream": stream}
		if !stream {
			var resp chatResp
			postOK(t, env.URL("/v1/chat/completions"), body, &resp)
			if got := *resp.Choices[0].Message.Content; got != want || resp.Choices[0].FinishReason != "stop" {
				t.Fatalf("stop %q: content %q (%s), want %q", stop, got, resp.Choices[0].FinishReason, want)
			}
			continue
		}
		_, data, _ := post(t, env.URL("/v1/chat/completions"), body)
		_, events := sseEvents(t, data)
		var sb strings.Builder
		for _, ev := range events[:len(events)-1] {
			var chunk struct {
				Choices []struct {
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			_ = json.Unmarshal([]byte(ev), &chunk)
			for _, c := range chunk.Choices {
				sb.WriteString(c.Delta.Content)
			}
		}
		if sb.String() != want {
			t.Fatalf("streamed with stop %q: %q, want %q", stop, sb.String(), want)
		}
	}
	env.WaitIdle(t)
}

func TestCachedTokensAndTTFT(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	system := strings.Repeat("You are a careful assistant who keeps answers short. ", 40) // ~2000 tokens
	ask := func(user string) chatResp {
		var resp chatResp
		postOK(t, env.URL("/v1/chat/completions"), map[string]any{
			"model": apitest.ModelName, "max_tokens": 2, "temperature": 0,
			"messages": []map[string]any{{"role": "system", "content": system}, {"role": "user", "content": user}},
		}, &resp)
		return resp
	}
	first := ask("First question?")
	second := ask("Another one?")
	if first.Usage.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("first request reports %d cached tokens", first.Usage.PromptTokensDetails.CachedTokens)
	}
	a := env.ChatPrompt(t, []chat.Message{{Role: "system", Content: system}, {Role: "user", Content: "First question?"}}, nil)
	b := env.ChatPrompt(t, []chat.Message{{Role: "system", Content: system}, {Role: "user", Content: "Another one?"}}, nil)
	common := 0
	for common < len(a) && common < len(b) && a[common] == b[common] {
		common++
	}
	bs := env.Engine.Config().BlockSize
	want := common / bs * bs
	if got := second.Usage.PromptTokensDetails.CachedTokens; got != want {
		t.Fatalf("cached_tokens %d, want the %d shared full blocks' %d tokens (common prefix %d)", got, common/bs, want, common)
	}
	if second.Kvserve.TTFTMS >= first.Kvserve.TTFTMS {
		t.Fatalf("TTFT with a %d-token cached prefix %.2f ms, without %.2f ms", want, second.Kvserve.TTFTMS, first.Kvserve.TTFTMS)
	}
	env.WaitIdle(t)
}

func TestClientDisconnectFreesBlocks(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body, _ := json.Marshal(map[string]any{"model": apitest.ModelName, "messages": userMsg("Never stop talking."),
		"max_tokens": 3000, "ignore_eos": true, "stream": true})
	req, _ := http.NewRequest("POST", env.URL("/v1/chat/completions"), bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	for i := 0; i < 6; i++ { // a few chunks: generation is under way
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if st := env.Engine.Now(); st.KV.Active == 0 {
		t.Fatalf("no blocks active while streaming: %+v", st)
	}
	resp.Body.Close() // the client goes away
	env.WaitIdle(t)
	if n := len(env.Recorder.Requests()); n != 1 {
		t.Fatalf("%d backend requests", n)
	}

	// Non-streamed: the client gives up while the server is generating.
	body, _ = json.Marshal(map[string]any{"model": apitest.ModelName, "messages": userMsg("Long answer."), "max_tokens": 3000, "ignore_eos": true})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "POST", env.URL("/v1/chat/completions"), bytes.NewReader(body))
	done := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for env.Engine.Now().KV.Active == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never ran")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled request succeeded")
	}
	env.WaitIdle(t)
}

func TestCompletions(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	prompt := []int32{1, 300, 301, 302, 303, 200, 150}
	want := env.Tokenizer.Decode(env.Greedy(t, prompt, 20))
	var resp struct {
		Object  string `json:"object"`
		Choices []struct {
			Text         string              `json:"text"`
			Logprobs     *completionLogprobs `json:"logprobs"`
			FinishReason string              `json:"finish_reason"`
		} `json:"choices"`
		Usage usageJSON `json:"usage"`
	}
	postOK(t, env.URL("/v1/completions"), map[string]any{"model": apitest.ModelName, "prompt": prompt, "max_tokens": 20, "temperature": 0, "logprobs": 2}, &resp)
	if resp.Object != "text_completion" || len(resp.Choices) != 1 {
		t.Fatalf("bad response %+v", resp)
	}
	ch := resp.Choices[0]
	if ch.Text != want {
		t.Fatalf("text %q, want %q", ch.Text, want)
	}
	if resp.Usage.PromptTokens != len(prompt) {
		t.Fatalf("prompt tokens %d, want %d", resp.Usage.PromptTokens, len(prompt))
	}
	lp := ch.Logprobs
	if lp == nil || len(lp.Tokens) != resp.Usage.CompletionTokens || len(lp.TopLogprobs[0]) == 0 || len(lp.TopLogprobs[0]) > 2 {
		t.Fatalf("bad logprobs %+v", lp)
	}
	for i := 1; i < len(lp.TextOffset); i++ {
		if lp.TextOffset[i] != lp.TextOffset[i-1]+len(lp.Tokens[i-1]) {
			t.Fatalf("text offsets %v for tokens %q", lp.TextOffset, lp.Tokens)
		}
	}

	// A text prompt with echo, streamed.
	status, data, _ := post(t, env.URL("/v1/completions"), map[string]any{"model": apitest.ModelName, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0, "echo": true, "stream": true})
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	_, events := sseEvents(t, data)
	var sb strings.Builder
	for _, ev := range events[:len(events)-1] {
		var c completionResponse
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatal(err)
		}
		for _, ch := range c.Choices {
			sb.WriteString(ch.Text)
		}
	}
	textIDs := env.Tokenizer.Encode("Once upon a time", true, true)
	wantText := "Once upon a time" + env.Tokenizer.Decode(env.Greedy(t, textIDs, 8))
	if sb.String() != wantText {
		t.Fatalf("streamed echo %q, want %q", sb.String(), wantText)
	}
	env.WaitIdle(t)
}

func TestModels(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	get := func(path string) (int, []byte) {
		resp, err := http.Get(env.URL(path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, data
	}
	status, data := get("/v1/models")
	var list struct {
		Object string      `json:"object"`
		Data   []modelJSON `json:"data"`
	}
	if err := json.Unmarshal(data, &list); status != 200 || err != nil || list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != apitest.ModelName || list.Data[0].Object != "model" {
		t.Fatalf("listing %d %s", status, data)
	}
	if status, data = get("/v1/models/" + apitest.ModelName); status != 200 || !strings.Contains(string(data), `"id":"tiny-chat"`) {
		t.Fatalf("model %d %s", status, data)
	}
	status, data = get("/v1/models/gpt-4")
	if status != 404 {
		t.Fatalf("unknown model %d %s", status, data)
	}
	checkErrorShape(t, data)
}

func TestMetrics(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	var resp chatResp
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{"model": apitest.ModelName, "messages": userMsg("hi"), "max_tokens": 2}, &resp)
	r, err := http.Get(env.URL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r.Body)
	r.Body.Close()
	for _, want := range []string{
		`kvserve_api_overhead_seconds_count{dialect="openai"} 1`,
		`kvserve_http_requests_total{code="200",dialect="openai",route="/v1/chat/completions"} 1`,
		`kvserve_generation_tokens_total`, // the engine's, same registry
	} {
		if !strings.Contains(string(data), want) {
			t.Fatalf("metrics lack %q:\n%s", want, data)
		}
	}
}

func TestSegmentsAndHints(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	var resp chatResp
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "max_tokens": 1,
		"messages": []map[string]any{
			{"role": "system", "content": "System rules."},
			{"role": "user", "content": "Question one"},
			{"role": "assistant", "content": "Answer one"},
			{"role": "user", "content": "Question two"},
		},
		"kvserve": map[string]any{"session_id": "s-1", "ttl": "10m", "priority": 3, "expected_output_tokens": 50, "end_session": true},
	}, &resp)
	r := env.Recorder.Last(t)
	if r.Hints.SessionID != "s-1" || r.Hints.TTL != 10*time.Minute || r.Priority != 3 || r.Hints.ExpectedOutputTokens != 50 || !r.Hints.EndSession {
		t.Fatalf("hints not passed: %+v priority %d", r.Hints, r.Priority)
	}
	if len(r.Segments) != 2 || r.Segments[0].Retention != engine.RetentionPersistent || r.Segments[1].Retention != engine.RetentionSession ||
		r.Segments[0].Start != 0 || r.Segments[0].End != r.Segments[1].Start || r.Segments[1].End != len(r.Prompt) {
		t.Fatalf("segments %+v for %d tokens", r.Segments, len(r.Prompt))
	}
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "max_tokens": 1, "messages": userMsg("hi"), "prompt_cache_key": "agent-7",
	}, &resp)
	if r := env.Recorder.Last(t); r.Hints.SessionID != "agent-7" {
		t.Fatalf("prompt_cache_key gave session %q", r.Hints.SessionID)
	}
	if status, data, _ := post(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "max_tokens": 1, "messages": userMsg("hi"), "kvserve": map[string]any{"end_session": true},
	}); status != 400 || !strings.Contains(string(data), "end_session") {
		t.Fatalf("end_session without session_id: %d %s", status, data)
	}
	sys := env.Tokenizer.Decode(r.Prompt[:r.Segments[0].End])
	if !strings.HasSuffix(sys, "rules.<|im_end|>\n") {
		t.Fatalf("persistent segment ends at %q", sys)
	}

	// Tools without a system message, a retention hint, and the latest
	// assistant reasoning (kept by this template? Qwen 2.5 drops it).
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{
		"model": apitest.ModelName, "max_tokens": 1,
		"messages": []map[string]any{{"role": "user", "content": "Use a tool"}},
		"tools":    []map[string]any{{"type": "function", "function": map[string]any{"name": "lookup", "parameters": map[string]any{"type": "object"}}}},
		"kvserve":  map[string]any{"retention": "ephemeral"},
	}, &resp)
	r = env.Recorder.Last(t)
	if len(r.Segments) != 2 || r.Segments[0].Retention != engine.RetentionPersistent || r.Segments[1].Retention != engine.RetentionEphemeral {
		t.Fatalf("segments %+v", r.Segments)
	}
	if sys := env.Tokenizer.Decode(r.Prompt[:r.Segments[0].End]); !strings.Contains(sys, "</tools>") || strings.Contains(sys, "Use a tool") {
		t.Fatalf("persistent segment is %q", sys)
	}
}

// TestReasoning serves a DeepSeek R1 distill template, whose generation
// prompt opens <think>: the output is reasoning until </think>. The random
// model never closes it, so everything it writes is reasoning_content.
func TestReasoning(t *testing.T) {
	src, err := os.ReadFile(testshared.Path(t, "testdata", "chat-templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, apitest.Options{Template: string(src)})
	body := map[string]any{"model": apitest.ModelName, "messages": []map[string]any{
		{"role": "user", "content": "Think first."},
		{"role": "assistant", "content": "Done.", "reasoning_content": "Earlier thoughts."},
		{"role": "user", "content": "Again."},
	}, "max_tokens": 12, "temperature": 0}
	var resp chatResp
	postOK(t, env.URL("/v1/chat/completions"), body, &resp)
	msg := resp.Choices[0].Message
	if msg.ReasoningContent == "" || (msg.Content != nil && *msg.Content != "") {
		t.Fatalf("reasoning %q, content %v", msg.ReasoningContent, msg.Content)
	}
	if got := resp.Usage.CompletionTokensDetails.ReasoningTokens; got != resp.Usage.CompletionTokens {
		t.Fatalf("reasoning tokens %d of %d", got, resp.Usage.CompletionTokens)
	}
	prompt := env.Tokenizer.Decode(env.Recorder.Last(t).Prompt)
	if !strings.HasSuffix(prompt, "<think>\n") {
		t.Fatalf("prompt does not open reasoning: %q", prompt)
	}

	body["stream"] = true
	_, data, _ := post(t, env.URL("/v1/chat/completions"), body)
	_, events := sseEvents(t, data)
	var sb strings.Builder
	for _, ev := range events[:len(events)-1] {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		_ = json.Unmarshal([]byte(ev), &chunk)
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" {
				t.Fatalf("content delta in reasoning: %s", ev)
			}
			sb.WriteString(c.Delta.ReasoningContent)
		}
	}
	if sb.String() != msg.ReasoningContent {
		t.Fatalf("streamed reasoning %q, non-streamed %q", sb.String(), msg.ReasoningContent)
	}
}

// TestServiceTier: "flex" reaches the engine request as Hints.Flex (the
// router's placement reads it) and is echoed, in chat, streamed chat and
// responses; the other tiers are served as "default" and say so; an
// unknown tier is a 400.
func TestServiceTier(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	for _, tc := range []struct {
		tier, echo string
		flex       bool
	}{{"flex", "flex", true}, {"priority", "default", false}, {"auto", "default", false}, {"", "", false}} {
		body := map[string]any{"model": apitest.ModelName, "max_tokens": 1, "messages": userMsg("hi")}
		if tc.tier != "" {
			body["service_tier"] = tc.tier
		}
		var resp struct {
			ServiceTier *string `json:"service_tier"`
		}
		postOK(t, env.URL("/v1/chat/completions"), body, &resp)
		if got := ""; resp.ServiceTier != nil && *resp.ServiceTier != tc.echo || resp.ServiceTier == nil && tc.echo != "" {
			if resp.ServiceTier != nil {
				got = *resp.ServiceTier
			}
			t.Errorf("service_tier %q: response says %q, want %q", tc.tier, got, tc.echo)
		}
		if r := env.Recorder.Last(t); r.Hints.Flex != tc.flex {
			t.Errorf("service_tier %q: engine hint flex %v", tc.tier, r.Hints.Flex)
		}
	}
	// Streamed: every chunk names the tier.
	status, data, _ := post(t, env.URL("/v1/chat/completions"), map[string]any{"model": apitest.ModelName, "max_tokens": 2,
		"messages": userMsg("hi"), "stream": true, "service_tier": "flex"})
	if status != 200 || !strings.Contains(string(data), `"service_tier":"flex"`) {
		t.Errorf("streamed: %d %s", status, data)
	}
	var resp struct {
		ServiceTier string `json:"service_tier"`
	}
	postOK(t, env.URL("/v1/responses"), map[string]any{"model": apitest.ModelName, "max_output_tokens": 1, "input": "hi",
		"service_tier": "flex"}, &resp)
	if resp.ServiceTier != "flex" || !env.Recorder.Last(t).Hints.Flex {
		t.Errorf("responses: service_tier %q, flex %v", resp.ServiceTier, env.Recorder.Last(t).Hints.Flex)
	}
	// Other dialects name it in the kvserve extension.
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{"model": apitest.ModelName, "max_tokens": 1, "messages": userMsg("hi"),
		"kvserve": map[string]any{"service_tier": "flex"}}, &resp)
	if !env.Recorder.Last(t).Hints.Flex {
		t.Error("kvserve.service_tier flex did not reach the engine")
	}
	if status, data, _ := post(t, env.URL("/v1/chat/completions"), map[string]any{"model": apitest.ModelName, "max_tokens": 1,
		"messages": userMsg("hi"), "service_tier": "cheap"}); status != 400 || !strings.Contains(string(data), "service_tier") {
		t.Errorf("unknown tier: %d %s", status, data)
	}
}
