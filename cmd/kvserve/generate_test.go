package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/api/openai"
	"github.com/kvserve/kvserve/internal/testshared"
)

// runGenerateCmd runs `generate ARGS...` and returns stdout and stderr.
func runGenerateCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runCommand(newGenerateCmd(), args...)
}

// parseIDs reads --print-tokens output.
func parseIDs(t *testing.T, s string) []int32 {
	t.Helper()
	var ids []int32
	for _, f := range strings.Fields(s) {
		v, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("output %q: %v", s, err)
		}
		ids = append(ids, int32(v))
	}
	return ids
}

// lastStats decodes the --json-stats line that ends stderr.
func lastStats(t *testing.T, stderr string) generateStats {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	var st generateStats
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &st); err != nil {
		t.Fatalf("no JSON statistics at the end of stderr %q: %v", stderr, err)
	}
	return st
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ",")
}

// TestGenerateMatchesCompletions: for the same prompt and settings, greedy
// `kvserve generate` emits the tokens the server's /v1/completions returns
// (both run the engine; this pins that they set it up alike: prompt, BOS,
// penalties, chunked prefill).
func TestGenerateMatchesCompletions(t *testing.T) {
	env := apitest.New(t, apitest.Options{Dialects: []api.Dialect{openai.New()}})
	modelFile := apitest.ModelFile(t)
	tok := env.Tokenizer
	long := make([]int32, 150)
	for i := range long {
		long[i] = int32(40 + i%50)
	}
	tests := []struct {
		name   string
		prompt []int32 // token ids, or nil to use text
		text   string
		n      int
		flags  []string       // generate's
		fields map[string]any // the same settings for the server
	}{
		{name: "token prompt", prompt: []int32{1, 72, 101, 108, 108, 111}, n: 24},
		{name: "text prompt, BOS added alike", text: "The quick brown fox", n: 20},
		{name: "chunked prefill", prompt: long, n: 16, flags: []string{"--batch", "32"}},
		{name: "repetition penalty sees the prompt", prompt: long, n: 24,
			flags:  []string{"--repeat-penalty", "1.5", "--repeat-last-n", "64"},
			fields: map[string]any{"repetition_penalty": 1.5}},
		{name: "presence and frequency penalties", prompt: []int32{1, 72, 101, 108, 108, 111}, n: 24,
			flags:  []string{"--presence-penalty", "1", "--frequency-penalty", "0.5"},
			fields: map[string]any{"presence_penalty": 1, "frequency_penalty": 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"--model", modelFile, "-t", "1", "--temperature", "0", "--ignore-eos",
				"--print-tokens", "--json-stats", "-n", strconv.Itoa(tt.n)}
			body := map[string]any{"model": apitest.ModelName, "max_tokens": tt.n, "temperature": 0,
				"ignore_eos": true, "logprobs": 0}
			if tt.prompt != nil {
				args = append(args, "--prompt-tokens", joinIDs(tt.prompt))
				body["prompt"] = tt.prompt
			} else {
				args = append(args, "--prompt", tt.text)
				body["prompt"] = tt.text
			}
			args = append(args, tt.flags...)
			for k, v := range tt.fields {
				body[k] = v
			}

			stdout, stderr, err := runGenerateCmd(t, args...)
			if err != nil {
				t.Fatalf("generate: %v\n%s", err, stderr)
			}
			ids := parseIDs(t, stdout)
			stats := lastStats(t, stderr)

			var resp struct {
				Choices []struct {
					Logprobs struct {
						Tokens []string `json:"tokens"`
					} `json:"logprobs"`
				} `json:"choices"`
				Usage struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				} `json:"usage"`
			}
			apitest.PostOK(t, env.URL("/v1/completions"), body, &resp)
			if tt.prompt != nil && !slices.Equal(env.Recorder.Last(t).Prompt, tt.prompt) {
				t.Fatalf("the server ran prompt %v, want %v", env.Recorder.Last(t).Prompt, tt.prompt)
			}
			if stats.PromptTokens != resp.Usage.PromptTokens {
				t.Fatalf("generate ran %d prompt tokens, the server %d", stats.PromptTokens, resp.Usage.PromptTokens)
			}
			// The completions endpoint reports tokens as text: compare
			// each generated id's piece, rendered as the server does.
			pieces := make([]string, len(ids))
			for i, id := range ids {
				pieces[i] = strings.ToValidUTF8(string(tok.AppendPiece(nil, id, true)), "\ufffd")
			}
			got := resp.Choices[0].Logprobs.Tokens
			if len(ids) != tt.n || resp.Usage.CompletionTokens != tt.n || !slices.Equal(pieces, got) {
				t.Fatalf("generate: %d tokens %q (ids %v)\nserver: %d tokens %q", len(ids), pieces, ids, resp.Usage.CompletionTokens, got)
			}
		})
	}
}

// TestGenerateOutput covers the command's own output: text with stop
// strings, -n 0, statistics, and the errors it reports before generating.
func TestGenerateOutput(t *testing.T) {
	modelFile := apitest.ModelFile(t)
	base := []string{"--model", modelFile, "-t", "1", "--temperature", "0", "--ignore-eos", "--prompt", "Once upon a time"}
	full, _, err := runGenerateCmd(t, append(base, "-n", "40")...)
	if err != nil {
		t.Fatal(err)
	}
	full = strings.TrimSuffix(full, "\n")
	if len(full) < 8 {
		t.Fatalf("output %q too short to pick a stop string from", full)
	}
	stop := full[len(full)/2 : len(full)/2+3]
	wantStopped := full[:strings.Index(full, stop)] + "\n"

	tests := []struct {
		name       string
		args       []string
		wantOut    string // exact stdout, when not empty
		wantTokens int    // generated_tokens, when ≥ 0
		wantErr    string
	}{
		{name: "stop string cuts the text", args: append(slices.Clone(base), "-n", "40", "--stop", stop),
			wantOut: wantStopped, wantTokens: -1},
		{name: "-n 0 runs the prompt only", args: append(slices.Clone(base), "-n", "0"), wantOut: "\n", wantTokens: 0},
		{name: "statistics count the tokens", args: append(slices.Clone(base), "-n", "7"), wantTokens: 7},
		{name: "both prompts", args: append(slices.Clone(base), "--prompt-tokens", "1,2"), wantErr: "exactly one of"},
		{name: "negative -n", args: append(slices.Clone(base), "-n", "-1"), wantErr: "-n must be"},
		{name: "batch 0", args: append(slices.Clone(base), "--batch", "0"), wantErr: "--batch"},
		{name: "bad sampling", args: append(slices.Clone(base), "--top-p", "2"), wantErr: "top_p"},
		{name: "prompt longer than the context",
			args:    []string{"--model", testshared.Path(t, "models", "tiny-q8_0.gguf"), "--prompt-tokens", strings.Repeat("5,", 300) + "5"},
			wantErr: "no room in the model's context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runGenerateCmd(t, append(tt.args, "--json-stats")...)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, stderr)
			}
			if tt.wantOut != "" && stdout != tt.wantOut {
				t.Fatalf("stdout %q, want %q", stdout, tt.wantOut)
			}
			st := lastStats(t, stderr)
			if st.PromptTokens == 0 || st.PrefillTokS <= 0 {
				t.Fatalf("statistics %+v: no prefill", st)
			}
			if tt.wantTokens >= 0 && st.GeneratedTokens != tt.wantTokens {
				t.Fatalf("generated_tokens %d, want %d", st.GeneratedTokens, tt.wantTokens)
			}
			if st.GeneratedTokens > 1 && st.DecodeTokS <= 0 {
				t.Fatalf("statistics %+v: no decode speed", st)
			}
			if !strings.Contains(stderr, "prefill: ") {
				t.Fatalf("stderr %q lacks the timing line", stderr)
			}
		})
	}
}
