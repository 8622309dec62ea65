package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/tenant"
)

// revocationBound is how soon a key revoked through one gateway must be
// refused by another: the store's staleness bound (1s) plus room for a
// loaded test machine. The watch on the head usually makes it milliseconds.
const revocationBound = 3 * time.Second

// startSimWorker runs `kvserve worker --engine sim` on the NATS server at
// url until the test ends.
func startSimWorker(t *testing.T, url, id, modelFile string) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	cmd := newWorkerCmd()
	cmd.SetErr(pw)
	cmd.SetArgs([]string{"--nats", url, "--id", id, "--engine", "sim", "--model", modelFile,
		"--data-dir", t.TempDir(), "--kv-cache-memory", "16MiB", "--drain-timeout", "5s"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); pw.Close() }()
	sc := bufio.NewScanner(pr)
	started := false
	for sc.Scan() {
		if strings.Contains(sc.Text(), "worker "+id+" serving") {
			started = true
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if !started {
		stop()
		t.Fatalf("the worker did not start: %v", <-done)
	}
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker %s returned %v", id, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("worker %s did not stop", id)
		}
	})
}

func startTestNATS(t *testing.T) *cluster.Server {
	t.Helper()
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

// TestGatewaysShareState: two gateways on one NATS server serve the same
// tenants, keys and context caches (--state nats, the default). A tenant
// and key created through gateway A work on B, a cache created through A
// is read and used through B (OpenAI and Gemini endpoints), another
// tenant gets 404 in each dialect's error format on both, and a key
// revoked through A is refused by B within revocationBound.
func TestGatewaysShareState(t *testing.T) {
	modelFile := apitest.ModelFile(t)
	ns := startTestNATS(t)
	startSimWorker(t, ns.URL(), "wk-1", modelFile)
	args := []string{"--nats", ns.URL(), "--model", modelFile, "--addr", "127.0.0.1:0", "--api-key", "sk-admin", "--cache-min-tokens", "16"}
	a := startCommand(t, newGatewayCmd(), append(args, "--data-dir", t.TempDir())...)
	b := startCommand(t, newGatewayCmd(), append(args, "--data-dir", t.TempDir())...)

	call := func(base, key, method, path, body string) (int, string) {
		t.Helper()
		status, data := httpDo(t, method, base+path, key, body)
		return status, string(data)
	}
	for _, name := range []string{"acme", "beta"} {
		if status, body := call(a.base, "sk-admin", "POST", "/v1/admin/tenants", `{"name":"`+name+`"}`); status != 201 {
			t.Fatalf("create tenant %s through A: %d %s", name, status, body)
		}
	}
	newKey := func(tenantName string) (id, secret string) {
		status, body := call(a.base, "sk-admin", "POST", "/v1/admin/keys", `{"tenant":"`+tenantName+`","role":"developer","principal":"dev"}`)
		var k struct{ ID, Secret string }
		if status != 201 || json.Unmarshal([]byte(body), &k) != nil || !keyRe.MatchString(k.Secret) {
			t.Fatalf("create key through A: %d %s", status, body)
		}
		return k.ID, k.Secret
	}
	acmeID, acme := newKey("acme")
	_, beta := newKey("beta")

	// B knows the key at once (an unknown key is confirmed against the
	// bucket's head, not only B's copy): it generates with it, never a
	// 401 (503 until B has heard the worker).
	for deadline := time.Now().Add(10 * time.Second); ; {
		status, data := chatThrough(t, b.base, b.model, acme)
		if status == 200 {
			wantChoice(t, status, data)
			break
		}
		if status != 503 || time.Now().After(deadline) {
			t.Fatalf("acme's key through B: %d %s", status, data)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// B lists the tenants within the store's staleness bound.
	for deadline := time.Now().Add(3 * time.Second); ; {
		status, body := call(b.base, "sk-admin", "GET", "/v1/admin/tenants", "")
		if status == 200 && strings.Contains(body, `"acme"`) && strings.Contains(body, `"beta"`) {
			break
		}
		if status != 200 || time.Now().After(deadline) {
			t.Fatalf("tenants through B: %d %s", status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A context cache created through A (OpenAI-style endpoint).
	status, body := call(a.base, acme, "POST", "/v1/cached_contents", `{"model":"`+a.model+`","ttl":"600s","messages":[`+
		`{"role":"system","content":"`+strings.Repeat("A system prompt every gateway knows. ", 6)+`"}]}`)
	var c struct{ ID string }
	if status != 200 || json.Unmarshal([]byte(body), &c) != nil || c.ID == "" {
		t.Fatalf("create a cache through A: %d %s", status, body)
	}
	id := strings.TrimPrefix(c.ID, "cachedContents/")
	if status, body := call(b.base, acme, "GET", "/v1/cached_contents/"+id, ""); status != 200 || !strings.Contains(body, id) {
		t.Fatalf("the cache through B (OpenAI): %d %s", status, body)
	}
	if status, body := call(b.base, acme, "GET", "/v1beta/cachedContents/"+id, ""); status != 200 || !strings.Contains(body, `"name":"cachedContents/`+id+`"`) {
		t.Fatalf("the cache through B (Gemini): %d %s", status, body)
	}
	status, body = call(b.base, acme, "POST", "/v1/chat/completions", `{"model":"`+b.model+`","max_tokens":1,`+
		`"messages":[{"role":"user","content":"Q?"}],"kvserve":{"cached_content":"cachedContents/`+id+`"}}`)
	if status != 200 || !strings.Contains(body, `"cached_tokens"`) {
		t.Fatalf("using A's cache through B: %d %s", status, body)
	}
	// Another tenant's key: the cache does not exist, on either gateway,
	// in each dialect's error format.
	for _, g := range []*servingServer{a, b} {
		if status, body := call(g.base, beta, "GET", "/v1/cached_contents/"+id, ""); status != 404 || !strings.Contains(body, `"code":"not_found"`) {
			t.Fatalf("beta reads acme's cache (OpenAI) through %s: %d %s", g.base, status, body)
		}
		if status, body := call(g.base, beta, "GET", "/v1beta/cachedContents/"+id, ""); status != 404 || !strings.Contains(body, `"status":"NOT_FOUND"`) {
			t.Fatalf("beta reads acme's cache (Gemini) through %s: %d %s", g.base, status, body)
		}
	}

	// Revoked through A: refused by B.
	if status, body := call(a.base, "sk-admin", "DELETE", "/v1/admin/keys/"+acmeID, ""); status != 200 {
		t.Fatalf("revoke through A: %d %s", status, body)
	}
	revoked := time.Now()
	for {
		status, data := chatThrough(t, b.base, b.model, acme)
		if status == 401 {
			if !strings.Contains(string(data), "revoked") {
				t.Fatalf("the revoked key through B: %s", data)
			}
			break
		}
		if status != 200 {
			t.Fatalf("the revoked key through B: %d %s", status, data)
		}
		if time.Since(revoked) > revocationBound {
			t.Fatalf("B still accepts a key revoked through A %s ago", revocationBound)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("B refused the key %s after its revocation through A", time.Since(revoked))
	// One audit trail: the revocation made through A and the refusal by B
	// are records of the cluster's chain.
	out, _, err := runCommand(newAuditCmd(), "tail", "-n", "50", "--nats", ns.URL())
	if err != nil || !strings.Contains(out, "key.revoke") || !regexp.MustCompile(`denied\s+dev\s+tn_\w+\s+auth\s`).MatchString(out) {
		t.Fatalf("the cluster's audit trail: %v\n%s", err, out)
	}
	if out, _, err := runCommand(newAuditCmd(), "verify", "--nats", ns.URL()); err != nil || !strings.Contains(out, "chain intact") {
		t.Fatalf("audit verify --nats: %v\n%s", err, out)
	}
	for _, g := range []*servingServer{a, b} {
		if err := g.stop(); err != nil {
			t.Fatalf("gateway returned %v", err)
		}
	}
}

// TestGatewayStateDataDir: --state data-dir keeps today's behaviour, a
// store per gateway: a tenant created through one is unknown to the
// other. A bad --state is refused.
func TestGatewayStateDataDir(t *testing.T) {
	modelFile := apitest.ModelFile(t)
	ns := startTestNATS(t)
	args := []string{"--nats", ns.URL(), "--model", modelFile, "--addr", "127.0.0.1:0", "--api-key", "sk-admin", "--state", "data-dir"}
	dirA := t.TempDir()
	a := startCommand(t, newGatewayCmd(), append(args, "--data-dir", dirA)...)
	b := startCommand(t, newGatewayCmd(), append(args, "--data-dir", t.TempDir())...)
	if status, body := httpDo(t, "POST", a.base+"/v1/admin/tenants", "sk-admin", `{"name":"acme"}`); status != 201 {
		t.Fatalf("create tenant: %d %s", status, body)
	}
	if status, body := httpDo(t, "GET", b.base+"/v1/admin/tenants", "sk-admin", ""); status != 200 || strings.Contains(string(body), "acme") {
		t.Fatalf("B lists A's tenant: %d %s", status, body)
	}
	if _, err := os.Stat(filepath.Join(dirA, tenant.StateFile)); err != nil {
		t.Fatalf("A's data directory has no store: %v", err)
	}
	if out, _ := run(t, dirA, "audit", "tail"); !strings.Contains(out, "tenant.create") {
		t.Fatalf("A's audit log:\n%s", out)
	}
	for _, bad := range [][]string{{"--state", "etcd"}, {"--state-replicas", "7"}, {"--state", "data-dir", "--state-replicas", "3"}} {
		_, _, err := runCommand(newGatewayCmd(), append([]string{"--nats", ns.URL()}, bad...)...)
		if err == nil || !strings.Contains(err.Error(), bad[len(bad)-2]) {
			t.Fatalf("%q: %v", bad, err)
		}
	}
}

// TestPlanAuthFirstKeyOnce: servers sharing one store, starting together
// on a non-loopback address with no key, create exactly one first admin
// key between them; each of them then requires keys. On the cluster's
// store (gateways) and on one data directory (two serve processes).
func TestPlanAuthFirstKeyOnce(t *testing.T) {
	ctx := context.Background()
	backends := map[string]func(t *testing.T) func(t *testing.T) *state{
		"nats": func(t *testing.T) func(t *testing.T) *state {
			ns := startTestNATS(t)
			return func(t *testing.T) *state {
				nc, err := nats.Connect(ns.URL())
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				st, err := openClusterState(ctx, nc, 0)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		},
		"data-dir": func(t *testing.T) func(t *testing.T) *state {
			dir := t.TempDir()
			return func(t *testing.T) *state {
				st, err := openState(dir)
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
		},
	}
	const servers, rounds = 4, 3
	for name, backend := range backends {
		t.Run(name, func(t *testing.T) {
			for range rounds {
				open := backend(t)
				var sts []*state
				for range servers {
					st := open(t)
					defer st.Close()
					sts = append(sts, st)
				}
				plans := make([]authPlan, servers)
				outs := make([]bytes.Buffer, servers)
				errs := make([]error, servers)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i, st := range sts {
					wg.Go(func() {
						<-start
						plans[i], errs[i] = planAuth(ctx, st.dir, "0.0.0.0:8080", 0, false, &outs[i])
					})
				}
				close(start)
				wg.Wait()
				var printed []string
				for i := range servers {
					if errs[i] != nil || !plans[i].useStore {
						t.Fatalf("server %d: %+v %v", i, plans[i], errs[i])
					}
					printed = append(printed, keyRe.FindAllString(outs[i].String(), -1)...)
				}
				if len(printed) != 1 {
					t.Fatalf("%d first keys printed: %q", len(printed), printed)
				}
				for i, st := range sts {
					// Every server knows the one key (at once: the
					// losers read the winner's commit).
					total, active, err := st.dir.KeyCounts(ctx)
					if err != nil || total != 1 || active != 1 {
						t.Fatalf("server %d counts %d keys (%d active), %v", i, total, active, err)
					}
					if p, err := st.dir.VerifyKey(ctx, printed[0]); err != nil || p.Role != tenant.RoleAdmin {
						t.Fatalf("server %d: the first key: %+v %v", i, p, err)
					}
					if ts, err := st.dir.Tenants(ctx); err != nil || len(ts) != 1 || ts[0].Name != "default" {
						t.Fatalf("server %d: tenants %+v %v", i, ts, err)
					}
				}
			}
		})
	}
}

// TestTenantCommandsOnNATS: `kvserve tenant` and `kvserve key` with --nats
// act on the cluster's store, not the data directory's.
func TestTenantCommandsOnNATS(t *testing.T) {
	ns := startTestNATS(t)
	dir := t.TempDir()
	cli := func(args ...string) (string, string) {
		t.Helper()
		return run(t, dir, append(args, "--nats", ns.URL())...)
	}
	cli("tenant", "create", "acme")
	if out, _ := cli("tenant", "list"); !strings.Contains(out, "acme") {
		t.Fatalf("tenant list:\n%s", out)
	}
	out, _ := cli("key", "create", "--tenant", "acme", "--role", "user")
	secret := strings.TrimSpace(out)
	id, ok := tenant.ParseKey(secret)
	if !ok {
		t.Fatalf("key create printed %q", out)
	}
	if out, _ := cli("key", "list"); !strings.Contains(out, id) || !strings.Contains(out, "active") {
		t.Fatalf("key list:\n%s", out)
	}
	// What a gateway sees.
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := openClusterState(context.Background(), nc, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if p, err := st.dir.VerifyKey(context.Background(), secret); err != nil || p.Role != tenant.RoleUser {
		t.Fatalf("the key in the cluster's store: %+v %v", p, err)
	}
	cli("key", "revoke", id)
	deadline := time.Now().Add(revocationBound)
	for {
		_, err := st.dir.VerifyKey(context.Background(), secret)
		if err != nil {
			if !strings.Contains(err.Error(), "revoked") {
				t.Fatalf("after revoke: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway's store still accepts the revoked key")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if out, _ := cli("cache", "list", "--tenant", "acme"); !strings.HasPrefix(out, "NAME") {
		t.Fatalf("cache list --nats:\n%s", out)
	}
	if _, _, err := runCommand(newRootCmd(), "cache", "list", "--tenant", "acme", "--data-dir", dir); err == nil {
		t.Fatal("the data directory's store knows the cluster's tenant")
	}
	acmeID := ""
	if ts, err := st.dir.Tenants(context.Background()); err == nil {
		for _, tn := range ts {
			if tn.Name == "acme" {
				acmeID = tn.ID
			}
		}
	}
	cli("tenant", "delete", "acme")
	if out, _ := cli("tenant", "list"); strings.Contains(out, "acme") {
		t.Fatalf("tenant list after delete:\n%s", out)
	}
	// The workers are told to drop its KV: its id on the forget stream.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := js.Stream(context.Background(), cluster.ForgetStreamName)
	if err != nil {
		t.Fatal(err)
	}
	m, err := fs.GetLastMsgForSubject(context.Background(), cluster.SubjectForget)
	if err != nil || acmeID == "" || !strings.Contains(string(m.Data), `"scope":"`+acmeID+`"`) {
		t.Fatalf("the forget stream's last message: %v %v (tenant id %q)", m, err, acmeID)
	}
	// The cluster's audit stream has the changes, in an intact chain; the
	// data directory was never used.
	if out, _ := cli("audit", "tail"); !strings.Contains(out, "key.revoke") || !strings.Contains(out, "tenant.delete") {
		t.Fatalf("audit tail --nats:\n%s", out)
	}
	if out, _ := cli("audit", "verify"); !strings.Contains(out, "KVSERVE_AUDIT") || !strings.Contains(out, "chain intact") {
		t.Fatalf("audit verify --nats:\n%s", out)
	}
	if out, _ := run(t, dir, "tenant", "list"); strings.Contains(out, "acme") {
		t.Fatalf("the data directory's store has the cluster's tenant:\n%s", out)
	}
	if out, _ := run(t, dir, "audit", "tail"); strings.Contains(out, "key.revoke") {
		t.Fatalf("the data directory's audit log has the cluster's records:\n%s", out)
	}
}
