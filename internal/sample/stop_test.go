package sample

import (
	"strings"
	"testing"
)

// refStop is the definition of stop-string handling, the slow way: grow the
// text one byte at a time and stop at the first prefix that ends with a stop
// string (the longest one if several end there).
func refStop(text string, stops []string) (string, bool) {
	for e := 1; e <= len(text); e++ {
		best := -1
		for _, s := range stops {
			if s != "" && strings.HasSuffix(text[:e], s) && len(s) > best {
				best = len(s)
			}
		}
		if best >= 0 {
			return text[:e-best], true
		}
	}
	return text, false
}

// longestHold returns the longest suffix of text that is a proper prefix of
// some stop string.
func longestHold(text string, stops []string) string {
	for i := range len(text) {
		for _, s := range stops {
			if s != "" && len(text)-i < len(s) && strings.HasPrefix(s, text[i:]) {
				return text[i:]
			}
		}
	}
	return ""
}

// runStop pushes pieces through a matcher, checking after every push that
// exactly the text that can no longer start a stop string has been emitted.
func runStop(t *testing.T, stops, pieces []string) (string, bool) {
	t.Helper()
	m := NewStopMatcher(stops)
	var out, pushed strings.Builder
	stopped := false
	for _, p := range pieces {
		pushed.WriteString(p)
		emit, st := m.Push(p)
		out.WriteString(emit)
		if st {
			stopped = true
			if e2, st2 := m.Push("more"); e2 != "" || !st2 {
				t.Fatalf("Push after stop = %q, %v", e2, st2)
			}
			if f := m.Flush(); f != "" {
				t.Fatalf("Flush after stop = %q", f)
			}
			break
		}
		if held := pushed.String()[out.Len():]; !strings.HasPrefix(pushed.String(), out.String()) || held != longestHold(pushed.String(), stops) {
			t.Fatalf("after %q: emitted %q, holding %q, want holding %q", pushed.String(), out.String(), held, longestHold(pushed.String(), stops))
		}
	}
	if !stopped {
		out.WriteString(m.Flush())
	}
	if m.Stopped() != stopped {
		t.Fatal("Stopped() disagrees with Push")
	}
	return out.String(), stopped
}

func TestStopMatcher(t *testing.T) {
	cases := []struct {
		name    string
		stops   []string
		pieces  []string
		want    string
		stopped bool
	}{
		{"no stops", nil, []string{"a", "b"}, "ab", false},
		{"empty stop ignored", []string{""}, []string{"ab"}, "ab", false},
		{"inside one piece", []string{"STOP"}, []string{"abcSTOPdef"}, "abc", true},
		{"across pieces", []string{"STOP"}, []string{"ab", "cS", "TO", "Pdef"}, "abc", true},
		{"one byte at a time", []string{"</s>"}, strings.Split("hi</s>x", ""), "hi", true},
		{"false start released", []string{"STOP"}, []string{"ST", "OX", "Y"}, "STOXY", false},
		{"held tail flushed at end", []string{"STOP"}, []string{"abc", "STO"}, "abcSTO", false},
		{"stop at very start", []string{"x"}, []string{"xyz"}, "", true},
		{"overlap: first completed wins", []string{"abcd", "bc"}, []string{"abcd"}, "a", true},
		{"overlap byte by byte", []string{"abcd", "bc"}, []string{"a", "b", "c", "d"}, "a", true},
		{"same end: longer wins", []string{"bc", "abc"}, []string{"xab", "c"}, "x", true},
		{"prefix of another", []string{"ab", "abc"}, []string{"zab"}, "z", true},
		{"self-overlapping stop", []string{"aab"}, []string{"a", "a", "a", "b"}, "a", true},
		{"repeated partial", []string{"ababc"}, []string{"abab", "abc"}, "ab", true},
		{"two stops, later one first", []string{"END", "\n\n"}, []string{"line\n", "\nEND"}, "line", true},
		{"multibyte", []string{"。"}, []string{"你好", "\xe3\x80", "\x82再见"}, "你好", true},
		{"multibyte no match", []string{"。"}, []string{"你好", "\xe3\x80"}, "你好\xe3\x80", false},
		{"empty pieces", []string{"ab"}, []string{"", "a", "", "b"}, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, stopped := runStop(t, tc.stops, tc.pieces)
			if got != tc.want || stopped != tc.stopped {
				t.Fatalf("got %q stopped=%v, want %q stopped=%v", got, stopped, tc.want, tc.stopped)
			}
			ref, refStopped := refStop(strings.Join(tc.pieces, ""), tc.stops)
			if ref != tc.want || refStopped != tc.stopped {
				t.Fatalf("reference gives %q %v: table wrong", ref, refStopped)
			}
		})
	}
}

func TestStopMatcherMatch(t *testing.T) {
	m := NewStopMatcher([]string{"<|im_end|>", "<|endoftext|>"})
	if m.Match() != "" {
		t.Fatal("Match before any stop")
	}
	m.Push("hello<|im_")
	if _, st := m.Push("end|>"); !st || m.Match() != "<|im_end|>" {
		t.Fatalf("Match() = %q", m.Match())
	}
}

func TestStopMatcherNoAllocWithoutHold(t *testing.T) {
	m := NewStopMatcher([]string{"</s>", "STOP"})
	if n := testing.AllocsPerRun(100, func() { m.Push("plain text ") }); n != 0 {
		t.Fatalf("%v allocations per Push of text that holds nothing back", n)
	}
}

// FuzzStopMatcher checks that any split of any text through any two stop
// strings gives the reference result, with exactly the safe text emitted
// after every piece.
func FuzzStopMatcher(f *testing.F) {
	f.Add("hello STOP world", "STOP", "", []byte{3, 1, 4})
	f.Add("abcd", "abcd", "bc", []byte{1, 1, 1})
	f.Add("aaab", "aab", "x", []byte{1})
	f.Add("你好。", "。", "好。", []byte{2, 2})
	f.Fuzz(func(t *testing.T, text, stopA, stopB string, cuts []byte) {
		if len(text) > 512 || len(stopA) > 16 || len(stopB) > 16 {
			return
		}
		var pieces []string
		rest := text
		for _, c := range cuts {
			n := min(int(c)%8, len(rest))
			pieces = append(pieces, rest[:n])
			rest = rest[n:]
		}
		pieces = append(pieces, rest)
		stops := []string{stopA, stopB}
		got, stopped := runStop(t, stops, pieces)
		want, wantStopped := refStop(text, stops)
		if got != want || stopped != wantStopped {
			t.Fatalf("pieces %q, stops %q: got %q %v, want %q %v", pieces, stops, got, stopped, want, wantStopped)
		}
	})
}
