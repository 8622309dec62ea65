package sample

// StopMatcher finds stop strings in streamed text that arrives in arbitrary
// pieces (one per token), and tells the caller which text is safe to send.
//
// Semantics: generation stops at the first stop string to be completed as
// the text grows; the output is everything before that stop string's start.
// When two stop strings end at the same place the longer one wins (it starts
// earlier). The result never depends on how the text was split into pieces:
// "abcd" pushed whole and pushed one byte at a time give the same output,
// so with stops "abcd" and "bc" both yield "a" ("bc" completes first).
//
// Between pieces the matcher holds back the longest tail of the text that
// could still grow into a stop string, and emits the rest. Matching is on
// bytes; stop strings are normally valid UTF-8, so a held-back tail never
// splits a character that an emitted part needs.
type StopMatcher struct {
	stops   []string
	maxLen  int
	held    []byte
	stopped bool
	match   string
}

// NewStopMatcher returns a matcher for stops. Empty strings are ignored; with
// no stop strings every Push emits its text unchanged.
func NewStopMatcher(stops []string) *StopMatcher {
	m := &StopMatcher{}
	for _, s := range stops {
		if s != "" {
			m.stops = append(m.stops, s)
			m.maxLen = max(m.maxLen, len(s))
		}
	}
	return m
}

// Push adds the next piece of text. It returns the text that can no longer be
// the start of a stop string (possibly empty), and whether a stop string has
// now been completed; in that case emit is the text before the stop string,
// and later calls return ("", true).
func (m *StopMatcher) Push(text string) (emit string, stopped bool) {
	if m.stopped {
		return "", true
	}
	if len(m.stops) == 0 {
		return text, false
	}
	if len(m.held) == 0 {
		// Common case: nothing held, work on text itself (no copy).
		start, s := firstMatch(m.stops, text)
		if s != "" {
			m.stop(s)
			return text[:start], true
		}
		keep := holdFrom(m.stops, m.maxLen, text)
		m.held = append(m.held, text[keep:]...)
		return text[:keep], false
	}
	m.held = append(m.held, text...)
	start, s := firstMatch(m.stops, m.held)
	if s != "" {
		emit = string(m.held[:start])
		m.stop(s)
		return emit, true
	}
	keep := holdFrom(m.stops, m.maxLen, m.held)
	if keep == 0 {
		return "", false
	}
	emit = string(m.held[:keep])
	m.held = append(m.held[:0], m.held[keep:]...)
	return emit, false
}

// Flush returns the held-back text, for the end of the stream: text that
// could have started a stop string but was not followed by the rest of it.
// It returns "" after a stop.
func (m *StopMatcher) Flush() string {
	if m.stopped || len(m.held) == 0 {
		return ""
	}
	s := string(m.held)
	m.held = m.held[:0]
	return s
}

// Stopped reports whether a stop string has been matched.
func (m *StopMatcher) Stopped() bool { return m.stopped }

// Match returns the stop string that ended the stream ("" if none yet).
func (m *StopMatcher) Match() string { return m.match }

func (m *StopMatcher) stop(s string) {
	m.stopped, m.match = true, s
	m.held = m.held[:0]
}

// text is the piece of text a matcher scans: the incoming string, or its
// held-back buffer with that string appended.
type text interface{ ~string | ~[]byte }

// firstMatch returns the start of the stop string that completes first in t
// (ties: the longest, which starts first) and that stop string, or "" when
// none occurs.
func firstMatch[T text](stops []string, t T) (int, string) {
	bestEnd, bestStart, best := -1, 0, ""
	for _, s := range stops {
		i := index(t, s)
		if i < 0 {
			continue
		}
		if end := i + len(s); bestEnd < 0 || end < bestEnd || end == bestEnd && i < bestStart {
			bestEnd, bestStart, best = end, i, s
		}
	}
	return bestStart, best
}

// index returns the first position of s in t, or -1.
func index[T text](t T, s string) int {
	for i := 0; i+len(s) <= len(t); i++ {
		if hasPrefix(t[i:], s) {
			return i
		}
	}
	return -1
}

// hasPrefix reports whether t starts with s.
func hasPrefix[T text](t T, s string) bool {
	if len(t) < len(s) {
		return false
	}
	for i := range len(s) {
		if t[i] != s[i] {
			return false
		}
	}
	return true
}

// holdFrom returns the start of the longest tail of t that is a proper prefix
// of some stop string, or len(t) when there is none. Only tails shorter than
// the longest stop string can qualify.
func holdFrom[T text](stops []string, maxLen int, t T) int {
	for i := max(0, len(t)-maxLen+1); i < len(t); i++ {
		tail := t[i:]
		for _, s := range stops {
			if properPrefix(tail, s) {
				return i
			}
		}
	}
	return len(t)
}

// properPrefix reports whether t is a proper prefix of s.
func properPrefix[T text](t T, s string) bool {
	if len(t) >= len(s) {
		return false
	}
	for i := range len(t) {
		if t[i] != s[i] {
			return false
		}
	}
	return true
}
