package kvevents

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/kv"
)

// message is one server-sent event.
type message struct {
	event string
	id    uint64
	batch Batch
	raw   string
}

// stream opens the handler's stream and returns its messages.
func stream(t *testing.T, srv *httptest.Server, query string, header http.Header) (<-chan message, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // before the server's Close, which waits for the stream
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events"+query, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	out := make(chan message, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<22)
		var m message
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if m.raw != "" {
					out <- m
				}
				m = message{}
			case strings.HasPrefix(line, "event: "):
				m.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "id: "):
				m.id, _ = strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
			case strings.HasPrefix(line, "data: "):
				m.raw = strings.TrimPrefix(line, "data: ")
				json.Unmarshal([]byte(m.raw), &m.batch)
			}
		}
	}()
	return out, cancel
}

func next(t *testing.T, ch <-chan message) message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("stream ended")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	return message{}
}

func TestStream(t *testing.T) {
	log := kv.NewEventLog(64)
	cfg := kv.Config{NumBlocks: 3, BlockSize: 4, Layers: 1, KVDim: 4, Events: log}
	cfg.HostMemoryBytes = 8 * cfg.BlockBytes()
	pool, err := kv.NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(Source{Log: log, Snapshot: pool.Snapshot}))
	t.Cleanup(srv.Close)
	cache := func(base int32) {
		s := pool.NewSequence(kv.Hash{1}, nil)
		tokens := []int32{base, base + 1, base + 2, base + 3, base + 4, base + 5, base + 6, base + 7, base + 8}
		if err := s.Reserve(len(tokens)); err != nil {
			t.Fatal(err)
		}
		s.Commit(tokens)
		s.Release()
	}
	cache(10) // two full blocks, before anyone listens

	ch, stop := stream(t, srv, "?snapshot=1", nil)
	snap := next(t, ch)
	if snap.event != "snapshot" || len(snap.batch.Events) != 2 || snap.batch.Events[1].ParentBlockHash == nil ||
		*snap.batch.Events[1].ParentBlockHash != snap.batch.Events[0].BlockHashes[0] || snap.batch.Events[0].Medium != "GPU" {
		t.Fatalf("snapshot: %s", snap.raw)
	}
	cache(20) // evicts the first chain into G2
	var (
		m     message
		types []string
	)
	for len(types) < 6 { // 2 × (removed from GPU, stored in CPU), 2 stored in GPU
		m = next(t, ch)
		for _, e := range m.batch.Events {
			types = append(types, e.Type+"/"+e.Medium)
			if e.Type == "BlockStored" && e.Medium == "GPU" && (len(e.TokenIDs) != 4 || e.BlockSize != 4 || len(e.BlockHashes[0]) != 64) {
				t.Fatalf("stored event: %+v", e)
			}
		}
	}
	got := strings.Join(types, " ")
	if !strings.Contains(got, "BlockStored/GPU") || !strings.Contains(got, "BlockRemoved/GPU") || !strings.Contains(got, "BlockStored/CPU") {
		t.Fatalf("live events up to %d: %s", m.id, got)
	}
	stop()

	// Resuming after the last message seen replays nothing twice.
	last := m.id
	ch, stop = stream(t, srv, "", http.Header{"Last-Event-ID": {strconv.FormatUint(last, 10)}})
	cache(30)
	if m := next(t, ch); m.id <= last || m.batch.Events[0].Type == "" {
		t.Fatalf("resumed at %d: %s", m.id, m.raw)
	}
	stop()

	// Asking for events the log no longer holds ends with an error.
	for range 30 {
		cache(40)
		pool.Clear()
	}
	ch, _ = stream(t, srv, "?from=1", nil)
	if m := next(t, ch); m.event != "error" || !strings.Contains(m.raw, "events_lost") {
		t.Fatalf("lost events: %q %s", m.event, m.raw)
	}
}

func TestBadParameters(t *testing.T) {
	srv := httptest.NewServer(Handler(Source{Log: kv.NewEventLog(8)}))
	defer srv.Close()
	for _, q := range []string{"?from=x", "?from=0", "?snapshot=maybe", "?snapshot=1&from=3"} {
		resp, err := http.Get(srv.URL + q)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Message, Type string }
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != 400 || body.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %+v", q, resp.StatusCode, body)
		}
	}
}
