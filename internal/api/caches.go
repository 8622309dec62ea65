package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
)

// This file is the core's side of context caches (internal/ctxcache):
// what every dialect needs to serve the resource and to generate with it.
// A dialect parses its own JSON and says how a cache record becomes a
// Request (CacheRequest); the core authorizes through the service, renders
// and prefills the prefix, and maps the service's errors onto the table.

// CacheRequest turns a cache record into the Request whose prompt is the
// cache's prefix (its system instruction, tools and contents, without a
// generation prompt). Its errors are the client's (400s naming fields).
type CacheRequest func(c *ctxcache.Cache) (*Request, error)

// CacheRenderer is an optional Dialect capability: the dialect whose JSON
// is the canonical form of cache records (Gemini's) turns a record into
// its prefix Request, for every other dialect that creates or uses caches.
// Register finds it by type assertion.
type CacheRenderer interface {
	CacheRequest(c *ctxcache.Cache) (*Request, error)
}

// CacheRequest returns the registered dialect's CacheRequest, or one that
// refuses when no dialect renders caches.
func (c *Call) CacheRequest() CacheRequest {
	if r := c.server.cacheRenderer; r != nil {
		return r
	}
	return func(*ctxcache.Cache) (*Request, error) {
		return nil, Errorf(CodeNotFound, "context caches are not enabled on this server (no dialect renders them)")
	}
}

// resolveCache applies the context cache req names, if any (applyCache).
func (c *Call) resolveCache(req *Request) error {
	if req.CachedContent == "" {
		return nil
	}
	m, err := c.Model(req.Model)
	if err != nil {
		return err
	}
	return c.applyCache(req, m)
}

// applyCache makes req the continuation of the context cache it names
// (req.CachedContent, from the kvserve extension): the cache is checked
// for cachedContents.use (and audited), then its system prompt, tools and
// turns go before req's messages. The request may not bring system
// messages or tools of its own: they would render before the cache's
// turns and change the prefix the cache holds. A raw prompt cannot
// continue a conversation and is refused.
func (c *Call) applyCache(req *Request, m *Model) error {
	const param = "kvserve.cached_content"
	cc, err := c.UseCache(req.CachedContent)
	if err != nil {
		if ae := (*Error)(nil); errors.As(err, &ae) && ae.Param == "cachedContent" {
			ae.Param = param
		}
		return err
	}
	if cc.Model != m.ID {
		return InvalidParam(param, "%s was created for the model %q, not %q", cc.Name(), cc.Model, m.ID)
	}
	if req.Messages == nil {
		return InvalidParam(param, "a context cache holds a conversation: use it with messages, not a raw prompt")
	}
	for i, msg := range req.Messages {
		if msg.Role == "system" || msg.Role == "developer" {
			return InvalidParam(fmt.Sprintf("messages[%d].role", i), "a request that uses a context cache cannot add %s messages: the system prompt belongs in the cache", msg.Role)
		}
	}
	if len(req.Tools) > 0 {
		return InvalidParam("tools", "a request that uses a context cache cannot add tools: they belong in the cache")
	}
	base, err := c.CacheRequest()(&cc)
	if err != nil {
		return err
	}
	k := len(base.Messages)
	req.Messages = append(base.Messages, req.Messages...)
	req.Tools = base.Tools
	if req.ToolChoice.Mode == ToolAuto {
		req.ToolChoice = base.ToolChoice
	}
	for i := range req.Breakpoints {
		if req.Breakpoints[i].Message >= 0 {
			req.Breakpoints[i].Message += k
		}
	}
	req.CachedContent = ""
	return nil
}

// caller is the identity as the cache service sees it.
func (id Identity) caller() ctxcache.Caller {
	return ctxcache.Caller{Tenant: id.Tenant, Principal: id.Principal, Role: id.Role, Open: id.open}
}

// caches returns the context-cache service, or a 404 when the server has
// none.
func (c *Call) caches() (*ctxcache.Service, *Error) {
	if c.server.cfg.Caches == nil {
		return nil, Errorf(CodeNotFound, "context caches are not enabled on this server")
	}
	return c.server.cfg.Caches, nil
}

// CreateCache creates a context cache: the service authorizes the caller
// and resolves the expiry, then build gives the prefix's Request, which is
// rendered, checked against the minimum size and prefilled with its blocks
// pinned to the expiry; the record is stored only after that succeeded.
// reused reports an idempotent create that found its cache.
func (c *Call) CreateCache(spec ctxcache.Spec, build CacheRequest) (cc ctxcache.Cache, reused bool, err error) {
	s, e := c.caches()
	if e != nil {
		return cc, false, e
	}
	cc, reused, err = s.Create(c.Context(), c.Identity.caller(), spec, c.prefiller(build))
	return cc, reused, cacheError(err)
}

// GetCache returns the cache called name (cachedContents/ID).
func (c *Call) GetCache(name string) (ctxcache.Cache, error) {
	s, e := c.caches()
	if e != nil {
		return ctxcache.Cache{}, e
	}
	cc, err := s.Get(c.Context(), c.Identity.caller(), name)
	return cc, cacheErrorNamed(err, name)
}

// UseCache returns the cache called name for a generation that uses it
// (cachedContents.use, which a binding may grant).
func (c *Call) UseCache(name string) (ctxcache.Cache, error) {
	s, e := c.caches()
	if e != nil {
		e.Param = "cachedContent"
		return ctxcache.Cache{}, e
	}
	cc, err := s.Use(c.Context(), c.Identity.caller(), name)
	if err = cacheErrorNamed(err, name); err != nil {
		if ae := (*Error)(nil); errors.As(err, &ae) && ae.Code == CodeNotFound {
			ae.Param = "cachedContent"
		}
		return ctxcache.Cache{}, err
	}
	return cc, nil
}

// ListCaches returns a page of the caller's tenant's caches and the next
// page's token.
func (c *Call) ListCaches(pageSize int, pageToken string) ([]ctxcache.Cache, string, error) {
	s, e := c.caches()
	if e != nil {
		return nil, "", e
	}
	list, next, err := s.List(c.Context(), c.Identity.caller(), pageSize, pageToken)
	return list, next, cacheError(err)
}

// UpdateCache changes the expiry of the cache called name (ttl or
// expireTime); a later expiry prefills the prefix again (build) so that its
// pins reach it.
func (c *Call) UpdateCache(name, ttl, expireTime string, build CacheRequest) (ctxcache.Cache, error) {
	s, e := c.caches()
	if e != nil {
		return ctxcache.Cache{}, e
	}
	cc, err := s.Update(c.Context(), c.Identity.caller(), name, ttl, expireTime, c.prefiller(build))
	return cc, cacheErrorNamed(err, name)
}

// DeleteCache deletes the cache called name.
func (c *Call) DeleteCache(name string) error {
	s, e := c.caches()
	if e != nil {
		return e
	}
	return cacheErrorNamed(s.Delete(c.Context(), c.Identity.caller(), name), name)
}

// prefiller returns the service's Prefill for build's requests.
func (c *Call) prefiller(build CacheRequest) ctxcache.Prefill {
	return func(ctx context.Context, cc *ctxcache.Cache, ttl time.Duration, minTokens int) (int, string, error) {
		req, err := build(cc)
		if err != nil {
			return 0, "", err
		}
		return c.prefill(ctx, req, ttl, minTokens)
	}
}

// prefill renders req's prompt without a generation prompt (the prefix
// later requests extend) and runs it through the engine with every block
// pinned for ttl and one token generated: the engine has no prefill-only
// request, and one token costs one decode step. It returns the prefix's
// tokens and the model's id.
func (c *Call) prefill(ctx context.Context, req *Request, ttl time.Duration, minTokens int) (int, string, error) {
	if err := req.validate(); err != nil {
		return 0, "", err
	}
	m, err := c.Model(req.Model)
	if err != nil {
		return 0, "", err
	}
	req.prefixOnly = true
	p, err := buildPrompt(m, req, c.fragmentScope())
	if err != nil {
		return 0, "", err
	}
	n := len(p.Tokens)
	switch {
	case n < minTokens:
		return 0, "", InvalidParam("contents", "the cached content is %d tokens; the minimum is %d", n, minTokens)
	case n >= m.ContextLength:
		return 0, "", &Error{Code: CodeTooLarge, Param: "contents",
			Message: fmt.Sprintf("the cached content is %d tokens; this model's context holds %d tokens in all (prompt plus output)", n, m.ContextLength)}
	}
	er := engine.Request{
		Prompt: p.Tokens,
		// The prefix pinned; the generated token's block (if it completes
		// one) ephemeral, so that it holds no pin.
		Segments:  []engine.Segment{{Start: 0, End: n, Retention: engine.RetentionPinned}},
		MaxTokens: 1,
		N:         1,
		Scope:     c.Identity.Tenant,
		Hints:     engine.Hints{Retention: engine.RetentionEphemeral, TTL: ttl},
	}
	st, err := m.Backend.Submit(ctx, er)
	if err != nil {
		return 0, "", AsError(err)
	}
	defer st.Cancel()
	var outs []engine.Output
	for {
		outs, err = st.Recv(ctx, outs[:0])
		for _, o := range outs {
			if o.Finish == engine.FinishError {
				return 0, "", &Error{Code: CodeInternal, Message: "prefilling the cached content failed", Err: o.Err}
			}
		}
		if errors.Is(err, engine.ErrDone) {
			return n, m.ID, nil
		}
		if err != nil {
			return 0, "", AsError(err)
		}
	}
}

// cacheErrorNamed is cacheError with a not-found message that names the
// resource and says nothing else: a cache that never existed, one that
// expired and another tenant's read the same.
func cacheErrorNamed(err error, name string) error {
	if errors.Is(err, ctxcache.ErrNotFound) {
		return &Error{Code: CodeNotFound, Param: "name", Message: fmt.Sprintf("cached content %s not found", name), Err: err}
	}
	return cacheError(err)
}

// cacheError maps the cache service's errors onto the error table; the
// core's and the dialect's own errors (from a prefill) pass as they are.
func cacheError(err error) error {
	var fe *ctxcache.FieldError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return &Error{Code: CodeInvalidRequest, Param: fe.Field, Message: fe.Msg, Err: err}
	case errors.Is(err, ctxcache.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: "cached content not found", Err: err}
	case errors.Is(err, ctxcache.ErrForbidden):
		return &Error{Code: CodeForbidden, Message: trimCachePrefix(err.Error()), Err: err}
	case errors.Is(err, ctxcache.ErrConflict):
		return &Error{Code: CodeConflict, Param: "displayName", Message: trimCachePrefix(err.Error()), Err: err}
	}
	return err
}

func trimCachePrefix(s string) string {
	const p = "ctxcache: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}
