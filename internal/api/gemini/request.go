package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/sample"
)

// generateRequest is the body of generateContent, streamGenerateContent
// and countTokens' generateContentRequest.
type generateRequest struct {
	// Model is only read in countTokens' generateContentRequest; the
	// generate methods take the model from the path.
	Model             string                `json:"model"`
	Contents          repeated[contentJSON] `json:"contents"`
	SystemInstruction *systemInstruction    `json:"systemInstruction"`
	Tools             repeated[toolJSON]    `json:"tools"`
	ToolConfig        *struct {
		FunctionCallingConfig *struct {
			Mode                 string           `json:"mode"`
			AllowedFunctionNames repeated[string] `json:"allowedFunctionNames"`
		} `json:"functionCallingConfig"`
	} `json:"toolConfig"`
	GenerationConfig *generationConfig `json:"generationConfig"`
	// SafetySettings are accepted and ignored: kvserve has no safety
	// classifier, and clients send them by default.
	SafetySettings json.RawMessage `json:"safetySettings"`
	CachedContent  string          `json:"cachedContent"`
	Kvserve        *api.Extension  `json:"kvserve"`

	// prefix marks a context cache's own fields: contents may be empty
	// (a system instruction alone), and no generation prompt follows.
	prefix bool
}

// contentJSON is a Content: a turn's role and parts.
type contentJSON struct {
	Role  string             `json:"role"`
	Parts repeated[partJSON] `json:"parts"`
}

// partJSON is a Part. Only text (and thought text), functionCall and
// functionResponse are supported; media parts are refused with a 400.
type partJSON struct {
	Text             *string `json:"text"`
	Thought          bool    `json:"thought"`
	ThoughtSignature string  `json:"thoughtSignature"`
	FunctionCall     *struct {
		ID   string          `json:"id"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args"`
	} `json:"functionCall"`
	FunctionResponse *struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	} `json:"functionResponse"`
	InlineData          json.RawMessage `json:"inlineData"`
	FileData            json.RawMessage `json:"fileData"`
	ExecutableCode      json.RawMessage `json:"executableCode"`
	CodeExecutionResult json.RawMessage `json:"codeExecutionResult"`
}

// systemInstruction is a Content whose role is ignored; a plain string is
// accepted too.
type systemInstruction struct {
	contentJSON
}

func (s *systemInstruction) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var text string
		if err := json.Unmarshal(b, &text); err != nil {
			return err
		}
		s.Parts = repeated[partJSON]{{Text: &text}}
		return nil
	}
	return json.Unmarshal(b, &s.contentJSON)
}

// toolJSON is a Tool. Only functionDeclarations are served; any other tool
// (googleSearch, codeExecution, urlContext, …) is refused by name.
type toolJSON struct {
	FunctionDeclarations repeated[functionDeclaration]
	others               []string
}

func (t *toolJSON) UnmarshalJSON(b []byte) error {
	var fields orderedObject
	if err := json.Unmarshal(b, &fields); err != nil {
		return api.InvalidParam("tools", "a tool must be an object such as {\"functionDeclarations\": [...]}")
	}
	for _, f := range fields {
		if f.Key != "functionDeclarations" {
			t.others = append(t.others, f.Key)
			continue
		}
		if err := json.Unmarshal(f.Value, &t.FunctionDeclarations); err != nil {
			return err
		}
	}
	return nil
}

// functionDeclaration declares one function; parameters are in Gemini's
// schema, parametersJsonSchema in JSON Schema.
type functionDeclaration struct {
	Name                 string          `json:"name"`
	Description          string          `json:"description"`
	Parameters           json.RawMessage `json:"parameters"`
	ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema"`
	Behavior             string          `json:"behavior"`
}

// generationConfig is GenerationConfig.
type generationConfig struct {
	Temperature        *float64         `json:"temperature"`
	TopP               *float64         `json:"topP"`
	TopK               *float64         `json:"topK"`
	CandidateCount     *int             `json:"candidateCount"`
	MaxOutputTokens    *int             `json:"maxOutputTokens"`
	StopSequences      repeated[string] `json:"stopSequences"`
	Seed               *int64           `json:"seed"`
	PresencePenalty    *float64         `json:"presencePenalty"`
	FrequencyPenalty   *float64         `json:"frequencyPenalty"`
	ResponseMimeType   string           `json:"responseMimeType"`
	ResponseSchema     json.RawMessage  `json:"responseSchema"`
	ResponseJSONSchema json.RawMessage  `json:"responseJsonSchema"`
	ResponseLogprobs   bool             `json:"responseLogprobs"`
	Logprobs           *int             `json:"logprobs"`
	ResponseModalities repeated[string] `json:"responseModalities"`
	ThinkingConfig     *struct {
		IncludeThoughts bool   `json:"includeThoughts"`
		ThinkingBudget  *int   `json:"thinkingBudget"`
		ThinkingLevel   string `json:"thinkingLevel"`
	} `json:"thinkingConfig"`
}

// options are the response-shaping choices of a request that are not part
// of api.Request.
type options struct {
	includeThoughts bool
	logprobs        bool
	topLogprobs     int
}

// isNull reports whether raw is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// toRequest maps the body onto the internal request for model.
func (g *generateRequest) toRequest(model string) (*api.Request, options, error) {
	var o options
	r := &api.Request{Model: model}
	if g.CachedContent != "" {
		// The handler takes the cache first (takeCache); a name left
		// here was never resolved.
		return nil, o, &api.Error{Code: api.CodeNotFound, Param: "cachedContent",
			Message: fmt.Sprintf("cached content %s not found", g.CachedContent)}
	}
	if len(g.Contents) == 0 && !g.prefix {
		return nil, o, api.InvalidParam("contents", "contents is not specified")
	}
	if g.SystemInstruction != nil {
		text, err := systemText(g.SystemInstruction.Parts)
		if err != nil {
			return nil, o, err
		}
		r.Messages = append(r.Messages, chat.Message{Role: "system", Content: text})
	}
	for i, c := range g.Contents {
		msgs, err := contentMessages(i, c)
		if err != nil {
			return nil, o, err
		}
		r.Messages = append(r.Messages, msgs...)
	}
	var err error
	if r.Tools, err = convertTools(g.Tools); err != nil {
		return nil, o, err
	}
	if err := g.toolChoice(r); err != nil {
		return nil, o, err
	}
	r.Sampling.Temperature = 1 // Gemini's default
	if g.GenerationConfig != nil {
		if o, err = g.GenerationConfig.apply(r); err != nil {
			return nil, o, err
		}
	}
	if r.ResponseFormat.Type != api.FormatText && (r.ToolChoice.Mode == api.ToolRequired || r.ToolChoice.Mode == api.ToolNamed) {
		return nil, o, api.InvalidParam("toolConfig.functionCallingConfig.mode", "function calling mode ANY cannot be combined with responseMimeType \"application/json\"")
	}
	if err := g.Kvserve.Apply(r); err != nil {
		return nil, o, err
	}
	if r.CachedContent != "" {
		return nil, o, api.InvalidParam("kvserve.cached_content", "a Gemini request names its cache in cachedContent")
	}
	return r, o, nil
}

// systemText joins the text parts of a system instruction.
func systemText(parts []partJSON) (string, error) {
	var sb strings.Builder
	for j, p := range parts {
		if err := checkMedia(p, fmt.Sprintf("systemInstruction.parts[%d]", j)); err != nil {
			return "", err
		}
		if p.Text == nil {
			return "", api.InvalidParam(fmt.Sprintf("systemInstruction.parts[%d]", j), "a system instruction takes text parts only")
		}
		sb.WriteString(*p.Text)
	}
	return sb.String(), nil
}

// checkMedia refuses the part kinds kvserve cannot serve.
func checkMedia(p partJSON, param string) error {
	for _, k := range []struct {
		name string
		raw  json.RawMessage
	}{{"inlineData", p.InlineData}, {"fileData", p.FileData}, {"executableCode", p.ExecutableCode},
		{"codeExecutionResult", p.CodeExecutionResult}} {
		if !isNull(k.raw) {
			return api.InvalidParam(param+"."+k.name, "%s parts are not supported: this server serves a text-only model (text, functionCall and functionResponse parts)", k.name)
		}
	}
	return nil
}

// contentMessages maps content i to chat messages: a user turn's text parts
// become a user message and each functionResponse a tool message (in part
// order); a model turn becomes one assistant message with its text,
// thoughts (reasoning) and function calls.
func contentMessages(i int, c contentJSON) ([]chat.Message, error) {
	param := fmt.Sprintf("contents[%d]", i)
	if len(c.Parts) == 0 {
		return nil, api.InvalidParam(param+".parts", "contents[%d] must have at least one part", i)
	}
	role := c.Role
	switch role {
	case "", "user":
		role = "user"
	case "model", "assistant":
		role = "model"
	case "function", "tool":
		role = "user" // the older clients' turn of function responses
	default:
		return nil, api.InvalidParam(param+".role", "unknown role %q (user or model)", c.Role)
	}
	if role == "model" {
		msg := chat.Message{Role: "assistant"}
		var text, thought strings.Builder
		for j, p := range c.Parts {
			pp := fmt.Sprintf("%s.parts[%d]", param, j)
			if err := checkMedia(p, pp); err != nil {
				return nil, err
			}
			switch {
			case p.FunctionCall != nil:
				fc := p.FunctionCall
				if fc.Name == "" {
					return nil, api.InvalidParam(pp+".functionCall.name", "a functionCall needs a name")
				}
				args := "{}"
				if !isNull(fc.Args) {
					if a := bytes.TrimSpace(fc.Args); a[0] != '{' {
						return nil, api.InvalidParam(pp+".functionCall.args", "functionCall args must be a JSON object")
					}
					args = string(bytes.TrimSpace(fc.Args))
				}
				msg.ToolCalls = append(msg.ToolCalls, chat.ToolCall{ID: fc.ID, Name: fc.Name, Arguments: args})
			case p.FunctionResponse != nil:
				return nil, api.InvalidParam(pp+".functionResponse", "a functionResponse belongs in a user turn, not a model turn")
			case p.Text != nil && p.Thought:
				thought.WriteString(*p.Text)
			case p.Text != nil:
				text.WriteString(*p.Text)
			case p.ThoughtSignature != "" || p.Thought:
				// A signature-only part: nothing for the prompt.
			default:
				return nil, api.InvalidParam(pp, "a part needs text, functionCall or functionResponse")
			}
		}
		msg.Content, msg.ReasoningContent = text.String(), thought.String()
		return []chat.Message{msg}, nil
	}
	var out []chat.Message
	var text strings.Builder
	hasText := false
	flush := func() {
		if hasText {
			out = append(out, chat.Message{Role: "user", Content: text.String()})
			text.Reset()
			hasText = false
		}
	}
	for j, p := range c.Parts {
		pp := fmt.Sprintf("%s.parts[%d]", param, j)
		if err := checkMedia(p, pp); err != nil {
			return nil, err
		}
		switch {
		case p.FunctionResponse != nil:
			fr := p.FunctionResponse
			if fr.Name == "" {
				return nil, api.InvalidParam(pp+".functionResponse.name", "a functionResponse needs the name of the function")
			}
			resp := "{}"
			if !isNull(fr.Response) {
				if a := bytes.TrimSpace(fr.Response); a[0] != '{' {
					return nil, api.InvalidParam(pp+".functionResponse.response", "functionResponse response must be a JSON object")
				}
				resp = string(bytes.TrimSpace(fr.Response))
			}
			flush()
			out = append(out, chat.Message{Role: "tool", Content: resp, Name: fr.Name, ToolCallID: fr.ID})
		case p.FunctionCall != nil:
			return nil, api.InvalidParam(pp+".functionCall", "a functionCall belongs in a model turn, not a user turn")
		case p.Text != nil:
			text.WriteString(*p.Text)
			hasText = true
		default:
			return nil, api.InvalidParam(pp, "a part needs text, functionCall or functionResponse")
		}
	}
	flush()
	return out, nil
}

// validFunctionName reports whether name is a valid Gemini function name:
// a letter or underscore, then up to 63 letters, digits, '_', '.', ':' or
// '-'.
func validFunctionName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_':
		case i > 0 && ('0' <= c && c <= '9' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// convertTools maps functionDeclarations onto chat tools, their schemas
// onto JSON Schema.
func convertTools(tools []toolJSON) ([]chat.Tool, error) {
	var out []chat.Tool
	seen := map[string]bool{}
	for i, t := range tools {
		if len(t.others) > 0 {
			return nil, api.InvalidParam(fmt.Sprintf("tools[%d].%s", i, t.others[0]), "tool %q is not supported: this server serves functionDeclarations only", t.others[0])
		}
		for j, fd := range t.FunctionDeclarations {
			param := fmt.Sprintf("tools[%d].functionDeclarations[%d]", i, j)
			if !validFunctionName(fd.Name) {
				return nil, api.InvalidParam(param+".name", "invalid function name %q: it must start with a letter or underscore and hold at most 64 letters, digits, underscores, dots, colons or dashes", fd.Name)
			}
			if seen[fd.Name] {
				return nil, api.InvalidParam(param+".name", "duplicate function name %q", fd.Name)
			}
			seen[fd.Name] = true
			tool := chat.Tool{Name: fd.Name, Description: fd.Description}
			switch {
			case !isNull(fd.Parameters) && !isNull(fd.ParametersJSONSchema):
				return nil, api.InvalidParam(param, "give parameters or parametersJsonSchema, not both")
			case !isNull(fd.ParametersJSONSchema):
				ps := bytes.TrimSpace(fd.ParametersJSONSchema)
				if ps[0] != '{' {
					return nil, api.InvalidParam(param+".parametersJsonSchema", "parametersJsonSchema must be a JSON Schema object")
				}
				tool.Parameters = json.RawMessage(ps)
			case !isNull(fd.Parameters):
				s, err := convertSchema(fd.Parameters, param+".parameters")
				if err != nil {
					return nil, err
				}
				tool.Parameters = s
			}
			out = append(out, tool)
		}
	}
	return out, nil
}

// toolChoice maps toolConfig.functionCallingConfig.
func (g *generateRequest) toolChoice(r *api.Request) error {
	if g.ToolConfig == nil || g.ToolConfig.FunctionCallingConfig == nil {
		return nil
	}
	fc := g.ToolConfig.FunctionCallingConfig
	const param = "toolConfig.functionCallingConfig"
	switch strings.ToUpper(fc.Mode) {
	case "", "MODE_UNSPECIFIED", "AUTO", "VALIDATED":
		// VALIDATED (calls checked against their schema, text allowed) is
		// served as AUTO: the grammar can force a call, not vet an
		// optional one.
		return nil
	case "NONE":
		r.ToolChoice = api.ToolChoice{Mode: api.ToolNone}
		return nil
	case "ANY":
	default:
		return api.InvalidParam(param+".mode", "unknown mode %q (AUTO, ANY, NONE, VALIDATED)", fc.Mode)
	}
	if len(r.Tools) == 0 {
		return api.InvalidParam(param+".mode", "mode ANY needs at least one function declaration")
	}
	declared := make(map[string]bool, len(r.Tools))
	for _, t := range r.Tools {
		declared[t.Name] = true
	}
	allowed := map[string]bool{}
	for i, name := range fc.AllowedFunctionNames {
		if !declared[name] {
			return api.InvalidParam(fmt.Sprintf("%s.allowedFunctionNames[%d]", param, i), "allowedFunctionNames names %q, which is not among the function declarations", name)
		}
		allowed[name] = true
	}
	switch {
	case len(allowed) == 1:
		r.ToolChoice = api.ToolChoice{Mode: api.ToolNamed, Name: fc.AllowedFunctionNames[0]}
	case len(allowed) == 0 || len(allowed) == len(declared):
		r.ToolChoice = api.ToolChoice{Mode: api.ToolRequired}
	default:
		// A subset: the core forces one named tool or any of them, so only
		// the allowed ones are declared to the model.
		var kept []chat.Tool
		for _, t := range r.Tools {
			if allowed[t.Name] {
				kept = append(kept, t)
			}
		}
		r.Tools = kept
		r.ToolChoice = api.ToolChoice{Mode: api.ToolRequired}
	}
	return nil
}

// apply sets the sampling and output fields of r.
func (gc *generationConfig) apply(r *api.Request) (options, error) {
	var o options
	const param = "generationConfig."
	p := &r.Sampling
	if gc.Temperature != nil {
		if !(*gc.Temperature >= 0 && *gc.Temperature <= 2) {
			return o, api.InvalidParam(param+"temperature", "temperature must be in [0, 2]")
		}
		p.Temperature = float32(*gc.Temperature)
	}
	if gc.TopP != nil {
		if !(*gc.TopP >= 0 && *gc.TopP <= 1) {
			return o, api.InvalidParam(param+"topP", "topP must be in [0, 1]")
		}
		p.TopP = float32(*gc.TopP)
	}
	if gc.TopK != nil {
		k := *gc.TopK
		if !(k >= 0 && k <= 1<<20) || k != float64(int(k)) {
			return o, api.InvalidParam(param+"topK", "topK must be a non-negative integer")
		}
		p.TopK = int(k)
	}
	if gc.CandidateCount != nil {
		if *gc.CandidateCount < 1 || *gc.CandidateCount > 128 {
			return o, api.InvalidParam(param+"candidateCount", "candidateCount must be in [1, 128]")
		}
		r.N = *gc.CandidateCount
	}
	if gc.MaxOutputTokens != nil {
		if *gc.MaxOutputTokens < 1 {
			return o, api.InvalidParam(param+"maxOutputTokens", "maxOutputTokens must be at least 1")
		}
		r.MaxTokens = *gc.MaxOutputTokens
	}
	if len(gc.StopSequences) > api.MaxStops {
		return o, api.InvalidParam(param+"stopSequences", "at most %d stop sequences are allowed", api.MaxStops)
	}
	for _, s := range gc.StopSequences {
		if s == "" {
			return o, api.InvalidParam(param+"stopSequences", "stop sequences must not be empty")
		}
	}
	r.Stop = gc.StopSequences
	if gc.Seed != nil {
		// 0 means "random" to the sampler; a client's seed 0 is a real seed.
		p.Seed = uint64(*gc.Seed)
		if p.Seed == 0 {
			p.Seed = 0x9E3779B97F4A7C15
		}
	}
	if gc.PresencePenalty != nil {
		if !(*gc.PresencePenalty >= -2 && *gc.PresencePenalty <= 2) {
			return o, api.InvalidParam(param+"presencePenalty", "presencePenalty must be in [-2, 2]")
		}
		p.PresencePenalty = float32(*gc.PresencePenalty)
	}
	if gc.FrequencyPenalty != nil {
		if !(*gc.FrequencyPenalty >= -2 && *gc.FrequencyPenalty <= 2) {
			return o, api.InvalidParam(param+"frequencyPenalty", "frequencyPenalty must be in [-2, 2]")
		}
		p.FrequencyPenalty = float32(*gc.FrequencyPenalty)
	}
	if gc.Logprobs != nil {
		if *gc.Logprobs < 0 || *gc.Logprobs > sample.MaxTopLogprobs {
			return o, api.InvalidParam(param+"logprobs", "logprobs must be in [0, %d]", sample.MaxTopLogprobs)
		}
		if !gc.ResponseLogprobs && *gc.Logprobs > 0 {
			return o, api.InvalidParam(param+"logprobs", "logprobs needs responseLogprobs: true")
		}
		p.TopLogprobs = *gc.Logprobs
		o.topLogprobs = *gc.Logprobs
	}
	p.Logprobs = gc.ResponseLogprobs
	o.logprobs = gc.ResponseLogprobs
	for i, m := range gc.ResponseModalities {
		if !strings.EqualFold(m, "TEXT") {
			return o, api.InvalidParam(fmt.Sprintf("%sresponseModalities[%d]", param, i), "response modality %q is not supported (TEXT only)", m)
		}
	}
	if err := gc.responseFormat(r); err != nil {
		return o, err
	}
	if tc := gc.ThinkingConfig; tc != nil {
		o.includeThoughts = tc.IncludeThoughts
		on := true
		switch {
		case tc.ThinkingBudget != nil:
			if *tc.ThinkingBudget < -1 {
				return o, api.InvalidParam(param+"thinkingConfig.thinkingBudget", "thinkingBudget must be -1 (dynamic), 0 (off) or a positive number of tokens")
			}
			on = *tc.ThinkingBudget != 0
			r.Reasoning = &on
		case tc.ThinkingLevel != "" && !strings.EqualFold(tc.ThinkingLevel, "THINKING_LEVEL_UNSPECIFIED"):
			on = !strings.EqualFold(tc.ThinkingLevel, "MINIMAL")
			r.Reasoning = &on
		}
	}
	return o, nil
}

// responseFormat maps responseMimeType and the response schemas.
func (gc *generationConfig) responseFormat(r *api.Request) error {
	const param = "generationConfig."
	hasSchema, hasJSONSchema := !isNull(gc.ResponseSchema), !isNull(gc.ResponseJSONSchema)
	if hasSchema && hasJSONSchema {
		return api.InvalidParam(param+"responseSchema", "give responseSchema or responseJsonSchema, not both")
	}
	switch mt := strings.ToLower(strings.TrimSpace(gc.ResponseMimeType)); mt {
	case "", "text/plain":
		if hasSchema || hasJSONSchema {
			return api.InvalidParam(param+"responseMimeType", "a response schema needs responseMimeType \"application/json\"")
		}
		return nil
	case "application/json":
	default:
		return api.InvalidParam(param+"responseMimeType", "responseMimeType %q is not supported (text/plain, application/json)", gc.ResponseMimeType)
	}
	switch {
	case hasJSONSchema:
		s := bytes.TrimSpace(gc.ResponseJSONSchema)
		if s[0] != '{' && string(s) != "true" {
			return api.InvalidParam(param+"responseJsonSchema", "responseJsonSchema must be a JSON Schema object")
		}
		r.ResponseFormat = api.ResponseFormat{Type: api.FormatJSONSchema, Name: "response", Schema: json.RawMessage(s)}
	case hasSchema:
		s, err := convertSchema(gc.ResponseSchema, param+"responseSchema")
		if err != nil {
			return err
		}
		r.ResponseFormat = api.ResponseFormat{Type: api.FormatJSONSchema, Name: "response", Schema: s}
	default:
		r.ResponseFormat = api.ResponseFormat{Type: api.FormatJSONObject}
	}
	return nil
}
