package tenant

import (
	"strings"
	"testing"
)

func TestParseKey(t *testing.T) {
	key, id := newKey()
	if got, ok := ParseKey(key); !ok || got != id {
		t.Fatalf("ParseKey(%q) = %q, %v; want %q", key, got, ok, id)
	}
	bad := []string{
		"", "sk-test", key[:len(key)-1], key + "0", strings.ToUpper(key),
		"kvs_" + id + "-" + key[len("kvs_")+13:],
		"kvs_" + strings.Repeat("g", 12) + key[len("kvs_")+12:],
	}
	for _, k := range bad {
		if _, ok := ParseKey(k); ok {
			t.Errorf("ParseKey(%q) accepted", k)
		}
	}
	if other, _ := newKey(); other == key {
		t.Fatal("two keys alike")
	}
}

// FuzzParseKey: any string parses or not without panicking, and what
// parses has the key's exact shape.
func FuzzParseKey(f *testing.F) {
	key, _ := newKey()
	f.Add(key)
	f.Add("kvs_")
	f.Add("kvs_0123456789ab_")
	f.Fuzz(func(t *testing.T, s string) {
		id, ok := ParseKey(s)
		if !ok {
			return
		}
		if len(s) != keyLen || s[4:16] != id || !isLowerHex(id) {
			t.Fatalf("ParseKey(%q) = %q", s, id)
		}
	})
}
