package servebench

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// The agent workload's shape. A session has agentMinTurns..agentMaxTurns
// main requests; after each but the last, the assistant's reply is followed
// by a tool call and its result (agentResultMin..agentResultMax tokens), or,
// with probability agentSubProb, by a one-shot sub-agent whose report
// becomes the tool result. Tool pauses are uniform in [pauseMin, pauseMax]
// before scaling, the 2–30 s of agentic traces.
const (
	agentMinTurns  = 4
	agentMaxTurns  = 16
	agentSubProb   = 0.15
	agentResultMin = 150
	agentResultMax = 600
	agentTaskMin   = 200
	agentTaskMax   = 500
	subSystemSize  = 600
	pauseMin       = 2 * time.Second
	pauseMax       = 30 * time.Second
	// jsonCharsPerToken is the assumed density of the tools JSON once a
	// chat template renders it (JSON tokenizes denser than prose).
	jsonCharsPerToken = 3.5
)

// agent is the coding-agent workload: every session shares one long system
// prompt with tool definitions (the part a server should keep, pinned or
// persistent), and grows its own history turn by turn (the session part).
type agent struct {
	o         WorkloadOptions
	tools     *agentTools
	ordinary  []string
	system    string
	subSystem string
	scale     float64
}

func newAgent(o WorkloadOptions) (Workload, error) {
	tools, err := parseAgentTools()
	if err != nil {
		return nil, err
	}
	w := &agent{o: o, tools: tools, ordinary: tools.ordinary(), scale: o.timeScale()}
	// The tool definitions have a fixed size; PromptScale scales the prose
	// around them, so a scaled-down run keeps a system prompt.
	sys := o.tokens(max(256, pick(o.PrefixTokens, 10000)-w.ToolTokens()))
	w.system = agentSystem(textGen{rngFor(o.Seed, "agent/system", 0)}, sys)
	sub := textGen{rngFor(o.Seed, "agent/subsystem", 0)}
	w.subSystem = "You are a sub-agent. Complete the task you are given and reply with a short report. " +
		sub.text(o.tokens(subSystemSize))
	return w, nil
}

// ToolTokens is the estimated token count of the tool definitions.
func (w *agent) ToolTokens() int { return int(float64(len(w.tools.raw)) / jsonCharsPerToken) }

// agentSystem writes an agent's system prompt of about n tokens: an opening
// line and numbered sections of prose.
func agentSystem(tg textGen, n int) string {
	var b strings.Builder
	b.WriteString("You are an autonomous software engineering agent working in a user's repository. Use the tools to inspect and change the code.\n")
	left := n - 25
	for sec := 1; left > 0; sec++ {
		k := min(left, 300+tg.rng.IntN(400))
		fmt.Fprintf(&b, "\n## %d. %s %s\n\n", sec, strings.ToUpper(tg.word()[:1])+tg.word()[1:], tg.word())
		tg.sentences(&b, k)
		b.WriteByte('\n')
		left -= k + 6
	}
	return b.String()
}

func (w *agent) Name() string { return "agent" }

func (w *agent) Session(i int) Session {
	r := rngFor(w.o.Seed, "agent/session", i)
	return &agentSession{
		w:     w,
		r:     r,
		tg:    textGen{r},
		index: i,
		id:    fmt.Sprintf("bench-%d-agent-%d", w.o.Seed, i),
		turns: agentMinTurns + r.IntN(agentMaxTurns-agentMinTurns+1),
	}
}

// agentSession is one agent conversation. All of its random draws come from
// its own source in a fixed order, independent of the server's replies, so
// the requests are the same on every run but for the assistant texts the
// server returns.
type agentSession struct {
	w      *agent
	r      *rand.Rand
	tg     textGen
	index  int
	id     string
	turns  int // main requests planned
	sent   int // main requests sent
	subs   int
	steps  int
	msgs   []Message
	inSub  bool
	callID string
}

func (s *agentSession) request() Request {
	return Request{Messages: s.msgs, Tools: s.w.tools.raw, SessionID: s.id}
}

func (s *agentSession) Next(prev *Reply) (Turn, bool) {
	if s.sent == 0 {
		task := fmt.Sprintf("Working directory: /home/dev/project-%d\nSession: %s\n\nTask: ", s.index, s.id) +
			s.tg.text(s.w.o.tokens(agentTaskMin+s.r.IntN(agentTaskMax-agentTaskMin+1)))
		s.msgs = []Message{{Role: "system", Content: s.w.system}, {Role: "user", Content: task}}
		s.sent = 1
		return Turn{Label: "agent-first", Request: s.request()}, true
	}
	if prev == nil || !prev.OK {
		return Turn{}, false // a real agent would stop or retry; the bench ends the session
	}
	if s.inSub {
		s.inSub = false
		s.msgs = append(s.msgs, Message{Role: "tool", ToolCallID: s.callID, Content: "Sub-agent report:\n" + prev.Content})
		s.sent++
		return Turn{Label: "agent-turn", Request: s.request()}, true
	}
	if s.sent >= s.turns {
		return Turn{}, false // the last reply was the final answer
	}
	s.steps++
	s.callID = fmt.Sprintf("call_%d_%d", s.index, s.steps)
	if s.r.Float64() < agentSubProb {
		call, err := s.w.tools.call(s.r, spawnTool, s.callID, s.tg)
		if err != nil {
			return Turn{}, false
		}
		s.msgs = append(s.msgs, Message{Role: "assistant", Content: prev.Content, ToolCalls: []ToolCall{call}})
		var args struct {
			Task string `json:"task"`
		}
		_ = json.Unmarshal([]byte(call.Function.Arguments), &args)
		s.subs++
		s.inSub = true
		return Turn{Label: "subagent", Request: Request{
			Messages: []Message{
				{Role: "system", Content: s.w.subSystem},
				{Role: "user", Content: "Task: " + args.Task},
			},
			SessionID: fmt.Sprintf("%s/sub-%d", s.id, s.subs),
		}}, true
	}
	name := s.w.ordinary[s.r.IntN(len(s.w.ordinary))]
	call, err := s.w.tools.call(s.r, name, s.callID, s.tg)
	if err != nil {
		return Turn{}, false
	}
	n := s.w.o.tokens(agentResultMin + s.r.IntN(agentResultMax-agentResultMin+1))
	pause := time.Duration(float64(pauseMin) + s.r.Float64()*float64(pauseMax-pauseMin))
	pause = time.Duration(float64(pause) * s.w.scale)
	s.msgs = append(s.msgs,
		Message{Role: "assistant", Content: prev.Content, ToolCalls: []ToolCall{call}},
		Message{Role: "tool", ToolCallID: s.callID, Content: toolResult(s.tg, name, n)},
	)
	s.sent++
	return Turn{Label: "agent-turn", Pause: pause, Request: s.request()}, true
}

// toolResult writes about n tokens of output of the named tool, shaped like
// the real thing (numbered source lines, grep hits, command output, prose).
func toolResult(tg textGen, name string, n int) string {
	var b strings.Builder
	line := func(prefix string) int {
		k := 5 + tg.rng.IntN(8)
		b.WriteString(prefix)
		for j := range k {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(tg.word())
		}
		b.WriteByte('\n')
		return int(float64(k)*TokensPerWord) + 3
	}
	switch name {
	case "read_file":
		for i, left := 1, n; left > 0; i++ {
			left -= line(fmt.Sprintf("%5d\t", i))
		}
	case "search_code", "git":
		for left := n; left > 0; {
			left -= line(fmt.Sprintf("internal/%s/%s.go:%d: ", tg.word(), tg.word(), 1+tg.rng.IntN(900)))
		}
	case "run_shell", "run_tests":
		b.WriteString("exit code 0\nstdout:\n")
		for left := n - 6; left > 0; {
			left -= line("")
		}
	case "list_directory", "query_database":
		for left := n; left > 0; {
			left -= line(fmt.Sprintf("| %d | ", tg.rng.IntN(10000)))
		}
	default:
		tg.sentences(&b, n)
	}
	return b.String()
}
