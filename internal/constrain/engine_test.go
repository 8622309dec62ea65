package constrain_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/constrain"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/grammar"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/testshared"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

var _ engine.LogitsProcessor = (*grammar.Matcher)(nil)

// TestEngineGeneratesSchemaInstances runs the real engine with the tiny
// random-weight model and a JSON-schema constraint the engine compiles with
// this package: every sample must end by itself (end-of-generation, not the
// length limit) with an instance of the schema.
func TestEngineGeneratesSchemaInstances(t *testing.T) {
	f, err := gguf.Open(testshared.Path(t, "models", "tiny-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	fwd, err := model.NewForwarder(m, model.ForwarderOptions{Threads: 1, KVType: tensor.F16})
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	compiler := constrain.New(tok, nil, grammar.Options{})
	e, err := engine.New(fwd, engine.Config{EndOfGeneration: tok.EOGs(), Constraints: compiler})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	const schema = `{"type":"object","properties":{
		"id":{"type":"integer","minimum":0,"maximum":999},
		"kind":{"enum":["cat","dog"]},
		"name":{"type":"string","maxLength":6},
		"ok":{"type":"boolean"}
	},"required":["id","kind","name","ok"]}`
	const n = 4
	st, err := e.Submit(context.Background(), engine.Request{
		Prompt: []int32{1, 40, 50, 60}, MaxTokens: 200, N: n,
		Sampling:   sample.Params{Temperature: 1, Seed: 5},
		Constraint: &engine.Constraint{Kind: engine.ConstraintJSONSchema, Schema: json.RawMessage(schema)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	toks := make([][]int32, n)
	fins := make([]engine.FinishReason, n)
	var buf []engine.Output
	for {
		var err error
		buf, err = st.Recv(ctx, buf[:0])
		for _, o := range buf {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			if o.Token >= 0 && !tok.IsEOG(o.Token) {
				toks[o.Index] = append(toks[o.Index], o.Token)
			}
			if o.Finish != engine.FinishNone {
				fins[o.Index] = o.Finish
			}
		}
		if errors.Is(err, engine.ErrDone) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		text := tok.Decode(toks[i])
		t.Logf("sample %d (%d tokens): %q", i, len(toks[i]), text)
		if fins[i] != engine.FinishStop {
			t.Errorf("sample %d ended with %v: %q", i, fins[i], text)
		}
		var doc struct {
			ID   *int    `json:"id"`
			Kind *string `json:"kind"`
			Name *string `json:"name"`
			OK   *bool   `json:"ok"`
		}
		if err := json.Unmarshal([]byte(text), &doc); err != nil {
			t.Errorf("sample %d: %q: %v", i, text, err)
			continue
		}
		if doc.ID == nil || *doc.ID < 0 || *doc.ID > 999 || doc.Kind == nil || (*doc.Kind != "cat" && *doc.Kind != "dog") ||
			doc.Name == nil || len([]rune(*doc.Name)) > 6 || doc.OK == nil {
			t.Errorf("sample %d: %q does not satisfy the schema", i, text)
		}
	}
}
