package engine

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
)

// Constraint is a request's output constraint as data: what the output
// must match, not the machinery that enforces it. The engine compiles it
// for its own model (Config.Constraints) when the request is submitted, so
// a request can cross a process boundary and a remote worker enforces the
// same rule with its own vocabulary.
type Constraint struct {
	// Kind is what the output must be: ConstraintJSONObject,
	// ConstraintJSONSchema or ConstraintToolCall.
	Kind string `json:"kind"`
	// Schema is the JSON schema of ConstraintJSONSchema.
	Schema json.RawMessage `json:"schema,omitempty"`
	// Tools are the calls ConstraintToolCall allows: the output is a call
	// of one of them, in the chat template's format, with arguments that
	// match its parameters schema.
	Tools []ConstraintTool `json:"tools,omitempty"`
	// AfterReasoning says the prompt leaves the model inside its reasoning
	// (the template opened it): the constrained output comes after the
	// reasoning's closing tag, which the output starts with.
	AfterReasoning bool `json:"after_reasoning,omitempty"`
}

// ConstraintTool is one tool a forced call may name.
type ConstraintTool struct {
	Name       string          `json:"name"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

// The constraint kinds.
const (
	ConstraintJSONObject = "json_object"
	ConstraintJSONSchema = "json_schema"
	ConstraintToolCall   = "tool_call"
)

// Key identifies the constraint: equal keys, equal constraints (the
// compiled form is cached by it).
func (c *Constraint) Key() [32]byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field([]byte(c.Kind))
	field(c.Schema)
	for _, t := range c.Tools {
		field([]byte(t.Name))
		field(t.Parameters)
	}
	if c.AfterReasoning {
		field([]byte{1})
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// ConstraintCompiler compiles constraints for one model: it knows the
// model's vocabulary and chat template.
type ConstraintCompiler interface {
	// Compile builds c for the requests of scope (a tenant): what the
	// compiler caches across compilations it keeps per scope, so that a
	// constraint one tenant sent never compiles faster for another.
	Compile(c *Constraint, scope string) (Constrainer, error)
}

// Constrainer is a compiled constraint: it makes the logits processor of
// each sample that follows it.
type Constrainer interface {
	NewProcessor() (LogitsProcessor, error)
}

// ConstraintError says a request's constraint cannot be enforced on this
// model. It matches ErrInvalid.
type ConstraintError struct {
	Kind string
	Err  error
}

func (e *ConstraintError) Error() string {
	return fmt.Sprintf("engine: cannot constrain the output (%s): %v", e.Kind, e.Err)
}

func (e *ConstraintError) Unwrap() []error { return []error{ErrInvalid, e.Err} }

// maxCachedConstraints bounds the compiled constraints an engine keeps:
// agents send the same schemas and tools with every request, and compiling
// them is the expensive part.
const maxCachedConstraints = 128

// constraintCache holds compiled constraints by key, oldest evicted first.
type constraintCache struct {
	mu    sync.Mutex
	byKey map[[32]byte]Constrainer
	order [][32]byte
}

// processors compiles (or finds) r's constraint and makes its samples'
// processors. It runs on the submitting goroutine, so compiling never
// holds up the step loop.
func (e *Engine) processors(r *Request) ([]LogitsProcessor, error) {
	c := r.Constraint
	if c == nil {
		return nil, nil
	}
	if e.cfg.Constraints == nil {
		return nil, &ConstraintError{Kind: c.Kind, Err: fmt.Errorf("this engine enforces no output constraints")}
	}
	// Compiled constraints are kept per tenant: a schema another tenant
	// sent must not compile measurably faster (DESIGN.md: no cross-tenant
	// timing signal).
	k := c.Key()
	k = sha256.Sum256(append(k[:], r.Scope...))
	cc := &e.constraints
	cc.mu.Lock()
	compiled, ok := cc.byKey[k]
	cc.mu.Unlock()
	if !ok {
		var err error
		if compiled, err = e.cfg.Constraints.Compile(c, r.Scope); err != nil {
			return nil, &ConstraintError{Kind: c.Kind, Err: err}
		}
		cc.mu.Lock()
		if cc.byKey == nil {
			cc.byKey = map[[32]byte]Constrainer{}
		}
		if _, ok := cc.byKey[k]; !ok {
			if len(cc.order) >= maxCachedConstraints {
				delete(cc.byKey, cc.order[0])
				cc.order = cc.order[1:]
			}
			cc.byKey[k] = compiled
			cc.order = append(cc.order, k)
		}
		cc.mu.Unlock()
	}
	procs := make([]LogitsProcessor, r.N)
	for i := range procs {
		p, err := compiled.NewProcessor()
		if err != nil {
			return nil, &ConstraintError{Kind: c.Kind, Err: err}
		}
		procs[i] = p
	}
	return procs, nil
}
