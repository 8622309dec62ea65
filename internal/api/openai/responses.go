package openai

import "github.com/kvserve/kvserve/internal/api"

// responses serves POST /v1/responses.
func responses(c *api.Call) error {
	return api.Errorf(api.CodeNotFound, "the Responses API is not implemented yet")
}
