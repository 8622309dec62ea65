package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/tensor"
)

// testCompiler is a ConstraintCompiler whose constraint kinds name test
// processors: each sample gets a new one from the kind's function.
type testCompiler map[string]func() LogitsProcessor

func (c testCompiler) Compile(k *Constraint, _ string) (Constrainer, error) {
	f, ok := c[k.Kind]
	if !ok {
		return nil, fmt.Errorf("unknown kind %q", k.Kind)
	}
	return procFunc(f), nil
}

type procFunc func() LogitsProcessor

func (f procFunc) NewProcessor() (LogitsProcessor, error) { return f(), nil }

// countingCompiler counts compilations.
type countingCompiler struct{ n int }

func (c *countingCompiler) Compile(*Constraint, string) (Constrainer, error) {
	c.n++
	return procFunc(func() LogitsProcessor { return fixedLogits{1: 1} }), nil
}

// nullForwarder is a forward pass that computes nothing (the engine's own
// tests of submission need no model).
type nullForwarder struct{}

func (nullForwarder) Shape() batch.Shape {
	return batch.Shape{Vocab: 16, Context: 256, Layers: 1, KVDim: 4, KVType: tensor.F16, MaxTokens: 64}
}
func (nullForwarder) Forward(_ context.Context, seqs []batch.Seq) error {
	for _, s := range seqs {
		for i := range s.Logits {
			s.Logits[i] = 0
		}
	}
	return nil
}

// TestRequestRoundTrip: a request is plain data; what crosses a process
// boundary as JSON comes back equal.
func TestRequestRoundTrip(t *testing.T) {
	r := Request{
		Prompt:     []int32{1, 2, 3, 4},
		Segments:   []Segment{{Start: 0, End: 2, Retention: RetentionPersistent}},
		MaxTokens:  9,
		Sampling:   sample.Params{Temperature: 0.7, TopK: 5, TopP: 0.9, Seed: 42, LogitBias: map[int32]float32{3: -1}, TopLogprobs: 2},
		StopTokens: []int32{7},
		IgnoreEOS:  true,
		N:          2,
		Constraint: &Constraint{Kind: ConstraintToolCall, AfterReasoning: true,
			Tools: []ConstraintTool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object"}`)}}},
		Priority:     3,
		Scope:        "tenant-a",
		SharedScope:  "shared",
		SharedTokens: 2,
		Hints:        Hints{SessionID: "s1", Retention: RetentionSession, TTL: time.Hour, ExpectedOutputTokens: 12},
	}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back Request
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, back) {
		t.Fatalf("round trip:\n got %+v\nwant %+v\njson %s", back, r, data)
	}
	// Every field is in the JSON: a field added without a tag (or one that
	// cannot be serialised) shows up here.
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatal(err)
	}
	if got, want := len(fields), reflect.TypeFor[Request]().NumField(); got != want {
		t.Fatalf("%d of %d fields serialised: %s", got, want, data)
	}
}

func TestOutputRoundTrip(t *testing.T) {
	outs := []Output{
		{Index: 1, Token: 42, Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC),
			Logprobs: &sample.Logprobs{Logprob: -0.5, Top: []sample.TokenLogprob{{Token: 42, Logprob: -0.5}}}},
		{Index: 0, Token: -1, Finish: FinishError, Err: errors.New("engine: boom")},
		{Token: 3, Finish: FinishStop},
	}
	for _, o := range outs {
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var back Output
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatal(err)
		}
		if (o.Err == nil) != (back.Err == nil) || (o.Err != nil && o.Err.Error() != back.Err.Error()) {
			t.Fatalf("error %v came back as %v", o.Err, back.Err)
		}
		o.Err, back.Err = nil, nil
		if !reflect.DeepEqual(o, back) {
			t.Fatalf("round trip:\n got %+v\nwant %+v\njson %s", back, o, data)
		}
	}
}

func TestConstraintKey(t *testing.T) {
	base := Constraint{Kind: ConstraintJSONSchema, Schema: json.RawMessage(`{"type":"string"}`)}
	variants := []Constraint{
		{Kind: ConstraintJSONObject},
		{Kind: ConstraintJSONSchema, Schema: json.RawMessage(`{"type":"number"}`)},
		{Kind: ConstraintToolCall, Tools: []ConstraintTool{{Name: "a"}}},
		{Kind: ConstraintToolCall, Tools: []ConstraintTool{{Name: "a"}}, AfterReasoning: true},
		{Kind: ConstraintToolCall, Tools: []ConstraintTool{{Name: "a", Parameters: json.RawMessage(`{}`)}}},
		{Kind: ConstraintToolCall, Tools: []ConstraintTool{{Name: "ab"}}},
		{Kind: ConstraintToolCall, Tools: []ConstraintTool{{Name: "a"}, {Name: "b"}}},
	}
	seen := map[[32]byte]int{base.Key(): -1}
	for i, v := range variants {
		if j, dup := seen[v.Key()]; dup {
			t.Errorf("variants %d and %d share a key", i, j)
		}
		seen[v.Key()] = i
	}
	same := base
	if same.Key() != base.Key() {
		t.Error("equal constraints, different keys")
	}
}

// TestConstraintCompiledOnce: the same constraint is compiled once per
// engine; a constraint the compiler refuses, or an engine without a
// compiler, fails the submission as an invalid request.
func TestConstraintCompiledOnce(t *testing.T) {
	cc := &countingCompiler{}
	e, err := NewStepped(nullForwarder{}, Config{Constraints: cc})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	c := &Constraint{Kind: ConstraintJSONObject}
	for range 3 {
		if _, err := e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 1, N: 2, Constraint: c}); err != nil {
			t.Fatal(err)
		}
	}
	if cc.n != 1 {
		t.Errorf("compiled %d times, want 1", cc.n)
	}
	// Another tenant's identical constraint is compiled for it.
	if _, err := e.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 1, Constraint: c, Scope: "other"}); err != nil {
		t.Fatal(err)
	}
	if cc.n != 2 {
		t.Errorf("compiled %d times after another tenant's request, want 2", cc.n)
	}

	refusing, err := NewStepped(nullForwarder{}, Config{Constraints: testCompiler{}})
	if err != nil {
		t.Fatal(err)
	}
	defer refusing.Close()
	none, err := NewStepped(nullForwarder{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer none.Close()
	for _, eng := range []*Engine{refusing, none} {
		_, err := eng.Submit(context.Background(), Request{Prompt: []int32{1}, MaxTokens: 1, Constraint: c})
		var ce *ConstraintError
		if !errors.As(err, &ce) || !errors.Is(err, ErrInvalid) || ce.Kind != ConstraintJSONObject {
			t.Errorf("error %v, want a ConstraintError that is ErrInvalid", err)
		}
		if eng.Pending() {
			t.Error("a refused request is pending")
		}
	}
}

// FuzzRequestJSON: a request decoded from any bytes (what a remote worker
// receives) is refused with an error or served; it never panics the
// engine, and the engine stays usable.
func FuzzRequestJSON(f *testing.F) {
	good, _ := json.Marshal(Request{Prompt: []int32{1, 2, 3}, MaxTokens: 2, N: 2,
		Segments: []Segment{{Start: 0, End: 2, Retention: RetentionPinned}},
		Hints:    Hints{SessionID: "s", TTL: time.Minute, EndSession: true}})
	f.Add(good)
	f.Add([]byte(`{"prompt":[1],"max_tokens":1,"constraint":{"kind":"json_object"}}`))
	f.Add([]byte(`{"prompt":[-1,99999],"max_tokens":-5,"n":1000,"segments":[{"start":-3,"end":99,"retention":200}]}`))
	f.Add([]byte(`{"prompt":[1],"max_tokens":1,"sampling":{"banned_tokens":[1,2],"logit_bias":{"3":1e9}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if json.Unmarshal(data, &r) != nil {
			return
		}
		// A small pool: the default gigabyte, allocated per input, let the
		// fuzzer run only a few inputs a second.
		e, err := NewStepped(nullForwarder{}, Config{KVMemoryBytes: 1 << 20,
			Constraints: testCompiler{"json_object": func() LogitsProcessor { return fixedLogits{1: 1} }}})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		ctx := context.Background()
		if _, err := e.Submit(ctx, r); err != nil {
			return
		}
		for i := 0; e.Pending() && i < 64; i++ {
			e.Step(ctx)
		}
		if err := e.KV().CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}
