package api

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// AutoModel is the model name that lets the server choose (AutoRule).
const AutoModel = "auto"

// AutoRule chooses a model for requests naming AutoModel: the strong one
// when a request needs it by these rules, else the fast one. A request
// continuing a context cache takes the cache's model whatever the rules
// say (a cache is bound to the model that prefilled it). The chosen
// model's id is the response's model and the ledger's.
type AutoRule struct {
	// Fast and Strong are served model ids (required).
	Fast, Strong string
	// LongPrompt sends prompts of at least this many tokens (as the fast
	// model tokenizes them) to the strong model (0: length never does).
	LongPrompt int
	// Tools sends requests offering tools to the strong model.
	Tools bool
	// Reasoning sends requests turning reasoning on to the strong model.
	Reasoning bool
}

// modelSet is what a server serves.
type modelSet struct {
	models []*Model
	auto   *AutoRule
}

// SetModel makes m the one served model (nil: back to loading); a model
// SetModels would refuse (no id, or "auto") is a programming error here:
// commands call SetModels and report its error.
func (s *Server) SetModel(m *Model) {
	if m == nil {
		s.model.Store(nil)
		return
	}
	if err := s.SetModels([]*Model{m}, nil); err != nil {
		panic(err)
	}
}

// SetModels serves ms (none: back to loading), the first being the one a
// request naming no model gets, and with auto, the AutoModel name. Ids and
// aliases must name one model each.
func (s *Server) SetModels(ms []*Model, auto *AutoRule) error {
	if len(ms) == 0 {
		if auto != nil {
			return errors.New("api: an auto rule needs models")
		}
		s.model.Store(nil)
		return nil
	}
	set := &modelSet{auto: auto}
	for _, m := range ms {
		if m == nil || m.ID == "" {
			return errors.New("api: a served model needs an id")
		}
		if m.ID == AutoModel || m.hasAlias(AutoModel) {
			return fmt.Errorf("api: %q is the automatic choice's name, not a model's", AutoModel)
		}
		for _, o := range set.models {
			if o.ID == m.ID || o.hasAlias(m.ID) || m.hasAlias(o.ID) {
				return fmt.Errorf("api: the models %q and %q share a name", o.ID, m.ID)
			}
		}
		c := *m
		if c.OwnedBy == "" {
			c.OwnedBy = "kvserve"
		}
		if c.Created.IsZero() {
			c.Created = time.Now()
		}
		set.models = append(set.models, &c)
	}
	if auto != nil {
		if set.find(auto.Fast) == nil || set.find(auto.Strong) == nil {
			return fmt.Errorf("api: the auto rule's fast %q and strong %q must be served models", auto.Fast, auto.Strong)
		}
		if auto.LongPrompt < 0 {
			return errors.New("api: the auto rule's long-prompt threshold must be ≥ 0")
		}
	}
	s.model.Store(set)
	return nil
}

// find returns the model called name (an id or an alias), or nil.
func (set *modelSet) find(name string) *Model {
	for _, m := range set.models {
		if name == m.ID {
			return m
		}
	}
	for _, m := range set.models {
		if m.hasAlias(name) {
			return m
		}
	}
	return nil
}

func (set *modelSet) ids() string {
	ids := make([]string, len(set.models))
	for i, m := range set.models {
		ids[i] = fmt.Sprintf("%q", m.ID)
	}
	return strings.Join(ids, ", ")
}

// isAuto reports whether name asks the server to choose (it has a rule).
func (s *Server) isAuto(name string) bool {
	set := s.model.Load()
	return name == AutoModel && set != nil && set.auto != nil
}

// plainName is name, or for AutoModel the fast model's id.
func (s *Server) plainName(name string) string {
	if s.isAuto(name) {
		return s.model.Load().auto.Fast
	}
	return name
}

// Model returns the served model called name (an id or an alias; "" is the
// first), or the API error to answer: 503 while loading, 404 for a model
// not served, 403 for one the caller may not use. AutoModel is resolved
// by Start and Tokenize (it depends on the request), not here.
func (c *Call) Model(name string) (*Model, error) {
	set := c.server.model.Load()
	if set == nil {
		return nil, &Error{Code: CodeUnavailable, Message: "the model is still loading; retry shortly", RetryAfter: 2 * time.Second}
	}
	m := set.models[0]
	if name != "" {
		if m = set.find(name); m == nil {
			msg := fmt.Sprintf("the model %q does not exist; this server serves %s", name, set.ids())
			if set.auto != nil {
				msg += fmt.Sprintf(", and %q to choose between %q and %q", AutoModel, set.auto.Fast, set.auto.Strong)
			}
			return nil, &Error{Code: CodeNotFound, Param: "model", OpenAICode: "model_not_found", Message: msg}
		}
	}
	if !c.Identity.Allows(m.ID) {
		return nil, c.forbidModel(m, fmt.Sprintf("this API key may not use the model %q", m.ID))
	}
	return m, nil
}

// Models returns the served models the caller may use (empty while
// loading).
func (c *Call) Models() []*Model {
	set := c.server.model.Load()
	if set == nil {
		return nil
	}
	var out []*Model
	for _, m := range set.models {
		if c.Identity.Allows(m.ID) {
			out = append(out, m)
		}
	}
	return out
}

// modelFor resolves req's model, choosing by the auto rule when it names
// AutoModel, and returns it with req's prompt for it. req.Model becomes
// the chosen model's id.
func (c *Call) modelFor(req *Request) (*Model, *Prompt, error) {
	set := c.server.model.Load()
	if !c.server.isAuto(req.Model) {
		m, err := c.Model(req.Model)
		if err != nil {
			return nil, nil, err
		}
		p, err := buildPrompt(m, req, c.fragmentScope())
		return m, p, err
	}
	rule := set.auto
	choose := func(name string) (*Model, *Prompt, error) {
		m, err := c.Model(name)
		if err != nil {
			return nil, nil, err
		}
		req.Model = m.ID
		p, err := buildPrompt(m, req, c.fragmentScope())
		return m, p, err
	}
	allowed := func(name string) bool { return c.Identity.Allows(set.find(name).ID) }
	strong := (rule.Tools && len(req.Tools) > 0) || (rule.Reasoning && req.Reasoning != nil && *req.Reasoning)
	switch {
	case !allowed(rule.Strong):
		return choose(rule.Fast) // the only choice this key has (or a 403)
	case !allowed(rule.Fast) || strong:
		return choose(rule.Strong)
	}
	m, p, err := choose(rule.Fast)
	var e *Error
	if rule.LongPrompt > 0 && (err == nil && len(p.Tokens) >= rule.LongPrompt ||
		errors.As(err, &e) && e.Code == CodeTooLarge) { // refused untokenized: too long for the fast model's context
		return choose(rule.Strong)
	}
	return m, p, err
}

// modelIDs lists the served models' ids, for readiness.
func (set *modelSet) modelIDs() []string {
	out := make([]string, 0, len(set.models))
	for _, m := range set.models {
		out = append(out, m.ID)
	}
	return slices.Clip(out)
}
