package api

import (
	"github.com/kvserve/kvserve/internal/chat/outparse"
	"github.com/kvserve/kvserve/internal/engine"
)

// constraintFor returns req's output constraint as data — a response
// format or a forced tool call — or nil when sampling is free, with the
// parameter to blame if the engine cannot enforce it. The engine compiles
// it for its model (package constrain), so the request stays plain data
// that a remote worker can take.
func constraintFor(m *Model, req *Request, p *Prompt) (*engine.Constraint, string) {
	switch req.ResponseFormat.Type {
	case FormatJSONObject:
		return &engine.Constraint{Kind: engine.ConstraintJSONObject}, "response_format"
	case FormatJSONSchema:
		return &engine.Constraint{Kind: engine.ConstraintJSONSchema, Schema: req.ResponseFormat.Schema},
			"response_format.json_schema.schema"
	}
	if req.ToolChoice.Mode != ToolRequired && req.ToolChoice.Mode != ToolNamed {
		return nil, ""
	}
	if m.Template == nil {
		return nil, ""
	}
	c := &engine.Constraint{Kind: engine.ConstraintToolCall,
		// The output starts inside reasoning: the call comes after it.
		AfterReasoning: outparse.ForTemplate(m.Template).PromptOpensReasoning(p.Text)}
	for _, t := range req.Tools {
		if req.ToolChoice.Mode == ToolRequired || t.Name == req.ToolChoice.Name {
			c.Tools = append(c.Tools, engine.ConstraintTool{Name: t.Name, Parameters: t.Parameters})
		}
	}
	return c, "tool_choice"
}
