package auditstream_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvserve/kvserve/internal/audit"
	"github.com/kvserve/kvserve/internal/audit/auditstream"
	"github.com/kvserve/kvserve/internal/cluster"
)

func startNATS(t *testing.T) string {
	t.Helper()
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns.URL()
}

// client opens the stream on a connection of its own, as another process
// would.
func client(t *testing.T, url string) (*auditstream.Stream, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := auditstream.Open(t.Context(), nc, auditstream.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, nc
}

// TestOneChainFromTwoClients: two clients appending concurrently make one
// intact chain holding every record once.
func TestOneChainFromTwoClients(t *testing.T) {
	url := startNATS(t)
	a, _ := client(t, url)
	b, _ := client(t, url)
	if sum, err := a.Verify(t.Context()); err != nil || sum.Records != 0 {
		t.Fatalf("an empty stream: %+v %v", sum, err)
	}
	if recs, err := a.Tail(t.Context(), 5); err != nil || len(recs) != 0 {
		t.Fatalf("tail of an empty stream: %v %v", recs, err)
	}
	const each = 50
	var mu sync.Mutex
	seqs := map[uint64]string{}
	var wg sync.WaitGroup
	for g := range 4 { // two goroutines per client
		s := []*auditstream.Stream{a, b}[g%2]
		wg.Go(func() {
			for i := range each / 2 {
				res := fmt.Sprintf("keys/%d-%d", g, i)
				r, err := s.Append(t.Context(), audit.Entry{Principal: "p", Action: "key.create", Resource: res, Outcome: audit.OK})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if other, dup := seqs[r.Seq]; dup {
					t.Errorf("seq %d given to %s and %s", r.Seq, other, res)
				}
				seqs[r.Seq] = res
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seqs) != 2*each {
		t.Fatalf("%d records appended, want %d", len(seqs), 2*each)
	}
	sum, err := b.Verify(t.Context())
	if err != nil || sum.Records != 2*each {
		t.Fatalf("verify: %+v %v", sum, err)
	}
	recs, err := a.Tail(t.Context(), 3)
	if err != nil || len(recs) != 3 || recs[0].Seq != 2*each-2 || recs[2].Seq != 2*each || recs[2].Resource != seqs[2*each] {
		t.Fatalf("tail: %+v %v", recs, err)
	}
	if recs[2].Hash != sum.Last {
		t.Fatalf("the last record's hash %s, verify's %s", recs[2].Hash, sum.Last)
	}
}

// TestTamperingEvident: a record published around Append (not chained, or
// not a record) breaks the chain where it is, and Append refuses to chain
// after a damaged record.
func TestTamperingEvident(t *testing.T) {
	url := startNATS(t)
	s, nc := client(t, url)
	for i := range 3 {
		if _, err := s.Append(t.Context(), audit.Entry{Action: "auth", Resource: fmt.Sprint(i), Outcome: audit.Denied}); err != nil {
			t.Fatal(err)
		}
	}
	// A well-formed record that claims to follow the genesis: its own hash
	// is right, its place in the chain is not.
	_, forged, err := audit.Chain(audit.Entry{Action: "key.create", Outcome: audit.OK}, 3, audit.GenesisPrev, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(auditstream.Subject, forged); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var ve *audit.VerifyError
	for deadline := time.Now().Add(5 * time.Second); ; {
		sum, err := s.Verify(t.Context())
		if errors.As(err, &ve) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("verify after a forged record: %+v %v", sum, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ve.Seq != 4 || !strings.Contains(ve.Reason, "prev") {
		t.Fatalf("verify: %v", ve)
	}
	// Not a record at all: Append cannot continue the chain.
	if err := nc.Publish(auditstream.Subject, []byte("not a record")); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	time.Sleep(50 * time.Millisecond)
	other, _ := client(t, url)
	if _, err := other.Append(t.Context(), audit.Entry{Action: "auth", Outcome: audit.Denied}); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("append after a damaged record: %v", err)
	}
}

// TestRecordsStay: the stream refuses purges and deletes of records; a
// closed client and an invalid entry append nothing.
func TestRecordsStay(t *testing.T) {
	url := startNATS(t)
	s, nc := client(t, url)
	if _, err := s.Append(t.Context(), audit.Entry{Action: "auth", Outcome: audit.Denied}); err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	st, err := js.Stream(t.Context(), auditstream.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(t.Context()); err == nil {
		t.Fatal("the audit stream was purged")
	}
	if err := st.DeleteMsg(t.Context(), 1); err == nil {
		t.Fatal("an audit record was deleted")
	}
	if _, err := s.Append(t.Context(), audit.Entry{Action: "auth", Outcome: "maybe"}); err == nil {
		t.Fatal("an entry with no valid outcome was appended")
	}
	s.Close()
	if _, err := s.Append(t.Context(), audit.Entry{Action: "auth", Outcome: audit.Denied}); err == nil {
		t.Fatal("a closed client appended")
	}
	other, _ := client(t, url)
	if sum, err := other.Verify(t.Context()); err != nil || sum.Records != 1 {
		t.Fatalf("verify: %+v %v", sum, err)
	}
}
