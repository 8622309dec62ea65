package outparse

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/chat/conv"
	"github.com/kvserve/kvserve/internal/testshared"
)

// The tests speak of the conversation's data as package chat does.
type (
	Message  = conv.Message
	ToolCall = conv.ToolCall
	Tool     = conv.Tool
)

const (
	FamilyHermes         = conv.FamilyHermes
	FamilyLlama3         = conv.FamilyLlama3
	FamilyFunctionaryV31 = conv.FamilyFunctionaryV31
	FamilyFunctionaryV32 = conv.FamilyFunctionaryV32
	FamilyFirefunctionV2 = conv.FamilyFirefunctionV2
	FamilyDeepSeekR1     = conv.FamilyDeepSeekR1
	FamilyMistral        = conv.FamilyMistral
	FamilyCommandR7B     = conv.FamilyCommandR7B
	FamilyCommandR       = conv.FamilyCommandR
)

// testTemplate is a chat template with its output syntax: the tests render
// conversations with one and parse the model's side back with the other.
type testTemplate struct {
	*chat.Template
	Syntax
}

func newTestTemplate(t testing.TB, src string) testTemplate {
	t.Helper()
	tmpl, err := chat.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	return testTemplate{tmpl, ForTemplate(tmpl)}
}

func parseShared(t testing.TB, stem string) testTemplate {
	t.Helper()
	src, err := os.ReadFile(testshared.Path(t, "testdata", "chat-templates", stem+".jinja"))
	if err != nil {
		t.Fatal(err)
	}
	return newTestTemplate(t, string(src))
}

// goldenSpec is what these tests use of package chat's golden cases: the
// tools and the render settings.
type goldenSpec struct {
	Now   time.Time `json:"now"`
	BOS   string    `json:"bos"`
	EOS   string    `json:"eos"`
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"tools"`
}

func loadSpec(t testing.TB) goldenSpec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec goldenSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}
