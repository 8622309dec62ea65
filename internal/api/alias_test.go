package api

import "testing"

func TestModelAliases(t *testing.T) {
	m := &Model{ID: "served", Aliases: []string{"claude-*", "gpt-4o", "gemini-?.?-pro"}}
	tests := []struct {
		name string
		want bool
	}{
		{"claude-opus-4-1", true},
		{"claude-", true},
		{"gpt-4o", true},
		{"gemini-2.5-pro", true},
		{"gpt-4o-mini", false},
		{"served", false}, // the ID itself is not an alias (Call.Model checks it first)
		{"anthropic/claude-x", false},
		{"gemini-2.5-flash", false},
	}
	for _, tt := range tests {
		if got := m.hasAlias(tt.name); got != tt.want {
			t.Errorf("hasAlias(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
	for _, a := range []string{"claude-*", "x", "a?b", "[a-z]*"} {
		if err := ValidAlias(a); err != nil {
			t.Errorf("ValidAlias(%q): %v", a, err)
		}
	}
	for _, a := range []string{"", "[", "claude-[", `x\`} {
		if err := ValidAlias(a); err == nil {
			t.Errorf("ValidAlias(%q) accepted a bad alias", a)
		}
	}
}
