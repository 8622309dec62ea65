package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/anthropic"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/api/gemini"
	"github.com/kvserve/kvserve/internal/api/openai"
	"github.com/kvserve/kvserve/internal/ledger"
)

// reported is what the responses' usage fields add up to, in the ledger's
// terms.
type reported struct {
	requests                                 int
	prompt, cached, write, output, reasoning int64
}

// TestLedgerEqualsResponses: over a randomised run of the three dialects
// (streamed and not, prompts sharing prefixes, Anthropic breakpoints), the
// ledger's records add up, to the token, to the usage the responses
// reported.
func TestLedgerEqualsResponses(t *testing.T) {
	l, _, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	env := apitest.New(t, apitest.Options{
		Dialects: []api.Dialect{openai.New(), anthropic.New(anthropic.Options{}), gemini.New()},
		Config:   api.Config{Ledger: l},
	})
	rng := rand.New(rand.NewPCG(7, 9))
	// Shared openings make cache hits; the tails make each prompt its own.
	openings := []string{
		strings.Repeat("The ledger keeps every token of every tenant. ", 6),
		strings.Repeat("A context cache is prefilled once and pinned. ", 5),
	}
	var want reported
	const n = 36
	for i := range n {
		text := openings[rng.IntN(len(openings))] + fmt.Sprintf("Question %d: what is %d plus %d?", i, rng.IntN(100), rng.IntN(100))
		maxTokens := 1 + rng.IntN(6)
		var got reported
		switch dialect := rng.IntN(4); dialect {
		case 0:
			got = openAIChat(t, env, text, maxTokens, false)
		case 1:
			got = openAIChat(t, env, text, maxTokens, true)
		case 2:
			got = anthropicMessage(t, env, text, maxTokens, rng.IntN(2) == 0)
		default:
			got = geminiGenerate(t, env, text, maxTokens)
		}
		want.add(got)
	}
	if want.cached == 0 || want.write == 0 {
		t.Fatalf("the run had no cache hits (%d) or no cache writes (%d): it checks too little", want.cached, want.write)
	}
	var got reported
	deadline := time.Now().Add(10 * time.Second)
	for {
		got = reported{}
		err := l.Records(context.Background(), ledger.Filter{}, func(r ledger.Record) error {
			if r.Kind != ledger.KindRequest || r.Outcome != ledger.OutcomeCompleted || r.Tenant != "" || r.Model != apitest.ModelName {
				return fmt.Errorf("record %+v", r)
			}
			got.add(reported{1, r.Tokens.Prompt, r.Tokens.Cached, r.Tokens.CacheWrite, r.Tokens.Output, r.Tokens.Reasoning})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// A response can reach the client before its handler has
		// returned, and the handler books the record on its way out.
		if got.requests == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got != want {
		t.Fatalf("the ledger says %+v, the responses said %+v", got, want)
	}
}

func (r *reported) add(o reported) {
	r.requests += o.requests
	r.prompt += o.prompt
	r.cached += o.cached
	r.write += o.write
	r.output += o.output
	r.reasoning += o.reasoning
}

func openAIChat(t *testing.T, env *apitest.Env, text string, maxTokens int, stream bool) reported {
	t.Helper()
	body := map[string]any{"model": apitest.ModelName, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": text}}}
	type usage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		CompletionTokensDetails struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	}
	var u *usage
	if !stream {
		var out struct{ Usage *usage }
		apitest.PostOK(t, env.URL("/v1/chat/completions"), body, &out)
		u = out.Usage
	} else {
		body["stream"] = true
		body["stream_options"] = map[string]bool{"include_usage": true}
		status, data, _ := apitest.Post(t, env.URL("/v1/chat/completions"), body)
		if status != http.StatusOK {
			t.Fatalf("status %d: %s", status, data)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || line == "[DONE]" {
				continue
			}
			var chunk struct{ Usage *usage }
			if err := json.Unmarshal([]byte(line), &chunk); err != nil {
				t.Fatal(err)
			}
			if chunk.Usage != nil {
				u = chunk.Usage
			}
		}
	}
	if u == nil {
		t.Fatal("no usage in the response")
	}
	return reported{1, u.PromptTokens, u.PromptTokensDetails.CachedTokens, 0, u.CompletionTokens, u.CompletionTokensDetails.ReasoningTokens}
}

func anthropicMessage(t *testing.T, env *apitest.Env, text string, maxTokens int, breakpoint bool) reported {
	t.Helper()
	content := []map[string]any{{"type": "text", "text": text}}
	if breakpoint {
		content[0]["cache_control"] = map[string]string{"type": "ephemeral"}
	}
	body := map[string]any{"model": apitest.ModelName, "max_tokens": maxTokens,
		"messages": []map[string]any{{"role": "user", "content": content}}}
	var out struct {
		Usage struct {
			InputTokens              int64 `json:"input_tokens"`
			CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
			CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
			OutputTokens             int64 `json:"output_tokens"`
		}
	}
	apitest.PostOK(t, env.URL("/v1/messages"), body, &out)
	u := out.Usage
	return reported{1, u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, u.CacheReadInputTokens,
		u.CacheCreationInputTokens, u.OutputTokens, 0}
}

func geminiGenerate(t *testing.T, env *apitest.Env, text string, maxTokens int) reported {
	t.Helper()
	body := map[string]any{
		"contents":         []map[string]any{{"role": "user", "parts": []map[string]string{{"text": text}}}},
		"generationConfig": map[string]int{"maxOutputTokens": maxTokens},
	}
	var out struct {
		UsageMetadata struct {
			PromptTokenCount        int64
			CachedContentTokenCount int64
			CandidatesTokenCount    int64
			ThoughtsTokenCount      int64
		}
	}
	apitest.PostOK(t, env.URL("/v1beta/models/"+apitest.ModelName+":generateContent"), body, &out)
	u := out.UsageMetadata
	return reported{1, u.PromptTokenCount, u.CachedContentTokenCount, 0, u.CandidatesTokenCount + u.ThoughtsTokenCount, u.ThoughtsTokenCount}
}

// TestLedgerBooksBeforeTheEnd: a response's final ledger record is
// committed before the client sees the response end ([DONE], or the whole
// non-streamed body), so a server killed the next instant has billed every
// response a client received.
func TestLedgerBooksBeforeTheEnd(t *testing.T) {
	l, _, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	env := apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New()}, Config: api.Config{Ledger: l}})
	booked := func(id string) bool {
		found := false
		err := l.Records(context.Background(), ledger.Filter{}, func(r ledger.Record) error {
			found = found || (r.ID == id && r.Outcome == ledger.OutcomeCompleted)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return found
	}
	for _, stream := range []bool{true, false} {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"stream":%v,"messages":[{"role":"user","content":"hello"}]}`, apitest.ModelName, stream)
		resp, err := http.Post(env.URL("/v1/chat/completions"), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		id := resp.Header.Get("X-Request-Id")
		if stream {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() && sc.Text() != "data: [DONE]" {
			}
			if sc.Err() != nil {
				t.Fatal(sc.Err())
			}
		} else {
			var out struct{ ID string }
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
		}
		// The response has ended for the client; the handler may still be
		// returning.
		if !booked(id) {
			t.Errorf("stream %v: request %q not booked as completed when its response ended", stream, id)
		}
		resp.Body.Close()
	}
}

// TestLedgerServiceTier: a flex request is booked in the flex tier (the
// price book's flex factor prices it), one in no named tier in none.
func TestLedgerServiceTier(t *testing.T) {
	l, _, err := ledger.Open(filepath.Join(t.TempDir(), "ledger.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	env := apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New()}, Config: api.Config{Ledger: l}})
	tiers := map[string]string{}
	for _, tier := range []string{"flex", ""} {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":2,"service_tier":%q,"messages":[{"role":"user","content":"hello"}]}`, apitest.ModelName, tier)
		resp, err := http.Post(env.URL("/v1/chat/completions"), "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("tier %q: status %d", tier, resp.StatusCode)
		}
		tiers[resp.Header.Get("X-Request-Id")] = tier
	}
	err = l.Records(context.Background(), ledger.Filter{}, func(r ledger.Record) error {
		if want, ok := tiers[r.ID]; ok && r.ServiceTier != want {
			t.Errorf("request asking tier %q booked in %q", want, r.ServiceTier)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
