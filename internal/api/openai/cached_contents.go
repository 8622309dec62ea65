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
		{Pattern: "GET /v1/cached_contents/{id}/content", Handler: cachedContentContent},
		{Pattern: "POST /v1/cached_contents/{id}/extend", Handler: extendCachedContent},
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
	// Shared publishes the cache to every tenant (administrators only).
	Shared bool `json:"shared"`
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
	field, err := api.UnknownField(body, v)
	switch {
	case err != nil:
		return api.InvalidParam("", "invalid JSON: %v", err)
	case field != "":
		return api.InvalidParam(field, "unknown field %q", field)
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
		Tools: tools, TTL: body.TTL, ExpireTime: body.ExpireTime, ReuseByDisplayName: body.ReuseByDisplayName, Shared: body.Shared}
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

// cachedContentContent serves GET /v1/cached_contents/{id}/content: what
// the cache holds — its system instruction, contents, tools and tool
// config in the canonical Gemini JSON every dialect renders it from — for
// its owner or an administrator.
func cachedContentContent(c *api.Call) error {
	cc, err := c.CacheContents(ctxcache.NamePrefix + c.R.PathValue("id"))
	if err != nil {
		return renameCacheParam(err)
	}
	return api.WriteJSON(c.W, http.StatusOK, struct {
		ID                string          `json:"id"`
		Object            string          `json:"object"`
		Name              string          `json:"name"`
		SystemInstruction json.RawMessage `json:"system_instruction,omitempty"`
		Contents          json.RawMessage `json:"contents,omitempty"`
		Tools             json.RawMessage `json:"tools,omitempty"`
		ToolConfig        json.RawMessage `json:"tool_config,omitempty"`
	}{cc.ID, "cached_content.content", cc.Name(), cc.SystemInstruction, cc.Contents, cc.Tools, cc.ToolConfig})
}

// extendCachedContent serves POST /v1/cached_contents/{id}/extend: a new
// cache whose contents are the old one's followed by the body's messages
// (user and assistant turns), with the old one's system instruction and
// tools. Its prefill is a prefix hit on the old cache's blocks, which the
// two then share; the old cache is unchanged. Extending needs reading the
// old one's contents (its owner, or an administrator) and creating.
func extendCachedContent(c *api.Call) error {
	var body struct {
		DisplayName string        `json:"display_name"`
		Messages    []chatMessage `json:"messages"`
		TTL         string        `json:"ttl"`
		ExpireTime  string        `json:"expire_time"`
	}
	if err := decodeStrict(c, &body); err != nil {
		return err
	}
	if len(body.Messages) == 0 {
		return api.InvalidParam("messages", "an extension needs messages to append")
	}
	for i, m := range body.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return api.InvalidParam(fmt.Sprintf("messages[%d].role", i), "an extension appends user and assistant turns; the system prompt and tools are the extended cache's")
		}
	}
	old, err := c.CacheContents(ctxcache.NamePrefix + c.R.PathValue("id"))
	if err != nil {
		return renameCacheParam(err)
	}
	_, more, _, err := geminiFields(body.Messages, nil)
	if err != nil {
		return err
	}
	contents, err := appendContents(old.Contents, more)
	if err != nil {
		return err
	}
	name := body.DisplayName
	if name == "" {
		name = old.DisplayName
	}
	spec := ctxcache.Spec{Model: old.Model, DisplayName: name, SystemInstruction: old.SystemInstruction, Contents: contents,
		Tools: old.Tools, ToolConfig: old.ToolConfig, TTL: body.TTL, ExpireTime: body.ExpireTime}
	cc, _, err := c.CreateCache(spec, c.CacheRequest())
	if err != nil {
		return renameCacheParam(err)
	}
	out := toCachedContentJSON(&cc)
	return api.WriteJSON(c.W, http.StatusOK, struct {
		cachedContentJSON
		Extends string `json:"extends"`
	}{out, old.Name()})
}

// appendContents concatenates two Gemini contents values: arrays of
// contents, or one content alone (as Gemini accepts); either may be empty.
func appendContents(a, b json.RawMessage) (json.RawMessage, error) {
	var x, y []json.RawMessage
	for _, p := range []struct {
		raw json.RawMessage
		dst *[]json.RawMessage
	}{{a, &x}, {b, &y}} {
		raw := bytes.TrimSpace(p.raw)
		switch {
		case len(raw) == 0:
			continue
		case raw[0] == '{':
			*p.dst = []json.RawMessage{raw}
			continue
		}
		if err := json.Unmarshal(raw, p.dst); err != nil {
			return nil, fmt.Errorf("openai: cached contents are not a JSON array: %w", err)
		}
	}
	return json.Marshal(append(x, y...))
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
