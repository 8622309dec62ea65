package gemini

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
)

// post and postOK are apitest.Post and apitest.PostOK.
var (
	post   = apitest.Post
	postOK = apitest.PostOK
)

func newEnv(t testing.TB, o apitest.Options) *apitest.Env {
	t.Helper()
	o.Dialects = append([]api.Dialect{New()}, o.Dialects...)
	return apitest.New(t, o)
}

// gen is the generateContent URL of the test model; method may be
// "streamGenerateContent" or "countTokens".
func gen(env *apitest.Env, method string) string {
	return env.URL("/v1beta/models/" + apitest.ModelName + ":" + method)
}

// gResp is a GenerateContentResponse as a client reads it.
type gResp struct {
	Candidates []struct {
		Content struct {
			Parts []struct {
				Text         *string `json:"text"`
				Thought      bool    `json:"thought"`
				FunctionCall *struct {
					ID   string          `json:"id"`
					Name string          `json:"name"`
					Args json.RawMessage `json:"args"`
				} `json:"functionCall"`
			} `json:"parts"`
			Role string `json:"role"`
		} `json:"content"`
		FinishReason   string   `json:"finishReason"`
		Index          *int     `json:"index"`
		AvgLogprobs    *float64 `json:"avgLogprobs"`
		LogprobsResult *struct {
			TopCandidates []struct {
				Candidates []lpCand `json:"candidates"`
			} `json:"topCandidates"`
			ChosenCandidates  []lpCand `json:"chosenCandidates"`
			LogProbabilitySum float64  `json:"logProbabilitySum"`
		} `json:"logprobsResult"`
	} `json:"candidates"`
	UsageMetadata *struct {
		PromptTokenCount        int `json:"promptTokenCount"`
		CachedContentTokenCount int `json:"cachedContentTokenCount"`
		CandidatesTokenCount    int `json:"candidatesTokenCount"`
		ThoughtsTokenCount      int `json:"thoughtsTokenCount"`
		TotalTokenCount         int `json:"totalTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string `json:"modelVersion"`
	ResponseID   string `json:"responseId"`
	Kvserve      *struct {
		OverheadMS float64 `json:"overhead_ms"`
		HandlerMS  float64 `json:"handler_ms"`
		TTFTMS     float64 `json:"ttft_ms"`
	} `json:"kvserve"`
}

type lpCand struct {
	Token          string  `json:"token"`
	TokenID        int32   `json:"tokenId"`
	LogProbability float64 `json:"logProbability"`
}

// text returns the concatenated non-thought text of candidate i.
func (r *gResp) text(i int) string {
	var sb strings.Builder
	for _, p := range r.Candidates[i].Content.Parts {
		if p.Text != nil && !p.Thought {
			sb.WriteString(*p.Text)
		}
	}
	return sb.String()
}

// thoughts returns the concatenated thought text of candidate i.
func (r *gResp) thoughts(i int) string {
	var sb strings.Builder
	for _, p := range r.Candidates[i].Content.Parts {
		if p.Text != nil && p.Thought {
			sb.WriteString(*p.Text)
		}
	}
	return sb.String()
}

// userContents is a single user turn.
func userContents(text string) []map[string]any {
	return []map[string]any{{"role": "user", "parts": []map[string]any{{"text": text}}}}
}

// sseChunks splits an alt=sse body as the @google/genai SDK does (events
// end at a blank line; their "data:" payload is one response) and decodes
// each chunk.
func sseChunks(t testing.TB, body []byte) []gResp {
	t.Helper()
	var out []gResp
	s := strings.ReplaceAll(string(body), "\r\n", "\n")
	for _, ev := range strings.Split(s, "\n\n") {
		ev = strings.TrimSpace(ev)
		if ev == "" {
			continue
		}
		payload, ok := strings.CutPrefix(ev, "data:")
		if !ok {
			t.Fatalf("SSE event without data: %q", ev)
		}
		var r gResp
		dec := json.NewDecoder(strings.NewReader(payload))
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("chunk %q: %v", payload, err)
		}
		out = append(out, r)
	}
	return out
}

// arrayChunks decodes a streamed JSON array body.
func arrayChunks(t testing.TB, body []byte) []gResp {
	t.Helper()
	var out []gResp
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("streamed array %q: %v", body, err)
	}
	return out
}

// streamed folds stream chunks into one response per candidate as a
// client does: parts concatenated by kind, the last finish reason and
// usage kept. It checks that every chunk names the model and one response
// id.
func streamed(t testing.TB, chunks []gResp, n int) (text, thoughts []string, finish []string, usage gResp) {
	t.Helper()
	text, thoughts, finish = make([]string, n), make([]string, n), make([]string, n)
	if len(chunks) == 0 {
		t.Fatal("no chunks")
	}
	id := chunks[0].ResponseID
	for k, c := range chunks {
		if c.ResponseID != id || id == "" || c.ModelVersion != apitest.ModelName {
			t.Fatalf("chunk %d: responseId %q (first %q), modelVersion %q", k, c.ResponseID, id, c.ModelVersion)
		}
		if c.UsageMetadata != nil && k != len(chunks)-1 {
			t.Fatalf("usage in chunk %d of %d", k, len(chunks))
		}
		for _, cd := range c.Candidates {
			if cd.Index == nil || *cd.Index < 0 || *cd.Index >= n {
				t.Fatalf("chunk %d: bad candidate index", k)
			}
			i := *cd.Index
			if finish[i] != "" {
				t.Fatalf("chunk %d: candidate %d continues after finishing", k, i)
			}
			if cd.Content.Role != "model" {
				t.Fatalf("chunk %d: role %q", k, cd.Content.Role)
			}
			for _, p := range cd.Content.Parts {
				switch {
				case p.Text != nil && p.Thought:
					thoughts[i] += *p.Text
				case p.Text != nil:
					text[i] += *p.Text
				}
			}
			finish[i] = cd.FinishReason
		}
	}
	usage = chunks[len(chunks)-1]
	if usage.UsageMetadata == nil {
		t.Fatal("the last chunk has no usageMetadata")
	}
	return text, thoughts, finish, usage
}

// geminiError is Google's error body.
type geminiError struct {
	Error struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Status  string `json:"status"`
		Details []struct {
			Type            string `json:"@type"`
			RetryDelay      string `json:"retryDelay"`
			FieldViolations []struct {
				Field string `json:"field"`
			} `json:"fieldViolations"`
		} `json:"details"`
	} `json:"error"`
}

// checkErrorShape checks a Gemini error body answered with status and
// returns it.
func checkErrorShape(t testing.TB, status int, data []byte) geminiError {
	t.Helper()
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("error body %s: %v", data, err)
	}
	for _, k := range []string{"code", "message", "status"} {
		if _, ok := raw["error"][k]; !ok {
			t.Fatalf("error body lacks error.%s: %s", k, data)
		}
	}
	var e geminiError
	_ = json.Unmarshal(data, &e)
	if e.Error.Code != status || e.Error.Message == "" || e.Error.Status == "" {
		t.Fatalf("error code %d (HTTP %d), message %q, status %q", e.Error.Code, status, e.Error.Message, e.Error.Status)
	}
	return e
}
