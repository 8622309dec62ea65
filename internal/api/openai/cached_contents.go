package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/ctxcache"
)

// /v1/cached_contents: the context-cache resource (internal/ctxcache) in
// OpenAI's style — snake_case fields, Unix times, list objects, errors in
// OpenAI's shape. It is the same resource as Gemini's cachedContents: a
// cache created here is used from any dialect, and the other way round.
// The record keeps Gemini's JSON (the canonical form), so messages and
// tools are converted on the way in: system messages become the system
// instruction, user and assistant messages text turns, function tools
// functionDeclarations with their JSON Schema.

func cacheRoutes() []api.Route {
	return []api.Route{
		{Pattern: "POST /v1/cached_contents", Handler: createCachedContent},
		{Pattern: "GET /v1/cached_contents", Handler: listCachedContents},
		{Pattern: "GET /v1/cached_contents/{id}", Handler: getCachedContent},
		{Pattern: "POST /v1/cached_contents/{id}", Handler: updateCachedContent},
		{Pattern: "DELETE /v1/cached_contents/{id}", Handler: deleteCachedContent},
	}
}

// cachedContentRequest is the body of a create. Unknown fields are
// refused: a misspelt ttl must not silently become the default.
type cachedContentRequest struct {
	Model       string        `json:"model"`
	DisplayName string        `json:"display_name"`
	Messages    []chatMessage `json:"messages"`
	Tools       []toolJSON    `json:"tools"`
	// TTL is protobuf Duration's form ("3600s"), as everywhere caches are.
	TTL        string `json:"ttl"`
	ExpireTime string `json:"expire_time"`
	// ReuseByDisplayName makes the create idempotent by display_name.
	ReuseByDisplayName bool `json:"reuse_by_display_name"`
}

// cachedContentJSON is the resource as returned.
type cachedContentJSON struct {
	ID          string `json:"id"`
	Object      string `json:"object"`
	Name        string `json:"name"`
	Model       string `json:"model"`
	DisplayName string `json:"display_name,omitempty"`
	CreatedAt   int64  `json:"created_at"`
	UpdatedAt   int64  `json:"updated_at"`
	ExpiresAt   int64  `json:"expires_at"`
	Usage       struct {
		TotalTokens int `json:"total_tokens"`
	} `json:"usage"`
}

func toCachedContentJSON(c *ctxcache.Cache) cachedContentJSON {
	out := cachedContentJSON{ID: c.ID, Object: "cached_content", Name: c.Name(), Model: c.Model, DisplayName: c.DisplayName,
		CreatedAt: c.CreateTime.Unix(), UpdatedAt: c.UpdateTime.Unix(), ExpiresAt: c.ExpireTime.Unix()}
	out.Usage.TotalTokens = c.TokenCount
	return out
}

// decodeStrict reads the body with api.DecodeJSONBytes' checks and then
// refuses unknown fields.
func decodeStrict(c *api.Call, v any) error {
	body, err := io.ReadAll(c.R.Body)
	if err != nil {
		return api.AsError(err)
	}
	if err := api.DecodeJSONBytes(body, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		const unknown = "json: unknown field "
		if msg := err.Error(); strings.HasPrefix(msg, unknown) {
			field := strings.Trim(strings.TrimPrefix(msg, unknown), `"`)
			return api.InvalidParam(field, "unknown field %q", field)
		}
		return api.InvalidParam("", "invalid JSON: %v", err)
	}
	return nil
}

// geminiFields converts messages and tools into the record's Gemini JSON:
// the system instruction, the contents, the tools.
func geminiFields(msgs []chatMessage, tools []toolJSON) (system, contents, gtools json.RawMessage, err error) {
	type part struct {
		Text string `json:"text"`
	}
	type content struct {
		Role  string `json:"role,omitempty"`
		Parts []part `json:"parts"`
	}
	var sys []string
	var turns []content
	for i, m := range msgs {
		param := fmt.Sprintf("messages[%d]", i)
		if len(m.ToolCalls) > 0 || m.ToolCallID != "" {
			return nil, nil, nil, api.InvalidParam(param, "a cached content holds text turns only (no tool calls or results)")
		}
		switch m.Role {
		case "system", "developer":
			if len(turns) > 0 {
				return nil, nil, nil, api.InvalidParam(param+".role", "system messages come before the conversation in a cached content")
			}
			sys = append(sys, m.Content.text)
		case "user":
			turns = append(turns, content{Role: "user", Parts: []part{{m.Content.text}}})
		case "assistant":
			turns = append(turns, content{Role: "model", Parts: []part{{m.Content.text}}})
		default:
			return nil, nil, nil, api.InvalidParam(param+".role", "role %q: a cached content takes system, user and assistant messages", m.Role)
		}
	}
	if len(sys) > 0 {
		if system, err = json.Marshal(content{Parts: []part{{strings.Join(sys, "\n")}}}); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(turns) > 0 {
		if contents, err = json.Marshal(turns); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(tools) > 0 {
		type decl struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parametersJsonSchema,omitempty"`
		}
		var decls []decl
		for i, t := range tools {
			if t.Type != "function" {
				return nil, nil, nil, api.InvalidParam(fmt.Sprintf("tools[%d].type", i), "tool type %q is not supported (function)", t.Type)
			}
			var params json.RawMessage
			if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && string(p) != "null" {
				var b bytes.Buffer
				if err := json.Compact(&b, p); err != nil || p[0] != '{' {
					return nil, nil, nil, api.InvalidParam(fmt.Sprintf("tools[%d].function.parameters", i), "parameters must be a JSON Schema object")
				}
				params = b.Bytes()
			}
			decls = append(decls, decl{t.Function.Name, t.Function.Description, params})
		}
		if gtools, err = json.Marshal([]map[string]any{{"functionDeclarations": decls}}); err != nil {
			return nil, nil, nil, err
		}
	}
	return system, contents, gtools, nil
}

// createCachedContent serves POST /v1/cached_contents.
func createCachedContent(c *api.Call) error {
	var body cachedContentRequest
	if err := decodeStrict(c, &body); err != nil {
		return err
	}
	if body.Model == "" {
		return api.InvalidParam("model", "model is required")
	}
	if len(body.Messages) == 0 {
		return api.InvalidParam("messages", "a cached content needs messages")
	}
	system, contents, tools, err := geminiFields(body.Messages, body.Tools)
	if err != nil {
		return err
	}
	spec := ctxcache.Spec{Model: body.Model, DisplayName: body.DisplayName, SystemInstruction: system, Contents: contents,
		Tools: tools, TTL: body.TTL, ExpireTime: body.ExpireTime, ReuseByDisplayName: body.ReuseByDisplayName}
	cc, _, err := c.CreateCache(spec, c.CacheRequest())
	if err != nil {
		return renameCacheParam(err)
	}
	return api.WriteJSON(c.W, http.StatusOK, toCachedContentJSON(&cc))
}

// renameCacheParam names the fields the cache service blames (in Gemini's
// names) as this endpoint calls them.
func renameCacheParam(err error) error {
	names := map[string]string{"expireTime": "expire_time", "displayName": "display_name", "contents": "messages",
		"systemInstruction": "messages", "pageSize": "limit", "pageToken": "after", "cachedContent": "id", "name": "id"}
	if ae := api.AsError(err); ae != nil {
		if n, ok := names[ae.Param]; ok {
			ae.Param = n
		}
		return ae
	}
	return err
}

// getCachedContent serves GET /v1/cached_contents/{id}.
func getCachedContent(c *api.Call) error {
	cc, err := c.GetCache(ctxcache.NamePrefix + c.R.PathValue("id"))
	if err != nil {
		return renameCacheParam(err)
	}
	return api.WriteJSON(c.W, http.StatusOK, toCachedContentJSON(&cc))
}

// listCachedContents serves GET /v1/cached_contents?limit=&after=.
func listCachedContents(c *api.Call) error {
	q := c.R.URL.Query()
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return api.InvalidParam("limit", "limit must be a positive integer")
		}
		limit = n
	}
	token := ""
	if after := q.Get("after"); after != "" {
		id, ok := ctxcache.ParseName(after)
		if !ok {
			return api.InvalidParam("after", "after %q is not a cached content id", after)
		}
		token = ctxcache.PageTokenAfter(id)
	}
	list, next, err := c.ListCaches(limit, token)
	if err != nil {
		return renameCacheParam(err)
	}
	out := struct {
		Object  string              `json:"object"`
		Data    []cachedContentJSON `json:"data"`
		HasMore bool                `json:"has_more"`
		LastID  *string             `json:"last_id"`
	}{Object: "list", Data: make([]cachedContentJSON, len(list)), HasMore: next != ""}
	for i := range list {
		out.Data[i] = toCachedContentJSON(&list[i])
	}
	if len(list) > 0 {
		out.LastID = &list[len(list)-1].ID
	}
	return api.WriteJSON(c.W, http.StatusOK, out)
}

// updateCachedContent serves POST /v1/cached_contents/{id}: ttl or
// expire_time, nothing else.
func updateCachedContent(c *api.Call) error {
	var body struct {
		TTL        string `json:"ttl"`
		ExpireTime string `json:"expire_time"`
	}
	if err := decodeStrict(c, &body); err != nil {
		return err
	}
	cc, err := c.UpdateCache(ctxcache.NamePrefix+c.R.PathValue("id"), body.TTL, body.ExpireTime, c.CacheRequest())
	if err != nil {
		return renameCacheParam(err)
	}
	return api.WriteJSON(c.W, http.StatusOK, toCachedContentJSON(&cc))
}

// deleteCachedContent serves DELETE /v1/cached_contents/{id}.
func deleteCachedContent(c *api.Call) error {
	id := c.R.PathValue("id")
	if err := c.DeleteCache(ctxcache.NamePrefix + id); err != nil {
		return renameCacheParam(err)
	}
	return api.WriteJSON(c.W, http.StatusOK, map[string]any{"id": id, "object": "cached_content.deleted", "deleted": true})
}
