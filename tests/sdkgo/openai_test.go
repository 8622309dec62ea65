package sdkgo_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/tests/sdk"
)

const apiKey = "sk-kvserve-sdkgo-test"

// constrainedMaxTokens is max_tokens for forced tool calls: a call takes
// 58-82 tokens on the synthetic model, and the grammar bounds whitespace
// and the schema the values, so this limit never ends one.
const constrainedMaxTokens = 300

// weather is the arguments of the weather tool; its schema leaves the
// model a bounded choice so a random-weight model finishes the call.
type weather struct {
	City string `json:"city"`
	Days int    `json:"days"`
}

var weatherSchema = shared.FunctionParameters{
	"type": "object",
	"properties": map[string]any{
		"city": map[string]any{"type": "string", "enum": []string{"Paris", "Tokyo", "Lima"}},
		"days": map[string]any{"type": "integer", "minimum": 1, "maximum": 14},
	},
	"required":             []string{"city", "days"},
	"additionalProperties": false,
}

// checkWeatherArgs unmarshals tool-call arguments strictly and checks them
// against weatherSchema.
func checkWeatherArgs(t *testing.T, args string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(args))
	dec.DisallowUnknownFields()
	var w weather
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("arguments %q do not unmarshal: %v", args, err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(args), &keys); err != nil || len(keys) != 2 {
		t.Fatalf("arguments %q: want exactly city and days (%v)", args, err)
	}
	if !slices.Contains([]string{"Paris", "Tokyo", "Lima"}, w.City) || w.Days < 1 || w.Days > 14 {
		t.Fatalf("arguments %q break the schema: %+v", args, w)
	}
}

// checkUsage checks a completion's usage: exact prompt and cached tokens,
// output within the limit (exactly at it when cut there), and the total.
func checkUsage(t *testing.T, u openai.CompletionUsage, prompt, cached, maxTokens int, cut bool) {
	t.Helper()
	if u.PromptTokens != int64(prompt) {
		t.Errorf("prompt_tokens %d, want %d", u.PromptTokens, prompt)
	}
	if got := u.PromptTokensDetails.CachedTokens; got != int64(cached) {
		t.Errorf("cached_tokens %d, want %d", got, cached)
	}
	if u.JSON.PromptTokens.Valid() && !u.PromptTokensDetails.JSON.CachedTokens.Valid() {
		// (Decoded from JSON, not built by the accumulator: the field must
		// have been there.)
		t.Errorf("prompt_tokens_details.cached_tokens is missing")
	}
	if c := u.CompletionTokens; c < 0 || c > int64(maxTokens) || (cut && c != int64(maxTokens)) {
		t.Errorf("completion_tokens %d with max_tokens %d (cut at the limit: %v)", c, maxTokens, cut)
	}
	if u.TotalTokens != u.PromptTokens+u.CompletionTokens {
		t.Errorf("total_tokens %d != %d + %d", u.TotalTokens, u.PromptTokens, u.CompletionTokens)
	}
}

// TestOpenAIGo runs the steps against a server of each engine.
func TestOpenAIGo(t *testing.T) {
	for _, engine := range sdk.Engines() {
		t.Run(engine, func(t *testing.T) { testOpenAIGo(t, engine) })
	}
}

// testOpenAIGo runs its steps in order against one server: the first chat
// request of the tenant finds nothing cached, later ones with the same
// prompt find its full blocks.
func testOpenAIGo(t *testing.T, engine string) {
	srv := sdk.Start(t, sdk.Options{APIKeys: []string{apiKey + "=sdkgo"}, Engine: engine})
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey(apiKey),
		option.WithMaxRetries(0), option.WithRequestTimeout(time.Minute))
	ctx := context.Background()
	const seed = 7
	hello := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}
	helloPrompt := srv.PromptTokens(t, []chat.Message{{Role: "user", Content: "Hello"}})
	helloCached := sdk.SharedBlockTokens(helloPrompt, helloPrompt)

	t.Run("chat", func(t *testing.T) {
		const maxTokens = 8
		res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: sdk.ModelID, Messages: hello, MaxTokens: openai.Int(maxTokens), Seed: openai.Int(seed),
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Object != "chat.completion" || !strings.HasPrefix(res.ID, "chatcmpl-") || res.Model != sdk.ModelID || res.Created < 1.6e9 {
			t.Errorf("object %q, id %q, model %q, created %d", res.Object, res.ID, res.Model, res.Created)
		}
		if len(res.Choices) != 1 {
			t.Fatalf("%d choices", len(res.Choices))
		}
		c := res.Choices[0]
		if c.Message.Role != "assistant" || !c.Message.JSON.Content.Valid() || len(c.Message.ToolCalls) != 0 {
			t.Errorf("message %s", c.Message.RawJSON())
		}
		if c.FinishReason != "stop" && c.FinishReason != "length" {
			t.Errorf("finish_reason %q", c.FinishReason)
		}
		checkUsage(t, res.Usage, len(helloPrompt), 0, maxTokens, c.FinishReason == "length")
	})

	t.Run("chat streamed into an accumulator", func(t *testing.T) {
		const maxTokens = 8
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: sdk.ModelID, Messages: hello, MaxTokens: openai.Int(maxTokens), Seed: openai.Int(seed),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		var deltas strings.Builder
		chunks, finished := 0, false
		var usage *openai.CompletionUsage
		for stream.Next() {
			chunk := stream.Current()
			chunks++
			if chunk.JSON.Usage.Valid() && chunk.Usage.JSON.PromptTokens.Valid() {
				if usage != nil || len(chunk.Choices) != 0 {
					t.Errorf("usage in a chunk with choices, or twice: %s", chunk.RawJSON())
				}
				usage = &chunk.Usage
			}
			if !acc.AddChunk(chunk) {
				t.Fatalf("the accumulator rejected chunk %d: %s", chunks, chunk.RawJSON())
			}
			for _, c := range chunk.Choices {
				deltas.WriteString(c.Delta.Content)
			}
			if _, ok := acc.JustFinishedContent(); ok {
				finished = true
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks < 3 || len(acc.Choices) != 1 {
			t.Fatalf("%d chunks, %d accumulated choices", chunks, len(acc.Choices))
		}
		c := acc.Choices[0]
		if c.Message.Content != deltas.String() {
			t.Errorf("accumulated content %q, deltas %q", c.Message.Content, deltas.String())
		}
		if c.FinishReason != "stop" && c.FinishReason != "length" {
			t.Errorf("finish_reason %q", c.FinishReason)
		}
		if !finished && c.Message.Content != "" {
			t.Errorf("the accumulator never reported the content finished")
		}
		if !strings.HasPrefix(acc.ID, "chatcmpl-") {
			t.Errorf("id %q", acc.ID)
		}
		if usage == nil {
			t.Fatal("no usage chunk with stream_options.include_usage")
		}
		checkUsage(t, *usage, len(helloPrompt), helloCached, maxTokens, c.FinishReason == "length")
		checkUsage(t, acc.Usage, len(helloPrompt), helloCached, maxTokens, c.FinishReason == "length")
	})

	weatherTool := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Description: openai.String("Weather forecast for a city"), Parameters: weatherSchema,
	})
	forced := openai.ToolChoiceOptionFunctionToolChoice(openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_weather"})

	t.Run("forced tool_choice", func(t *testing.T) {
		res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: sdk.ModelID, MaxTokens: openai.Int(constrainedMaxTokens), Seed: openai.Int(seed),
			Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Weather in Tokyo for the weekend?")},
			Tools:      []openai.ChatCompletionToolUnionParam{weatherTool},
			ToolChoice: forced,
		})
		if err != nil {
			t.Fatal(err)
		}
		c := res.Choices[0]
		if c.FinishReason != "tool_calls" || len(c.Message.ToolCalls) != 1 {
			t.Fatalf("finish_reason %q, message %s", c.FinishReason, c.Message.RawJSON())
		}
		call := c.Message.ToolCalls[0].AsFunction()
		if call.ID == "" || call.Type != "function" || call.Function.Name != "get_weather" {
			t.Errorf("tool call %s", c.Message.ToolCalls[0].RawJSON())
		}
		checkWeatherArgs(t, call.Function.Arguments)
	})

	t.Run("forced tool_choice streamed into an accumulator", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: sdk.ModelID, MaxTokens: openai.Int(constrainedMaxTokens), Seed: openai.Int(seed),
			Messages:   []openai.ChatCompletionMessageParamUnion{openai.UserMessage("And in Lima?")},
			Tools:      []openai.ChatCompletionToolUnionParam{weatherTool},
			ToolChoice: forced,
		})
		defer stream.Close()
		var acc openai.ChatCompletionAccumulator
		var finished []openai.FinishedChatCompletionToolCall
		for stream.Next() {
			if !acc.AddChunk(stream.Current()) {
				t.Fatalf("the accumulator rejected %s", stream.Current().RawJSON())
			}
			if tc, ok := acc.JustFinishedToolCall(); ok {
				finished = append(finished, tc)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "tool_calls" || len(acc.Choices[0].Message.ToolCalls) != 1 {
			t.Fatalf("accumulated %+v", acc.Choices)
		}
		call := acc.Choices[0].Message.ToolCalls[0]
		if call.ID == "" || call.Function.Name != "get_weather" {
			t.Errorf("tool call id %q name %q", call.ID, call.Function.Name)
		}
		checkWeatherArgs(t, call.Function.Arguments)
		if len(finished) != 1 || finished[0].Arguments != call.Function.Arguments || finished[0].Name != "get_weather" {
			t.Errorf("JustFinishedToolCall reported %+v", finished)
		}
	})

	t.Run("cached tokens of a shared system prompt", func(t *testing.T) {
		system := sdk.LongSystemPrompt("openai-go")
		users := []string{"What is the capital of France?", "Name three prime numbers."}
		var prompts [][]int32
		for _, u := range users {
			prompts = append(prompts, srv.PromptTokens(t, []chat.Message{{Role: "system", Content: system}, {Role: "user", Content: u}}))
		}
		want := sdk.SharedBlockTokens(prompts[0], prompts[1])
		if want < 8*sdk.BlockSize {
			t.Fatalf("the shared system prompt covers only %d tokens", want)
		}
		for i, u := range users {
			res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model: sdk.ModelID, MaxTokens: openai.Int(2), Seed: openai.Int(seed),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(u)},
			})
			if err != nil {
				t.Fatal(err)
			}
			cached := 0
			if i == 1 {
				cached = want
			}
			checkUsage(t, res.Usage, len(prompts[i]), cached, 2, res.Choices[0].FinishReason == "length")
		}
	})

	t.Run("unknown model", func(t *testing.T) {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "no-such-model", Messages: hello, MaxTokens: openai.Int(1),
		})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("error %v (%T), want *openai.Error", err, err)
		}
		if apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" || apiErr.Param != "model" ||
			apiErr.Type != "invalid_request_error" || !bytes.Contains([]byte(apiErr.Message), []byte("no-such-model")) {
			t.Errorf("error %d %q %q %q: %q", apiErr.StatusCode, apiErr.Type, apiErr.Code, apiErr.Param, apiErr.Message)
		}
	})
}
