// Package sharedmodel loads the test models of ../shared/models for tests
// that run them (a package of its own so that testshared stays free of the
// model packages, whose own tests use it).
package sharedmodel

import (
	"os"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/testshared"
)

// Load opens ../shared/models/name and loads its model; the file is closed
// when the test ends. A missing file fails the test.
func Load(t testing.TB, name string) *model.Model {
	t.Helper()
	path := testshared.Path(t, "models", name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("test model not found: %v", err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	m, err := model.Load(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
