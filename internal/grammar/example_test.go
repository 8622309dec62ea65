package grammar_test

import (
	"fmt"

	"github.com/kvserve/kvserve/internal/grammar"
)

// A forced tool call (tool_choice "required" or a named function) is a
// grammar of one call in the model's own format, with the arguments
// constrained by the tool's JSON Schema. Hermes-style templates (Qwen 2.5,
// Hermes) wrap a {"name", "arguments"} object in <tool_call> tags; Llama
// 3.x emits {"name", "parameters"} bare; Mistral emits [TOOL_CALLS] and a
// JSON array of calls. Several tools become a Choice.
func Example_toolCall() {
	weather, err := grammar.FromJSONSchema([]byte(`{"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["C","F"]}},"required":["city"],"additionalProperties":false}`))
	if err != nil {
		panic(err)
	}
	hermes := func(name string, args *grammar.Grammar) *grammar.Grammar {
		return grammar.Sequence(
			grammar.Literal("<tool_call>\n"),
			grammar.Object(grammar.Field{Name: "name", Value: grammar.JSONString(name)}, grammar.Field{Name: "arguments", Value: args}),
			grammar.Literal("\n</tool_call>"),
		)
	}
	required := grammar.Choice(hermes("get_weather", weather), hermes("get_time", grammar.JSONObject()))
	if err := required.Check(); err != nil {
		panic(err)
	}
	llama3 := grammar.Object(grammar.Field{Name: "name", Value: grammar.JSONString("get_weather")}, grammar.Field{Name: "parameters", Value: weather})
	fmt.Println(llama3)
	// Output:
	// root ::= "{" ws "\"name\"" ws ":" ws "\"get_weather\"" ws "," ws "\"parameters\"" ws ":" ws object ws "}"
	// ws ::= (" " | "\n" [\t ]{0,20})?
	// object ::= "{" ws "\"city\"" ws ":" ws string (ws "," ws "\"unit\"" ws ":" ws ("\"C\"" | "\"F\""))? ws "}"
	// string ::= "\"" char* "\""
	// char ::= [ !#-[\]-\x7F] | [\xC2-\xDF] [\x80-\xBF] | "\xe0" [\xA0-\xBF] [\x80-\xBF] | [\xE1-\xEC] [\x80-\xBF] [\x80-\xBF] | "\xed" [\x80-\x9F] [\x80-\xBF] | [\xEE\xEF] [\x80-\xBF] [\x80-\xBF] | "\xf0" [\x90-\xBF] [\x80-\xBF] [\x80-\xBF] | [\xF1-\xF3] [\x80-\xBF] [\x80-\xBF] [\x80-\xBF] | "\xf4" [\x80-\x8F] [\x80-\xBF] [\x80-\xBF] | "\\" (["/\\bfnrt] | "u" ([0-9A-CEFa-cef] [0-9A-Fa-f] [0-9A-Fa-f] [0-9A-Fa-f] | [Dd] [0-7] [0-9A-Fa-f] [0-9A-Fa-f]))
}
