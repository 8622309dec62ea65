package api

import "github.com/kvserve/kvserve/internal/engine"

// constraint returns the factory of per-sample logits processors that
// enforce req's response format or forced tool call, or nil when sampling
// is free.
func constraint(m *Model, req *Request) (func(int) engine.LogitsProcessor, error) {
	if req.ResponseFormat.Type != FormatText {
		return nil, InvalidParam("response_format", "response_format is not supported by this server yet")
	}
	if req.ToolChoice.Mode == ToolRequired || req.ToolChoice.Mode == ToolNamed {
		return nil, InvalidParam("tool_choice", "forced tool_choice is not supported by this server yet")
	}
	return nil, nil
}
