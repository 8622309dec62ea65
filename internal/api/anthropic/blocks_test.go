package anthropic

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
)

// ev builds an event of the run's one sample.
func ev(kind api.EventKind, text string, call int) api.Event {
	return api.Event{Kind: kind, Text: text, ToolCall: call, ToolName: "f"}
}

var finishStop = api.Event{Kind: api.EventFinish, Finish: api.FinishStop}

// TestBlocks feeds event sequences through the block state machine, in
// batches, streamed and not: both must give the same blocks.
func TestBlocks(t *testing.T) {
	tests := []struct {
		name     string
		batches  [][]api.Event
		parallel bool // disable_parallel_tool_use false
		want     string
	}{
		{"text", [][]api.Event{{ev(api.EventText, "Hel", 0), ev(api.EventText, "lo", 0)}, {ev(api.EventText, "!", 0), finishStop}}, true,
			`[{"type":"text","text":"Hello!"}]`},
		{"empty text makes no block", [][]api.Event{{ev(api.EventText, "", 0), finishStop}}, true, `[]`},
		{"thinking then text", [][]api.Event{{ev(api.EventReasoning, "hmm", 0)}, {ev(api.EventReasoning, " ok", 0), ev(api.EventText, "Yes.", 0)}, {finishStop}}, true,
			`[{"type":"thinking","thinking":"hmm ok","signature":"*"},{"type":"text","text":"Yes."}]`},
		{"two calls", [][]api.Event{{ev(api.EventText, "Calling.", 0), ev(api.EventToolCallBegin, "", 0), ev(api.EventToolCallArgs, `{"a":`, 0)},
			{ev(api.EventToolCallArgs, `1}`, 0), ev(api.EventToolCallEnd, "", 0), ev(api.EventToolCallBegin, "", 1), ev(api.EventToolCallArgs, `{}`, 1), ev(api.EventToolCallEnd, "", 1)},
			{{Kind: api.EventFinish, Finish: api.FinishToolCalls}}}, true,
			`[{"type":"text","text":"Calling."},{"type":"tool_use","id":"*","name":"f","input":{"a":1}},{"type":"tool_use","id":"*","name":"f","input":{}}]`},
		{"parallel calls disabled", [][]api.Event{{ev(api.EventToolCallBegin, "", 0), ev(api.EventToolCallArgs, `{"a":1}`, 0), ev(api.EventToolCallEnd, "", 0),
			ev(api.EventToolCallBegin, "", 1), ev(api.EventToolCallArgs, `{"b":2}`, 1), ev(api.EventToolCallEnd, "", 1), {Kind: api.EventFinish, Finish: api.FinishToolCalls}}}, false,
			`[{"type":"tool_use","id":"*","name":"f","input":{"a":1}}]`},
		{"call cut short", [][]api.Event{{ev(api.EventToolCallBegin, "", 0), ev(api.EventToolCallArgs, ` {"a":"x`, 0)}, {{Kind: api.EventFinish, Finish: api.FinishLength}}}, true,
			`[{"type":"tool_use","id":"*","name":"f","input":{}}]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			full := newBlocks(nil, !tc.parallel)
			rec := httptest.NewRecorder()
			sse := api.NewSSE(rec)
			streamedB := newBlocks(sse, !tc.parallel)
			sse.Event("message_start", []byte(`{"type":"message_start","message":{"id":"msg_ABCDEFGHIJKLMNOPQRSTUVWX","type":"message","role":"assistant","model":"tiny-chat","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}}`))
			for _, batch := range tc.batches {
				for i := range batch {
					full.add(&batch[i])
					streamedB.add(&batch[i])
				}
				streamedB.flush()
				if err := sse.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			streamedB.ping()
			sse.Event("message_delta", []byte(`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}`))
			sse.Event("message_stop", []byte(`{"type":"message_stop"}`))
			_ = sse.Flush()

			got, _ := json.Marshal(full.content)
			if !matchIDs(string(got), tc.want) {
				t.Fatalf("blocks %s, want %s", got, tc.want)
			}
			s := readStream(t, rec.Body.Bytes())
			if len(s.msg.Content) != len(full.content) {
				t.Fatalf("streamed %d blocks, non-streamed %d:\n%s", len(s.msg.Content), len(full.content), rec.Body.Bytes())
			}
			for i, b := range s.msg.Content {
				f := full.content[i]
				if b.Type != f.Type {
					t.Fatalf("block %d: %s streamed, %s not", i, b.Type, f.Type)
				}
				switch b.Type {
				case "text":
					if *b.Text != *f.Text {
						t.Fatalf("block %d: %q streamed, %q not", i, *b.Text, *f.Text)
					}
				case "thinking":
					if *b.Thinking != *f.Thinking || b.Signature == nil || *b.Signature != *f.Signature || *f.Signature == "" {
						t.Fatalf("block %d: thinking %q/%v streamed, %q/%q not", i, *b.Thinking, b.Signature, *f.Thinking, *f.Signature)
					}
				case "tool_use":
					// A call cut short streams a prefix of its arguments; the
					// non-streamed block has {} instead.
					cut := !json.Valid(b.Input) && string(f.Input) == "{}"
					if (string(b.Input) != string(f.Input) && !cut) || !strings.HasPrefix(f.ID, "toolu_") {
						t.Fatalf("block %d: input %s streamed, %s (%s) not", i, b.Input, f.Input, f.ID)
					}
				}
			}
		})
	}
}

// matchIDs compares JSON texts where want's "*" strings match any string.
func matchIDs(got, want string) bool {
	parts := strings.Split(want, `"*"`)
	for i, p := range parts {
		if !strings.HasPrefix(got, p) {
			return false
		}
		got = got[len(p):]
		if i == len(parts)-1 {
			break
		}
		if len(got) == 0 || got[0] != '"' {
			return false
		}
		end := strings.IndexByte(got[1:], '"')
		if end < 0 {
			return false
		}
		got = got[end+2:]
	}
	return got == ""
}

func TestUsageArithmetic(t *testing.T) {
	tests := []struct {
		name               string
		prompt, cached     int
		marks              cacheMarks
		input, create, c1h int
	}{
		{"no breakpoints", 100, 0, cacheMarks{}, 100, 0, 0},
		{"no breakpoints, cached", 100, 64, cacheMarks{}, 36, 0, 0},
		{"first request", 100, 0, cacheMarks{end: 70}, 30, 70, 0},
		{"partly cached", 100, 48, cacheMarks{end: 70}, 30, 22, 0},
		{"cached beyond the breakpoint", 100, 80, cacheMarks{end: 70}, 20, 0, 0},
		{"1h then 5m", 100, 16, cacheMarks{end: 70, end1h: 40}, 30, 54, 24},
		{"1h is the last", 100, 0, cacheMarks{end: 70, end1h: 70}, 30, 70, 70},
		{"marks past the prompt", 50, 0, cacheMarks{end: 70, end1h: 90}, 0, 50, 50},
	}
	for _, tc := range tests {
		u := usage(api.Usage{PromptTokens: tc.prompt, CachedTokens: tc.cached, CompletionTokens: 3,
			CacheWriteTokens: api.CacheWriteTokens(tc.prompt, tc.cached, tc.marks.end)}, tc.marks)
		if u.InputTokens != tc.input || u.CacheCreationInputTokens != tc.create || u.CacheReadInputTokens != tc.cached ||
			u.CacheCreation.Ephemeral1h != tc.c1h || u.CacheCreation.Ephemeral5m != tc.create-tc.c1h || u.OutputTokens != 3 {
			t.Fatalf("%s: usage %+v", tc.name, u)
		}
		if inputSum(u) != tc.prompt {
			t.Fatalf("%s: inputs add up to %d of %d", tc.name, inputSum(u), tc.prompt)
		}
	}
}

func TestDottedParam(t *testing.T) {
	for in, want := range map[string]string{
		"model":                             "model",
		"messages[1].content[0].type":       "messages.1.content.0.type",
		"tools[12].input_schema":            "tools.12.input_schema",
		"system[3].cache_control.ttl":       "system.3.cache_control.ttl",
		"messages[0].content[2].content[1]": "messages.0.content.2.content.1",
	} {
		if got := dottedParam(in); got != want {
			t.Fatalf("dottedParam(%q) = %q, want %q", in, got, want)
		}
	}
}
