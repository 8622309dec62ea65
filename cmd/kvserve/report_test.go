package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/billing"
)

// TestUsageEndpointsAndReport: GET /v1/usage shows a tenant its own usage
// only and an admin everyone's; the records export as CSV; kvserve report
// gives the same totals from the server and, stopped, from its ledger.
func TestUsageEndpointsAndReport(t *testing.T) {
	dir := t.TempDir()
	s := startServe(t, "--model", apitest.ModelFile(t), "--addr", "127.0.0.1:0", "--data-dir", dir, "--kv-cache-memory", "16MiB",
		"--threads", "1", "--kv-disk", "off", "--api-key", "admin-key", "--api-key", "key-a=acme", "--api-key", "key-b=beta")
	prompt := strings.Repeat("Every token is metered and priced. ", 8)
	sent := map[string]int{"key-a": 3, "key-b": 2}
	for key, n := range sent {
		for i := range n {
			status, body := httpDo(t, "POST", s.base+"/v1/chat/completions", key,
				`{"model":"`+s.model+`","max_tokens":2,"messages":[{"role":"user","content":"`+prompt+string(rune('a'+i))+`"}]}`)
			if status != 200 {
				t.Fatalf("chat: %d %s", status, body)
			}
		}
	}
	summary := func(key, query string) (int, billing.Summary, string) {
		t.Helper()
		status, body := httpDo(t, "GET", s.base+"/v1/usage"+query, key, "")
		var sum billing.Summary
		if status == 200 {
			if err := json.Unmarshal(body, &sum); err != nil {
				t.Fatal(err)
			}
		}
		return status, sum, string(body)
	}
	tests := []struct {
		name, key, query string
		status           int
		requests         int64
		groups           int
		errText          string
	}{
		{"a tenant sees its own", "key-a", "", 200, 3, 0, ""},
		{"the other tenant its own", "key-b", "?group_by=day", 200, 2, 1, ""},
		{"an admin sees all by tenant", "admin-key", "?group_by=tenant,model", 200, 5, 2, ""},
		{"an admin asks for one tenant", "admin-key", "?tenant=beta", 200, 2, 0, ""},
		{"a tenant asks for another's", "key-a", "?tenant=beta", 403, 0, 0, "only its own tenant"},
		{"no key", "", "", 401, 0, 0, ""},
		{"a bad dimension", "admin-key", "?group_by=week", 400, 0, 0, "cannot group by"},
		{"a bad date", "admin-key", "?from=yesterday", 400, 0, 0, "neither a date"},
		{"nothing in the range", "admin-key", "?from=2020-01-01&to=2020-01-02", 200, 0, 0, ""},
	}
	for _, tc := range tests {
		status, sum, body := summary(tc.key, tc.query)
		if status != tc.status || !strings.Contains(body, tc.errText) {
			t.Fatalf("%s: %d %s", tc.name, status, body)
		}
		if status != 200 {
			if !strings.Contains(body, `"error"`) {
				t.Fatalf("%s: not an error in OpenAI's shape: %s", tc.name, body)
			}
			continue
		}
		if sum.Total.Requests != tc.requests || len(sum.Groups) != tc.groups && tc.groups > 0 {
			t.Fatalf("%s: %d requests in %d groups: %s", tc.name, sum.Total.Requests, len(sum.Groups), body)
		}
		if tc.requests > 0 && (sum.Total.Tokens.Prompt == 0 || sum.Total.CostTotal <= 0 || sum.Currency != "USD") {
			t.Fatalf("%s: no tokens or cost: %s", tc.name, body)
		}
	}
	_, all, _ := summary("admin-key", "")
	if all.Total.Tokens.Cached == 0 || all.Total.Savings <= 0 {
		t.Fatalf("prompts sharing an opening saved nothing: %+v", all.Total)
	}

	status, body := httpDo(t, "GET", s.base+"/v1/usage/records?format=csv", "admin-key", "")
	rows, err := csv.NewReader(bytes.NewReader(body)).ReadAll()
	if status != 200 || err != nil || len(rows) != 6 || strings.Join(rows[0], ",") != strings.Join(billing.CSVHeader, ",") {
		t.Fatalf("records as CSV: %d %v %q", status, err, body)
	}

	var out bytes.Buffer
	report := func(args ...string) string {
		t.Helper()
		out.Reset()
		cmd := newReportCmd()
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("kvserve report %v: %v", args, err)
		}
		return out.String()
	}
	remote := report("--url", s.base, "--api-key", "admin-key", "--json")
	cmd := newReportCmd()
	cmd.SetArgs([]string{"--data-dir", dir})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "running server holds") {
		t.Fatalf("a local report while the server runs: %v", err)
	}
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	local := report("--data-dir", dir, "--json")
	var r, l billing.Summary
	if json.Unmarshal([]byte(remote), &r) != nil || json.Unmarshal([]byte(local), &l) != nil {
		t.Fatalf("report JSON:\n%s\n%s", remote, local)
	}
	if r.Total.Tokens != l.Total.Tokens || r.Total.Requests != 5 || r.Total.CostTotal != l.Total.CostTotal {
		t.Fatalf("the server's report %+v, the ledger's %+v", r.Total, l.Total)
	}
	if table := report("--data-dir", dir, "--group-by", "tenant"); !strings.Contains(table, "acme") || !strings.Contains(table, "total") ||
		!strings.Contains(table, "built-in price book") {
		t.Fatalf("report table:\n%s", table)
	}
	if lines := strings.Count(report("--data-dir", dir, "--records", "jsonl"), "\n"); lines != 5 {
		t.Fatalf("%d JSON lines, want 5", lines)
	}
}
