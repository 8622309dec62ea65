// Package gemini is the Gemini dialect of the kvserve API: the
// generativelanguage v1beta surface that Google's @google/genai SDK (and the
// older google-generativeai clients) speak —
// models/{model}:generateContent, :streamGenerateContent (server-sent events
// with ?alt=sse, a streamed JSON array without it), :countTokens, and the
// model listing — in Gemini's own shapes.
//
// Like every dialect it only translates: Gemini contents (user and model
// turns of text, thought, functionCall and functionResponse parts), the
// systemInstruction, functionDeclarations with their OpenAPI-subset schemas
// (mapped to JSON Schema, which the chat template shows the model and the
// grammar enforces), toolConfig and generationConfig become one
// api.Request; api.Events become candidates, parts and usageMetadata.
// Templating, tokenizing, grammars, stop strings and tool-call parsing
// happen in package api, the same for every dialect.
//
// # Choices made where Google's behaviour is not ours to copy
//
//   - Request field names are accepted in lowerCamelCase and in the proto's
//     snake_case (Google's own curl examples use system_instruction and
//     function_declarations), and a repeated field may be given as a single
//     value, as Google's JSON parser allows.
//   - A prompt longer than the context, and a body over the size limit, are
//     HTTP 400 INVALID_ARGUMENT, not 413: that is what Google answers ("The
//     input token count (N) exceeds the maximum number of tokens allowed
//     (M)"; "Request payload size exceeds the limit"), and what Gemini
//     clients handle as a non-retryable client error.
//   - cachedContent names a context-cache resource (/v1beta/cachedContents,
//     caches.go): the request's contents follow the cache's, which brings
//     the system instruction and tools (the request may not add its own).
//     A name that does not resolve, another tenant's included, is 404
//     NOT_FOUND, so a client never silently runs without the cache it asked
//     for. Creating a cache refuses unknown fields, as Google does.
//   - functionCallingConfig mode ANY with allowedFunctionNames forces a call
//     through the grammar: one name is a named call, all (or none) of the
//     declared functions any call. A proper subset of two or more is served
//     by declaring only those functions to the model, as the core's tool
//     choice names one tool or all of them.
//   - Streamed function calls are sent whole, as Gemini does, in the chunk
//     where the call ends; arguments that are not a JSON object end the
//     candidate with MALFORMED_FUNCTION_CALL.
//   - An error after a stream has started is written as a bare JSON error
//     object (SSE) or as the last element of the array, as Google does and
//     as the SDKs detect.
//
// Stream chunks are built by appending JSON to reused buffers rather than
// by reflection: they are written once per batch of generated tokens.
package gemini

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
)

// Dialect serves the Gemini API. The zero value is ready to use.
type Dialect struct{}

// New returns the Gemini dialect.
func New() *Dialect { return &Dialect{} }

var (
	_ api.Dialect = (*Dialect)(nil)
	_ api.Claimer = (*Dialect)(nil)
)

// Name returns "gemini".
func (d *Dialect) Name() string { return "gemini" }

// Routes lists the Gemini endpoints. Go's ServeMux cannot match
// "{model}:generateContent" as a wildcard followed by a literal, so one
// route takes everything under models/ and the method is split off at the
// last ':'. The v1 paths (the SDKs' apiVersion "v1", the default of
// @google/genai 3) share the POST methods; v1's model listing is shared
// with the OpenAI dialect: a Gemini client (geminiClient) gets Gemini's
// shape, everyone else OpenAI's.
func (d *Dialect) Routes() []api.Route {
	routes := []api.Route{
		{Pattern: "POST /v1beta/models/{rest...}", Handler: modelMethod},
		{Pattern: "POST /v1/models/{rest...}", Handler: modelMethod},
		{Pattern: "GET /v1beta/models", Handler: listModels},
		{Pattern: "GET /v1beta/models/{rest...}", Handler: getModel},
		{Pattern: "GET /v1/models", Handler: listModels, Claim: geminiClient},
		{Pattern: "GET /v1/models/{rest...}", Handler: getModel, Claim: geminiClient},
	}
	routes = append(routes, cacheRoutes("/v1beta")...)
	return append(routes, cacheRoutes("/v1")...)
}

// geminiClient reports whether r comes from a Gemini client: the Google
// SDKs name themselves in x-goog-api-client and send the key in
// x-goog-api-key (or the key query parameter); OpenAI's clients do neither.
func geminiClient(r *http.Request) bool {
	return r.Header.Get("X-Goog-Api-Client") != "" || r.Header.Get("X-Goog-Api-Key") != "" || r.URL.Query().Has("key")
}

// Claims reports whether r belongs to the Gemini API (any path under
// /v1beta/, and /v1/cachedContents), so that unknown routes and methods
// there get Gemini's 404.
func (d *Dialect) Claims(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/v1beta/") || strings.HasPrefix(r.URL.Path, "/v1/cachedContents")
}

// The methods of a model resource.
const (
	methodGenerate    = "generateContent"
	methodStream      = "streamGenerateContent"
	methodCountTokens = "countTokens"
)

// splitMethod splits "models/{model}:{method}" (the models/ prefix
// optional) into the model id and the method.
func splitMethod(rest string) (model, method string, ok bool) {
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return "", "", false
	}
	return trimModelPrefix(rest[:i]), rest[i+1:], true
}

// trimModelPrefix drops the resource prefix "models/" from a model name.
func trimModelPrefix(name string) string { return strings.TrimPrefix(name, "models/") }

// modelMethod serves POST /v1beta/models/{model}:{method}.
func modelMethod(c *api.Call) error {
	model, method, ok := splitMethod(c.R.PathValue("rest"))
	if !ok || model == "" {
		return api.Errorf(api.CodeNotFound, "unknown route %s %s: expected models/{model}:generateContent, :streamGenerateContent or :countTokens", c.R.Method, c.R.URL.Path)
	}
	switch method {
	case methodGenerate:
		return generate(c, model, false)
	case methodStream:
		return generate(c, model, true)
	case methodCountTokens:
		return countTokens(c, model)
	}
	return api.Errorf(api.CodeNotFound, "method %q of models/%s is not supported (generateContent, streamGenerateContent, countTokens)", method, model)
}

// isArrayStream reports whether r asks for a stream framed as a JSON array
// (streamGenerateContent without alt=sse).
func isArrayStream(r *http.Request) bool {
	if r == nil || r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, ":"+methodStream) {
		return false
	}
	return r.URL.Query().Get("alt") != "sse"
}

// errorBody is Google's error shape (google.rpc.Status as JSON).
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Code    int           `json:"code"`
	Message string        `json:"message"`
	Status  string        `json:"status"`
	Details []errorDetail `json:"details,omitempty"`
}

// errorDetail is one of the google.rpc detail messages Google attaches: a
// BadRequest naming the field at fault, or a RetryInfo with the delay.
type errorDetail struct {
	Type            string           `json:"@type"`
	FieldViolations []fieldViolation `json:"fieldViolations,omitempty"`
	RetryDelay      string           `json:"retryDelay,omitempty"`
}

type fieldViolation struct {
	Field       string `json:"field"`
	Description string `json:"description"`
}

// status returns the HTTP status Gemini answers e with: the table's, except
// that a prompt or body too large is a 400, as at Google.
func status(e *api.Error) int {
	if e.Code == api.CodeTooLarge {
		return http.StatusBadRequest
	}
	return e.Status()
}

// coreParams renames the request fields the core blames (in OpenAI's
// terms) to the Gemini fields they came from.
var coreParams = map[string]string{
	"messages":                           "contents",
	"response_format":                    "generationConfig.responseMimeType",
	"response_format.json_schema.schema": "generationConfig.responseSchema",
	"tool_choice":                        "toolConfig.functionCallingConfig",
}

// toErrorBody builds Gemini's error object for e.
func toErrorBody(e *api.Error) errorBody {
	st := status(e)
	obj := errorObject{Code: st, Message: e.Message, Status: e.Code.Kind().GeminiStatus}
	if e.Param != "" {
		field := e.Param
		if f, ok := coreParams[field]; ok {
			field = f
		}
		obj.Details = append(obj.Details, errorDetail{
			Type:            "type.googleapis.com/google.rpc.BadRequest",
			FieldViolations: []fieldViolation{{Field: field, Description: e.Message}},
		})
	}
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + 999_999_999) / 1_000_000_000)
		obj.Details = append(obj.Details, errorDetail{
			Type:       "type.googleapis.com/google.rpc.RetryInfo",
			RetryDelay: strconv.FormatInt(secs, 10) + "s",
		})
	}
	return errorBody{Error: obj}
}

// WriteError writes e as {"error": {"code", "message", "status",
// "details"}} with Gemini's status for it; a streamGenerateContent call
// without alt=sse gets it inside a JSON array, as Google sends it.
func (d *Dialect) WriteError(w http.ResponseWriter, r *http.Request, e *api.Error) {
	api.SetErrorHeaders(w, e)
	body := toErrorBody(e)
	if isArrayStream(r) {
		_ = api.WriteJSON(w, status(e), []errorBody{body})
		return
	}
	_ = api.WriteJSON(w, status(e), body)
}

// appendError appends e's error object as JSON.
func appendError(b []byte, e *api.Error) []byte {
	j, err := json.Marshal(toErrorBody(e))
	if err != nil { // cannot happen: plain strings and numbers
		return append(b, `{"error":{"code":500,"message":"internal error","status":"INTERNAL"}}`...)
	}
	return append(b, j...)
}
