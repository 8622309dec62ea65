package constrain_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/constrain"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/grammar"
	"github.com/kvserve/kvserve/internal/testshared"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

func tinyTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	f, err := gguf.Open(testshared.Path(t, "models", "tiny-f32.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tok, err := tokenizer.FromGGUF(f)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestCompile: every kind compiles to processors that accept what they
// should, and what cannot be enforced is refused with a reason.
func TestCompile(t *testing.T) {
	tok := tinyTokenizer(t)
	tmpl, err := chat.Parse(tok.ChatTemplate())
	if err != nil {
		t.Fatal(err)
	}
	c := constrain.New(tok, tmpl, grammar.Options{})
	tests := []struct {
		name    string
		k       engine.Constraint
		noTmpl  bool
		wantErr string
	}{
		{name: "json object", k: engine.Constraint{Kind: engine.ConstraintJSONObject}},
		{name: "json schema", k: engine.Constraint{Kind: engine.ConstraintJSONSchema, Schema: json.RawMessage(`{"type":"integer"}`)}},
		{name: "bad schema", k: engine.Constraint{Kind: engine.ConstraintJSONSchema, Schema: json.RawMessage(`{"type":`)}, wantErr: "schema"},
		{name: "tool call", k: engine.Constraint{Kind: engine.ConstraintToolCall,
			Tools: []engine.ConstraintTool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}}},
		{name: "tool call after reasoning", k: engine.Constraint{Kind: engine.ConstraintToolCall, AfterReasoning: true,
			Tools: []engine.ConstraintTool{{Name: "f"}}}},
		{name: "no tools", k: engine.Constraint{Kind: engine.ConstraintToolCall}, wantErr: "names no tool"},
		{name: "no template", k: engine.Constraint{Kind: engine.ConstraintToolCall, Tools: []engine.ConstraintTool{{Name: "f"}}}, noTmpl: true, wantErr: "template"},
		{name: "unknown kind", k: engine.Constraint{Kind: "regex"}, wantErr: "unknown constraint kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := c
			if tt.noTmpl {
				cc = constrain.New(tok, nil, grammar.Options{})
			}
			compiled, err := cc.Compile(&tt.k, "tenant")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one about %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			p, err := compiled.NewProcessor()
			if err != nil {
				t.Fatal(err)
			}
			// The processor must allow something and forbid something.
			logits := make([]float32, tok.VocabSize())
			p.Process(logits)
			allowed, forbidden := 0, 0
			for _, l := range logits {
				if l == 0 {
					allowed++
				} else {
					forbidden++
				}
			}
			if allowed == 0 || forbidden == 0 {
				t.Fatalf("%d tokens allowed, %d forbidden", allowed, forbidden)
			}
		})
	}
}

// TestPrepare: the grammar vocabulary is built by Prepare, not left for the
// first constrained request (a burst of them would all wait for it), and
// not before it is asked for.
func TestPrepare(t *testing.T) {
	c := constrain.New(tinyTokenizer(t), nil, grammar.Options{})
	if c.Prepared() {
		t.Fatal("the vocabulary was built before anything asked for it")
	}
	c.Prepare()
	if !c.Prepared() {
		t.Fatal("Prepare did not build the grammar vocabulary")
	}
	c.Prepare() // again: built once, still there
	if !c.Prepared() {
		t.Fatal("the vocabulary went away")
	}
}
