package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/ctxcache"
)

// The cachedContents resource, as @google/genai's caches.create, get, list,
// update and delete call it (under v1beta and v1). The record keeps the
// request's systemInstruction, contents, tools and toolConfig as Gemini
// JSON; like Google, responses never return them (they are input-only).

// cacheRoutes lists the cachedContents endpoints under prefix.
func cacheRoutes(prefix string) []api.Route {
	return []api.Route{
		{Pattern: "POST " + prefix + "/cachedContents", Handler: createCache},
		{Pattern: "GET " + prefix + "/cachedContents", Handler: listCaches},
		{Pattern: "GET " + prefix + "/cachedContents/{id}", Handler: getCache},
		{Pattern: "PATCH " + prefix + "/cachedContents/{id}", Handler: updateCache},
		{Pattern: "DELETE " + prefix + "/cachedContents/{id}", Handler: deleteCache},
	}
}

// cacheBody is the body of caches.create. Unknown fields are refused, as
// Google refuses them ("Invalid JSON payload received. Unknown name").
type cacheBody struct {
	Model             string          `json:"model"`
	DisplayName       string          `json:"displayName"`
	SystemInstruction json.RawMessage `json:"systemInstruction"`
	Contents          json.RawMessage `json:"contents"`
	Tools             json.RawMessage `json:"tools"`
	ToolConfig        json.RawMessage `json:"toolConfig"`
	TTL               string          `json:"ttl"`
	ExpireTime        string          `json:"expireTime"`
	// Kvserve holds kvserve's own options for a create.
	Kvserve *struct {
		// ReuseByDisplayName makes the create idempotent by displayName
		// (see ctxcache.Spec.ReuseByDisplayName).
		ReuseByDisplayName bool `json:"reuse_by_display_name"`
		// Shared publishes the cache to every tenant (administrators only;
		// see ctxcache.Spec.Shared).
		Shared bool `json:"shared"`
	} `json:"kvserve"`
}

// cacheJSON is the CachedContent resource as returned.
type cacheJSON struct {
	Name          string         `json:"name"`
	DisplayName   string         `json:"displayName,omitempty"`
	Model         string         `json:"model"`
	CreateTime    string         `json:"createTime"`
	UpdateTime    string         `json:"updateTime"`
	ExpireTime    string         `json:"expireTime"`
	UsageMetadata cacheUsageJSON `json:"usageMetadata"`
}

type cacheUsageJSON struct {
	TotalTokenCount int `json:"totalTokenCount"`
}

func toCacheJSON(c *ctxcache.Cache) cacheJSON {
	return cacheJSON{Name: c.Name(), DisplayName: c.DisplayName, Model: "models/" + c.Model,
		CreateTime: timestamp(c.CreateTime), UpdateTime: timestamp(c.UpdateTime), ExpireTime: timestamp(c.ExpireTime),
		UsageMetadata: cacheUsageJSON{TotalTokenCount: c.TokenCount}}
}

// timestamp formats t as protobuf Timestamp's JSON.
func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// decodeStrict reads a body like decodeBody, refusing unknown fields.
func decodeStrict(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return api.AsError(err)
		}
		return &api.Error{Code: api.CodeInvalidRequest, Message: "could not read the request body", Err: err}
	}
	if err := decodeBytes(body, v); err != nil { // the checks and messages of every body
		return err
	}
	if json.Valid(body) {
		if err := checkDepth(body); err != nil {
			return err
		}
		if norm, err := normalizeKeys(body); err == nil {
			body = norm
		}
	}
	field, err := api.UnknownField(body, v)
	switch {
	case err != nil:
		return api.InvalidParam("", "invalid JSON: %v", err)
	case field != "":
		return api.InvalidParam(field, "Invalid JSON payload received. Unknown name %q: this request does not take it", field)
	}
	return nil
}

// compact returns raw without insignificant spaces (nil for absent or
// null), so that equal inputs are equal bytes in the record.
func compact(raw json.RawMessage) json.RawMessage {
	if isNull(raw) {
		return nil
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw // decoding has validated it; cannot happen
	}
	return b.Bytes()
}

var _ api.CacheRenderer = (*Dialect)(nil)

// CacheRequest renders a cache record for every dialect: Gemini's JSON is
// the records' canonical form.
func (d *Dialect) CacheRequest(c *ctxcache.Cache) (*api.Request, error) { return cacheRequest(c) }

// cacheRequest is the Request whose prompt is the prefix of cache c: its
// system instruction, tools and contents in Gemini's shapes.
func cacheRequest(c *ctxcache.Cache) (*api.Request, error) {
	g, err := cacheGenerateRequest(c)
	if err != nil {
		return nil, err
	}
	g.prefix = true
	req, _, err := g.toRequest(c.Model)
	return req, err
}

// cacheGenerateRequest decodes a cache's fields as the generate body they
// were taken from.
func cacheGenerateRequest(c *ctxcache.Cache) (*generateRequest, error) {
	obj := map[string]json.RawMessage{}
	for k, v := range map[string]json.RawMessage{"systemInstruction": c.SystemInstruction, "contents": c.Contents,
		"tools": c.Tools, "toolConfig": c.ToolConfig} {
		if !isNull(v) {
			obj[k] = v
		}
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("gemini: cache %s: %w", c.ID, err)
	}
	var g generateRequest
	if err := decodeBytes(body, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// createCache serves POST /v1beta/cachedContents.
func createCache(c *api.Call) error {
	var body cacheBody
	if err := decodeStrict(c.R, &body); err != nil {
		return err
	}
	if body.Model == "" {
		return api.InvalidParam("model", "model is required (models/ID)")
	}
	spec := ctxcache.Spec{Model: trimModelPrefix(body.Model), DisplayName: body.DisplayName,
		SystemInstruction: compact(body.SystemInstruction), Contents: compact(body.Contents),
		Tools: compact(body.Tools), ToolConfig: compact(body.ToolConfig), TTL: body.TTL, ExpireTime: body.ExpireTime}
	if body.Kvserve != nil {
		spec.ReuseByDisplayName = body.Kvserve.ReuseByDisplayName
		spec.Shared = body.Kvserve.Shared
	}
	if spec.Contents == nil && spec.SystemInstruction == nil {
		return api.InvalidParam("contents", "a cached content needs contents or a systemInstruction")
	}
	cc, _, err := c.CreateCache(spec, cacheRequest)
	if err != nil {
		return err
	}
	return api.WriteJSON(c.W, http.StatusOK, toCacheJSON(&cc))
}

// getCache serves GET /v1beta/cachedContents/{id}.
func getCache(c *api.Call) error {
	cc, err := c.GetCache(ctxcache.NamePrefix + c.R.PathValue("id"))
	if err != nil {
		return err
	}
	return api.WriteJSON(c.W, http.StatusOK, toCacheJSON(&cc))
}

// listCaches serves GET /v1beta/cachedContents?pageSize=&pageToken=.
func listCaches(c *api.Call) error {
	q := c.R.URL.Query()
	size := 0
	if s := q.Get("pageSize"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return api.InvalidParam("pageSize", "pageSize %q is not an integer", s)
		}
		size = n
	}
	list, next, err := c.ListCaches(size, q.Get("pageToken"))
	if err != nil {
		return err
	}
	out := struct {
		CachedContents []cacheJSON `json:"cachedContents"`
		NextPageToken  string      `json:"nextPageToken,omitempty"`
	}{CachedContents: make([]cacheJSON, len(list)), NextPageToken: next}
	for i := range list {
		out.CachedContents[i] = toCacheJSON(&list[i])
	}
	return api.WriteJSON(c.W, http.StatusOK, out)
}

// updateBody is the body of caches.update: the expiration only.
type updateBody struct {
	TTL        string `json:"ttl"`
	ExpireTime string `json:"expireTime"`
}

// updateCache serves PATCH /v1beta/cachedContents/{id}[?updateMask=ttl].
// An updateMask, when given, must name the one expiration field the body
// sets: nothing else of a cache can change.
func updateCache(c *api.Call) error {
	var body updateBody
	if err := decodeStrict(c.R, &body); err != nil {
		return err
	}
	if mask := c.R.URL.Query().Get("updateMask"); mask != "" {
		for _, f := range strings.Split(mask, ",") {
			switch camelCase(strings.TrimSpace(f)) {
			case "ttl":
				if body.TTL == "" {
					return api.InvalidParam("updateMask", "updateMask names ttl, which the body does not set")
				}
			case "expireTime":
				if body.ExpireTime == "" {
					return api.InvalidParam("updateMask", "updateMask names expireTime, which the body does not set")
				}
			default:
				return api.InvalidParam("updateMask", "updateMask %q: only ttl or expireTime can be updated", f)
			}
		}
	}
	cc, err := c.UpdateCache(ctxcache.NamePrefix+c.R.PathValue("id"), body.TTL, body.ExpireTime, cacheRequest)
	if err != nil {
		return err
	}
	return api.WriteJSON(c.W, http.StatusOK, toCacheJSON(&cc))
}

// deleteCache serves DELETE /v1beta/cachedContents/{id}: an empty object.
func deleteCache(c *api.Call) error {
	if err := c.DeleteCache(ctxcache.NamePrefix + c.R.PathValue("id")); err != nil {
		return err
	}
	return api.WriteJSON(c.W, http.StatusOK, struct{}{})
}
