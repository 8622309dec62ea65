package servebench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// estTokens estimates a text's tokens the way the workloads aim them.
func estTokens(s string) float64 { return float64(len(strings.Fields(s))) * TokensPerWord }

// drive runs a session to its end with replies from reply (nil: OK with
// "reply <n>"), returning its turns.
func drive(t *testing.T, s Session, limit int) []Turn {
	t.Helper()
	var turns []Turn
	var prev *Reply
	for range limit {
		turn, ok := s.Next(prev)
		if !ok {
			return turns
		}
		turns = append(turns, turn)
		prev = &Reply{OK: true, Content: fmt.Sprintf("reply %d", len(turns))}
	}
	t.Fatalf("session longer than %d turns", limit)
	return nil
}

// bodies returns the request bodies of sessions 0..n-1.
func bodies(t *testing.T, w Workload, n int) [][]byte {
	t.Helper()
	var out [][]byte
	for i := range n {
		for _, turn := range drive(t, w.Session(i), 100) {
			b, err := Body("m", 16, false, turn.Request)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, append(b, []byte(turn.Label+turn.Pause.String())...))
		}
	}
	return out
}

func mustWorkload(t *testing.T, name string, o WorkloadOptions) Workload {
	t.Helper()
	w, err := NewWorkload(name, o)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestWorkloadDeterminism: the same seed gives byte-identical requests, in
// any order of session creation; another seed gives different ones.
func TestWorkloadDeterminism(t *testing.T) {
	for _, name := range WorkloadNames() {
		t.Run(name, func(t *testing.T) {
			o := WorkloadOptions{Seed: 42, PromptScale: 0.2}
			a := bodies(t, mustWorkload(t, name, o), 12)
			b := bodies(t, mustWorkload(t, name, o), 12)
			if len(a) != len(b) {
				t.Fatalf("%d vs %d requests", len(a), len(b))
			}
			for i := range a {
				if !bytes.Equal(a[i], b[i]) {
					t.Fatalf("request %d differs between runs", i)
				}
			}
			// Session 7 alone equals session 7 made after the others.
			w := mustWorkload(t, name, o)
			one := bodies(t, singleSession{w, 7}, 1)
			all := bodies(t, w, 12)
			off := len(bodies(t, w, 7))
			for i := range one {
				if !bytes.Equal(one[i], all[off+i]) {
					t.Fatalf("session 7 depends on the sessions made before it")
				}
			}
			o.Seed = 43
			c := bodies(t, mustWorkload(t, name, o), 12)
			same := 0
			for i := range min(len(a), len(c)) {
				if bytes.Equal(a[i], c[i]) {
					same++
				}
			}
			if same > 0 {
				t.Fatalf("seed 43 repeats %d requests of seed 42", same)
			}
		})
	}
}

// singleSession presents session i of w as session 0.
type singleSession struct {
	Workload
	i int
}

func (s singleSession) Session(int) Session { return s.Workload.Session(s.i) }

func TestNewWorkloadUnknown(t *testing.T) {
	if _, err := NewWorkload("nope", WorkloadOptions{}); err == nil || !strings.Contains(err.Error(), "shared-prefix") {
		t.Fatalf("err = %v", err)
	}
}

func TestSharedPrefixShape(t *testing.T) {
	w := mustWorkload(t, "shared-prefix", WorkloadOptions{Seed: 1, Groups: 5})
	const n = 400
	seen := map[string]int{} // system prompt → requests
	var prevSys string
	switches := 0
	for i := range n {
		turns := drive(t, w.Session(i), 2)
		if len(turns) != 1 {
			t.Fatalf("session %d has %d turns", i, len(turns))
		}
		tr := turns[0]
		m := tr.Request.Messages
		if len(m) != 2 || m[0].Role != "system" || m[1].Role != "user" || tr.Pause != 0 || tr.Request.SessionID != "" {
			t.Fatalf("request %d: %+v", i, tr)
		}
		if est := estTokens(m[0].Content); est < 1900 || est > 2200 {
			t.Fatalf("system prompt ≈ %.0f tokens, want ≈ 2048", est)
		}
		if est := estTokens(m[1].Content); est < 110 || est > 150 {
			t.Fatalf("question ≈ %.0f tokens, want ≈ 128", est)
		}
		wantLabel := "prefix-warm"
		if i < 5 {
			wantLabel = "prefix-cold"
			if seen[m[0].Content] != 0 {
				t.Fatalf("cold request %d repeats a group", i)
			}
		}
		if tr.Label != wantLabel {
			t.Fatalf("request %d label %q, want %q", i, tr.Label, wantLabel)
		}
		seen[m[0].Content]++
		if i > 0 && m[0].Content != prevSys {
			switches++
		}
		prevSys = m[0].Content
	}
	if len(seen) != 5 {
		t.Fatalf("%d distinct system prompts, want 5", len(seen))
	}
	for _, c := range seen {
		if c < n/5/2 || c > n/5*2 {
			t.Fatalf("group sizes %v: not roughly uniform", seen)
		}
	}
	// Interleaved: with 5 groups a random next group differs 4/5 of the time.
	if switches < n/2 {
		t.Fatalf("only %d group switches in %d requests: not interleaved", switches, n)
	}
}

func TestChatShape(t *testing.T) {
	w := mustWorkload(t, "chat", WorkloadOptions{Seed: 3})
	firsts := map[string]bool{}
	lo, hi := 1e9, 0.0
	for i := range 300 {
		turns := drive(t, w.Session(i), 2)
		if len(turns) != 1 || len(turns[0].Request.Messages) != 1 || turns[0].Label != "chat" {
			t.Fatalf("session %d: %+v", i, turns)
		}
		text := turns[0].Request.Messages[0].Content
		est := estTokens(text)
		lo, hi = min(lo, est), max(hi, est)
		f := strings.Fields(text)
		key := strings.Join(f[:min(16, len(f))], " ")
		if firsts[key] {
			t.Fatalf("two prompts share their first words: %q", key)
		}
		firsts[key] = true
	}
	if lo > 80 || hi < 2000 || hi > 4600 {
		t.Fatalf("prompt sizes %.0f..%.0f tokens, want mixed within 32..4096", lo, hi)
	}
}

// TestAgentTools checks the tool definitions: a dozen functions with
// object parameters, and generated calls whose arguments satisfy each
// schema's required fields.
func TestAgentTools(t *testing.T) {
	tools, err := parseAgentTools()
	if err != nil {
		t.Fatal(err)
	}
	var defs []map[string]any
	if err := json.Unmarshal(tools.raw, &defs); err != nil {
		t.Fatal(err)
	}
	if len(defs) != 12 || len(tools.tools) != 12 {
		t.Fatalf("%d tools, want 12", len(defs))
	}
	for _, tl := range tools.tools {
		p := tl.Function.Parameters
		if p.Type != "object" || len(p.Properties) < 2 {
			t.Fatalf("%s: parameters %+v", tl.Function.Name, p)
		}
		r := rngFor(1, "tools", 0)
		call, err := tools.call(r, tl.Function.Name, "c", textGen{r})
		if err != nil {
			t.Fatal(err)
		}
		var args map[string]any
		if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
			t.Fatalf("%s: %v", tl.Function.Name, err)
		}
		for _, req := range p.Required {
			if _, ok := args[req]; !ok {
				t.Fatalf("%s: required %q missing from %s", tl.Function.Name, req, call.Function.Arguments)
			}
		}
		for k, v := range args {
			prop, ok := p.Properties[k]
			if !ok {
				t.Fatalf("%s: unknown argument %q", tl.Function.Name, k)
			}
			if len(prop.Enum) > 0 && !containsAny(prop.Enum, v) {
				t.Fatalf("%s: %q = %v not in enum %v", tl.Function.Name, k, v, prop.Enum)
			}
			if n, isNum := v.(float64); isNum && ((prop.Minimum != nil && n < *prop.Minimum) || (prop.Maximum != nil && n > *prop.Maximum)) {
				t.Fatalf("%s: %q = %v out of bounds", tl.Function.Name, k, v)
			}
		}
	}
	if _, err := tools.call(rngFor(1, "x", 0), "nope", "c", textGen{rngFor(1, "y", 0)}); err == nil {
		t.Fatal("unknown tool: want error")
	}
}

func containsAny(list []any, v any) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// TestAgentShape drives many agent sessions and checks the workload's
// promises: a shared ≈10k-token system prompt with tools; a history that
// grows by exactly an assistant reply (with the server's text and a tool
// call) and its tool result per turn, so each request extends the one
// before; scaled pauses; sub-agents with their own session id and small
// prompt whose report comes back as the tool result.
func TestAgentShape(t *testing.T) {
	const scale = 0.05
	w := mustWorkload(t, "agent", WorkloadOptions{Seed: 9})
	aw := w.(*agent)
	if est := estTokens(aw.system) + float64(aw.ToolTokens()); est < 9000 || est > 11000 {
		t.Fatalf("system + tools ≈ %.0f tokens, want ≈ 10,000", est)
	}
	if tt := aw.ToolTokens(); tt < 1000 || tt > 5000 {
		t.Fatalf("tools ≈ %d tokens", tt)
	}
	var mains, subs, results int
	for i := range 60 {
		s := w.Session(i)
		var prevMain *Request
		var prevReply, prevMainReply string
		var prev *Reply
		mainTurns, sessionSubs := 0, 0
		for step := 0; ; step++ {
			turn, ok := s.Next(prev)
			if !ok {
				break
			}
			reply := fmt.Sprintf("assistant text %d of session %d", step, i)
			prev = &Reply{OK: true, Content: reply}
			req := turn.Request
			switch turn.Label {
			case "agent-first":
				if step != 0 || len(req.Messages) != 2 || req.Messages[0].Content != aw.system || turn.Pause != 0 {
					t.Fatalf("session %d: bad first turn", i)
				}
			case "agent-turn":
				last := req.Messages[len(req.Messages)-1]
				asst := req.Messages[len(req.Messages)-2]
				if len(req.Messages) != len(prevMain.Messages)+2 || last.Role != "tool" || asst.Role != "assistant" ||
					len(asst.ToolCalls) != 1 || asst.ToolCalls[0].ID != last.ToolCallID || asst.Content != prevMainReply {
					t.Fatalf("session %d step %d: history did not grow by reply + tool result", i, step)
				}
				// The new request extends the previous one exactly.
				a, _ := json.Marshal(prevMain.Messages)
				b, _ := json.Marshal(req.Messages[:len(prevMain.Messages)])
				if !bytes.Equal(a, b) {
					t.Fatalf("session %d step %d: earlier history changed", i, step)
				}
				if asst.ToolCalls[0].Function.Name == spawnTool {
					if turn.Pause != 0 || !strings.Contains(last.Content, prevReply) {
						t.Fatalf("session %d step %d: sub-agent report not returned: %q", i, step, last.Content)
					}
				} else {
					lo := time.Duration(float64(pauseMin) * scale)
					hi := time.Duration(float64(pauseMax) * scale)
					if turn.Pause < lo || turn.Pause > hi {
						t.Fatalf("pause %v outside [%v, %v]", turn.Pause, lo, hi)
					}
					if est := estTokens(last.Content); est < agentResultMin*0.8 || est > agentResultMax*1.5 {
						t.Fatalf("tool result ≈ %.0f tokens", est)
					}
					results++
				}
			case "subagent":
				subs++
				sessionSubs++
				if req.SessionID != fmt.Sprintf("bench-9-agent-%d/sub-%d", i, sessionSubs) {
					t.Fatalf("sub-agent session id %q", req.SessionID)
				}
				if len(req.Messages) != 2 || req.Messages[0].Content != aw.subSystem || req.Tools != nil || turn.Pause != 0 {
					t.Fatalf("sub-agent request %+v", req)
				}
				if est := estTokens(req.Messages[0].Content); est > 800 {
					t.Fatalf("sub-agent system prompt ≈ %.0f tokens, want small", est)
				}
			default:
				t.Fatalf("label %q", turn.Label)
			}
			if turn.Label != "subagent" {
				mainTurns++
				r := req
				prevMain = &r
				prevMainReply = reply
				if req.SessionID != fmt.Sprintf("bench-9-agent-%d", i) || !bytes.Equal(req.Tools, aw.tools.raw) {
					t.Fatalf("session %d: session id %q or tools missing", i, req.SessionID)
				}
			}
			prevReply = reply
		}
		if mainTurns < agentMinTurns || mainTurns > agentMaxTurns {
			t.Fatalf("session %d has %d main turns", i, mainTurns)
		}
		mains += mainTurns
	}
	// Sub-agents replace about agentSubProb of the tool steps.
	frac := float64(subs) / float64(subs+results)
	if frac < 0.07 || frac > 0.25 {
		t.Fatalf("sub-agent share %.2f of %d tool steps, want ≈ %.2f", frac, subs+results, agentSubProb)
	}
}

// TestAgentPauseScale checks pauses follow the time scale, and that a
// negative scale removes them.
func TestAgentPauseScale(t *testing.T) {
	for _, tc := range []struct {
		scale  float64
		lo, hi time.Duration
	}{
		{0, 100 * time.Millisecond, 1500 * time.Millisecond}, // default 0.05
		{1, 2 * time.Second, 30 * time.Second},
		{0.5, time.Second, 15 * time.Second},
		{-1, 0, 0},
	} {
		w := mustWorkload(t, "agent", WorkloadOptions{Seed: 2, TimeScale: tc.scale, PromptScale: 0.05})
		n := 0
		var sum time.Duration
		for i := range 20 {
			for _, turn := range drive(t, w.Session(i), 100) {
				if turn.Label != "agent-turn" || turn.Pause == 0 && tc.hi > 0 {
					continue
				}
				if turn.Pause < tc.lo || turn.Pause > tc.hi {
					t.Fatalf("scale %g: pause %v outside [%v, %v]", tc.scale, turn.Pause, tc.lo, tc.hi)
				}
				sum += turn.Pause
				n++
			}
		}
		if n < 20 {
			t.Fatalf("scale %g: only %d pauses", tc.scale, n)
		}
		if mean := sum / time.Duration(n); tc.hi > 0 && (mean < tc.lo+(tc.hi-tc.lo)/4 || mean > tc.hi-(tc.hi-tc.lo)/4) {
			t.Fatalf("scale %g: mean pause %v, want near the middle of [%v, %v]", tc.scale, mean, tc.lo, tc.hi)
		}
	}
}

// TestAgentStopsOnFailure: a failed request ends the session.
func TestAgentStopsOnFailure(t *testing.T) {
	s := mustWorkload(t, "agent", WorkloadOptions{Seed: 1, PromptScale: 0.05}).Session(0)
	if _, ok := s.Next(nil); !ok {
		t.Fatal("no first turn")
	}
	if _, ok := s.Next(&Reply{OK: false}); ok {
		t.Fatal("session went on after a failure")
	}
}
