// Package openai is the OpenAI dialect of the kvserve API:
// /v1/chat/completions, /v1/completions, /v1/responses, /v1/models and
// /v1/cached_contents (context caches, cached_contents.go),
// streamed as server-sent events and not, in the shapes the official SDKs
// parse.
//
// The package only translates: request JSON into api.Request (messages,
// tools, tool_choice, response_format, sampling fields, the kvserve
// extension) and api.Events into OpenAI's response objects and chunks. All
// model work — templating, tokenizing, grammars, stop strings, tool-call
// parsing — happens in package api, the same for every dialect.
//
// Stream chunks are built by appending JSON to a reused buffer rather than
// by reflection, since they are written once per generated token for every
// stream.
package openai

import (
	"crypto/rand"
	"encoding/json"
	"net/http"

	"github.com/kvserve/kvserve/internal/api"
)

// Dialect serves the OpenAI API. The zero value is ready to use.
type Dialect struct{}

// New returns the OpenAI dialect.
func New() *Dialect { return &Dialect{} }

var _ api.Dialect = (*Dialect)(nil)

// Name returns "openai".
func (d *Dialect) Name() string { return "openai" }

// Routes lists the OpenAI endpoints.
func (d *Dialect) Routes() []api.Route {
	routes := []api.Route{
		{Pattern: "POST /v1/chat/completions", Handler: chatCompletions},
		{Pattern: "POST /v1/completions", Handler: completions},
		{Pattern: "POST /v1/responses", Handler: responses},
		{Pattern: "GET /v1/models", Handler: listModels},
		{Pattern: "GET /v1/models/{id...}", Handler: getModel},
	}
	return append(routes, cacheRoutes()...)
}

// errorBody is OpenAI's error shape.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// WriteError writes e as {"error": {"message", "type", "param", "code"}}.
func (d *Dialect) WriteError(w http.ResponseWriter, _ *http.Request, e *api.Error) {
	api.SetErrorHeaders(w, e)
	_ = api.WriteJSON(w, e.Status(), toErrorBody(e))
}

func toErrorBody(e *api.Error) errorBody {
	k := e.Code.Kind()
	obj := errorObject{Message: e.Message, Type: k.OpenAIType}
	if e.Param != "" {
		p := e.Param
		obj.Param = &p
	}
	code := k.OpenAICode
	if e.OpenAICode != "" {
		code = e.OpenAICode
	}
	if code != "" {
		obj.Code = &code
	}
	return errorBody{Error: obj}
}

// newID returns prefix followed by 24 random letters and digits.
func newID(prefix string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	var b [24]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b[:])
}

// stringOrList decodes a JSON string or array of strings.
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = stringOrList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return api.InvalidParam("stop", "stop must be a string or an array of strings")
	}
	*s = many
	return nil
}
