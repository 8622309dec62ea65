package openai

import (
	"fmt"

	"github.com/kvserve/kvserve/internal/api"
)

// modelJSON is one entry of the model listing. Beyond OpenAI's fields it
// says how long a context the model takes and, for the synthetic default
// model, that its output is not language.
type modelJSON struct {
	ID            string `json:"id"`
	Object        string `json:"object"`
	Created       int64  `json:"created"`
	OwnedBy       string `json:"owned_by"`
	Description   string `json:"description,omitempty"`
	Synthetic     bool   `json:"synthetic,omitempty"`
	ContextLength int    `json:"context_length"`
}

func toModelJSON(m *api.Model) modelJSON {
	return modelJSON{
		ID: m.ID, Object: "model", Created: m.Created.Unix(), OwnedBy: m.OwnedBy,
		Description: m.Description, Synthetic: m.Synthetic, ContextLength: m.ContextLength,
	}
}

// listModels serves GET /v1/models.
func listModels(c *api.Call) error {
	data := []modelJSON{}
	for _, m := range c.Models() {
		data = append(data, toModelJSON(m))
	}
	return api.WriteJSON(c.W, 200, map[string]any{"object": "list", "data": data})
}

// getModel serves GET /v1/models/{id}.
func getModel(c *api.Call) error {
	id := c.R.PathValue("id")
	for _, m := range c.Models() {
		if m.ID == id {
			return api.WriteJSON(c.W, 200, toModelJSON(m))
		}
	}
	if !c.Ready() {
		_, err := c.Model(id)
		return err
	}
	return &api.Error{Code: api.CodeNotFound, Param: "model", OpenAICode: "model_not_found",
		Message: fmt.Sprintf("the model %q does not exist", id)}
}
