package testshared

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindBesideRepository(t *testing.T) {
	t.Setenv(EnvVar, "")
	dir, err := find()
	if err != nil {
		// This repository's own tests need ../shared: so does this one.
		t.Fatal(err)
	}
	if filepath.Base(dir) != "shared" {
		t.Errorf("find() = %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "models")); err != nil {
		t.Error(err)
	}
}

func TestFindOverride(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		env, want, err string
	}{
		{env: tmp, want: tmp},
		{env: "shared", err: "not an absolute path"},
		{env: filepath.Join(tmp, "missing"), err: "no such file"},
		{env: file, err: "not a directory"},
	}
	for _, tc := range tests {
		t.Setenv(EnvVar, tc.env)
		got, err := find()
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("%s=%s: find() = %q, %v; want %q", EnvVar, tc.env, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s=%s: find() error %v, want one containing %q", EnvVar, tc.env, err, tc.err)
		}
	}
}
