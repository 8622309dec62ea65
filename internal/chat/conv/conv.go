// Package conv holds the data shared by the two directions of a chat: the
// rendering of a conversation into a prompt (package chat) and the parsing of
// what the model writes back (package chat/outparse) — a conversation's
// messages and tools, and the model families that decide both the prompt's
// layout and the syntax of the model's output. It depends on nothing else of
// kvserve, so that neither direction depends on the other.
package conv

import "encoding/json"

// Message is one turn of a conversation.
type Message struct {
	// Role is system, user, assistant or tool.
	Role string
	// Content is the turn's text.
	Content string
	// ReasoningContent is an assistant turn's reasoning (the text a reasoning
	// model writes between <think> and </think>). It is passed to templates
	// as reasoning_content (and as tool_plan to Command R7B); most templates
	// drop it from history, as their models expect.
	ReasoningContent string
	// ToolCalls are an assistant turn's tool calls.
	ToolCalls []ToolCall
	// ToolCallID and Name identify the call a tool turn answers.
	ToolCallID, Name string
}

// ToolCall is one tool call made by the assistant.
type ToolCall struct {
	ID, Name string
	// Arguments is the call's arguments as JSON text (normally an object).
	Arguments string
}

// Tool is a function the model may call.
type Tool struct {
	Name, Description string
	// Parameters is the JSON Schema of the arguments. Its key order is kept
	// in the prompt. Empty means no parameters.
	Parameters json.RawMessage
}
