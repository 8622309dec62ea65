package servebench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// agentToolsJSON is the agent workload's OpenAI "tools" array: a dozen
// functions of a coding agent with JSON-Schema parameters of the kinds real
// agents declare (enums, nested objects, arrays, bounds, defaults). It is
// sent byte for byte the same in every request, as real clients do.
const agentToolsJSON = `[
{"type":"function","function":{"name":"read_file","description":"Read a text file from the workspace. Returns the requested line range with line numbers. Use this before editing a file; prefer reading whole small files over many small ranges.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the workspace root."},"start_line":{"type":"integer","minimum":1,"description":"First line to return (1-based)."},"end_line":{"type":"integer","minimum":1,"description":"Last line to return, inclusive. Omit to read to the end of the file."}},"required":["path"],"additionalProperties":false}}},
{"type":"function","function":{"name":"write_file","description":"Create a file or overwrite an existing one with the given content. Parent directories are created as needed.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the workspace root."},"content":{"type":"string","description":"The complete new content of the file."},"mode":{"type":"string","enum":["0644","0755"],"default":"0644","description":"Unix permission bits of a new file."}},"required":["path","content"],"additionalProperties":false}}},
{"type":"function","function":{"name":"edit_file","description":"Replace exact text in a file. The old text must occur exactly once unless replace_all is set. Preserve indentation exactly.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"Path relative to the workspace root."},"old_text":{"type":"string","description":"Text to find, including surrounding lines to make it unique."},"new_text":{"type":"string","description":"Replacement text."},"replace_all":{"type":"boolean","default":false,"description":"Replace every occurrence instead of exactly one."}},"required":["path","old_text","new_text"],"additionalProperties":false}}},
{"type":"function","function":{"name":"list_directory","description":"List the entries of a directory with their sizes and types.","parameters":{"type":"object","properties":{"path":{"type":"string","description":"Directory relative to the workspace root; '.' for the root."},"recursive":{"type":"boolean","default":false},"max_depth":{"type":"integer","minimum":1,"maximum":8,"default":2},"include_hidden":{"type":"boolean","default":false}},"required":["path"],"additionalProperties":false}}},
{"type":"function","function":{"name":"search_code","description":"Search file contents with a regular expression (RE2 syntax) and return matching lines with file names and line numbers.","parameters":{"type":"object","properties":{"pattern":{"type":"string","description":"Regular expression to search for."},"glob":{"type":"string","description":"Only search files whose path matches this glob, e.g. '**/*.go'."},"case_sensitive":{"type":"boolean","default":true},"context_lines":{"type":"integer","minimum":0,"maximum":10,"default":0},"max_results":{"type":"integer","minimum":1,"maximum":500,"default":50}},"required":["pattern"],"additionalProperties":false}}},
{"type":"function","function":{"name":"run_shell","description":"Run a shell command in the workspace and return its exit code, standard output and standard error (truncated to 30,000 characters). Commands time out after the given number of seconds.","parameters":{"type":"object","properties":{"command":{"type":"string","description":"The command line, run with bash -c."},"timeout_seconds":{"type":"integer","minimum":1,"maximum":600,"default":120},"working_directory":{"type":"string","description":"Directory relative to the workspace root."},"env":{"type":"object","additionalProperties":{"type":"string"},"description":"Extra environment variables."}},"required":["command"],"additionalProperties":false}}},
{"type":"function","function":{"name":"run_tests","description":"Run the project's test suite or a subset of it and report failures with their output.","parameters":{"type":"object","properties":{"packages":{"type":"array","items":{"type":"string"},"description":"Packages or test files to run; empty for all."},"filter":{"type":"string","description":"Only run tests whose name matches this regular expression."},"race":{"type":"boolean","default":false,"description":"Enable the race detector."},"verbose":{"type":"boolean","default":false}},"additionalProperties":false}}},
{"type":"function","function":{"name":"git","description":"Run a read-only git subcommand (status, diff, log, show, blame) in the workspace repository.","parameters":{"type":"object","properties":{"subcommand":{"type":"string","enum":["status","diff","log","show","blame"]},"args":{"type":"array","items":{"type":"string"},"description":"Further arguments, e.g. a path or a revision range."},"max_output_lines":{"type":"integer","minimum":1,"maximum":2000,"default":400}},"required":["subcommand"],"additionalProperties":false}}},
{"type":"function","function":{"name":"web_search","description":"Search the web and return the top results with titles, URLs and snippets.","parameters":{"type":"object","properties":{"query":{"type":"string","description":"Search terms."},"num_results":{"type":"integer","minimum":1,"maximum":20,"default":5},"recency":{"type":"string","enum":["any","day","week","month","year"],"default":"any"},"site":{"type":"string","description":"Restrict results to this domain."}},"required":["query"],"additionalProperties":false}}},
{"type":"function","function":{"name":"fetch_url","description":"Fetch a web page or document and return its main text as Markdown.","parameters":{"type":"object","properties":{"url":{"type":"string","format":"uri"},"max_chars":{"type":"integer","minimum":100,"maximum":100000,"default":20000},"selector":{"type":"string","description":"Optional CSS selector of the part of the page to keep."}},"required":["url"],"additionalProperties":false}}},
{"type":"function","function":{"name":"query_database","description":"Run a read-only SQL query against the analytics database and return at most max_rows rows as a table.","parameters":{"type":"object","properties":{"sql":{"type":"string","description":"A single SELECT statement."},"params":{"type":"array","items":{"type":["string","number","boolean","null"]},"description":"Positional parameters for $1, $2, ..."},"max_rows":{"type":"integer","minimum":1,"maximum":1000,"default":100},"timeout_ms":{"type":"integer","minimum":100,"maximum":60000,"default":5000}},"required":["sql"],"additionalProperties":false}}},
{"type":"function","function":{"name":"spawn_agent","description":"Start a sub-agent with its own fresh context to carry out a self-contained task (research, a focused search, a review) and return its final report. The sub-agent cannot see this conversation: describe the task completely.","parameters":{"type":"object","properties":{"task":{"type":"string","description":"Complete description of the task and of the expected report."},"kind":{"type":"string","enum":["research","search","review","plan"]},"max_turns":{"type":"integer","minimum":1,"maximum":50,"default":10},"files":{"type":"array","items":{"type":"string"},"description":"Paths the sub-agent should start from."}},"required":["task","kind"],"additionalProperties":false}}}
]`

// spawnTool is the tool whose call starts a sub-agent.
const spawnTool = "spawn_agent"

// toolSchema is the part of a tool definition argument generation reads.
type toolSchema struct {
	Function struct {
		Name       string       `json:"name"`
		Parameters schemaObject `json:"parameters"`
	} `json:"function"`
}

type schemaObject struct {
	Type       any                     `json:"type"`
	Properties map[string]schemaObject `json:"properties"`
	Required   []string                `json:"required"`
	Enum       []any                   `json:"enum"`
	Minimum    *float64                `json:"minimum"`
	Maximum    *float64                `json:"maximum"`
	Items      *schemaObject           `json:"items"`
}

// agentTools holds the parsed tool definitions.
type agentTools struct {
	raw   json.RawMessage
	tools []toolSchema
}

func parseAgentTools() (*agentTools, error) {
	var tools []toolSchema
	if err := json.Unmarshal([]byte(agentToolsJSON), &tools); err != nil {
		return nil, fmt.Errorf("servebench: agent tools: %w", err)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(agentToolsJSON)); err != nil {
		return nil, fmt.Errorf("servebench: agent tools: %w", err)
	}
	return &agentTools{raw: compact.Bytes(), tools: tools}, nil
}

// call returns a call of the named tool with arguments drawn from its
// schema (object keys sorted, so equal draws give equal bytes).
func (a *agentTools) call(r *rand.Rand, name, id string, tg textGen) (ToolCall, error) {
	for _, t := range a.tools {
		if t.Function.Name != name {
			continue
		}
		args := genValue(r, tg, "", t.Function.Parameters, 0)
		b, err := json.Marshal(args)
		if err != nil {
			return ToolCall{}, fmt.Errorf("servebench: tool %s arguments: %w", name, err)
		}
		return ToolCall{ID: id, Type: "function", Function: FunctionCall{Name: name, Arguments: string(b)}}, nil
	}
	return ToolCall{}, fmt.Errorf("servebench: no tool %q", name)
}

// ordinary returns the tool names other than spawnTool.
func (a *agentTools) ordinary() []string {
	var out []string
	for _, t := range a.tools {
		if t.Function.Name != spawnTool {
			out = append(out, t.Function.Name)
		}
	}
	return out
}

// genValue draws a value that satisfies s. Property names steer strings
// towards plausible paths, URLs and commands.
func genValue(r *rand.Rand, tg textGen, name string, s schemaObject, depth int) any {
	if len(s.Enum) > 0 {
		return s.Enum[r.IntN(len(s.Enum))]
	}
	typ, _ := s.Type.(string)
	if list, ok := s.Type.([]any); ok && len(list) > 0 {
		typ, _ = list[r.IntN(len(list))].(string)
	}
	switch typ {
	case "object":
		out := map[string]any{}
		if depth > 3 {
			return out
		}
		keys := make([]string, 0, len(s.Properties))
		for k := range s.Properties {
			keys = append(keys, k)
		}
		sort.Strings(keys) // map order is random: draw in a fixed order
		for _, k := range keys {
			p := s.Properties[k]
			req := false
			for _, q := range s.Required {
				req = req || q == k
			}
			if req || r.IntN(3) == 0 {
				out[k] = genValue(r, tg, k, p, depth+1)
			}
		}
		return out
	case "array":
		var out []any
		if s.Items != nil {
			for range 1 + r.IntN(3) {
				out = append(out, genValue(r, tg, name, *s.Items, depth+1))
			}
		}
		return out
	case "integer", "number":
		lo, hi := 1.0, 100.0
		if s.Minimum != nil {
			lo = *s.Minimum
		}
		if s.Maximum != nil {
			hi = *s.Maximum
		} else if lo >= hi {
			hi = lo + 100
		}
		return int(lo) + r.IntN(int(hi-lo)+1)
	case "boolean":
		return r.IntN(2) == 0
	case "null":
		return nil
	}
	switch {
	case strings.Contains(name, "path") || name == "files" || name == "packages" || name == "working_directory":
		return fmt.Sprintf("internal/%s/%s.go", tg.word(), tg.word())
	case name == "url":
		return fmt.Sprintf("https://docs.example.com/%s/%s", tg.word(), tg.word())
	case name == "command":
		return fmt.Sprintf("go test ./internal/%s/... -run %s", tg.word(), strings.ToUpper(tg.word()[:1]))
	case name == "sql":
		return fmt.Sprintf("SELECT %s, count(*) FROM %s GROUP BY 1 LIMIT 20", tg.word(), tg.word())
	case name == "task":
		return tg.text(60 + r.IntN(60))
	case name == "content" || name == "new_text" || name == "old_text":
		return tg.text(20 + r.IntN(60))
	}
	return tg.text(3 + r.IntN(8))
}
