package outparse

import (
	"strings"

	"github.com/kvserve/kvserve/internal/chat/pyjson"
)

// A tool-call section is read by a small program of steps (toolformat.go):
// literals, whitespace, a JSON call object, a name up to a delimiter, the
// arguments. Each step consumes what it can of the input and says whether
// it is done, needs more input, or failed. Before the call is announced,
// steps only move cur (the bytes stay tentative, so a failure can give them
// back as content); afterwards every byte they consume is skipped as syntax
// or, for the arguments, emitted.

type stepResult uint8

const (
	stepWait stepResult = iota // more input needed
	stepNext                   // done: go to the next step
	stepJump                   // done: pc was set
	stepFail                   // the input does not fit
	stepEnd                    // the section ends here (Functionary's >>>all)
)

// opCode streams the rest of the output as the "code" argument of a Python
// tool (after <|python_tag|>); it comes after the ops of toolformat.go.
const opCode = opPython + 1

var codeProg = []step{{op: opCode}}

// section runs the current section's program.
func (p *StreamParser) section(eof bool) {
	for p.state == stSection {
		if p.pc >= len(p.prog) {
			p.endSection()
			return
		}
		switch p.exec(&p.prog[p.pc], eof) {
		case stepWait:
			return
		case stepNext:
			p.pc++
		case stepJump:
		case stepFail:
			p.fail()
			return
		case stepEnd:
			p.endSection()
			return
		}
	}
}

// consume reads n bytes of syntax.
func (p *StreamParser) consume(n int) {
	p.cur += n
	if !p.tentative {
		p.skip(p.cur, lSyntax)
	}
}

func (p *StreamParser) exec(st *step, eof bool) stepResult {
	rest := p.buf[p.cur:]
	switch st.op {
	case opWS:
		i := skipSpace(rest)
		p.consume(i)
		if i == len(rest) && !eof {
			return stepWait
		}
		return stepNext
	case opLit, opOptLit:
		if strings.HasPrefix(rest, st.s) {
			p.consume(len(st.s))
			return stepNext
		}
		if strings.HasPrefix(st.s, rest) {
			if !eof {
				return stepWait
			}
			if !p.tentative { // cut off at the end, after a complete call
				p.consume(len(rest))
				return stepNext
			}
		}
		if st.op == opOptLit {
			return stepNext
		}
		return stepFail
	case opLoop:
		if strings.HasPrefix(rest, st.s) {
			p.consume(len(st.s))
			p.pc = st.to
			return stepJump
		}
		if strings.HasPrefix(rest, st.s2) {
			p.consume(len(st.s2))
			return stepNext
		}
		if strings.HasPrefix(st.s, rest) || strings.HasPrefix(st.s2, rest) {
			if !eof {
				return stepWait
			}
			if !p.tentative {
				p.consume(len(rest))
				return stepNext
			}
		}
		return stepFail
	case opItem:
		if p.secCalls > 0 {
			p.tentative = true
			p.itemMark = p.cur
		}
		p.resetCall()
		return stepNext
	case opObject:
		return p.object(st.keys, eof)
	case opName:
		return p.readName(st.delim, eof)
	case opArgs:
		r := p.args(eof)
		if r == stepNext {
			p.endCall(false)
		}
		return r
	case opRecipient:
		return p.recipient(eof)
	case opPython:
		return p.python(eof)
	case opCode:
		if p.cur < len(p.buf) {
			s := p.buf[p.cur:]
			p.skip(len(p.buf), lSyntax)
			p.argText(jsonStringBody(s))
		}
		if !eof {
			return stepWait
		}
		p.argText(`"}`)
		p.endCall(false)
		return stepNext
	}
	return stepFail
}

// lookup returns the index of the tool called name, or -1.
func (p *StreamParser) lookup(name []byte) int {
	for i := range p.opts.Tools {
		if p.opts.Tools[i].Name == string(name) {
			return i
		}
	}
	return -1
}

// namePrefix reports whether some tool's name starts with w.
func (p *StreamParser) namePrefix(w []byte) bool {
	for i := range p.opts.Tools {
		n := p.opts.Tools[i].Name
		if len(n) >= len(w) && n[:len(w)] == string(w) {
			return true
		}
	}
	return false
}

// readName reads a tool name up to delim.
func (p *StreamParser) readName(delim byte, eof bool) stepResult {
	for p.cur < len(p.buf) {
		c := p.buf[p.cur]
		if c == delim {
			if p.tool = p.lookup(p.word); p.tool < 0 {
				return stepFail
			}
			return stepNext
		}
		p.word = append(p.word, c)
		if !p.namePrefix(p.word) {
			return stepFail
		}
		p.consume(1)
	}
	if eof {
		return stepFail
	}
	return stepWait
}

// recipient reads Functionary v3.2's ">>>recipient\n": "all" introduces
// plain text, a tool name a call.
func (p *StreamParser) recipient(eof bool) stepResult {
	if p.obj.st == 0 {
		rest := p.buf[p.cur:]
		if strings.HasPrefix(rest, ">>>") {
			p.consume(3)
		} else if strings.HasPrefix(">>>", rest) && !eof {
			return stepWait
		}
		p.obj.st = 1
	}
	for p.cur < len(p.buf) {
		c := p.buf[p.cur]
		if c == '\n' {
			p.consume(1)
			if string(p.word) == "all" {
				p.skip(p.cur, lSkip)
				p.tentative = false
				return stepEnd
			}
			if p.tool = p.lookup(p.word); p.tool < 0 {
				return stepFail
			}
			return stepNext
		}
		p.word = append(p.word, c)
		if !strings.HasPrefix("all", string(p.word)) && !p.namePrefix(p.word) {
			return stepFail
		}
		p.consume(1)
	}
	if eof {
		return stepFail
	}
	return stepWait
}

// argState tracks the arguments value of the current call.
type argState struct {
	started bool
	str     bool // a JSON string holding the arguments: decoded
	early   bool // read before the name was known: buf[start:end]
	done    bool
	start   int
	end     int
}

// args reads the arguments value: an object, streamed as it is; or a
// string, decoded. Read before the call's name is known, it is only
// scanned, and sent when the call is announced.
func (p *StreamParser) args(eof bool) stepResult {
	if !p.arg.started {
		rest := p.buf[p.cur:]
		i := skipSpace(rest)
		p.consume(i)
		if i == len(rest) {
			if eof {
				return stepFail
			}
			return stepWait
		}
		c := rest[i]
		if c != '{' && c != '"' {
			return stepFail
		}
		if c == '"' && p.tool >= 0 {
			// Arguments written as a string: announce the call only
			// once the string is seen to hold an object.
			in := rest[i+1:]
			j := skipSpace(in)
			switch {
			case j == len(in) && !eof:
				return stepWait
			case j == len(in) || in[j] != '{':
				return stepFail
			}
		}
		p.arg.started = true
		p.arg.str = c == '"'
		p.scan.reset()
		switch {
		case p.tool < 0:
			p.arg.early = true
			p.arg.start = p.cur
		case !p.callOpen:
			p.commit()
		}
		if p.arg.str && !p.arg.early {
			p.consume(1)
			p.sdec = strDecoder{}
		}
	}
	switch {
	case p.arg.early:
		for p.cur < len(p.buf) {
			switch p.scan.step(p.buf[p.cur]) {
			case scanMore:
				p.cur++
				continue
			case scanEnd:
				p.cur++
				p.arg.end = p.cur
				return stepNext
			}
			return stepFail
		}
	case p.arg.str:
		n, out, end, bad := p.sdec.decode(p.buf[p.cur:], p.scratch[:0])
		p.scratch = out
		p.skip(p.cur+n, lSyntax)
		ok := p.scan.feedObject(out)
		p.argText(string(out[:ok]))
		switch {
		case bad || ok < len(out):
			return stepFail
		case end && !p.scan.complete():
			return stepFail
		case end:
			return stepNext
		}
	default:
		for p.cur < len(p.buf) {
			switch p.scan.step(p.buf[p.cur]) {
			case scanMore:
				p.cur++
				continue
			case scanEnd:
				p.cur++
				p.emit(ToolCallArgs, p.cur)
				return stepNext
			}
			p.emit(ToolCallArgs, p.cur)
			return stepFail
		}
		p.emit(ToolCallArgs, p.cur)
	}
	if eof {
		return stepFail
	}
	return stepWait
}

// validArgs reports whether s is one JSON object, maybe with spaces around.
func validArgs(s string) bool {
	var sc jsonScan
	sc.reset()
	return sc.feedObject([]byte(s)) == len(s) && sc.complete()
}

// decodeString decodes the inside of a JSON string the scanner accepted.
func decodeString(s string) string {
	var d strDecoder
	_, out, _, _ := d.decode(s, nil)
	return string(d.flush(out))
}

// objState tracks a JSON call object.
type objState struct {
	st      uint8
	kind    uint8 // of the current key
	hasArgs bool
	keyed   bool // a key has been read
	start   int  // where the object starts in buf
}

const (
	oOpen uint8 = iota
	oKeyOrEnd
	oKey
	oColon
	oValue
	oName
	oArgs
	oSkip
	oAfter
	oPython
)

const (
	kUnknown uint8 = iota
	kName
	kArgs
	kOther
)

func (k *callKeys) classify(w []byte) uint8 {
	for _, n := range k.name {
		if n == string(w) {
			return kName
		}
	}
	for _, n := range k.args {
		if n == string(w) {
			return kArgs
		}
	}
	for _, n := range k.other {
		if n == string(w) {
			return kOther
		}
	}
	return kUnknown
}

// object reads one JSON call object: a name key, an arguments key, maybe
// keys the format allows (an id). Keys may come in any order; arguments
// before the name are held until the name is known.
func (p *StreamParser) object(keys *callKeys, eof bool) stepResult {
	for {
		if p.obj.st == oPython {
			return p.pyObject(keys, eof)
		}
		if p.obj.st == oArgs {
			if r := p.args(eof); r != stepNext {
				return r
			}
			p.arg.done = true
			p.obj.st = oAfter
			continue
		}
		if p.cur >= len(p.buf) {
			if !eof {
				return stepWait
			}
			if p.callOpen && p.arg.done { // cut off after the arguments
				p.endCall(false)
				return stepNext
			}
			return stepFail
		}
		c := p.buf[p.cur]
		switch p.obj.st {
		case oOpen, oKeyOrEnd, oColon, oValue, oAfter:
			if isSpace(c) {
				p.consume(1)
				continue
			}
		}
		switch p.obj.st {
		case oOpen:
			if c != '{' {
				return stepFail
			}
			p.obj.start = p.cur
			p.obj.st = oKeyOrEnd
		case oKeyOrEnd:
			if c == '\'' && keys.python && !p.obj.keyed {
				p.obj.st = oPython
				continue
			}
			if c != '"' {
				return stepFail
			}
			p.obj.keyed = true
			p.word = p.word[:0]
			p.sdec = strDecoder{}
			p.obj.st = oKey
		case oKey, oName:
			n, w, end, bad := p.sdec.decode(p.buf[p.cur:], p.word)
			p.word = w
			p.consume(n)
			if bad {
				return stepFail
			}
			if p.obj.st == oName && !p.namePrefix(p.word) {
				return stepFail
			}
			if !end {
				if p.cur < len(p.buf) { // a split escape
					if eof {
						return stepFail
					}
					return stepWait
				}
				continue
			}
			if p.obj.st == oName {
				if p.tool = p.lookup(p.word); p.tool < 0 {
					return stepFail
				}
				if p.arg.early {
					if p.arg.str && !validArgs(decodeString(p.buf[p.arg.start+1:p.arg.end-1])) {
						return stepFail
					}
					p.commit()
				}
				p.obj.st = oAfter
				continue
			}
			k := keys.classify(p.word)
			switch {
			case k == kUnknown && p.tentative:
				return stepFail
			case k == kUnknown, k == kName && p.tool >= 0, k == kArgs && p.obj.hasArgs:
				k = kOther
			}
			p.obj.kind = k
			p.obj.st = oColon
			continue
		case oColon:
			if c != ':' {
				return stepFail
			}
			p.obj.st = oValue
		case oValue:
			switch p.obj.kind {
			case kName:
				if c != '"' {
					return stepFail
				}
				p.word = p.word[:0]
				p.sdec = strDecoder{}
				p.obj.st = oName
			case kArgs:
				p.obj.hasArgs = true
				p.obj.st = oArgs
				continue
			default:
				p.scan.reset()
				p.obj.st = oSkip
				continue
			}
		case oSkip:
			switch p.scan.step(c) {
			case scanMore:
			case scanEnd:
				p.obj.st = oAfter
			case scanBefore:
				p.obj.st = oAfter
				continue
			default:
				return stepFail
			}
		case oAfter:
			switch c {
			case ',':
				p.obj.st = oKeyOrEnd
			case '}':
				p.consume(1)
				if p.tool < 0 {
					return stepFail
				}
				if !p.callOpen {
					p.commit()
					if !p.obj.hasArgs {
						p.argText("{}")
					}
				}
				p.endCall(false)
				return stepNext
			default:
				return stepFail
			}
		}
		p.consume(1)
	}
}

// pyObject reads a call object written as a Python dict, held whole until
// it closes; its arguments are sent as JSON.
func (p *StreamParser) pyObject(keys *callKeys, eof bool) stepResult {
	r := pyReader{s: p.buf[p.obj.start:]}
	fields, st := r.dict()
	switch st {
	case pyMore:
		if eof {
			return stepFail
		}
		return stepWait
	case pyBad:
		return stepFail
	}
	tool, args := -1, "{}"
	for _, f := range fields {
		switch keys.classify([]byte(f.key)) {
		case kName:
			var name string
			if !strings.HasPrefix(f.json, `"`) || unquoteJSON(f.json, &name) != nil {
				return stepFail
			}
			tool = p.lookup([]byte(name))
		case kArgs:
			if !strings.HasPrefix(f.json, "{") {
				return stepFail
			}
			args = f.json
		case kUnknown:
			return stepFail
		}
	}
	if tool < 0 {
		return stepFail
	}
	p.cur = p.obj.start + r.i
	p.tool = tool
	p.commit()
	p.argText(args)
	p.endCall(false)
	return stepNext
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// codeTool returns the index of the request's Python tool, or -1.
func (p *StreamParser) codeTool() int {
	for i, t := range p.opts.Tools {
		switch t.Name {
		case "python", "ipython", "code_interpreter":
			return i
		}
	}
	return -1
}

// python reads what follows <|python_tag|>: a JSON call object; a Llama 3.1
// built-in call, name.call(key="value", …), the whole rest of the output;
// or Python code for the request's python tool, the whole rest of the
// output, sent as {"code": "…"}.
func (p *StreamParser) python(eof bool) stepResult {
	rest := p.buf[p.cur:]
	if rest == "" {
		if eof {
			return stepFail
		}
		return stepWait
	}
	if rest[0] == '{' {
		p.prog, p.pc = jsonCallProg, 0
		return stepJump
	}
	i := 0
	for i < len(rest) && isIdent(rest[i]) {
		i++
	}
	if i == len(rest) && !eof {
		return stepWait
	}
	const call = ".call("
	if after := rest[i:]; i > 0 && (strings.HasPrefix(after, call) || strings.HasPrefix(call, after)) {
		if tool := p.lookup([]byte(rest[:i])); tool >= 0 {
			if !eof {
				return stepWait
			}
			if js, ok := pyCallArgs(after[min(len(after), len(call)):]); ok && strings.HasPrefix(after, call) {
				p.tool = tool
				p.cur = len(p.buf)
				p.commit()
				p.argText(js)
				p.endCall(false)
				return stepNext
			}
		}
	}
	if p.tool = p.codeTool(); p.tool < 0 {
		return stepFail
	}
	p.commit()
	p.argText(`{"code": "`)
	p.prog, p.pc = codeProg, 0
	return stepJump
}

// jsonStringBody returns s as the inside of a JSON string.
func jsonStringBody(s string) string {
	var b strings.Builder
	pyjson.WriteString(&b, s, false)
	out := b.String()
	return out[1 : len(out)-1]
}

// pyCallArgs turns the keyword arguments of a Python call, key="value", …)
// up to its closing parenthesis at the end, into a JSON object.
func pyCallArgs(s string) (string, bool) {
	s = s[:trimSpaceEnd(s)]
	if !strings.HasSuffix(s, ")") {
		return "", false
	}
	r := pyReader{s: s}
	var b strings.Builder
	b.WriteByte('{')
	for n := 0; ; n++ {
		r.space()
		if r.i >= len(s) {
			return "", false
		}
		if s[r.i] == ')' {
			break
		}
		if n > 0 {
			if s[r.i] != ',' {
				return "", false
			}
			r.i++
			r.space()
			if r.i < len(s) && s[r.i] == ')' {
				break
			}
			b.WriteString(", ")
		}
		j := r.i
		for j < len(s) && isIdent(s[j]) {
			j++
		}
		if j == r.i {
			return "", false
		}
		pyjson.WriteString(&b, s[r.i:j], false)
		b.WriteString(": ")
		r.i = j
		r.space()
		if r.i >= len(s) || s[r.i] != '=' {
			return "", false
		}
		r.i++
		if r.value(&b, 1) != pyOK {
			return "", false
		}
	}
	if r.i != len(s)-1 {
		return "", false
	}
	b.WriteByte('}')
	return b.String(), true
}
