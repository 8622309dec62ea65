package gemini

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat/outparse"
)

// modelJSON is Gemini's Model resource.
type modelJSON struct {
	Name                       string   `json:"name"`
	Version                    string   `json:"version"`
	DisplayName                string   `json:"displayName"`
	Description                string   `json:"description,omitempty"`
	InputTokenLimit            int      `json:"inputTokenLimit"`
	OutputTokenLimit           int      `json:"outputTokenLimit"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
	Temperature                float64  `json:"temperature"`
	MaxTemperature             float64  `json:"maxTemperature"`
	TopP                       float64  `json:"topP"`
	Thinking                   bool     `json:"thinking,omitempty"`
}

// methods are the generation methods every served model supports
// (streamGenerateContent is implied by generateContent, as at Google).
var methods = []string{methodGenerate, methodCountTokens}

func toModelJSON(m *api.Model) modelJSON {
	thinking := false
	if m.Template != nil {
		_, _, thinking = outparse.ForTemplate(m.Template).ReasoningTags()
	}
	return modelJSON{
		Name: "models/" + m.ID, Version: "kvserve", DisplayName: m.ID, Description: m.Description,
		// One context holds prompt and output: each limit is all of it.
		InputTokenLimit: m.ContextLength, OutputTokenLimit: m.ContextLength,
		SupportedGenerationMethods: methods,
		Temperature:                1, MaxTemperature: 2, TopP: 1, Thinking: thinking,
	}
}

// listModels serves GET /v1beta/models ({"models": [...]}: one page, no
// nextPageToken).
func listModels(c *api.Call) error {
	models := []modelJSON{}
	for _, m := range c.Models() {
		models = append(models, toModelJSON(m))
	}
	return api.WriteJSON(c.W, 200, map[string]any{"models": models})
}

// getModel serves GET /v1beta/models/{model} (and /v1/models/{model} to a
// Gemini client, a pattern it shares with OpenAI's route, whose wildcard
// is named id).
func getModel(c *api.Call) error {
	rest := c.R.PathValue("rest")
	if rest == "" {
		rest = c.R.PathValue("id")
	}
	id := trimModelPrefix(rest)
	for _, m := range c.Models() {
		if m.ID == id {
			return api.WriteJSON(c.W, 200, toModelJSON(m))
		}
	}
	if !c.Ready() {
		_, err := c.Model(id)
		return err
	}
	return &api.Error{Code: api.CodeNotFound, Param: "name",
		Message: fmt.Sprintf("models/%s is not found for API version %s; call ListModels to see the available models", id, apiVersion(c.R))}
}

// countRequest is the body of countTokens: contents alone (with, as
// Vertex sends them, a system instruction and tools beside them), or a
// whole generateContentRequest.
type countRequest struct {
	generateRequest
	GenerateContentRequest *generateRequest `json:"generateContentRequest"`
}

// countTokens serves POST /v1beta/models/{model}:countTokens: the tokens of
// the prompt the request would run, as the chat template renders it.
func countTokens(c *api.Call, model string) error {
	var body countRequest
	if err := decodeBody(c.R, &body); err != nil {
		return err
	}
	g := body.GenerateContentRequest
	switch {
	case g != nil && len(body.Contents) > 0:
		return api.InvalidParam("contents", "give contents or generateContentRequest, not both")
	case g == nil:
		g = &body.generateRequest
	case g.Model != "" && trimModelPrefix(g.Model) != model:
		return api.InvalidParam("generateContentRequest.model", "generateContentRequest.model %q differs from the model of the path %q", g.Model, model)
	}
	cache := g.takeCache()
	req, _, err := g.toRequest(model)
	if err != nil {
		return err
	}
	useCache(req, cache)
	p, err := c.Tokenize(req)
	if err != nil {
		return err
	}
	n := len(p.Tokens)
	return api.WriteJSON(c.W, 200, map[string]any{
		"totalTokens":         n,
		"promptTokensDetails": []modalityCount{{"TEXT", n}},
	})
}

// apiVersion is the API version a request's path names (v1 or v1beta).
func apiVersion(r *http.Request) string {
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		return "v1"
	}
	return "v1beta"
}
