// Package constrain compiles output constraints (engine.Constraint: a JSON
// object, a JSON schema, a forced tool call) into grammars over one
// model's vocabulary: the engine.ConstraintCompiler a worker serving that
// model gives its engine. The request carries the constraint as data; this
// package is where the model's tokenizer and chat template turn it into
// per-sample matchers.
package constrain

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/chat/outparse"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/grammar"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// Compiler compiles constraints for one model. It is safe for concurrent
// use.
type Compiler struct {
	tok  *tokenizer.Tokenizer
	tmpl *chat.Template
	opts grammar.Options

	vocabOnce sync.Once
	vocab     atomic.Pointer[grammar.Vocab]
}

var _ engine.ConstraintCompiler = (*Compiler)(nil)

// New makes the compiler of a model with this tokenizer and chat template
// (nil: forced tool calls are refused). opts tunes the grammars (zero: the
// grammar package's defaults); a random-weight model needs
// MaxStringLength to close its strings.
func New(tok *tokenizer.Tokenizer, tmpl *chat.Template, opts grammar.Options) *Compiler {
	return &Compiler{tok: tok, tmpl: tmpl, opts: opts}
}

// Prepare builds now what the first constrained request would otherwise
// build while every constrained request behind it waits: the grammar
// vocabulary, a trie of every token's bytes (tens of milliseconds and
// megabytes for a large vocabulary). A server that serves agents calls it
// at start.
func (c *Compiler) Prepare() { c.vocabulary() }

// Prepared reports whether the vocabulary is built.
func (c *Compiler) Prepared() bool { return c.vocab.Load() != nil }

func (c *Compiler) vocabulary() *grammar.Vocab {
	c.vocabOnce.Do(func() { c.vocab.Store(grammar.NewVocab(c.tok)) })
	return c.vocab.Load()
}

// Compile builds k's grammar for scope's requests and checks it; the token
// masks its states compute are cached in the vocabulary for scope alone.
func (c *Compiler) Compile(k *engine.Constraint, scope string) (engine.Constrainer, error) {
	g, err := c.grammar(k)
	if err != nil {
		return nil, err
	}
	g.SetCacheScope(scope)
	if err := g.Check(); err != nil {
		return nil, err
	}
	return &compiled{g: g, vocab: c.vocabulary()}, nil
}

func (c *Compiler) grammar(k *engine.Constraint) (*grammar.Grammar, error) {
	o := c.opts
	switch k.Kind {
	case engine.ConstraintJSONObject:
		return o.JSONObject(), nil
	case engine.ConstraintJSONSchema:
		return o.FromJSONSchema(k.Schema)
	case engine.ConstraintToolCall:
		return c.toolCall(k)
	}
	return nil, fmt.Errorf("constrain: unknown constraint kind %q", k.Kind)
}

// toolCall is the grammar of a call of one of k's tools in the chat
// template's format, after the reasoning's closing tag when the prompt
// left the model inside its reasoning.
func (c *Compiler) toolCall(k *engine.Constraint) (*grammar.Grammar, error) {
	if c.tmpl == nil {
		return nil, errors.New("constrain: the model has no chat template to format a tool call")
	}
	if len(k.Tools) == 0 {
		return nil, errors.New("constrain: a forced tool call names no tool")
	}
	alts := make([]*grammar.Grammar, 0, len(k.Tools))
	for _, t := range k.Tools {
		prefix, suffix, err := outparse.ForTemplate(c.tmpl).ForcedCall(chat.Tool{Name: t.Name, Parameters: t.Parameters})
		if err != nil {
			return nil, err
		}
		args, err := argsGrammar(c.opts, t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tool %q: %w", t.Name, err)
		}
		alts = append(alts, grammar.Sequence(grammar.Literal(prefix), args, grammar.Literal(suffix)))
	}
	g := grammar.Choice(alts...)
	if k.AfterReasoning {
		if _, closeTag, _ := outparse.ForTemplate(c.tmpl).ReasoningTags(); closeTag != "" {
			g = grammar.Sequence(grammar.Literal(closeTag), g)
		}
	}
	return g, nil
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

// compiled is a checked grammar over the model's vocabulary.
type compiled struct {
	g     *grammar.Grammar
	vocab *grammar.Vocab
}

// NewProcessor makes one sample's matcher.
func (c *compiled) NewProcessor() (engine.LogitsProcessor, error) {
	m := c.g.NewMatcher(c.vocab)
	if err := m.Err(); err != nil {
		return nil, fmt.Errorf("cannot constrain the output with this model's vocabulary: %w", err)
	}
	return m, nil
}
