package chat

// The golden files in testdata/golden were produced by Python's Jinja2
// 3.1.6, configured as Hugging Face transformers configures it for
// apply_chat_template, with testdata/gen_golden.py (run offline, not by the
// tests):
//
//	cd internal/chat && python3 testdata/gen_golden.py ../../../shared/testdata/chat-templates
//
// The script shapes the messages of testdata/cases.json by the rules this
// package documents, written out independently in Python (which templates
// take object arguments, which want content None), so the test checks the
// shaping and the probes as well as the rendering. A .err golden holds the
// error Python raised; the Go render must fail too, with the same message
// when the template raised it itself.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/testshared"
)

type goldenCase struct {
	Name             string    `json:"name"`
	GenerationPrompt bool      `json:"generation_prompt"`
	Tools            bool      `json:"tools"`
	Messages         []Message `json:"messages"`
}

type goldenSpec struct {
	Now   time.Time `json:"now"`
	BOS   string    `json:"bos"`
	EOS   string    `json:"eos"`
	Tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"tools"`
	Cases []goldenCase `json:"cases"`
}

// UnmarshalJSON reads a case, its messages from the snake_case keys of
// cases.json.
func (c *goldenCase) UnmarshalJSON(b []byte) error {
	var raw struct {
		Name             string `json:"name"`
		GenerationPrompt bool   `json:"generation_prompt"`
		Tools            bool   `json:"tools"`
		Messages         []struct {
			Role             string `json:"role"`
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			ToolCalls        []struct {
				ID        string `json:"id"`
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"tool_calls"`
			ToolCallID string `json:"tool_call_id"`
			Name       string `json:"name"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*c = goldenCase{Name: raw.Name, GenerationPrompt: raw.GenerationPrompt, Tools: raw.Tools}
	for _, rm := range raw.Messages {
		m := Message{Role: rm.Role, Content: rm.Content, ReasoningContent: rm.ReasoningContent, ToolCallID: rm.ToolCallID, Name: rm.Name}
		for _, tc := range rm.ToolCalls {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
		}
		c.Messages = append(c.Messages, m)
	}
	return nil
}

func loadSpec(t testing.TB) goldenSpec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec goldenSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestGoldenTemplates(t *testing.T) {
	spec := loadSpec(t)
	var tools []Tool
	for _, tl := range spec.Tools {
		tools = append(tools, Tool{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters})
	}
	files, err := filepath.Glob(testshared.Path(t, "testdata", "chat-templates", "*.jinja"))
	if err != nil || len(files) < 17 {
		t.Fatalf("found %d templates (%v); want the 17 in shared/testdata/chat-templates", len(files), err)
	}
	for _, f := range files {
		stem := strings.TrimSuffix(filepath.Base(f), ".jinja")
		t.Run(stem, func(t *testing.T) {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			tmpl, err := Parse(string(src))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range spec.Cases {
				opts := RenderOptions{AddGenerationPrompt: c.GenerationPrompt, BOS: spec.BOS, EOS: spec.EOS, Now: spec.Now}
				if c.Tools {
					opts.Tools = tools
				}
				got, rerr := tmpl.renderTemplate(c.Messages, opts) // the template alone, as Jinja2 renders it
				base := filepath.Join("testdata", "golden", stem, c.Name)
				if want, err := os.ReadFile(base + ".txt"); err == nil {
					if rerr != nil {
						t.Errorf("%s: render failed: %v", c.Name, rerr)
						continue
					}
					if markupEscaped[stem] {
						want = []byte(unescapeMarkup(string(want)))
					}
					if got != string(want) {
						t.Errorf("%s: output differs from Jinja2's\n%s", c.Name, firstDiff(got, string(want)))
					}
					continue
				}
				wantErr, err := os.ReadFile(base + ".err")
				if err != nil {
					t.Fatalf("%s: no golden file %s.txt or .err", c.Name, base)
				}
				if rerr == nil {
					t.Errorf("%s: rendered, but Jinja2 failed with %s", c.Name, wantErr)
					continue
				}
				if msg, ok := strings.CutPrefix(strings.TrimSpace(string(wantErr)), "TemplateError: "); ok && !strings.Contains(rerr.Error(), msg) {
					t.Errorf("%s: error %q does not carry the template's message %q", c.Name, rerr, msg)
				}
			}
		})
	}
}

// markupEscaped lists the templates whose Jinja2 rendering HTML-escapes
// text: Functionary v3.1 builds its tool list as "…"|safe + name + …, and in
// Jinja2 adding a plain string to a |safe (Markup) string escapes the plain
// one — so the reference prompt has &lt;city&gt; and {&#34;name&#34;: …}.
// The jinja library has no Markup type; kvserve, like llama.cpp's renderer,
// writes the text unescaped, which is what the template means. For these
// templates the goldens are compared with markupsafe's five escapes undone:
// everything else must still match byte for byte.
var markupEscaped = map[string]bool{"meetkai-functionary-medium-v3.1": true}

func unescapeMarkup(s string) string {
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&#34;", `"`, "&#39;", "'", "&amp;", "&").Replace(s)
}

// firstDiff shows where two strings start to differ.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-80)
	return "at byte " + itoa(i) + ":\n got: …" + quote(got[lo:min(len(got), i+80)]) + "\nwant: …" + quote(want[lo:min(len(want), i+80)])
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }
