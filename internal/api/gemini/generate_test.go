package gemini

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/testshared"
)

func TestGenerateContentMatchesEngine(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	msgs := []chat.Message{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Say something."}}
	prompt := env.ChatPrompt(t, msgs, nil)
	want := env.Greedy(t, prompt, 24)
	body := map[string]any{
		"systemInstruction": map[string]any{"parts": []map[string]any{{"text": "Be brief."}}},
		"contents":          userContents("Say something."),
		"generationConfig":  map[string]any{"temperature": 0, "maxOutputTokens": 24},
		"safetySettings":    []map[string]any{{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}},
	}
	for _, path := range []string{gen(env, "generateContent"), env.URL("/v1beta/models/models/" + apitest.ModelName + ":generateContent"),
		env.URL("/v1/models/" + apitest.ModelName + ":generateContent")} {
		var resp gResp
		postOK(t, path, body, &resp)
		if got := env.Recorder.Last(t).Prompt; !slices.Equal(got, prompt) {
			t.Fatalf("%s: engine prompt %q, want %q", path, env.Tokenizer.Decode(got), env.Tokenizer.Decode(prompt))
		}
		if len(resp.Candidates) != 1 || resp.Candidates[0].Index == nil || *resp.Candidates[0].Index != 0 || resp.Candidates[0].Content.Role != "model" {
			t.Fatalf("bad candidates %+v", resp.Candidates)
		}
		if got := resp.text(0); got != env.Tokenizer.Decode(want) {
			t.Fatalf("text %q, want %q", got, env.Tokenizer.Decode(want))
		}
		u := resp.UsageMetadata
		generated := len(want)
		finish := "MAX_TOKENS"
		if len(want) < 24 {
			generated++ // the end-of-generation token counts
			finish = "STOP"
		}
		if resp.Candidates[0].FinishReason != finish {
			t.Fatalf("finishReason %q, want %q", resp.Candidates[0].FinishReason, finish)
		}
		if u == nil || u.PromptTokenCount != len(prompt) || u.CandidatesTokenCount != generated || u.TotalTokenCount != len(prompt)+generated || u.ThoughtsTokenCount != 0 {
			t.Fatalf("usage %+v, want prompt %d candidates %d", u, len(prompt), generated)
		}
		if resp.ModelVersion != apitest.ModelName || len(resp.ResponseID) < 16 || resp.Kvserve == nil {
			t.Fatalf("modelVersion %q responseId %q kvserve %v", resp.ModelVersion, resp.ResponseID, resp.Kvserve)
		}
	}
	env.WaitIdle(t)
}

func TestStreamGenerateContent(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{
		"contents":         userContents("Stream to me."),
		"generationConfig": map[string]any{"temperature": 0.8, "seed": 4, "maxOutputTokens": 40, "candidateCount": 2},
	}
	var whole gResp
	postOK(t, gen(env, "generateContent"), body, &whole)
	if len(whole.Candidates) != 2 {
		t.Fatalf("%d candidates", len(whole.Candidates))
	}
	for _, mode := range []string{"sse", "array"} {
		t.Run(mode, func(t *testing.T) {
			url := gen(env, "streamGenerateContent")
			if mode == "sse" {
				url += "?alt=sse"
			}
			// Tokens that arrive while a chunk is written go out together in
			// the next one, and a handler descheduled for a millisecond can
			// find the whole (cached-prompt, tiny-model) answer ready: so a
			// streamed response has at least 2 chunks in one of 3 tries; a
			// response that is not streamed never does.
			var chunks []gResp
			for try := 0; try < 3 && len(chunks) < 2; try++ {
				status, data, hdr := post(t, url, body)
				if status != 200 {
					t.Fatalf("status %d: %s", status, data)
				}
				if mode == "sse" {
					if ct := hdr.Get("Content-Type"); ct != "text/event-stream" {
						t.Fatalf("Content-Type %q", ct)
					}
					chunks = sseChunks(t, data)
				} else {
					if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
						t.Fatalf("Content-Type %q", ct)
					}
					chunks = arrayChunks(t, data)
				}
			}
			if len(chunks) < 2 {
				t.Fatalf("%d chunks in 3 tries: not streamed", len(chunks))
			}
			text, _, finish, last := streamed(t, chunks, 2)
			for i := range text {
				if text[i] != whole.text(i) || finish[i] != whole.Candidates[i].FinishReason {
					t.Fatalf("candidate %d streamed %q (%s), whole %q (%s)", i, text[i], finish[i], whole.text(i), whole.Candidates[i].FinishReason)
				}
			}
			u, w := last.UsageMetadata, whole.UsageMetadata
			if u.PromptTokenCount != w.PromptTokenCount || u.CandidatesTokenCount != w.CandidatesTokenCount || u.TotalTokenCount != w.TotalTokenCount {
				t.Fatalf("streamed usage %+v, whole %+v", u, w)
			}
			if last.Kvserve == nil {
				t.Fatal("no kvserve timings in the last chunk")
			}
		})
	}
	env.WaitIdle(t)
}

// weatherDecl is a function declaration in Gemini's schema (upper-case
// types, a string enum, a propertyOrdering).
var weatherDecl = map[string]any{
	"name": "get_weather", "description": "Current weather of a city",
	"parameters": map[string]any{"type": "OBJECT", "properties": map[string]any{
		"city": map[string]any{"type": "STRING"},
		"unit": map[string]any{"type": "STRING", "format": "enum", "enum": []string{"celsius", "fahrenheit"}},
		"days": map[string]any{"type": "INTEGER", "minimum": 1, "maximum": "7"},
	}, "required": []string{"city", "unit"}, "propertyOrdering": []string{"city", "unit", "days"}},
}

var timeDecl = map[string]any{"name": "get_time", "parameters": map[string]any{"type": "object",
	"properties": map[string]any{"zone": map[string]any{"type": "string"}}, "required": []string{"zone"}}}

var newsDecl = map[string]any{"name": "get_news", "description": "Headlines",
	"parametersJsonSchema": map[string]any{"type": "object", "properties": map[string]any{"topic": map[string]any{"type": "string"}},
		"required": []string{"topic"}, "additionalProperties": false}}

// checkCall checks a function call's arguments against its declaration.
func checkCall(t *testing.T, name string, args json.RawMessage) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	switch name {
	case "get_weather":
		var v struct {
			City *string `json:"city"`
			Unit string  `json:"unit"`
			Days *float64
		}
		if err := dec.Decode(&v); err != nil || v.City == nil || (v.Unit != "celsius" && v.Unit != "fahrenheit") ||
			(v.Days != nil && (*v.Days < 1 || *v.Days > 7 || *v.Days != float64(int(*v.Days)))) {
			t.Fatalf("get_weather args %s do not fit the schema: %v", args, err)
		}
	case "get_time":
		var v struct {
			Zone *string `json:"zone"`
		}
		if err := dec.Decode(&v); err != nil || v.Zone == nil {
			t.Fatalf("get_time args %s: %v", args, err)
		}
	case "get_news":
		var v struct {
			Topic *string `json:"topic"`
		}
		if err := dec.Decode(&v); err != nil || v.Topic == nil {
			t.Fatalf("get_news args %s: %v", args, err)
		}
	default:
		t.Fatalf("called %q", name)
	}
}

func TestFunctionCallingANY(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{
		"contents":         userContents("Weather in Paris?"),
		"tools":            []any{map[string]any{"functionDeclarations": []any{weatherDecl, timeDecl}}},
		"toolConfig":       map[string]any{"functionCallingConfig": map[string]any{"mode": "ANY", "allowedFunctionNames": []string{"get_weather"}}},
		"generationConfig": map[string]any{"maxOutputTokens": 300, "seed": 5},
	}
	var resp gResp
	postOK(t, gen(env, "generateContent"), body, &resp)
	cd := resp.Candidates[0]
	if cd.FinishReason != "STOP" || len(cd.Content.Parts) != 1 || cd.Content.Parts[0].FunctionCall == nil {
		t.Fatalf("finish %q, parts %+v", cd.FinishReason, cd.Content.Parts)
	}
	call := cd.Content.Parts[0].FunctionCall
	if call.Name != "get_weather" || call.ID == "" {
		t.Fatalf("call %+v", call)
	}
	checkCall(t, call.Name, call.Args)
	// The schema reached the template as JSON Schema.
	prompt := env.Tokenizer.Decode(env.Recorder.Last(t).Prompt)
	// (The test vocabulary cannot spell spaces: decoded prompts have none.)
	if !strings.Contains(prompt, `"type":"object"`) || !strings.Contains(prompt, `"enum":["celsius","fahrenheit"]`) {
		t.Fatalf("tool schema not rendered as JSON Schema: %q", prompt)
	}

	// Streamed, same seed: the same call, whole, in one part.
	for _, mode := range []string{"?alt=sse", ""} {
		status, data, _ := post(t, gen(env, "streamGenerateContent")+mode, body)
		if status != 200 {
			t.Fatalf("status %d: %s", status, data)
		}
		var chunks []gResp
		if mode != "" {
			chunks = sseChunks(t, data)
		} else {
			chunks = arrayChunks(t, data)
		}
		var calls int
		for _, c := range chunks {
			for _, p := range c.Candidates[0].Content.Parts {
				if p.FunctionCall != nil {
					calls++
					if p.FunctionCall.Name != call.Name || !bytes.Equal(p.FunctionCall.Args, call.Args) {
						t.Fatalf("streamed call %s %s, whole %s %s", p.FunctionCall.Name, p.FunctionCall.Args, call.Name, call.Args)
					}
				} else if p.Text != nil && *p.Text != "" {
					t.Fatalf("text %q beside a forced call", *p.Text)
				}
			}
		}
		if _, _, finish, _ := streamed(t, chunks, 1); calls != 1 || finish[0] != "STOP" {
			t.Fatalf("%d calls streamed, finish %q", calls, finish[0])
		}
	}

	// ANY without names: any of the declared functions (one given in JSON
	// Schema), three candidates.
	body["tools"] = []any{map[string]any{"functionDeclarations": []any{weatherDecl, timeDecl}}, map[string]any{"functionDeclarations": []any{newsDecl}}}
	body["toolConfig"] = map[string]any{"functionCallingConfig": map[string]any{"mode": "ANY"}}
	body["generationConfig"] = map[string]any{"maxOutputTokens": 300, "seed": 11, "candidateCount": 3}
	var anyResp gResp
	postOK(t, gen(env, "generateContent"), body, &anyResp)
	for i, cd := range anyResp.Candidates {
		if len(cd.Content.Parts) != 1 || cd.Content.Parts[0].FunctionCall == nil {
			t.Fatalf("candidate %d: parts %+v (%s)", i, cd.Content.Parts, cd.FinishReason)
		}
		checkCall(t, cd.Content.Parts[0].FunctionCall.Name, cd.Content.Parts[0].FunctionCall.Args)
	}

	// A subset of two: only those are declared to the model.
	body["toolConfig"] = map[string]any{"function_calling_config": map[string]any{"mode": "ANY", "allowed_function_names": []string{"get_time", "get_news"}}}
	body["generationConfig"] = map[string]any{"maxOutputTokens": 300, "seed": 2, "candidateCount": 2}
	var sub gResp
	postOK(t, gen(env, "generateContent"), body, &sub)
	for i, cd := range sub.Candidates {
		if len(cd.Content.Parts) != 1 || cd.Content.Parts[0].FunctionCall == nil || cd.Content.Parts[0].FunctionCall.Name == "get_weather" {
			t.Fatalf("candidate %d: parts %+v", i, cd.Content.Parts)
		}
		checkCall(t, cd.Content.Parts[0].FunctionCall.Name, cd.Content.Parts[0].FunctionCall.Args)
	}
	if prompt := env.Tokenizer.Decode(env.Recorder.Last(t).Prompt); strings.Contains(prompt, "get_weather") {
		t.Fatalf("a function outside allowedFunctionNames was declared: %q", prompt)
	}

	// NONE: functions declared, nothing parsed as a call.
	body["toolConfig"] = map[string]any{"functionCallingConfig": map[string]any{"mode": "NONE"}}
	body["generationConfig"] = map[string]any{"maxOutputTokens": 8}
	var none gResp
	postOK(t, gen(env, "generateContent"), body, &none)
	for _, p := range none.Candidates[0].Content.Parts {
		if p.FunctionCall != nil {
			t.Fatalf("mode NONE produced a call: %+v", p.FunctionCall)
		}
	}
	env.WaitIdle(t)
}

// TestFunctionRoundTrip sends a model turn with a call and the user's
// function response back: the template sees an assistant tool call and a
// tool message.
func TestFunctionRoundTrip(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	body := map[string]any{
		"contents": []any{
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Weather in Oslo?"}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"functionCall": map[string]any{"id": "c1", "name": "get_weather", "args": map[string]any{"city": "Oslo", "unit": "celsius"}}}}},
			map[string]any{"role": "user", "parts": []any{map[string]any{"functionResponse": map[string]any{"id": "c1", "name": "get_weather", "response": map[string]any{"temp_c": 3}}}}},
		},
		"tools":            []any{map[string]any{"functionDeclarations": []any{weatherDecl}}},
		"generationConfig": map[string]any{"maxOutputTokens": 2},
	}
	var resp gResp
	postOK(t, gen(env, "generateContent"), body, &resp)
	prompt := env.Tokenizer.Decode(env.Recorder.Last(t).Prompt)
	// (The test vocabulary cannot spell spaces: decoded prompts have none.)
	for _, want := range []string{`{"name":"get_weather","arguments":{"city":"Oslo","unit":"celsius"}}`, "<tool_response>\n{\"temp_c\":3}\n</tool_response>"} {
		if !strings.Contains(prompt, want) {
			t.Fatalf("prompt lacks %q: %q", want, prompt)
		}
	}
	env.WaitIdle(t)
}

func TestResponseSchema(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	schema := map[string]any{
		"type": "OBJECT",
		"properties": map[string]any{
			"tags": map[string]any{"type": "ARRAY", "items": map[string]any{"type": "STRING", "enum": []string{"red", "blue"}}, "maxItems": "3"},
			"name": map[string]any{"type": "STRING", "maxLength": 10},
			"age":  map[string]any{"type": "INTEGER", "minimum": 0, "maximum": 150},
			"ok":   map[string]any{"type": "BOOLEAN", "nullable": true},
		},
		"required":         []string{"name", "age", "tags", "ok"},
		"propertyOrdering": []string{"name", "age", "tags", "ok"},
	}
	for seed := 1; seed <= 2; seed++ {
		var resp gResp
		postOK(t, gen(env, "generateContent"), map[string]any{
			"contents": userContents("A person, please."),
			"generationConfig": map[string]any{"maxOutputTokens": 300, "seed": seed,
				"responseMimeType": "application/json", "responseSchema": schema},
		}, &resp)
		text := resp.text(0)
		var v struct {
			Name *string   `json:"name"`
			Age  *float64  `json:"age"`
			Tags *[]string `json:"tags"`
			OK   *bool     `json:"ok"`
		}
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil || resp.Candidates[0].FinishReason != "STOP" {
			t.Fatalf("seed %d: %q (%s) does not parse: %v", seed, text, resp.Candidates[0].FinishReason, err)
		}
		if v.Name == nil || v.Age == nil || v.Tags == nil || len([]rune(*v.Name)) > 10 || *v.Age != float64(int(*v.Age)) || *v.Age < 0 || *v.Age > 150 || len(*v.Tags) > 3 {
			t.Fatalf("seed %d: %q violates the schema", seed, text)
		}
		// propertyOrdering: the keys come in its order.
		if a, b, c := strings.Index(text, `"name"`), strings.Index(text, `"age"`), strings.Index(text, `"tags"`); !(a < b && b < c) {
			t.Fatalf("seed %d: keys out of propertyOrdering: %q", seed, text)
		}
	}

	// responseJsonSchema takes JSON Schema as is.
	var js gResp
	postOK(t, gen(env, "generateContent"), map[string]any{
		"contents": userContents("A color."),
		"generationConfig": map[string]any{"maxOutputTokens": 100, "responseMimeType": "application/json",
			"responseJsonSchema": map[string]any{"type": "object", "properties": map[string]any{"color": map[string]any{"enum": []string{"red", "green"}}}, "required": []string{"color"}, "additionalProperties": false}},
	}, &js)
	var color struct {
		Color string `json:"color"`
	}
	if err := json.Unmarshal([]byte(js.text(0)), &color); err != nil || (color.Color != "red" && color.Color != "green") {
		t.Fatalf("responseJsonSchema output %q: %v", js.text(0), err)
	}

	// JSON mode without a schema: a JSON object.
	var obj gResp
	postOK(t, gen(env, "generateContent"), map[string]any{
		"contents":         userContents("JSON."),
		"generationConfig": map[string]any{"maxOutputTokens": 300, "seed": 3, "responseMimeType": "application/json"},
	}, &obj)
	var m map[string]any
	if err := json.Unmarshal([]byte(obj.text(0)), &m); err != nil {
		t.Fatalf("JSON mode output %q: %v", obj.text(0), err)
	}
	env.WaitIdle(t)
}

func TestCachedContentTokenCount(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	system := strings.Repeat("You are a careful assistant who keeps answers short. ", 40) // ~2000 tokens
	ask := func(user string) gResp {
		var resp gResp
		postOK(t, gen(env, "generateContent"), map[string]any{
			"system_instruction": map[string]any{"parts": map[string]any{"text": system}},
			"contents":           userContents(user),
			"generationConfig":   map[string]any{"maxOutputTokens": 2, "temperature": 0},
		}, &resp)
		return resp
	}
	first := ask("First question?")
	second := ask("Another one?")
	if first.UsageMetadata.CachedContentTokenCount != 0 {
		t.Fatalf("first request reports %d cached tokens", first.UsageMetadata.CachedContentTokenCount)
	}
	a := env.ChatPrompt(t, []chat.Message{{Role: "system", Content: system}, {Role: "user", Content: "First question?"}}, nil)
	b := env.ChatPrompt(t, []chat.Message{{Role: "system", Content: system}, {Role: "user", Content: "Another one?"}}, nil)
	common := 0
	for common < len(a) && common < len(b) && a[common] == b[common] {
		common++
	}
	bs := env.Engine.Config().BlockSize
	want := common / bs * bs
	if got := second.UsageMetadata.CachedContentTokenCount; got != want || want == 0 {
		t.Fatalf("cachedContentTokenCount %d, want the %d shared full blocks' %d tokens (common prefix %d)", got, common/bs, want, common)
	}
	if second.UsageMetadata.PromptTokenCount != len(b) {
		t.Fatalf("promptTokenCount %d, want %d", second.UsageMetadata.PromptTokenCount, len(b))
	}
	// The system instruction is kept as persistent.
	segs := env.Recorder.Last(t).Segments
	if len(segs) < 2 || segs[0].Retention != engine.RetentionPersistent || segs[0].End < len(b)/2 || segs[len(segs)-1].Retention != engine.RetentionSession {
		t.Fatalf("segments %+v: the system instruction is not persistent", segs)
	}
	env.WaitIdle(t)
}

func TestCountTokens(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	var resp struct {
		TotalTokens int `json:"totalTokens"`
	}
	postOK(t, gen(env, "countTokens"), map[string]any{"contents": userContents("How many tokens is this?")}, &resp)
	if want := len(env.ChatPrompt(t, []chat.Message{{Role: "user", Content: "How many tokens is this?"}}, nil)); resp.TotalTokens != want {
		t.Fatalf("totalTokens %d, want %d", resp.TotalTokens, want)
	}
	postOK(t, gen(env, "countTokens"), map[string]any{"generateContentRequest": map[string]any{
		"model":             "models/" + apitest.ModelName,
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "Count well."}}},
		"contents":          userContents("How many tokens is this?"),
	}}, &resp)
	msgs := []chat.Message{{Role: "system", Content: "Count well."}, {Role: "user", Content: "How many tokens is this?"}}
	if want := len(env.ChatPrompt(t, msgs, nil)); resp.TotalTokens != want {
		t.Fatalf("totalTokens %d with a system instruction, want %d", resp.TotalTokens, want)
	}
	// Vertex's spelling: the system instruction beside the contents.
	resp.TotalTokens = 0
	postOK(t, gen(env, "countTokens"), map[string]any{
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "Count well."}}},
		"contents":          userContents("How many tokens is this?"),
	}, &resp)
	if want := len(env.ChatPrompt(t, msgs, nil)); resp.TotalTokens != want {
		t.Fatalf("totalTokens %d with a system instruction beside the contents, want %d", resp.TotalTokens, want)
	}
	if n := len(env.Recorder.Requests()); n != 0 {
		t.Fatalf("countTokens ran %d requests on the engine", n)
	}
}

func TestModels(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	get := func(path string) (int, []byte) {
		resp, err := http.Get(env.URL(path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.Bytes()
	}
	status, data := get("/v1beta/models")
	var list struct {
		Models []struct {
			Name                       string   `json:"name"`
			InputTokenLimit            int      `json:"inputTokenLimit"`
			SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
		} `json:"models"`
	}
	if err := json.Unmarshal(data, &list); status != 200 || err != nil || len(list.Models) != 1 {
		t.Fatalf("list: %d %s", status, data)
	}
	m := list.Models[0]
	if m.Name != "models/"+apitest.ModelName || m.InputTokenLimit != env.Model.ContextLength || !slices.Contains(m.SupportedGenerationMethods, "generateContent") {
		t.Fatalf("model %+v", m)
	}
	for _, path := range []string{"/v1beta/models/" + apitest.ModelName, "/v1beta/models/models/" + apitest.ModelName} {
		if status, data := get(path); status != 200 || !strings.Contains(string(data), `"name":"models/`+apitest.ModelName+`"`) {
			t.Fatalf("get %s: %d %s", path, status, data)
		}
	}
	status, data = get("/v1beta/models/gemini-2.5-flash")
	if e := checkErrorShape(t, status, data); status != 404 || e.Error.Status != "NOT_FOUND" {
		t.Fatalf("unknown model: %d %s", status, data)
	}
}

// TestThoughts serves a DeepSeek R1 template, whose generation prompt opens
// reasoning: the output is thought, returned as thought parts when
// includeThoughts is set and counted as thoughtsTokenCount either way.
func TestThoughts(t *testing.T) {
	src, err := os.ReadFile(testshared.Path(t, "testdata", "chat-templates", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	env := newEnv(t, apitest.Options{Template: string(src)})
	body := map[string]any{
		"contents": []any{
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Think first."}}},
			map[string]any{"role": "model", "parts": []any{map[string]any{"text": "Earlier thoughts.", "thought": true}, map[string]any{"text": "Done."}}},
			map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Again."}}},
		},
		"generationConfig": map[string]any{"maxOutputTokens": 12, "temperature": 0, "thinkingConfig": map[string]any{"includeThoughts": true}},
	}
	var resp gResp
	postOK(t, gen(env, "generateContent"), body, &resp)
	if resp.thoughts(0) == "" || resp.text(0) != "" || !resp.Candidates[0].Content.Parts[0].Thought {
		t.Fatalf("parts %+v", resp.Candidates[0].Content.Parts)
	}
	u := resp.UsageMetadata
	if u.ThoughtsTokenCount != 12 || u.CandidatesTokenCount != 0 || u.TotalTokenCount != u.PromptTokenCount+12 {
		t.Fatalf("usage %+v", u)
	}
	prompt := env.Tokenizer.Decode(env.Recorder.Last(t).Prompt)
	if !strings.HasSuffix(prompt, "<think>\n") || !strings.Contains(prompt, "Done.") {
		t.Fatalf("prompt %q", prompt)
	}

	status, data, _ := post(t, gen(env, "streamGenerateContent")+"?alt=sse", body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	text, thoughts, _, _ := streamed(t, sseChunks(t, data), 1)
	if thoughts[0] != resp.thoughts(0) || text[0] != "" {
		t.Fatalf("streamed thoughts %q text %q, whole %q", thoughts[0], text[0], resp.thoughts(0))
	}

	// Without includeThoughts the thoughts are not returned but counted.
	body["generationConfig"] = map[string]any{"maxOutputTokens": 12, "temperature": 0}
	var hidden gResp
	postOK(t, gen(env, "generateContent"), body, &hidden)
	if hidden.thoughts(0) != "" || hidden.UsageMetadata.ThoughtsTokenCount != 12 {
		t.Fatalf("hidden thoughts: parts %+v usage %+v", hidden.Candidates[0].Content.Parts, hidden.UsageMetadata)
	}
	env.WaitIdle(t)
}

func TestLogprobs(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	var resp gResp
	postOK(t, gen(env, "generateContent"), map[string]any{
		"contents":         userContents("Probabilities, please."),
		"generationConfig": map[string]any{"temperature": 0, "maxOutputTokens": 10, "responseLogprobs": true, "logprobs": 3},
	}, &resp)
	cd := resp.Candidates[0]
	lr := cd.LogprobsResult
	if lr == nil || len(lr.ChosenCandidates) != resp.UsageMetadata.CandidatesTokenCount || len(lr.TopCandidates) != len(lr.ChosenCandidates) || cd.AvgLogprobs == nil {
		t.Fatalf("logprobs %+v for %d tokens", lr, resp.UsageMetadata.CandidatesTokenCount)
	}
	sum := 0.0
	for i, ch := range lr.ChosenCandidates {
		top := lr.TopCandidates[i].Candidates
		if len(top) != 3 || top[0].TokenID != ch.TokenID || ch.LogProbability > 0 || top[1].LogProbability > top[0].LogProbability {
			t.Fatalf("token %d: chosen %+v, top %+v", i, ch, top)
		}
		sum += ch.LogProbability
	}
	if d := sum - lr.LogProbabilitySum; d > 1e-9 || d < -1e-9 {
		t.Fatalf("logProbabilitySum %v, sum %v", lr.LogProbabilitySum, sum)
	}

	// Streamed: the chosen tokens arrive with the chunks.
	status, data, _ := post(t, gen(env, "streamGenerateContent")+"?alt=sse", map[string]any{
		"contents":         userContents("Probabilities, please."),
		"generationConfig": map[string]any{"temperature": 0, "maxOutputTokens": 10, "responseLogprobs": true},
	})
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	var ids []int32
	for _, c := range sseChunks(t, data) {
		if lr := c.Candidates[0].LogprobsResult; lr != nil {
			for _, ch := range lr.ChosenCandidates {
				ids = append(ids, ch.TokenID)
			}
		}
	}
	var want []int32
	for _, ch := range lr.ChosenCandidates {
		want = append(want, ch.TokenID)
	}
	if !slices.Equal(ids, want) {
		t.Fatalf("streamed tokens %v, whole %v", ids, want)
	}
	env.WaitIdle(t)
}

// TestSnakeCaseAndSingletons sends Google's curl spelling (snake_case
// fields, a single part instead of a list) and the kvserve extension.
func TestSnakeCaseAndSingletons(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	camel := map[string]any{
		"systemInstruction": map[string]any{"parts": []any{map[string]any{"text": "Be a cat."}}},
		"contents":          []any{map[string]any{"role": "user", "parts": []any{map[string]any{"text": "Hello"}}}},
		"generationConfig":  map[string]any{"maxOutputTokens": 3, "stopSequences": []string{"\x00never"}},
	}
	snake := `{"system_instruction": {"parts": {"text": "Be a cat."}}, "contents": {"parts": {"text": "Hello"}},
		"generation_config": {"max_output_tokens": 3, "stop_sequences": "\u0000never"},
		"kvserve": {"session_id": "s-1", "retention": "session", "ignore_eos": true}}`
	var a, b gResp
	postOK(t, gen(env, "generateContent"), camel, &a)
	pa := env.Recorder.Last(t).Prompt
	postOK(t, gen(env, "generateContent"), snake, &b)
	last := env.Recorder.Last(t)
	if !slices.Equal(pa, last.Prompt) || last.MaxTokens != 3 {
		t.Fatalf("snake_case prompt %q (max %d), camelCase %q", env.Tokenizer.Decode(last.Prompt), last.MaxTokens, env.Tokenizer.Decode(pa))
	}
	if last.Hints.SessionID != "s-1" || last.Hints.Retention != engine.RetentionSession || !last.IgnoreEOS {
		t.Fatalf("kvserve hints %+v, ignore_eos %v", last.Hints, last.IgnoreEOS)
	}
	env.WaitIdle(t)
}

func TestClientDisconnectFreesBlocks(t *testing.T) {
	env := newEnv(t, apitest.Options{})
	// ignore_eos: the reply must still be streaming when the first chunk
	// is read, however fast the engine (this model's replies otherwise end
	// within a hundred tokens).
	body, _ := json.Marshal(map[string]any{"contents": userContents("Never stop talking."),
		"generationConfig": map[string]any{"maxOutputTokens": 3000}, "kvserve": map[string]any{"priority": 1, "ignore_eos": true}})
	req, _ := http.NewRequest("POST", gen(env, "streamGenerateContent")+"?alt=sse", bytes.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil { // the first chunk: generation is under way
		t.Fatal(err)
	}
	if st := env.Engine.Now(); st.KV.Active == 0 {
		t.Fatalf("no blocks active while streaming: %+v", st)
	}
	resp.Body.Close() // the client goes away
	env.WaitIdle(t)
}
