package api_test

import (
	"testing"

	"github.com/kvserve/kvserve/internal/api"
)

// TestPrepareConstraints: the grammar vocabulary is built by
// PrepareConstraints, not left for the first constrained request (a burst
// of them would all wait for it), and not before it is asked for.
func TestPrepareConstraints(t *testing.T) {
	srv, err := api.New(api.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv.PrepareConstraints() // no model yet: nothing to do
	srv.SetModel(synthModel(t, "smollm2-135m"))
	if srv.ConstraintVocabBuilt() {
		t.Fatal("the vocabulary was built before anything asked for it")
	}
	srv.PrepareConstraints()
	if !srv.ConstraintVocabBuilt() {
		t.Fatal("PrepareConstraints did not build the grammar vocabulary")
	}
	srv.PrepareConstraints() // again: built once, still there
	if !srv.ConstraintVocabBuilt() {
		t.Fatal("the vocabulary went away")
	}
}
