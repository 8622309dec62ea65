package openai

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/api/gemini"
	"github.com/kvserve/kvserve/internal/ctxcache"
)

// openCaches lets every caller use every cache (the permission matrix is
// tested in cmd/kvserve over the real tenant store).
type openCaches struct{}

func (openCaches) Authorize(context.Context, ctxcache.Caller, string, string, string) error {
	return nil
}

// twoModels serves the test model as "tiny-chat" (fast) and again as
// "tiny-strong", with the auto rule between them.
func twoModels(t *testing.T, rule api.AutoRule) *apitest.Env {
	t.Helper()
	svc, err := ctxcache.New(ctxcache.Options{Store: &ctxcache.MemStore{}, Authorizer: openCaches{}, MinTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The Gemini dialect renders caches' prompts (api.CacheRenderer).
	env := newEnv(t, apitest.Options{Config: api.Config{Caches: svc}, Dialects: []api.Dialect{gemini.New()}})
	strong := *env.Model
	strong.ID = "tiny-strong"
	rule.Fast, rule.Strong = apitest.ModelName, strong.ID
	if err := env.Server.SetModels([]*api.Model{env.Model, &strong}, &rule); err != nil {
		t.Fatal(err)
	}
	return env
}

func TestAutoModel(t *testing.T) {
	env := twoModels(t, api.AutoRule{LongPrompt: 300, Tools: true, Reasoning: true})
	tool := []map[string]any{{"type": "function", "function": map[string]any{"name": "lookup", "parameters": map[string]any{"type": "object"}}}}
	short := []map[string]string{{"role": "user", "content": "hi"}}
	long := []map[string]string{{"role": "user", "content": strings.Repeat("long ", 400)}}
	cases := []struct {
		name string
		body map[string]any
		want string
	}{
		{"short", map[string]any{"messages": short}, apitest.ModelName},
		{"tools", map[string]any{"messages": short, "tools": tool}, "tiny-strong"},
		{"long", map[string]any{"messages": long}, "tiny-strong"},
		{"reasoning on", map[string]any{"messages": short, "reasoning_effort": "high"}, "tiny-strong"},
		{"reasoning off", map[string]any{"messages": short, "reasoning_effort": "none"}, apitest.ModelName},
		{"named", map[string]any{"messages": short, "tools": tool, "model": apitest.ModelName}, apitest.ModelName},
	}
	for _, c := range cases {
		c.body["max_tokens"] = 2
		if c.body["model"] == nil {
			c.body["model"] = api.AutoModel
		}
		var out struct{ Model string }
		postOK(t, env.URL("/v1/chat/completions"), c.body, &out)
		if out.Model != c.want {
			t.Errorf("%s: answered by %q, want %q", c.name, out.Model, c.want)
		}
	}
	// Both models are listed; "auto" resolves only in a request.
	var list struct{ Data []struct{ ID string } }
	resp, err := http.Get(env.URL("/v1/models"))
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list.Data) != 2 || list.Data[0].ID != apitest.ModelName || list.Data[1].ID != "tiny-strong" {
		t.Errorf("models listed: %+v (%v)", list.Data, err)
	}
	status, data, _ := post(t, env.URL("/v1/chat/completions"), map[string]any{"model": "nope", "messages": short})
	if status != http.StatusNotFound || !strings.Contains(string(data), `tiny-strong`) || !strings.Contains(string(data), `auto`) {
		t.Errorf("unknown model: %d %s", status, data)
	}
}

// TestAutoLongPromptBeyondTheFastContext: a prompt whose text alone is too
// long for the fast model's context (refused there before it is
// tokenized) still goes to the strong model under a long-prompt rule.
func TestAutoLongPromptBeyondTheFastContext(t *testing.T) {
	env := twoModels(t, api.AutoRule{})
	strong := *env.Model
	strong.ID, strong.ContextLength = "tiny-strong", 2*apitest.ContextLength
	if err := env.Server.SetModels([]*api.Model{env.Model, &strong}, &api.AutoRule{Fast: apitest.ModelName, Strong: strong.ID, LongPrompt: 300}); err != nil {
		t.Fatal(err)
	}
	// At least the fast context's tokens by the bound, fewer than the
	// strong one's: the strong model tokenizes it and finds it too long
	// for itself as well (a token a byte here), naming its own context.
	text := strings.Repeat("a", apitest.ContextLength*env.Model.Tokenizer.MaxBytesPerToken()+1)
	status, data, _ := post(t, env.URL("/v1/chat/completions"), map[string]any{"model": api.AutoModel, "max_tokens": 2,
		"messages": []map[string]string{{"role": "user", "content": text}}})
	want := "context holds " + strconv.Itoa(strong.ContextLength) + " tokens"
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(string(data), want) || strings.Contains(string(data), "at least") {
		t.Fatalf("status %d, want 413 from the strong model (%q): %s", status, want, data)
	}
}

// TestAutoKeepsTheCachesModel: a request continuing a context cache takes
// the cache's model, whatever the rules would choose.
func TestAutoKeepsTheCachesModel(t *testing.T) {
	env := twoModels(t, api.AutoRule{Tools: true})
	var cc struct{ Name string }
	postOK(t, env.URL("/v1/cached_contents"), map[string]any{"model": apitest.ModelName,
		"messages": []map[string]string{{"role": "system", "content": "a cached system prompt"}}}, &cc)
	tool := []map[string]any{{"type": "function", "function": map[string]any{"name": "lookup", "parameters": map[string]any{"type": "object"}}}}
	var out struct{ Model string }
	postOK(t, env.URL("/v1/chat/completions"), map[string]any{"model": api.AutoModel, "max_tokens": 2, "tools": tool,
		"messages": []map[string]string{{"role": "user", "content": "hi"}}, "kvserve": map[string]any{"cached_content": cc.Name}}, &out)
	if out.Model != apitest.ModelName {
		t.Errorf("answered by %q, want the cache's %q", out.Model, apitest.ModelName)
	}
	// A cache is bound to one model: "auto" cannot create one.
	status, data, _ := post(t, env.URL("/v1/cached_contents"), map[string]any{"model": api.AutoModel,
		"messages": []map[string]string{{"role": "system", "content": "x"}}})
	if status != http.StatusBadRequest && status != http.StatusNotFound {
		t.Errorf("a cache for %q: %d %s", api.AutoModel, status, data)
	}
}

func TestSetModelsRefused(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	a := *env.Model
	b := *env.Model
	b.ID = "other"
	aliased := b
	aliased.Aliases = []string{apitest.ModelName}
	autoNamed := b
	autoNamed.ID = api.AutoModel
	for name, c := range map[string]struct {
		ms   []*api.Model
		rule *api.AutoRule
	}{
		"same id":       {[]*api.Model{&a, &a}, nil},
		"alias clash":   {[]*api.Model{&a, &aliased}, nil},
		"named auto":    {[]*api.Model{&a, &autoNamed}, nil},
		"unknown fast":  {[]*api.Model{&a, &b}, &api.AutoRule{Fast: "x", Strong: "other"}},
		"rule, no list": {nil, &api.AutoRule{Fast: "x", Strong: "y"}},
		"negative long": {[]*api.Model{&a, &b}, &api.AutoRule{Fast: a.ID, Strong: b.ID, LongPrompt: -1}},
	} {
		if err := env.Server.SetModels(c.ms, c.rule); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := env.Server.SetModels([]*api.Model{&a, &b}, &api.AutoRule{Fast: a.ID, Strong: b.ID}); err != nil {
		t.Errorf("two models and a rule: %v", err)
	}
}
