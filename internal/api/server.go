package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvserve/kvserve/internal/audit"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// Backend runs token-space requests: the local engine (LocalBackend), and
// anything that can take a request as data and send its outputs back — a
// router, a remote worker. Submit's errors are the engine's (ErrQueueFull,
// ErrTooLong, ErrInvalid, *engine.ConstraintError, ...).
type Backend interface {
	Submit(ctx context.Context, r engine.Request) (Stream, error)
}

// Stream is a submitted request's outputs, as plain events.
type Stream interface {
	// Recv returns the next outputs (at least one), waiting as needed;
	// engine.ErrDone once every sample has finished and been read.
	Recv(ctx context.Context, dst []engine.Output) ([]engine.Output, error)
	// Usage is the request's token counts so far.
	Usage() engine.Usage
	// Ended is when the last output was produced (zero until then).
	Ended() time.Time
	// Cancel stops the request.
	Cancel()
}

// Readier is an optional Backend capability: a backend that can be unable
// to take requests for a while (a gateway with no live worker) says why,
// and /ready answers 503 meanwhile, so a load balancer sends clients
// elsewhere.
type Readier interface {
	Ready() error
}

// LocalBackend serves requests on an engine in this process.
func LocalBackend(e *engine.Engine) Backend { return localBackend{e} }

type localBackend struct{ e *engine.Engine }

// Unpinner is an optional Backend capability: ending at once the pins on a
// prompt's blocks in a scope, when the context cache that pinned them is
// deleted. A backend without it lets them lapse at their expiry.
type Unpinner interface {
	Unpin(scope string, prompt []int32) int
}

func (b localBackend) Unpin(scope string, prompt []int32) int { return b.e.Unpin(scope, prompt) }

func (b localBackend) Submit(ctx context.Context, r engine.Request) (Stream, error) {
	s, err := b.e.Submit(ctx, r)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}

var _ Stream = (*engine.Stream)(nil)

// Model is a served model: the backend that runs it and what the API needs
// to turn text into its tokens and back.
type Model struct {
	// ID is the name clients use in the model field.
	ID string
	// Aliases are other names accepted for the model: exact names or
	// path.Match patterns ("claude-*"), so clients that insist on their
	// own model names (agents written for a hosted API) work unmodified.
	// Responses and listings use ID. See ValidAlias.
	Aliases []string
	// Description is shown in the model listing.
	Description string
	// OwnedBy is the listing's owned_by ("kvserve" by default).
	OwnedBy string
	// Synthetic marks a random-weight model whose output is not language;
	// listings say so.
	Synthetic bool
	// Created is the listing's creation time (default: when set).
	Created time.Time
	// ContextLength is the longest sequence (prompt + output) in tokens.
	ContextLength int
	Backend       Backend
	Tokenizer     *tokenizer.Tokenizer
	// Template renders chat conversations (nil: chat requests are refused).
	Template *chat.Template
}

// Config configures a Server. The zero value of every field means its
// default.
type Config struct {
	// BodyLimit is the largest accepted request body in bytes (default
	// 16 MiB).
	BodyLimit int64
	// APIKeys are the keys accepted from the configuration.
	APIKeys []APIKey
	// Keys verifies keys kept elsewhere (the tenant store). With neither
	// APIKeys nor Keys the server is open: no key is asked for, and
	// /metrics is public.
	Keys KeyVerifier
	// Audit receives a record of every denied request: a missing, unknown,
	// expired or revoked key, a model the key may not use, /metrics
	// refused (default: none). Records name the key by its public id,
	// never the key.
	Audit AuditLog
	// Caches keeps the context-cache resources (default: none; their
	// endpoints answer 404 and a request naming a cache is refused).
	Caches *ctxcache.Service
	// Registry receives the server's metrics and serves /metrics; the
	// engine's metrics should be registered in the same one (default: a
	// new registry with only the server's metrics).
	Registry *prometheus.Registry
	// Logger receives errors worth an operator's attention (default:
	// discard).
	Logger *slog.Logger
	// Ledger, when set, books every generation request and context-cache
	// prefill in the usage ledger (internal/ledger); a request the ledger
	// cannot take is refused (503) rather than served unmetered.
	Ledger UsageLedger
}

// DefaultBodyLimit is the default Config.BodyLimit.
const DefaultBodyLimit = 16 << 20

// Dialect is one API dialect (OpenAI, Anthropic, Gemini): its routes and
// its error shape. Register it with Server.Register.
type Dialect interface {
	// Name labels the dialect's metrics ("openai").
	Name() string
	// Routes lists the dialect's endpoints.
	Routes() []Route
	// WriteError writes e in the dialect's error shape with e's status.
	WriteError(w http.ResponseWriter, r *http.Request, e *Error)
}

// Claimer is an optional Dialect capability: a dialect that claims a
// request for an unknown route writes its 404 (e.g. Gemini for /v1beta/…).
// Unclaimed unknown routes get the first registered dialect's 404.
type Claimer interface {
	Claims(r *http.Request) bool
}

// Route is one endpoint of a dialect.
type Route struct {
	// Pattern is an http.ServeMux pattern with a method: "POST /v1/messages".
	Pattern string
	// Handler serves the route. An error it returns before writing
	// anything is written in the dialect's error shape.
	Handler HandlerFunc
	// Public routes need no API key (model listings stay private by default).
	Public bool
	// Claim, when set, lets the route share its pattern with another
	// dialect's route (the one without a Claim): it serves the requests
	// Claim accepts, the other route the rest. /v1/models answers a Gemini
	// client (known by its headers) in Gemini's shape, everyone else in
	// OpenAI's.
	Claim func(*http.Request) bool
}

// sharedRoute serves one pattern that several dialects' routes share.
type sharedRoute struct {
	claimed  []claimedRoute
	fallback http.Handler
}

type claimedRoute struct {
	claim func(*http.Request) bool
	h     http.Handler
}

func (sr *sharedRoute) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, c := range sr.claimed {
		if c.claim(r) {
			c.h.ServeHTTP(w, r)
			return
		}
	}
	if sr.fallback != nil {
		sr.fallback.ServeHTTP(w, r)
		return
	}
	sr.claimed[0].h.ServeHTTP(w, r)
}

// wildcardName matches a pattern's wildcard names, which do not make two
// patterns different to ServeMux.
var wildcardName = regexp.MustCompile(`\{[^}.]*(\.\.\.)?\}`)

// HandlerFunc serves one API call.
type HandlerFunc func(c *Call) error

// Server is the HTTP API: an http.Handler serving the registered dialects
// plus /health, /ready and /metrics.
type Server struct {
	cfg      Config
	keys     *keyring
	mux      *http.ServeMux
	model    atomic.Pointer[modelSet]
	dialects []Dialect
	// cacheRenderer is the registered CacheRenderer's method, if any.
	cacheRenderer CacheRequest
	log           *slog.Logger
	m             *httpMetrics
	mu            sync.Mutex // guards registration
	// patterns holds every dialect route's pattern (wildcard names
	// blanked), so that routes with a Claim can share one.
	patterns map[string]*sharedRoute
}

// New builds a server. Register dialects, then SetModel when the model is
// loaded: until then the model routes answer 503 and /ready is false.
func New(cfg Config) (*Server, error) {
	if cfg.BodyLimit <= 0 {
		cfg.BodyLimit = DefaultBodyLimit
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	kr, err := newKeyring(cfg.APIKeys, cfg.Keys)
	if err != nil {
		return nil, err
	}
	m, err := newHTTPMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, keys: kr, mux: http.NewServeMux(), log: cfg.Logger, m: m}
	s.mux.HandleFunc("GET /health", s.health)
	s.mux.HandleFunc("GET /ready", s.ready)
	s.mux.Handle("GET /metrics", s.adminOnly(promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{Registry: cfg.Registry})))
	s.mux.HandleFunc("/", s.notFound)
	return s, nil
}

// Register adds a dialect's routes. It must be called before serving.
func (s *Server) Register(d Dialect) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rt := range d.Routes() {
		if err := s.handle(d, rt); err != nil {
			return err
		}
	}
	s.dialects = append(s.dialects, d)
	if r, ok := d.(CacheRenderer); ok && s.cacheRenderer == nil {
		s.cacheRenderer = r.CacheRequest
	}
	return nil
}

func (s *Server) handle(d Dialect, rt Route) (err error) {
	defer func() {
		if r := recover(); r != nil { // ServeMux panics on conflicting patterns
			err = fmt.Errorf("api: register %s route %q: %v", d.Name(), rt.Pattern, r)
		}
	}()
	key := wildcardName.ReplaceAllString(rt.Pattern, "{$1}")
	if s.patterns == nil {
		s.patterns = map[string]*sharedRoute{}
	}
	sr, shared := s.patterns[key]
	if !shared {
		sr = &sharedRoute{}
		s.patterns[key] = sr
	}
	switch h := s.wrap(d, rt); {
	case rt.Claim != nil:
		sr.claimed = append(sr.claimed, claimedRoute{rt.Claim, h})
	case sr.fallback != nil:
		return fmt.Errorf("api: register %s route %q: the pattern is taken", d.Name(), rt.Pattern)
	default:
		sr.fallback = h
	}
	if !shared {
		s.mux.Handle(rt.Pattern, sr)
	}
	return nil
}

// Ready reports whether a model is loaded.
func (s *Server) Ready() bool { return s.model.Load() != nil }

// Registry returns the metrics registry /metrics serves.
func (s *Server) Registry() *prometheus.Registry { return s.cfg.Registry }

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	_ = WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	set := s.model.Load()
	if set == nil {
		_ = WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "status": "loading"})
		return
	}
	// Ready when every model can take requests: a load balancer should not
	// send a gateway requests for a model it cannot serve.
	for _, m := range set.models {
		if r, ok := m.Backend.(Readier); ok {
			if err := r.Ready(); err != nil {
				_ = WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "status": "unavailable",
					"model": m.ID, "reason": err.Error()})
				return
			}
		}
	}
	out := map[string]any{"ready": true, "status": "ok", "model": set.models[0].ID}
	if len(set.models) > 1 {
		out["models"] = set.modelIDs()
	}
	_ = WriteJSON(w, http.StatusOK, out)
}

// notFound answers unknown routes in the claiming dialect's shape.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	e := Errorf(CodeNotFound, "unknown route %s %s", r.Method, r.URL.Path)
	s.m.requests.WithLabelValues("none", "unknown", "404").Inc()
	for _, d := range s.dialects {
		if c, ok := d.(Claimer); ok && c.Claims(r) {
			d.WriteError(w, r, e)
			return
		}
	}
	if len(s.dialects) > 0 {
		s.dialects[0].WriteError(w, r, e)
		return
	}
	SetErrorHeaders(w, e)
	_ = WriteJSON(w, e.Status(), map[string]any{"error": map[string]string{"message": e.Message}})
}

// wrap turns a route handler into an http.Handler: body limit, auth,
// timing, metrics, panic recovery and error writing.
func (s *Server) wrap(d Dialect, rt Route) http.Handler {
	route := rt.Pattern
	if _, path, ok := strings.Cut(route, " "); ok {
		route = path
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		c := &Call{W: rec, R: r, Dialect: d, server: s, start: time.Now(), rec: rec, route: route}
		r.Body = http.MaxBytesReader(rec, r.Body, s.cfg.BodyLimit)
		s.m.inflight.Inc()
		defer func() {
			s.m.inflight.Dec()
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("api: handler panic", "route", rt.Pattern, "panic", p)
				if !rec.wrote {
					d.WriteError(rec, r, Errorf(CodeInternal, "internal server error"))
				}
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			c.endUsage(status)
			s.m.requests.WithLabelValues(d.Name(), route, statusLabel(status)).Inc()
			s.m.duration.WithLabelValues(d.Name(), route).Observe(time.Since(c.start).Seconds())
			if c.run != nil {
				s.m.overhead.WithLabelValues(d.Name()).Observe(c.Overhead().Seconds())
			}
		}()
		if !rt.Public {
			id, p, err := s.keys.authenticate(r)
			if err != nil {
				s.denied(r, p, "auth", err)
				d.WriteError(rec, r, err)
				return
			}
			c.Identity = id
		}
		if err := rt.Handler(c); err != nil {
			c.fail(err)
		}
	})
}

// HandlePublic serves pattern with h for anyone, without a key: only for
// what holds no data (the dashboard's static page, whose data comes from
// an operator endpoint).
func (s *Server) HandlePublic(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// HandleAdmin serves an operator endpoint (the KV event stream) on
// pattern, guarded as /metrics is: an admin key when keys are configured.
func (s *Server) HandleAdmin(pattern string, h http.Handler) {
	s.mux.Handle(pattern, s.adminOnly(h))
}

// adminOnly guards an operator endpoint (/metrics): when keys are
// configured, it needs a key whose role grants admin (401 without one, 403
// with another), refused in OpenAI's error shape.
func (s *Server) adminOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, p, err := s.keys.authenticate(r)
		if err == nil && !id.Has(PermissionAdmin) {
			err = Errorf(CodeForbidden, "%s needs a key with the admin role; this key's role is %q", r.URL.Path, id.Role)
		}
		if err != nil {
			action := "auth"
			if err.Code == CodeForbidden {
				action = "admin"
			}
			s.denied(r, p, action, err)
			writeOpenAIError(w, err)
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// HandleKeyed serves an endpoint outside every dialect that any valid key
// may call (GET /v1/usage): the handler finds the caller with IdentityFrom
// and checks its permissions itself. Refusals are in OpenAI's error shape.
func (s *Server) HandleKeyed(pattern string, h http.Handler) {
	s.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, p, err := s.keys.authenticate(r)
		if err != nil {
			s.denied(r, p, "auth", err)
			writeOpenAIError(w, err)
			return
		}
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		h.ServeHTTP(w, r.WithContext(context.WithValue(ctx, identityKey{}, id)))
	}))
}

// identityKey keys the caller's Identity in a HandleKeyed request's
// context.
type identityKey struct{}

// IdentityFrom is who a HandleKeyed request authenticated as; ok is false
// outside one.
func IdentityFrom(ctx context.Context) (id Identity, ok bool) {
	id, ok = ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// WriteOperatorError writes e as the operator endpoints (/metrics, the
// KV events, the admin API) do: in OpenAI's error shape.
func WriteOperatorError(w http.ResponseWriter, e *Error) { writeOpenAIError(w, e) }

// principalKey keys the authenticated principal in an operator request's
// context.
type principalKey struct{}

// PrincipalFrom is who an operator request (HandleAdmin) authenticated as
// (the zero Principal on an open server).
func PrincipalFrom(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey{}).(Principal)
	return p
}

// writeOpenAIError writes e in OpenAI's error shape, for endpoints outside
// every dialect.
func writeOpenAIError(w http.ResponseWriter, e *Error) {
	k := e.Code.Kind()
	obj := map[string]any{"message": e.Message, "type": k.OpenAIType, "param": nil, "code": nil}
	if k.OpenAICode != "" {
		obj["code"] = k.OpenAICode
	}
	SetErrorHeaders(w, e)
	_ = WriteJSON(w, e.Status(), map[string]any{"error": obj})
}

// denied records a refused request: who (as far as known), the route, and
// why. The key itself is never recorded, nor the query string (which may
// carry it as ?key=).
func (s *Server) denied(r *http.Request, p Principal, action string, e *Error) {
	if e.Code == CodeInternal {
		s.log.Error("api: checking an API key failed", "path", r.URL.Path, "err", e.Err)
	}
	route := r.Method + " " + r.URL.Path
	resource := route
	if action == "auth" && p.KeyID != "" {
		resource = "keys/" + p.KeyID // the key is what was refused
	}
	outcome := audit.Denied
	if e.Code == CodeInternal {
		outcome = audit.Failed
	}
	s.audit(r.Context(), audit.Entry{Principal: p.Name, Tenant: p.Tenant, Action: action, Resource: resource,
		Outcome: outcome, Reason: e.Message + " (" + route + ")"})
}

// audit appends e to the audit log, if any. A failure to record is logged
// (the request was refused anyway).
func (s *Server) audit(ctx context.Context, e audit.Entry) {
	if s.cfg.Audit == nil {
		return
	}
	if _, err := s.cfg.Audit.Append(context.WithoutCancel(ctx), e); err != nil {
		s.log.Error("api: audit record lost", "action", e.Action, "resource", e.Resource, "err", err)
	}
}

func statusLabel(code int) string {
	switch {
	case code >= 100 && code < 1000:
		return fmt.Sprint(code)
	}
	return "other"
}

// statusClientClosed labels requests whose client went away before an
// answer (nginx's 499).
const statusClientClosed = 499

// recorder notes the status a handler wrote.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

// Flush sends buffered data to the client.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		if !r.wrote {
			r.status, r.wrote = http.StatusOK, true
		}
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Call is one API call in progress: the request, the caller's identity and
// the timing of the server's own work.
type Call struct {
	// W and R are the response and request.
	W http.ResponseWriter
	R *http.Request
	// Identity is the authenticated caller.
	Identity Identity
	// Dialect is the dialect serving the call.
	Dialect Dialect

	server  *Server
	rec     *recorder
	start   time.Time
	blocked time.Duration // waiting for engine outputs
	// submitted is when the request was handed to the engine.
	submitted time.Time
	first     time.Time // first generated token received
	run       *Run
	// route is the route's path pattern, for metrics and the ledger.
	route string
	// usage is the call's open ledger record (Seq 0: none).
	usage ledger.Record
	// settled: usage was booked final when the run ended, before the
	// response's last bytes (endUsage books nothing more).
	settled bool
	// err is the error the call failed with, for the ledger.
	err *Error
}

// Context is the request's context: it ends when the client goes away,
// which cancels the engine request.
func (c *Call) Context() context.Context { return c.R.Context() }

// Written reports whether the response has started (status sent).
func (c *Call) Written() bool { return c.rec.wrote }

// Decode reads the JSON body into v (see DecodeJSON).
func (c *Call) Decode(v any) error { return DecodeJSON(c.R, v) }

// fail writes err in the dialect's shape if nothing was written yet, and
// logs internal errors.
func (c *Call) fail(err error) {
	if c.R.Context().Err() != nil && !c.rec.wrote {
		// The client went away: nobody to answer. Counted as 499, as
		// proxies do.
		c.rec.status = statusClientClosed
		return
	}
	e := AsError(err)
	c.err = e
	if e.Code == CodeInternal {
		c.server.log.Error("api: request failed", "path", c.R.URL.Path, "err", err)
	}
	if c.rec.wrote {
		return
	}
	c.Dialect.WriteError(c.W, c.R, e)
}

// forbidModel returns the 403 of a model the caller may not use, recorded
// in the audit log.
func (c *Call) forbidModel(m *Model, msg string) *Error {
	c.server.audit(c.Context(), audit.Entry{Principal: c.Identity.Principal, Tenant: c.Identity.Tenant,
		Action: PermissionModelsUse, Resource: "models/" + m.ID, Outcome: audit.Denied, Reason: msg})
	return &Error{Code: CodeForbidden, Param: "model", Message: msg}
}

// hasAlias reports whether name is one of m's aliases or matches one of
// its patterns.
func (m *Model) hasAlias(name string) bool {
	for _, a := range m.Aliases {
		if ok, err := path.Match(a, name); a == name || (err == nil && ok) {
			return true
		}
	}
	return false
}

// ValidAlias checks that alias is a usable Model alias: not empty, and a
// well-formed path.Match pattern.
func ValidAlias(alias string) error {
	if alias == "" {
		return errors.New("api: empty model alias")
	}
	if _, err := path.Match(alias, ""); err != nil {
		return fmt.Errorf("api: model alias %q: %w", alias, err)
	}
	return nil
}

// Timings are the per-request times reported to clients in the "kvserve"
// response object. A request's wall time splits into OverheadMS + EngineMS.
type Timings struct {
	// OverheadMS is the time the server added outside the engine so far:
	// from the request's arrival until it was submitted to the engine
	// (reading, parsing, templating, tokenizing), plus, once the engine
	// has queued its last output, the time since then (delivering what is
	// left and ending the response). The handler's work between the two
	// overlaps with the engine's and is in HandlerMS.
	OverheadMS float64 `json:"overhead_ms"`
	// TTFTMS is the time from the request's arrival to its first generated
	// token (0 before then).
	TTFTMS float64 `json:"ttft_ms"`
	// EngineMS is the engine's span so far: from the request's submission
	// until its last output was queued (or until now while it runs).
	EngineMS float64 `json:"engine_ms"`
	// HandlerMS is the time the handler was busy so far (wall time minus
	// time spent waiting for the engine's outputs): parsing, writing every
	// event, flushing. Most of it overlaps with the engine's work.
	HandlerMS float64 `json:"handler_ms"`
	// QueueMS is the time the request waited for admission in the engine,
	// when the backend's stream reports it (see queueTimer).
	QueueMS *float64 `json:"queue_ms,omitempty"`
}

// queueTimer is implemented by backend streams that know how long their
// request waited for admission (the engine's Stream will; a router's may
// not). It is discovered by type assertion so the API needs no change
// when a backend gains it.
type queueTimer interface {
	QueueTime() time.Duration
}

// Overhead is the time the server added outside the engine so far (see
// Timings.OverheadMS).
func (c *Call) Overhead() time.Duration {
	now := time.Now()
	if c.run == nil {
		return now.Sub(c.start)
	}
	return c.submitted.Sub(c.start) + now.Sub(c.engineEnd(now))
}

// engineEnd is when the engine queued the call's last output, or now while
// it still runs.
func (c *Call) engineEnd(now time.Time) time.Time {
	if end := c.run.stream.Ended(); !end.IsZero() {
		return end
	}
	return now
}

// Handler is the time the call's handler was busy so far: wall time minus
// time blocked on the engine.
func (c *Call) Handler() time.Duration { return time.Since(c.start) - c.blocked }

// Timings returns the call's timings so far.
func (c *Call) Timings() Timings {
	t := Timings{OverheadMS: ms(c.Overhead()), HandlerMS: ms(c.Handler())}
	if c.run != nil {
		t.EngineMS = ms(c.engineEnd(time.Now()).Sub(c.submitted))
	}
	if !c.first.IsZero() {
		t.TTFTMS = ms(c.first.Sub(c.start))
	}
	if c.run != nil {
		if qt, ok := any(c.run.stream).(queueTimer); ok {
			q := ms(qt.QueueTime())
			t.QueueMS = &q
		}
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// httpMetrics are the server's own metrics.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	overhead *prometheus.HistogramVec
	inflight prometheus.Gauge
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvserve_http_requests_total",
			Help: "HTTP API requests by dialect, route and status code."}, []string{"dialect", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvserve_http_request_duration_seconds",
			Help:    "Wall time of HTTP API requests, streamed ones to their last byte.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}, []string{"dialect", "route"}),
		overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvserve_api_overhead_seconds",
			Help: "Latency the server adds to a generation request outside the engine: from arrival to submission " +
				"(parsing, templating, tokenizing) plus from the engine's last output to the response's end.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .002, .005, .01, .025, .05, .1, .25, 1}}, []string{"dialect"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvserve_http_requests_in_flight",
			Help: "HTTP API requests being served."}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.overhead, m.inflight} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("api: register metrics: %w", err)
		}
	}
	return m, nil
}

// Ready reports whether the model is loaded.
func (c *Call) Ready() bool { return c.server.Ready() }
