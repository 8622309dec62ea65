package grammar

import (
	"math"
	"testing"
)

// byteVocab is a vocabulary of the 256 single bytes plus an end token (id
// 256): matching a byte string through it tests the grammar itself.
func byteVocab() *Vocab {
	pieces := make([][]byte, 257)
	for b := range 256 {
		pieces[b] = []byte{byte(b)}
	}
	return newVocab(pieces, []int32{256})
}

// feed runs s through a matcher of g one byte token at a time, checking
// that Process allows each byte before it is accepted. It returns how many
// bytes were allowed and whether the matcher is then Done.
func feed(t testing.TB, g *Grammar, v *Vocab, s string) (int, bool) {
	t.Helper()
	m := g.NewMatcher(v)
	if m.Err() != nil {
		t.Fatalf("matcher: %v", m.Err())
	}
	logits := make([]float32, v.Size())
	for i := 0; i < len(s); i++ {
		for j := range logits {
			logits[j] = 0
		}
		m.Process(logits)
		if math.IsInf(float64(logits[s[i]]), -1) {
			return i, false
		}
		m.Accept(int32(s[i]))
		if m.Err() != nil {
			t.Fatalf("byte %d of %q allowed by Process but Accept failed: %v", i, s, m.Err())
		}
	}
	for j := range logits {
		logits[j] = 0
	}
	m.Process(logits)
	eogAllowed := !math.IsInf(float64(logits[256]), -1)
	if eogAllowed != m.Done() {
		t.Fatalf("%q: Done() = %v but end token allowed = %v", s, m.Done(), eogAllowed)
	}
	return len(s), m.Done()
}
