package sdk_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/ledger"
	"github.com/kvserve/kvserve/tests/sdk"
)

// TestKill9Ledger: a server killed with SIGKILL under load loses from its
// usage ledger at most the requests in flight, and books those as
// interrupted when it starts again; every response a client saw end is
// booked as completed, with the tokens its usage reported.
func TestKill9Ledger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kvserve twice as a process")
	}
	args := []string{"--api-key", "admin-key", "--engine", "sim"}
	s := sdk.Start(t, sdk.Options{Args: args})

	type seen struct {
		prompt, cached, output int64
	}
	var (
		mu        sync.Mutex
		completed = map[string]seen{} // by X-Request-Id
		started   = map[string]bool{}
		streaming = map[string]time.Time{} // first chunk, until the end
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				body := fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,`+
					`"messages":[{"role":"user","content":"worker %d request %d: %s"}]}`,
					sdk.ModelID, 16+40*(i%3), w, i, strings.Repeat("a shared opening of every prompt ", 8))
				req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer admin-key")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // the server was killed
				}
				id := resp.Header.Get("X-Request-Id")
				mu.Lock()
				started[id] = true
				mu.Unlock()
				var u *struct {
					PromptTokens        int64 `json:"prompt_tokens"`
					CompletionTokens    int64 `json:"completion_tokens"`
					PromptTokensDetails struct {
						CachedTokens int64 `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				}
				done := false
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					line, ok := strings.CutPrefix(sc.Text(), "data: ")
					if !ok {
						continue
					}
					mu.Lock()
					if _, ok := streaming[id]; !ok {
						streaming[id] = time.Now()
					}
					mu.Unlock()
					if line == "[DONE]" {
						done = true
						break
					}
					var chunk struct {
						Usage json.RawMessage `json:"usage"`
					}
					if json.Unmarshal([]byte(line), &chunk) == nil && len(chunk.Usage) > 0 && string(chunk.Usage) != "null" {
						_ = json.Unmarshal(chunk.Usage, &u)
					}
				}
				resp.Body.Close()
				if !done || u == nil {
					return // cut off by the kill
				}
				mu.Lock()
				completed[id] = seen{u.PromptTokens, u.PromptTokensDetails.CachedTokens, u.CompletionTokens}
				delete(streaming, id)
				mu.Unlock()
			}
		})
	}
	// Kill once 12 have completed and a request has streamed for a while:
	// its open record, which the ledger commits without making the
	// request wait, is on disk by then.
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(completed)
		inFlight := false
		for _, first := range streaming {
			inFlight = inFlight || time.Since(first) > 100*time.Millisecond
		}
		mu.Unlock()
		if n >= 12 && inFlight {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests completed in a minute", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill(t)
	stop()
	wg.Wait()

	r := sdk.Start(t, sdk.Options{Args: args, DataDir: s.DataDir})
	req, _ := http.NewRequest("GET", r.URL+"/v1/usage/records?format=jsonl", nil)
	req.Header.Set("Authorization", "Bearer admin-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("records: %d %s", resp.StatusCode, body)
	}
	booked := map[string]ledger.Record{}
	dec := json.NewDecoder(resp.Body)
	for {
		var rec ledger.Record
		if err := dec.Decode(&rec); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if _, dup := booked[rec.ID]; dup {
			t.Fatalf("request %s booked twice", rec.ID)
		}
		booked[rec.ID] = rec
	}
	for id, want := range completed {
		rec, ok := booked[id]
		if !ok {
			t.Fatalf("request %s completed for its client but is not in the ledger", id)
		}
		if rec.Outcome != ledger.OutcomeCompleted || rec.Tokens.Prompt != want.prompt || rec.Tokens.Cached != want.cached || rec.Tokens.Output != want.output {
			t.Fatalf("request %s: booked %+v (%s), its client saw %+v", id, rec.Tokens, rec.Outcome, want)
		}
	}
	interrupted := 0
	for id, rec := range booked {
		switch rec.Outcome {
		case ledger.OutcomeInterrupted:
			interrupted++
			if _, ok := completed[id]; ok {
				t.Fatalf("request %s completed but is booked as interrupted", id)
			}
		case ledger.OutcomeCompleted:
			// A response can be booked and cut before its client read
			// its end: booked, never seen whole.
		default:
			t.Fatalf("request %s booked as %s", id, rec.Outcome)
		}
	}
	// Four clients streamed without pause: some were in flight at the kill.
	if interrupted == 0 {
		t.Fatalf("no request booked as interrupted after a kill under load (%d booked, %d completed)", len(booked), len(completed))
	}
	lost := 0
	for id := range started {
		if _, ok := booked[id]; !ok {
			lost++
		}
	}
	if lost > 4 {
		t.Fatalf("%d requests a client started are missing from the ledger; at most the 4 in flight may be", lost)
	}
}
