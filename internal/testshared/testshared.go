// Package testshared finds the project's shared test data (models, chat
// templates, llama.cpp reference outputs, traces): the directory named by
// $KVSERVE_SHARED, else ../shared beside the repository root. Only tests
// import it.
//
// A test that needs the data and does not find it fails, in CI and on a
// developer's machine alike, with a message saying where it looked: a
// skipped golden test looks like a passing one.
package testshared

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// EnvVar names the variable that overrides where the shared data is: an
// absolute path.
const EnvVar = "KVSERVE_SHARED"

// Dir returns the shared test data directory, or fails t.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := find()
	if err != nil {
		t.Fatalf("testshared: %v; set %s to the absolute path of the shared test data (models/, testdata/, traces/)", err, EnvVar)
	}
	return dir
}

// Path returns elem joined to the shared test data directory (a file, a
// directory or a glob pattern), or fails t if that directory is missing.
func Path(t testing.TB, elem ...string) string {
	t.Helper()
	return filepath.Join(append([]string{Dir(t)}, elem...)...)
}

// Own returns elem joined to the repository's own test data directory,
// testdata/ at its root: reference files this project made itself with
// llama.cpp for what the shared data does not cover (testdata/README.md).
func Own(t testing.TB, elem ...string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("testshared: %v", err)
	}
	return filepath.Join(append([]string{root, "testdata"}, elem...)...)
}

// repoRoot is the repository's root directory: this file is
// internal/testshared/testshared.go in it.
func repoRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the repository (no caller information)")
	}
	return filepath.Join(filepath.Dir(file), "..", ".."), nil
}

// find returns the shared directory or why it was not found.
func find() (string, error) {
	if env := os.Getenv(EnvVar); env != "" {
		if !filepath.IsAbs(env) {
			// Tests run in their package's directory, so a relative
			// path would mean something different in each package.
			return "", fmt.Errorf("%s=%s is not an absolute path", EnvVar, env)
		}
		if err := isDir(env); err != nil {
			return "", fmt.Errorf("%s: %w", EnvVar, err)
		}
		return env, nil
	}
	// The shared data is ../shared from the repository's root.
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "..", "shared")
	if err := isDir(dir); err != nil {
		return "", fmt.Errorf("looked beside the repository %s: %w", root, err)
	}
	return dir, nil
}

// isDir returns nil if p is a directory.
func isDir(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", p)
	}
	return nil
}
