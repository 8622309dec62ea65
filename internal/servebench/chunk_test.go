package servebench

import (
	"testing"
)

func TestParseChunk(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	tests := []struct {
		name    string
		in      string
		output  bool
		content string
		usage   *Usage
		cached  int
		timing  *ServerTiming
		errMsg  string
		bad     bool
	}{
		{name: "role only", in: `{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`},
		{name: "null content", in: `{"choices":[{"index":0,"delta":{"role":"assistant","content":null}}]}`},
		{name: "content", in: `{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`, output: true, content: "Hi"},
		{name: "reasoning_content", in: `{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}`, output: true},
		{name: "reasoning", in: `{"choices":[{"index":0,"delta":{"reasoning":"hmm"}}]}`, output: true},
		{name: "tool call", in: `{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":""}}]}}]}`, output: true},
		{name: "finish", in: `{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`},
		{name: "usage", in: `{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,"prompt_tokens_details":{"cached_tokens":64}}}`,
			usage: &Usage{PromptTokens: 100, CompletionTokens: 7, TotalTokens: 107}, cached: 64},
		{name: "usage without details", in: `{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1}}`,
			usage: &Usage{PromptTokens: 5, CompletionTokens: 1}},
		{name: "timing top level", in: `{"choices":[],"usage":{"prompt_tokens":5},"kvserve":{"overhead_ms":1.5,"queue_ms":0,"ttft_ms":20}}`,
			usage: &Usage{PromptTokens: 5}, timing: &ServerTiming{OverheadMS: f(1.5), QueueMS: f(0), TTFTMS: f(20)}},
		{name: "error", in: `{"error":{"message":"out of memory","type":"server_error","code":503}}`, errMsg: "out of memory"},
		{name: "not json", in: `{"choices":[`, bad: true},
		{name: "wrong type", in: `{"choices":{}}`, bad: true},
	}
	var c Chunk
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ParseChunk([]byte(tt.in), &c)
			if (err != nil) != tt.bad {
				t.Fatalf("err = %v", err)
			}
			if tt.bad {
				return
			}
			out, content := false, ""
			for _, ch := range c.Choices {
				out = out || ch.Delta.HasOutput()
				content += ch.Delta.Content
			}
			if out != tt.output || content != tt.content {
				t.Fatalf("output %v %q, want %v %q", out, content, tt.output, tt.content)
			}
			if (c.Usage == nil) != (tt.usage == nil) {
				t.Fatalf("usage %+v, want %+v", c.Usage, tt.usage)
			}
			if tt.usage != nil {
				if c.Usage.PromptTokens != tt.usage.PromptTokens || c.Usage.CompletionTokens != tt.usage.CompletionTokens ||
					c.Usage.CachedTokens() != tt.cached {
					t.Fatalf("usage %+v cached %d, want %+v %d", c.Usage, c.Usage.CachedTokens(), tt.usage, tt.cached)
				}
			}
			if (c.KVServe == nil) != (tt.timing == nil) {
				t.Fatalf("timing %+v, want %+v", c.KVServe, tt.timing)
			}
			if tt.timing != nil && (*c.KVServe.OverheadMS != *tt.timing.OverheadMS || *c.KVServe.QueueMS != *tt.timing.QueueMS ||
				*c.KVServe.TTFTMS != *tt.timing.TTFTMS) {
				t.Fatalf("timing %+v", c.KVServe)
			}
			if (c.Error != nil) != (tt.errMsg != "") || (c.Error != nil && c.Error.Message != tt.errMsg) {
				t.Fatalf("error %+v, want %q", c.Error, tt.errMsg)
			}
		})
	}
}

// TestParseChunkReuse checks that decoding into a reused Chunk leaves
// nothing of the previous one behind.
func TestParseChunkReuse(t *testing.T) {
	var c Chunk
	if err := ParseChunk([]byte(`{"choices":[{"index":0,"delta":{"content":"a","tool_calls":[{"index":0,"id":"x"}]},"finish_reason":"stop"}],"usage":{"prompt_tokens":1}}`), &c); err != nil {
		t.Fatal(err)
	}
	if err := ParseChunk([]byte(`{"choices":[{"index":0,"delta":{}}]}`), &c); err != nil {
		t.Fatal(err)
	}
	d := c.Choices[0]
	if d.Delta.HasOutput() || d.FinishReason != nil || c.Usage != nil {
		t.Fatalf("stale fields: %+v usage %v", d, c.Usage)
	}
}

func FuzzParseChunk(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"index":0,"delta":{"content":"Hi"}}]}`,
		`{"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":64}},"kvserve":{"overhead_ms":1}}`,
		`{"error":{"message":"x"}}`,
		`[DONE]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var c Chunk
		if err := ParseChunk(in, &c); err != nil {
			return
		}
		for _, ch := range c.Choices {
			_ = ch.Delta.HasOutput()
		}
		_ = c.Usage.CachedTokens()
		// Decoding the same bytes again into the used Chunk gives the same
		// choices.
		n := len(c.Choices)
		if err := ParseChunk(in, &c); err != nil || len(c.Choices) != n {
			t.Fatalf("second decode: %v, %d choices, want %d", err, len(c.Choices), n)
		}
	})
}
