package conv

import "strings"

// Template families, as returned by chat.Template.Family. A family names a
// prompt layout and, above all, the way the model writes tool calls, which
// package outparse parses per family.
const (
	// FamilyChatML: <|im_start|>role … <|im_end|>, no tool-call syntax (also
	// the fallback template).
	FamilyChatML = "chatml"
	// FamilyHermes: ChatML with <tool_call>{"name": …, "arguments": …}</tool_call>
	// (Hermes 2 Pro and 3, Qwen 2.5).
	FamilyHermes = "hermes"
	// FamilyLlama3: <|start_header_id|>role<|end_header_id|>; tool calls as a
	// bare JSON object {"name": …, "parameters": …}, or <|python_tag|> for
	// built-in tools (Llama 3.1, 3.2, 3.3).
	FamilyLlama3 = "llama3"
	// FamilyFunctionaryV31: Llama 3 layout, tool calls as
	// <function=name>{…}</function>.
	FamilyFunctionaryV31 = "functionary-v3.1"
	// FamilyFunctionaryV32: Llama 3 layout, every reply as >>>recipient\n…
	// (>>>all for plain text).
	FamilyFunctionaryV32 = "functionary-v3.2"
	// FamilyFirefunctionV2: Llama 3 layout, tool calls as
	// functools[{"name": …, "arguments": …}, …].
	FamilyFirefunctionV2 = "firefunction-v2"
	// FamilyDeepSeekR1: <｜User｜>/<｜Assistant｜> with <think> reasoning and
	// <｜tool▁calls▁begin｜> … <｜tool▁calls▁end｜> tool calls (R1 and its
	// distills).
	FamilyDeepSeekR1 = "deepseek-r1"
	// FamilyMistral: [INST] … [/INST], tool calls as [TOOL_CALLS][{…}].
	FamilyMistral = "mistral"
	// FamilyCommandR: Cohere Command R/R+, <|START_OF_TURN_TOKEN|> turns,
	// tool calls as "Action: ```json [...]```".
	FamilyCommandR = "command-r"
	// FamilyCommandR7B: Cohere Command R7B, tool calls between
	// <|START_ACTION|> and <|END_ACTION|>, reasoning in <|START_THINKING|>.
	FamilyCommandR7B = "command-r7b"
	// FamilyGemma: <start_of_turn>user/model, no system role, no tools.
	FamilyGemma = "gemma"
	// FamilyPhi3: <|user|> … <|end|> <|assistant|>.
	FamilyPhi3 = "phi3"
	// FamilyUnknown: none of the above.
	FamilyUnknown = "unknown"
)

// DetectFamily names the family of a template from marker strings in its
// source, most specific first (Functionary and Firefunction templates also
// contain Llama 3 headers; Hermes 3 is a Llama model with a ChatML template).
func DetectFamily(src string) string {
	has := func(s string) bool { return strings.Contains(src, s) }
	switch {
	case has("<|START_ACTION|>"):
		return FamilyCommandR7B
	case has("<|START_OF_TURN_TOKEN|>"):
		return FamilyCommandR
	case has(">>>all"):
		return FamilyFunctionaryV32
	case has(" functools["):
		return FamilyFirefunctionV2
	case has("<function=") && has("<|start_header_id|>"):
		return FamilyFunctionaryV31
	case has("<｜tool▁calls▁begin｜>") || has("<｜Assistant｜>"):
		return FamilyDeepSeekR1
	case has("<|im_start|>") && has("<tool_call>"):
		return FamilyHermes
	case has("<|im_start|>"):
		return FamilyChatML
	case has("<|start_header_id|>"):
		return FamilyLlama3
	case has("[TOOL_CALLS]") || has("[INST]"):
		return FamilyMistral
	case has("<start_of_turn>"):
		return FamilyGemma
	case has("<|assistant|>") && has("<|end|>"):
		return FamilyPhi3
	}
	return FamilyUnknown
}
