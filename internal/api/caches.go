package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/ledger"
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

// resolveCache applies the context cache req names, if any (applyCache);
// with the model "auto", the request takes the cache's model.
func (c *Call) resolveCache(req *Request) error {
	if req.CachedContent == "" {
		return nil
	}
	param := req.CachedContentParam
	if param == "" {
		param = "kvserve.cached_content"
	}
	cc, err := c.UseCache(req.CachedContent)
	if err != nil {
		if ae := (*Error)(nil); errors.As(err, &ae) && ae.Param == "cachedContent" {
			ae.Param = param
		}
		return err
	}
	if c.server.isAuto(req.Model) {
		req.Model = cc.Model // a context cache keeps its model
	}
	m, err := c.Model(req.Model)
	if err != nil {
		return err
	}
	return c.applyCache(req, m, &cc, param)
}

// applyCache makes req the continuation of cc, the context cache it names
// (req.CachedContent, checked for cachedContents.use and audited by
// resolveCache): its system prompt, tools and turns go before req's
// messages. A request may add system text and tools of its own (Vertex
// refuses them; here they are appended): its system messages come after
// the cache's turns where the chat template renders a system message
// there, so the whole cached prefix is still a hit, and are otherwise
// appended to the cache's system prompt; its tools follow the cache's.
// Either way the usage reports the tokens actually served from the cache.
// A raw prompt cannot continue a conversation and is refused.
func (c *Call) applyCache(req *Request, m *Model, cc *ctxcache.Cache, param string) error {
	if cc.Model != m.ID {
		return InvalidParam(param, "%s was created for the model %q, not %q", cc.Name(), cc.Model, m.ID)
	}
	if req.Messages == nil {
		return InvalidParam(param, "a context cache holds a conversation: use it with messages, not a raw prompt")
	}
	base, err := c.CacheRequest()(cc)
	if err != nil {
		return err
	}
	for i, t := range req.Tools {
		if slices.ContainsFunc(base.Tools, func(b chat.Tool) bool { return b.Name == t.Name }) {
			return InvalidParam(fmt.Sprintf("tools[%d]", i), "the tool %q is in %s already", t.Name, cc.Name())
		}
	}
	var extra []chat.Message // the request's own system text
	turns := req.Messages[:0:0]
	// where[i] is where the request's message i lands: its turns after
	// the cache's and the extra system text, that text after the cache's
	// turns (or, merged, in the cache's system prompt at 0).
	where := make([]int, len(req.Messages))
	for i, msg := range req.Messages {
		if msg.Role == "system" || msg.Role == "developer" {
			where[i] = -1 - len(extra)
			extra = append(extra, chat.Message{Role: "system", Content: msg.Content})
			continue
		}
		where[i] = len(turns)
		turns = append(turns, msg)
	}
	msgs := base.Messages
	merged := len(extra) > 0 && !m.rendersLateSystem()
	if merged {
		msgs = mergeSystem(msgs, extra)
		extra = nil
	}
	for i, w := range where {
		switch {
		case w >= 0:
			where[i] = len(msgs) + len(extra) + w
		case merged:
			where[i] = 0
		default:
			where[i] = len(msgs) + (-1 - w)
		}
	}
	for i, bp := range req.Breakpoints {
		if bp.Message >= 0 && bp.Message < len(where) {
			req.Breakpoints[i].Message = where[bp.Message]
		}
	}
	req.Messages = append(append(msgs, extra...), turns...)
	if cc.Tenant == ctxcache.SharedTenant {
		// Its KV is the shared scope's, pinned by the administrator who
		// published it: a tenant's request neither pins it nor is charged
		// for it, and shares only the tokens that are the cache's own.
		pre := *base
		pre.prefixOnly = true
		p, err := buildPrompt(m, &pre, c.fragmentScope())
		if err != nil {
			return err
		}
		req.sharedPrefix = p.Tokens
	} else if !merged && len(msgs) > 0 {
		// The cache's prefix is pinned again to its expiry (a no-op while
		// its pins hold; after a restart, or once the pool lost them, the
		// use pins what it recomputed or brought back from disk).
		req.cacheMessages = len(msgs)
		if ttl := time.Until(cc.ExpireTime); ttl > req.Hints.TTL {
			req.Hints.TTL = ttl
		}
	}
	req.Tools = append(base.Tools, req.Tools...)
	if req.ToolChoice.Mode == ToolAuto {
		req.ToolChoice = base.ToolChoice
	}
	req.CachedContent = ""
	return nil
}

// rendersLateSystem reports whether m's chat template renders a system
// message that follows other turns, in its place (some templates take only
// a leading one, or refuse any other).
func (m *Model) rendersLateSystem() bool {
	if m.Template == nil {
		return false
	}
	const mark = "\x01late-system\x01"
	text, err := m.Template.Render([]chat.Message{{Role: "user", Content: "hello"}, {Role: "system", Content: mark}},
		chat.RenderOptions{})
	i, j := strings.Index(text, "hello"), strings.Index(text, mark)
	return err == nil && i >= 0 && j > i
}

// mergeSystem appends the system texts of extra to msgs's leading system
// message (making one if it has none).
func mergeSystem(msgs, extra []chat.Message) []chat.Message {
	msgs = slices.Clone(msgs)
	var add []string
	for _, e := range extra {
		add = append(add, e.Content)
	}
	text := strings.Join(add, "\n\n")
	if len(msgs) > 0 && msgs[0].Role == "system" {
		msgs[0].Content += "\n\n" + text
		return msgs
	}
	return append([]chat.Message{{Role: "system", Content: text}}, msgs...)
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

// CacheContents returns the cache called name with its contents, for its
// owner (ctxcache.Service.Contents).
func (c *Call) CacheContents(name string) (ctxcache.Cache, error) {
	s, e := c.caches()
	if e != nil {
		return ctxcache.Cache{}, e
	}
	cc, err := s.Contents(c.Context(), c.Identity.caller(), name)
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
	cc, err := s.Update(c.Context(), c.Identity.caller(), name, ttl, expireTime, c.repinner(build))
	return cc, cacheErrorNamed(err, name)
}

// repinner is the prefiller of an update: a later expiry raises the pins
// (prefill); an earlier one ends them first (pins only ever rise), pins
// again to the new expiry, and re-pins the tenant's other caches, whose
// prefixes may share the blocks.
func (c *Call) repinner(build CacheRequest) ctxcache.Prefill {
	prefill := c.prefiller(build)
	return func(ctx context.Context, cc *ctxcache.Cache, ttl time.Duration, minTokens int) (int, string, error) {
		if !time.Now().Add(ttl).Before(cc.ExpireTime) {
			return prefill(ctx, cc, ttl, minTokens)
		}
		c.unpin(cc)
		n, model, err := prefill(ctx, cc, ttl, minTokens)
		if err != nil {
			c.server.log.Warn("api: a shortened context cache's pins could not be renewed; its KV is recomputed on its next use", "cache", cc.Name(), "err", err)
		}
		c.repinOthers(ctx, cc, build)
		return n, model, err
	}
}

// repinOthers pins again the live caches of cc's tenant and model other than
// cc, to their own expiries: ending cc's pins ended those of the blocks
// they share with it (an extended cache shares its parent's).
func (c *Call) repinOthers(ctx context.Context, cc *ctxcache.Cache, build CacheRequest) {
	s, e := c.caches()
	if e != nil {
		return
	}
	all, err := s.All(ctx)
	if err != nil {
		c.server.log.Warn("api: other context caches' pins were not renewed", "cache", cc.Name(), "err", err)
		return
	}
	prefill := c.prefiller(build)
	for i := range all {
		o := &all[i]
		if o.ID == cc.ID || o.Tenant != cc.Tenant || o.Model != cc.Model {
			continue
		}
		if ttl := time.Until(o.ExpireTime); ttl > 0 {
			if _, _, err := prefill(ctx, o, ttl, 0); err != nil {
				c.server.log.Warn("api: a context cache's pins were not renewed; its KV is recomputed on its next use", "cache", o.Name(), "err", err)
			}
		}
	}
}

// DeleteCache deletes the cache called name.
func (c *Call) DeleteCache(name string) error {
	s, e := c.caches()
	if e != nil {
		return e
	}
	cc, err := s.Delete(c.Context(), c.Identity.caller(), name)
	if err != nil {
		return cacheErrorNamed(err, name)
	}
	c.unpin(&cc)
	c.repinOthers(c.Context(), &cc, c.CacheRequest())
	return nil
}

// unpin ends a deleted cache's pins at once, where the backend can
// (Unpinner); otherwise they lapse at the cache's expiry. The record is
// gone either way, so a failure here is logged, not returned.
func (c *Call) unpin(cc *ctxcache.Cache) {
	m, err := c.Model(cc.Model)
	if err != nil {
		return
	}
	u, ok := m.Backend.(Unpinner)
	if !ok {
		return
	}
	req, err := c.CacheRequest()(cc)
	if err == nil {
		req.prefixOnly = true
		var p *Prompt
		if p, err = buildPrompt(m, req, c.fragmentScope()); err == nil {
			u.Unpin(cc.Tenant, p.Tokens)
			return
		}
	}
	c.server.log.Warn("api: a deleted context cache's pins lapse at its expiry", "cache", cc.Name(), "err", err)
}

// prefiller returns the service's Prefill for build's requests.
func (c *Call) prefiller(build CacheRequest) ctxcache.Prefill {
	return func(ctx context.Context, cc *ctxcache.Cache, ttl time.Duration, minTokens int) (int, string, error) {
		req, err := build(cc)
		if err != nil {
			return 0, "", err
		}
		return c.prefill(ctx, req, cc.Tenant, ttl, minTokens)
	}
}

// prefill renders req's prompt without a generation prompt (the prefix
// later requests extend) and runs it through the engine with every block
// pinned for ttl and one token generated: the engine has no prefill-only
// request, and one token costs one decode step. It returns the prefix's
// tokens and the model's id.
func (c *Call) prefill(ctx context.Context, req *Request, scope string, ttl time.Duration, minTokens int) (int, string, error) {
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
		Scope:     scope, // the cache's tenant: the shared scope for a shared cache
		Hints:     engine.Hints{Retention: engine.RetentionEphemeral, TTL: ttl},
	}
	rec, err := c.openRecord(m, ledger.KindCacheCreate, time.Now(), 0, "")
	if err != nil {
		return 0, "", err
	}
	st, err := m.Backend.Submit(ctx, er)
	if err != nil {
		c.endPrefill(ctx, rec, engine.Usage{}, err)
		return 0, "", AsError(err)
	}
	defer st.Cancel()
	var outs []engine.Output
	for {
		outs, err = st.Recv(ctx, outs[:0])
		for _, o := range outs {
			if o.Finish == engine.FinishError {
				c.endPrefill(ctx, rec, st.Usage(), o.Err)
				return 0, "", &Error{Code: CodeInternal, Message: "prefilling the cached content failed", Err: o.Err}
			}
		}
		if errors.Is(err, engine.ErrDone) {
			c.endPrefill(ctx, rec, st.Usage(), nil)
			return n, m.ID, nil
		}
		if err != nil {
			c.endPrefill(ctx, rec, st.Usage(), err)
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
