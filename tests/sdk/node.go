package sdk

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FindNode returns the node binary. Without one the test fails: CI must
// run the tests that need it (the SDK tests, the dashboard's browser
// test). A developer may set KVSERVE_SKIP_NODE=1 to skip them
// (scripts/test.sh then skips npm ci too); CI (CI set) ignores that.
func FindNode(t testing.TB) string {
	t.Helper()
	SkipNode(t)
	node, err := exec.LookPath("node")
	if err == nil {
		out, verr := exec.Command(node, "--version").Output()
		v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
		major, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
		if verr == nil && major >= 20 {
			return node
		}
		err = fmt.Errorf("%s --version = %q (%v); Node.js 20 or later is needed", node, out, verr)
	}
	t.Fatalf("Node.js is needed for this integration test: %v. Install Node.js 20+ and run ./scripts/test.sh "+
		"(it runs npm ci in tests/sdk and tests/ui); developers without Node may set KVSERVE_SKIP_NODE=1 (never in CI)", err)
	return ""
}

// SkipNode skips t when a developer set KVSERVE_SKIP_NODE=1 outside CI.
func SkipNode(t testing.TB) {
	t.Helper()
	if os.Getenv("KVSERVE_SKIP_NODE") == "1" {
		if os.Getenv("CI") == "" {
			t.Skip("KVSERVE_SKIP_NODE=1: skipping a test that needs Node")
		}
		t.Log("KVSERVE_SKIP_NODE is ignored in CI")
	}
}

// CheckInstalled fails unless dir's node_modules holds exactly the
// versions that dir's package.json pins (npm ci has run since the last
// change).
func CheckInstalled(t testing.TB, dir string) {
	t.Helper()
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "package.json"))
	if err == nil {
		err = json.Unmarshal(raw, &pkg)
	}
	if err != nil || len(pkg.Dependencies) == 0 {
		t.Fatalf("%s: %v", filepath.Join(dir, "package.json"), err)
	}
	for name, want := range pkg.Dependencies {
		var got struct {
			Version string `json:"version"`
		}
		raw, err := os.ReadFile(filepath.Join(dir, "node_modules", filepath.FromSlash(name), "package.json"))
		if err == nil {
			err = json.Unmarshal(raw, &got)
		}
		if err != nil || got.Version != want {
			t.Fatalf("npm package %s@%s is not installed (found %q, %v): run npm ci --prefix %s --no-audit --no-fund --ignore-scripts "+
				"(./scripts/test.sh does)", name, want, got.Version, err, dir)
		}
	}
}
