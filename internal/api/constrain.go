package api

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/grammar"
)

// modelState is what the server builds lazily per served model: the
// grammar vocabulary (a trie of the token pieces, built on the first
// constrained request) and a bounded cache of compiled grammars, since
// agents send the same schemas and tools with every request and compiling
// them is the expensive part.
type modelState struct {
	vocabOnce sync.Once
	vocab     *grammar.Vocab

	mu       sync.Mutex
	grammars map[[32]byte]*grammar.Grammar
	order    [][32]byte // insertion order, for eviction
}

// maxCachedGrammars bounds modelState's grammar cache.
const maxCachedGrammars = 128

func (s *modelState) vocabulary(m *Model) *grammar.Vocab {
	s.vocabOnce.Do(func() { s.vocab = grammar.NewVocab(m.Tokenizer) })
	return s.vocab
}

// grammar returns the cached grammar for key, building it with build on a
// miss.
func (s *modelState) grammar(key [32]byte, build func() (*grammar.Grammar, error)) (*grammar.Grammar, error) {
	s.mu.Lock()
	g, ok := s.grammars[key]
	s.mu.Unlock()
	if ok {
		return g, nil
	}
	g, err := build()
	if err != nil {
		return nil, err
	}
	if err := g.Check(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.grammars == nil {
		s.grammars = map[[32]byte]*grammar.Grammar{}
	}
	if _, ok := s.grammars[key]; !ok {
		if len(s.order) >= maxCachedGrammars {
			delete(s.grammars, s.order[0])
			s.order = s.order[1:]
		}
		s.grammars[key] = g
		s.order = append(s.order, key)
	}
	return g, nil
}

// constraint returns the factory of per-sample logits processors that
// enforce req's response format or forced tool call, or nil when sampling
// is free. The matchers are made here, on the handler's goroutine, rather
// than in the engine's step loop.
func constraint(m *Model, req *Request, p *Prompt, n int) (func(int) engine.LogitsProcessor, error) {
	key, build, param := grammarFor(m, req, p)
	if build == nil {
		return nil, nil
	}
	st := m.state
	if st == nil { // a Model used without Server.SetModel
		st = &modelState{}
	}
	g, err := st.grammar(key, build)
	if err != nil {
		return nil, InvalidParam(param, "cannot constrain the output: %v", err)
	}
	vocab := st.vocabulary(m)
	matchers := make([]*grammar.Matcher, n)
	for i := range matchers {
		matchers[i] = g.NewMatcher(vocab)
		if err := matchers[i].Err(); err != nil {
			return nil, InvalidParam(param, "cannot constrain the output with this model's vocabulary: %v", err)
		}
	}
	return func(i int) engine.LogitsProcessor {
		if i < len(matchers) {
			return matchers[i]
		}
		return g.NewMatcher(vocab)
	}, nil
}

// grammarFor returns the cache key and builder of req's grammar, and the
// parameter to blame if it fails; build is nil when nothing constrains the
// output.
func grammarFor(m *Model, req *Request, p *Prompt) (key [32]byte, build func() (*grammar.Grammar, error), param string) {
	o := m.Grammar
	h := sha256.New()
	fmt.Fprintf(h, "%+v\x00%d\x00", o, req.ResponseFormat.Type)
	switch req.ResponseFormat.Type {
	case FormatJSONObject:
		h.Sum(key[:0])
		return key, func() (*grammar.Grammar, error) { return o.JSONObject(), nil }, "response_format"
	case FormatJSONSchema:
		h.Write(req.ResponseFormat.Schema)
		h.Sum(key[:0])
		schema := req.ResponseFormat.Schema
		return key, func() (*grammar.Grammar, error) { return o.FromJSONSchema(schema) }, "response_format.json_schema.schema"
	}
	if req.ToolChoice.Mode != ToolRequired && req.ToolChoice.Mode != ToolNamed {
		return key, nil, ""
	}
	if m.Template == nil {
		return key, nil, ""
	}
	var tools []chat.Tool
	for _, t := range req.Tools {
		if req.ToolChoice.Mode == ToolRequired || t.Name == req.ToolChoice.Name {
			tools = append(tools, t)
		}
	}
	closeFirst := ""
	if m.Template.PromptOpensReasoning(p.Text) {
		// The output starts inside reasoning: the call comes after it.
		_, closeFirst, _ = m.Template.ReasoningTags()
	}
	fmt.Fprintf(h, "tools\x00%s\x00%s\x00", m.Template.Family(), closeFirst)
	for _, t := range tools {
		fmt.Fprintf(h, "%q\x00%d\x00", t.Name, len(t.Parameters))
		h.Write(t.Parameters)
	}
	h.Sum(key[:0])
	return key, func() (*grammar.Grammar, error) {
		alts := make([]*grammar.Grammar, 0, len(tools))
		for _, t := range tools {
			prefix, suffix, err := m.Template.ForcedCall(t)
			if err != nil {
				return nil, err
			}
			args, err := argsGrammar(o, t.Parameters)
			if err != nil {
				return nil, fmt.Errorf("tool %q: %w", t.Name, err)
			}
			alts = append(alts, grammar.Sequence(grammar.Literal(prefix), args, grammar.Literal(suffix)))
		}
		g := grammar.Choice(alts...)
		if closeFirst != "" {
			g = grammar.Sequence(grammar.Literal(closeFirst), g)
		}
		return g, nil
	}, "tool_choice"
}

// argsGrammar is the grammar of a tool's arguments: its parameters schema,
// or any object when it has none. A schema the grammar cannot enforce
// exactly is enforced leniently (its shape, not every keyword): a forced
// call must still be made.
func argsGrammar(o grammar.Options, params json.RawMessage) (*grammar.Grammar, error) {
	if len(params) == 0 || string(params) == "null" || string(params) == "{}" {
		return o.JSONObject(), nil
	}
	g, err := o.FromJSONSchema(params)
	if err == nil {
		return g, nil
	}
	lenient := o
	lenient.Lenient = true
	if g, err2 := lenient.FromJSONSchema(params); err2 == nil {
		return g, nil
	}
	return nil, errors.Join(errors.New("the parameters schema cannot be enforced"), err)
}
