package gemini

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
)

// generate serves generateContent and streamGenerateContent on model.
func generate(c *api.Call, model string, stream bool) error {
	var body generateRequest
	if err := decodeBody(c.R, &body); err != nil {
		return err
	}
	cache := body.takeCache()
	req, opts, err := body.toRequest(model)
	if err != nil {
		return err
	}
	useCache(req, cache)
	run, err := c.Start(req)
	if err != nil {
		return err
	}
	if stream {
		return streamGenerate(c, run, opts)
	}
	choices, err := run.Collect()
	if err != nil {
		return err
	}
	resp := response{
		Candidates:   make([]candidate, len(choices)),
		ModelVersion: run.Model().ID,
		ResponseID:   newResponseID(),
	}
	for i, ch := range choices {
		if ch.Finish == api.FinishError {
			return engineFailure(ch.Err)
		}
		resp.Candidates[i] = toCandidate(ch, opts)
	}
	u := toUsage(run.Usage())
	resp.UsageMetadata = &u
	t := c.Timings()
	resp.Kvserve = &t
	return api.WriteJSON(c.W, 200, resp)
}

// takeCache returns the request's cachedContent and clears it: the core
// resolves it (useCache) once the request is converted.
func (g *generateRequest) takeCache() string {
	name := g.CachedContent
	g.CachedContent = ""
	return name
}

// useCache makes req the continuation of the context cache named cache, if
// any: the core checks it for cachedContents.use (and audits it) and puts
// its system instruction, tools and contents before the request's, the
// request's own system instruction and tools appended (Call.applyCache).
func useCache(req *api.Request, cache string) {
	if cache != "" {
		req.CachedContent, req.CachedContentParam = cache, "cachedContent"
	}
}

// engineFailure is the error of a sample the engine failed.
func engineFailure(err error) *api.Error {
	if err == nil {
		err = errors.New("generation failed")
	}
	return &api.Error{Code: api.CodeInternal, Message: "generation failed", Err: err}
}

// response is a GenerateContentResponse.
type response struct {
	Candidates    []candidate    `json:"candidates"`
	UsageMetadata *usageMetadata `json:"usageMetadata,omitempty"`
	ModelVersion  string         `json:"modelVersion"`
	ResponseID    string         `json:"responseId"`
	// Kvserve reports the server's timings (an extension; SDKs ignore it).
	Kvserve *api.Timings `json:"kvserve,omitempty"`
}

// candidate is one Candidate of a response.
type candidate struct {
	Content        contentOut      `json:"content"`
	FinishReason   string          `json:"finishReason,omitempty"`
	FinishMessage  string          `json:"finishMessage,omitempty"`
	Index          int             `json:"index"`
	AvgLogprobs    *float64        `json:"avgLogprobs,omitempty"`
	LogprobsResult *logprobsResult `json:"logprobsResult,omitempty"`
}

type contentOut struct {
	Parts []partOut `json:"parts"`
	Role  string    `json:"role"`
}

// partOut is a generated part: text (a thought when Thought is set) or a
// function call.
type partOut struct {
	Text         *string          `json:"text,omitempty"`
	Thought      bool             `json:"thought,omitempty"`
	FunctionCall *functionCallOut `json:"functionCall,omitempty"`
}

type functionCallOut struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

// usageMetadata is the response's token accounting. candidatesTokenCount
// excludes the thoughts, which thoughtsTokenCount counts, as at Google;
// cachedContentTokenCount is the prompt tokens served from the KV prefix
// cache.
type usageMetadata struct {
	PromptTokenCount        int             `json:"promptTokenCount"`
	CachedContentTokenCount int             `json:"cachedContentTokenCount,omitempty"`
	CandidatesTokenCount    int             `json:"candidatesTokenCount,omitempty"`
	ThoughtsTokenCount      int             `json:"thoughtsTokenCount,omitempty"`
	TotalTokenCount         int             `json:"totalTokenCount"`
	PromptTokensDetails     []modalityCount `json:"promptTokensDetails,omitempty"`
	CacheTokensDetails      []modalityCount `json:"cacheTokensDetails,omitempty"`
}

type modalityCount struct {
	Modality   string `json:"modality"`
	TokenCount int    `json:"tokenCount"`
}

func toUsage(u api.Usage) usageMetadata {
	out := usageMetadata{
		PromptTokenCount:        u.PromptTokens,
		CachedContentTokenCount: u.CachedTokens,
		CandidatesTokenCount:    u.CompletionTokens - u.ReasoningTokens,
		ThoughtsTokenCount:      u.ReasoningTokens,
		TotalTokenCount:         u.PromptTokens + u.CompletionTokens,
		PromptTokensDetails:     []modalityCount{{"TEXT", u.PromptTokens}},
	}
	if u.CachedTokens > 0 {
		out.CacheTokensDetails = []modalityCount{{"TEXT", u.CachedTokens}}
	}
	return out
}

// logprobsResult is a candidate's LogprobsResult.
type logprobsResult struct {
	TopCandidates     []topCandidates    `json:"topCandidates,omitempty"`
	ChosenCandidates  []logprobCandidate `json:"chosenCandidates"`
	LogProbabilitySum float64            `json:"logProbabilitySum"`
}

type topCandidates struct {
	Candidates []logprobCandidate `json:"candidates"`
}

type logprobCandidate struct {
	Token          string  `json:"token"`
	TokenID        int32   `json:"tokenId"`
	LogProbability float64 `json:"logProbability"`
}

// toLogprobs converts a run of token logprobs; top adds the alternatives.
func toLogprobs(lps []api.TokenLogprob, top bool) *logprobsResult {
	out := &logprobsResult{ChosenCandidates: make([]logprobCandidate, len(lps))}
	if top {
		out.TopCandidates = make([]topCandidates, len(lps))
	}
	for i, lp := range lps {
		out.ChosenCandidates[i] = logprobCandidate{Token: lp.Text, TokenID: lp.Token, LogProbability: lp.Logprob}
		out.LogProbabilitySum += lp.Logprob
		if top {
			tc := make([]logprobCandidate, len(lp.Top))
			for j, t := range lp.Top {
				tc[j] = logprobCandidate{Token: t.Text, TokenID: t.Token, LogProbability: t.Logprob}
			}
			out.TopCandidates[i] = topCandidates{Candidates: tc}
		}
	}
	return out
}

// finishReason maps a finish reason to Gemini's (a function call ends
// with STOP, as at Google).
func finishReason(f api.FinishReason) string {
	switch f {
	case api.FinishLength:
		return "MAX_TOKENS"
	case api.FinishStop, api.FinishToolCalls:
		return "STOP"
	case api.FinishNone:
		return ""
	}
	return "OTHER"
}

// malformedCall is the finish reason of a candidate whose function call
// could not be parsed.
const malformedCall = "MALFORMED_FUNCTION_CALL"

// validArgs reports whether args is a JSON object.
func validArgs(args string) bool {
	a := strings.TrimSpace(args)
	return len(a) > 0 && a[0] == '{' && json.Valid([]byte(a))
}

// toCandidate builds the candidate of one finished sample.
func toCandidate(ch api.Choice, o options) candidate {
	cd := candidate{Index: ch.Index, Content: contentOut{Role: "model"}, FinishReason: finishReason(ch.Finish)}
	if o.includeThoughts && ch.Reasoning != "" {
		r := ch.Reasoning
		cd.Content.Parts = append(cd.Content.Parts, partOut{Text: &r, Thought: true})
	}
	if ch.Text != "" {
		t := ch.Text
		cd.Content.Parts = append(cd.Content.Parts, partOut{Text: &t})
	}
	malformed := ch.Finish == api.FinishToolCalls && ch.Err != nil
	for _, tc := range ch.ToolCalls {
		if !validArgs(tc.Arguments) {
			malformed = true
			continue
		}
		cd.Content.Parts = append(cd.Content.Parts, partOut{FunctionCall: &functionCallOut{ID: tc.ID, Name: tc.Name, Args: json.RawMessage(strings.TrimSpace(tc.Arguments))}})
	}
	if malformed && ch.Finish != api.FinishLength {
		cd.FinishReason = malformedCall
		cd.FinishMessage = "the model's function call could not be parsed as a call with a JSON object of arguments"
	}
	if len(cd.Content.Parts) == 0 {
		// Google leaves parts out here; an empty text part keeps clients
		// that read parts[0] working.
		empty := ""
		cd.Content.Parts = []partOut{{Text: &empty}}
	}
	if o.logprobs {
		lr := toLogprobs(ch.Logprobs, o.topLogprobs > 0)
		cd.LogprobsResult = lr
		if n := len(ch.Logprobs); n > 0 {
			avg := lr.LogProbabilitySum / float64(n)
			cd.AvgLogprobs = &avg
		}
	}
	return cd
}

// newResponseID returns a response id: 24 random letters and digits.
func newResponseID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	var b [24]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b[:])
}
