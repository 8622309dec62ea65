// Package api is the HTTP front of kvserve: it turns requests in the
// OpenAI, Anthropic and Gemini dialects into one internal Request, runs it
// on a Backend (the engine, later a router), and turns the generated tokens
// back into each dialect's responses and server-sent events.
//
// # Why one core and thin dialects
//
// Everything that decides what the model sees and what the cache can reuse
// happens here, once, for every dialect: the chat template renders the
// conversation, the tokenizer parses the template's special tokens (the
// template writes BOS), prompt spans are tagged with retention classes
// (tools and system prompt persistent, history session, the latest
// reasoning ephemeral), the client's kvserve hints are applied, the tenant
// from the API key becomes the engine's isolation scope, and grammars
// constrain sampling when a response format or a forced tool call asks. On
// the way back a Run turns engine outputs into typed events per sample:
// text that never splits a UTF-8 character, stop strings found across token
// boundaries, reasoning and tool calls parsed from the model's own format.
// A dialect package only maps its JSON onto Request and Events onto its
// JSON; it registers its routes through the Dialect interface and writes
// errors from the one table in errors.go in its own shape.
//
// # Writing a dialect
//
// A dialect is a type with Name, Routes and WriteError (Dialect), registered
// with Server.Register; serve registers each one. A route handler gets a
// *Call and, typically:
//
//	var body myRequest
//	if err := c.Decode(&body); err != nil { return err } // 400/413 as *Error
//	req := &api.Request{Model: body.Model, Messages: …, MaxTokens: …}
//	if err := body.Kvserve.Apply(req); err != nil { return err } // the kvserve hints
//	run, err := c.Start(req) // render, tokenize, segment, constrain, submit
//	if err != nil { return err } // written by the dialect's WriteError
//	// non-streamed: choices, err := run.Collect()
//	// streamed: sse := api.NewSSE(c.W); for { evs, err := run.Next(); …; sse.Flush() }
//	usage, timings := run.Usage(), c.Timings() // cached tokens, overhead_ms
//
// Errors returned before anything is written are written by the dialect's
// WriteError with the status from the error table (errors.go: one row per
// Code with each dialect's type string); AsError maps engine and decoding
// errors onto codes. Call.Tokenize counts a prompt's tokens without running
// it. Request.Breakpoints carries cache_control-style breakpoints; Hints the
// session, retention and TTL; Request.CachedContent (the kvserve
// extension's cached_content) a context cache the request continues.
//
// Context caches (caches.go) are served by the dialects over
// Call.CreateCache, GetCache, ListCaches, UpdateCache, DeleteCache and
// UseCache, which go through Config.Caches (internal/ctxcache: the
// resource, its expiry, its authorization and audit); the core renders and
// prefills a cache's prefix with its blocks pinned. Cache records keep
// Gemini's JSON, so the Gemini dialect is the CacheRenderer that every
// dialect's caches are rendered with. Authentication (Bearer, x-api-key,
// x-goog-api-key, ?key=) happens before the handler: Call.Identity.Tenant is
// the engine scope. A dialect that owns a path prefix implements Claimer so
// that unknown routes under it get its 404 shape.
//
// # Overhead accounting
//
// Every request's wall time is split into the time spent blocked waiting for
// the engine's outputs and everything else (decoding the body, templating,
// tokenizing, detokenizing, encoding, writing). The second part is the
// server's own overhead: it is exported as kvserve_api_overhead_seconds and
// reported to the client in a "kvserve" object so a load generator can
// measure it end to end.
//
// # Security
//
// Configured API keys are held only as SHA-256 digests and compared in
// constant time; stored keys (the tenant store) are checked by a
// KeyVerifier, which the server sees only through that interface. Each key
// maps to a tenant whose id becomes the engine scope, so tenants never
// share KV blocks, and to a principal and role: generating wants
// models.use, and /metrics admin once any key exists. Every refusal (a missing, unknown, expired or
// revoked key, a model the key may not use, /metrics) is recorded in the
// AuditLog by the key's public id, never the key; every context-cache
// operation and refusal is recorded by the cache service, and another
// tenant's cache is answered exactly as one that does not exist. Bodies are size-limited
// and JSON nesting is bounded before decoding.
package api
