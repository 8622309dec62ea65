package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fixedClock returns times one second apart from a fixed start.
func fixedClock() func() time.Time {
	t := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	var mu sync.Mutex
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(time.Second)
		return t
	}
}

// writeLog appends n records to a new log and returns its path.
func writeLog(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{Now: fixedClock()})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		_, err := l.Append(context.Background(), Entry{Principal: "alice", Tenant: "t1", Action: "key.create",
			Resource: fmt.Sprintf("keys/k%d", i), Outcome: OK})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func readLines(t *testing.T, path string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(data, []byte{'\n'})[:bytes.Count(data, []byte{'\n'})]
}

func writeLines(t *testing.T, path string, lines [][]byte, tail string) {
	t.Helper()
	data := append(bytes.Join(lines, nil), tail...)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyIntact(t *testing.T) {
	path := writeLog(t, 5)
	s, err := Verify(path)
	if err != nil || s.Records != 5 || !isHex256(s.Last) {
		t.Fatalf("%+v %v", s, err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", st.Mode(), err)
	}
	empty := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(empty, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if s, err := Verify(empty); err != nil || s.Records != 0 {
		t.Fatalf("empty log: %+v %v", s, err)
	}
}

// TestVerifyTampered tampers with a log of 6 records each way and checks
// that Verify names the first broken record.
func TestVerifyTampered(t *testing.T) {
	tests := []struct {
		name    string
		tamper  func(lines [][]byte) ([][]byte, string)
		wantSeq uint64
	}{
		{"edited", func(l [][]byte) ([][]byte, string) {
			l[2] = bytes.Replace(l[2], []byte(`"alice"`), []byte(`"mallory"`), 1)
			return l, ""
		}, 3},
		{"edited and rehashed", func(l [][]byte) ([][]byte, string) {
			r, _ := ParseRecord(bytes.TrimSuffix(l[2], []byte{'\n'}))
			r.Principal = "mallory"
			line, _ := r.seal()
			l[2] = append(line, '\n')
			return l, ""
		}, 4},
		{"reformatted", func(l [][]byte) ([][]byte, string) {
			l[1] = bytes.Replace(l[1], []byte(`,"tenant"`), []byte(`, "tenant"`), 1)
			return l, ""
		}, 2},
		{"deleted", func(l [][]byte) ([][]byte, string) {
			return append(l[:3:3], l[4:]...), ""
		}, 4},
		{"first deleted", func(l [][]byte) ([][]byte, string) { return l[1:], "" }, 1},
		{"reordered", func(l [][]byte) ([][]byte, string) {
			l[3], l[4] = l[4], l[3]
			return l, ""
		}, 4},
		{"duplicated", func(l [][]byte) ([][]byte, string) {
			return append(l[:5:5], l[4], l[5]), ""
		}, 6},
		{"truncated mid-line", func(l [][]byte) ([][]byte, string) {
			return l[:5], string(l[5][:40])
		}, 6},
		{"blank line", func(l [][]byte) ([][]byte, string) {
			return append(l[:2:2], append([][]byte{[]byte("\n")}, l[2:]...)...), ""
		}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeLog(t, 6)
			lines, tail := tt.tamper(readLines(t, path))
			writeLines(t, path, lines, tail)
			_, err := Verify(path)
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify: %v, want a VerifyError", err)
			}
			if ve.Seq != tt.wantSeq {
				t.Fatalf("broken at %d, want %d: %v", ve.Seq, tt.wantSeq, ve)
			}
		})
	}
}

// TestReopenContinues: a log reopened after Close continues the chain.
func TestReopenContinues(t *testing.T) {
	path := writeLog(t, 3)
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Append(context.Background(), Entry{Action: "tenant.delete", Outcome: OK})
	if err != nil || r.Seq != 4 {
		t.Fatalf("seq %d, %v", r.Seq, err)
	}
	l.Close()
	if s, err := Verify(path); err != nil || s.Records != 4 || s.Last != r.Hash {
		t.Fatalf("%+v %v", s, err)
	}
}

// TestTornTail: a final line without its end (a crash mid-write) is cut by
// the next append, which records the cut; the chain then verifies.
func TestTornTail(t *testing.T) {
	path := writeLog(t, 3)
	lines := readLines(t, path)
	writeLines(t, path, lines, `{"seq":4,"time":"2026`)
	if _, err := Verify(path); err == nil {
		t.Fatal("torn tail verified")
	}
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Append(context.Background(), Entry{Action: "auth", Outcome: Denied})
	if err != nil || r.Seq != 5 {
		t.Fatalf("seq %d, %v", r.Seq, err)
	}
	l.Close()
	recs, err := Tail(path, 2)
	if err != nil || len(recs) != 2 || recs[0].Action != "audit.recover" || !strings.Contains(recs[0].Reason, "21 bytes") {
		t.Fatalf("%+v %v", recs, err)
	}
	if _, err := Verify(path); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedLastRecord: a log whose last record was edited cannot be
// continued: Open says so rather than chaining onto it.
func TestDamagedLastRecord(t *testing.T) {
	path := writeLog(t, 2)
	lines := readLines(t, path)
	lines[1] = bytes.Replace(lines[1], []byte("alice"), []byte("alicf"), 1)
	writeLines(t, path, lines, "")
	if _, err := Open(path, Options{}); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("Open: %v", err)
	}
}

// TestConcurrentAppends: goroutines appending through two Logs on the same
// file (as a server and a CLI command in two processes) keep one chain.
func TestConcurrentAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	a, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		l := a
		if i%2 == 1 {
			l = b
		}
		wg.Go(func() {
			for j := range 10 {
				if _, err := l.Append(context.Background(), Entry{Principal: fmt.Sprint(i), Resource: fmt.Sprint(j), Action: "x", Outcome: OK}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	a.Close()
	b.Close()
	if s, err := Verify(path); err != nil || s.Records != 80 {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestTail(t *testing.T) {
	path := writeLog(t, 7)
	for _, n := range []int{0, 1, 3, 7, 20} {
		recs, err := Tail(path, n)
		if err != nil {
			t.Fatal(err)
		}
		want := min(n, 7)
		if len(recs) != want {
			t.Fatalf("Tail(%d): %d records", n, len(recs))
		}
		for i, r := range recs {
			if r.Seq != uint64(7-want+i+1) {
				t.Fatalf("Tail(%d)[%d] seq %d", n, i, r.Seq)
			}
		}
	}
}

func TestClipAndBadOutcome(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Append(context.Background(), Entry{Outcome: "maybe"}); err == nil {
		t.Fatal("unknown outcome accepted")
	}
	long := strings.Repeat("é", maxField) + "\xff<&>\u2028"
	r, err := l.Append(context.Background(), Entry{Reason: long, Resource: "a\xffb<x>", Outcome: Failed})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Reason) > maxField+len("…") || r.Resource != "a\uFFFDb<x>" {
		t.Fatalf("reason of %d bytes, resource %q", len(r.Reason), r.Resource)
	}
	if _, err := Verify(path); err != nil {
		t.Fatal(err)
	}
}

// FuzzParseRecord: no input panics the parser, and what it accepts is
// exactly the canonical encoding of the record it returns.
func FuzzParseRecord(f *testing.F) {
	path := filepath.Join(f.TempDir(), "audit.log")
	l, err := Open(path, Options{Now: fixedClock()})
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range []Entry{
		{Principal: "alice", Tenant: "t1", Action: "key.create", Resource: "keys/abc", Outcome: OK},
		{Action: "auth", Outcome: Denied, Reason: "API key revoked"},
		{Principal: "é\"\\\n", Outcome: Failed, Reason: "<&>"},
	} {
		if _, err := l.Append(context.Background(), e); err != nil {
			f.Fatal(err)
		}
	}
	l.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	for _, ln := range bytes.Split(bytes.TrimSpace(data), []byte{'\n'}) {
		f.Add(ln)
	}
	f.Add([]byte(`{"seq":1}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseRecord(line)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		again, err := r.seal()
		if err != nil || !bytes.Equal(again, line) {
			t.Fatalf("accepted %q, re-encodes to %q (%v)", line, again, err)
		}
	})
}
