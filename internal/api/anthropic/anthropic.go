// Package anthropic is the Anthropic dialect of the kvserve API: POST
// /v1/messages (streamed as server-sent events and not) and POST
// /v1/messages/count_tokens, in the shapes the official SDKs and Claude Code
// parse.
//
// # What it translates
//
// A Messages request becomes one api.Request: the system prompt (a string
// or text blocks) is the leading system message; user content blocks become
// user turns, and each tool_result block a tool turn answering its
// tool_use_id (is_error results are prefixed "Error: " so the model sees
// the failure); an assistant turn's text, tool_use and thinking blocks
// become its content, tool calls and reasoning. Several text blocks of one
// turn (or of the system prompt) are joined with "\n". Image and document
// blocks are refused with a 400: the served models read text only.
// tool_choice auto / any / tool / none map onto the core's modes (any and
// tool are enforced by grammar-constrained sampling), and
// disable_parallel_tool_use keeps the first tool call of a reply. thinking
// {"type": "enabled" | "adaptive"} turns a reasoning template's thinking on,
// "disabled" off; absent leaves the template's default. The budget is not
// enforced as a cap.
//
// On the way back, the core's events become content blocks — thinking,
// text, tool_use — in the order the model wrote them, each opened, filled
// and closed once. One state machine (blocks.go) builds both the streamed
// events and the non-streamed message, so the two always agree. A thinking
// block's signature is a digest of its text: kvserve does not verify
// signatures it receives back.
//
// # Prompt caching: cache_control and the usage fields
//
// cache_control breakpoints ({"type": "ephemeral", "ttl": "5m" | "1h"}, at
// most four, on system blocks, tools and message content blocks) become the
// core's breakpoints: the prompt up to the end of the turn holding the
// block (up to the end of the tools and system prompt for those) is worth
// keeping for the TTL; a 1h breakpoint makes that span persistent. The
// longest TTL becomes the request's TTL hint unless the kvserve extension
// gives one.
//
// kvserve's cache is automatic: every full block of every prompt is
// reusable, breakpoints or not. The usage fields report it this way, and
// the three input counts always add up to the prompt's tokens:
//
//   - cache_read_input_tokens: prompt tokens served from the prefix cache
//     (whole blocks), whether or not a breakpoint asked for them;
//   - cache_creation_input_tokens: prompt tokens before the last
//     breakpoint's end that were not read from the cache, i.e.
//     max(0, B − cache_read) where B is the token position where the last
//     breakpoint's span ends; cache_creation splits it into
//     ephemeral_1h_input_tokens (those before the last 1h breakpoint's end)
//     and ephemeral_5m_input_tokens (the rest);
//   - input_tokens: the remaining prompt tokens.
//
// B is found as the core finds segment boundaries: the conversation up to
// the breakpoint is rendered without a generation prompt, its common prefix
// with the prompt text taken, and the prompt tokens lying wholly inside it
// counted. For the commonest case, a breakpoint on the last message (as
// Claude Code sends), the span is the prompt less its generation prompt,
// whose text is learnt once per template: the tokens are counted back from
// the end, without rendering the conversation again.
//
// # Headers
//
// anthropic-version is accepted with any value (or none) and counted by
// value in kvserve_anthropic_requests_total; anthropic-beta is ignored;
// x-api-key authenticates (in the core). Every response carries a
// request-id header, and errors repeat it in the body, as Anthropic's do.
package anthropic

import (
	"crypto/rand"
	"errors"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/api"
)

// Options configure the dialect. The zero value is ready to use.
type Options struct {
	// Registerer receives the dialect's metrics (the anthropic-version
	// counter); nil leaves them unregistered.
	Registerer prometheus.Registerer
}

// Dialect serves the Anthropic Messages API.
type Dialect struct {
	versions *prometheus.CounterVec
	marks    markFinder
}

// New returns the Anthropic dialect.
func New(o Options) *Dialect {
	versions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kvserve_anthropic_requests_total",
		Help: "Anthropic API requests by the anthropic-version header they sent (\"none\" without one, \"other\" when it is not a date).",
	}, []string{"version"})
	if o.Registerer != nil {
		if err := o.Registerer.Register(versions); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					versions = existing
				}
			}
		}
	}
	return &Dialect{versions: versions}
}

var (
	_ api.Dialect = (*Dialect)(nil)
	_ api.Claimer = (*Dialect)(nil)
)

// Name returns "anthropic".
func (d *Dialect) Name() string { return "anthropic" }

// Routes lists the Anthropic endpoints.
func (d *Dialect) Routes() []api.Route {
	return []api.Route{
		{Pattern: "POST /v1/messages", Handler: d.messages},
		{Pattern: "POST /v1/messages/count_tokens", Handler: d.countTokens},
	}
}

// Claims reports whether an unknown route is under /v1/messages, so that it
// gets the Anthropic 404 shape.
func (d *Dialect) Claims(r *http.Request) bool {
	return r.URL.Path == "/v1/messages" || strings.HasPrefix(r.URL.Path, "/v1/messages/")
}

// errorBody is Anthropic's error shape.
type errorBody struct {
	Type      string      `json:"type"`
	Error     errorObject `json:"error"`
	RequestID string      `json:"request_id,omitempty"`
}

type errorObject struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// WriteError writes e as {"type": "error", "error": {"type", "message"},
// "request_id"}. The offending field, when known, leads the message in
// Anthropic's dotted form ("messages.1.content.0: …").
func (d *Dialect) WriteError(w http.ResponseWriter, _ *http.Request, e *api.Error) {
	api.SetErrorHeaders(w, e)
	id := requestID(w)
	_ = api.WriteJSON(w, e.Status(), errorBody{Type: "error", Error: toErrorObject(e), RequestID: id})
}

func toErrorObject(e *api.Error) errorObject {
	msg := e.Message
	if e.Param != "" && !strings.Contains(msg, `"`+e.Param+`"`) {
		msg = dottedParam(e.Param) + ": " + msg
	}
	return errorObject{Type: e.Code.Kind().AnthropicType, Message: msg}
}

// dottedParam turns "messages[1].content[0]" into "messages.1.content.0".
func dottedParam(p string) string {
	if !strings.ContainsAny(p, "[]") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '[':
			b.WriteByte('.')
		case ']':
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// requestID returns the response's request-id header, setting a new one
// first if there is none.
func requestID(w http.ResponseWriter) string {
	h := w.Header()
	if id := h.Get("Request-Id"); id != "" {
		return id
	}
	id := newID("req_")
	h.Set("Request-Id", id)
	return id
}

// noteVersion counts the request's anthropic-version header. Only date-like
// values become label values, so clients cannot grow the label set.
func (d *Dialect) noteVersion(r *http.Request) {
	v := r.Header.Get("Anthropic-Version")
	label := "other"
	switch {
	case v == "":
		label = "none"
	case isDate(v):
		label = v
	}
	d.versions.WithLabelValues(label).Inc()
}

// isDate reports whether s looks like YYYY-MM-DD.
func isDate(s string) bool {
	if len(s) != 10 || s[4] != '-' || s[7] != '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 4 || i == 7 {
			continue
		}
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// newID returns prefix followed by 24 random letters and digits, the shape
// of Anthropic's ids (msg_…, toolu_…, req_…).
func newID(prefix string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	var b [24]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return prefix + string(b[:])
}
