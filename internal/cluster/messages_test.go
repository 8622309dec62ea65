package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/engine"
)

// TestLeastLoaded: the picker takes the fewest running + waiting +
// dispatched, then the fewest KV blocks in use, then the first.
func TestLeastLoaded(t *testing.T) {
	c := func(id string, running, waiting, dispatched, active int) Candidate {
		return Candidate{WorkerInfo: WorkerInfo{Heartbeat: Heartbeat{Worker: id, Running: running, Waiting: waiting, KVActive: active}},
			Dispatched: dispatched}
	}
	tests := []struct {
		name  string
		cands []Candidate
		want  string
	}{
		{"one", []Candidate{c("a", 9, 9, 9, 9)}, "a"},
		{"fewest running", []Candidate{c("a", 3, 0, 0, 0), c("b", 1, 0, 0, 0)}, "b"},
		{"waiting counts", []Candidate{c("a", 1, 5, 0, 0), c("b", 3, 0, 0, 0)}, "b"},
		{"dispatched counts", []Candidate{c("a", 0, 0, 4, 0), c("b", 2, 0, 0, 0)}, "b"},
		{"KV breaks ties", []Candidate{c("a", 1, 0, 0, 50), c("b", 1, 0, 0, 10)}, "b"},
		{"then the first", []Candidate{c("a", 1, 0, 0, 10), c("b", 1, 0, 0, 10)}, "a"},
	}
	for _, tt := range tests {
		if got := tt.cands[LeastLoaded{}.Pick(nil, tt.cands)].Worker; got != tt.want {
			t.Errorf("%s: picked %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestDecodeRefuses: messages of another version, or naming no valid
// worker or request, are refused with an error saying why.
func TestDecodeRefuses(t *testing.T) {
	// v writes this build's version in a message.
	v := func(s string) string { return strings.Replace(s, `"v":1`, fmt.Sprintf(`"v":%d`, Version), 1) }
	tests := []struct {
		name   string
		decode func([]byte) error
		data   string
		want   string
	}{
		{"heartbeat of another version", func(b []byte) error { _, err := DecodeHeartbeat(b); return err },
			`{"v":99,"worker":"w","interval_ns":1}`, "version 99"},
		{"heartbeat bad id", func(b []byte) error { _, err := DecodeHeartbeat(b); return err },
			v(`{"v":1,"worker":"a.b","interval_ns":1}`), "worker id"},
		{"heartbeat no interval", func(b []byte) error { _, err := DecodeHeartbeat(b); return err },
			v(`{"v":1,"worker":"w"}`), "interval"},
		{"gateway heartbeat without a name", func(b []byte) error { _, err := DecodeGatewayHeartbeat(b); return err },
			v(`{"v":1,"interval_ns":1}`), "gateway heartbeat"},
		{"frame v0", func(b []byte) error { _, err := DecodeFrame(b); return err }, `{"seq":1}`, "version 0"},
		{"request without id", func(b []byte) error { _, err := DecodeGenerateRequest(b); return err },
			v(`{"v":1,"request":{}}`), "without an id"},
		{"cancel not JSON", func(b []byte) error { _, err := DecodeCancel(b); return err }, `cancel`, "decode cancel"},
		{"leave v9", func(b []byte) error { _, err := DecodeLeave(b); return err }, `{"v":9}`, "version 9"},
		{"batch of another version", func(b []byte) error { _, err := DecodeEventBatch(b); return err }, `{"v":99}`, "version 99"},
		{"chunk of another version", func(b []byte) error { _, err := DecodeSnapshotChunk(b); return err }, `{"v":99}`, "version 99"},
		{"request with a prompt twice", func(b []byte) error { _, err := DecodeGenerateRequest(b); return err },
			v(`{"v":1,"id":"x","request":{"prompt":[1]},"prompt_ids":1}`) + "\n\x01\x00\x00\x00", "1 ids in it"},
		{"request with a ragged prompt", func(b []byte) error { _, err := DecodeGenerateRequest(b); return err },
			v(`{"v":1,"id":"x","request":{},"prompt_ids":1}`) + "\n\x01\x00\x00", "3 bytes after"},
		{"request with a prompt not announced", func(b []byte) error { _, err := DecodeGenerateRequest(b); return err },
			v(`{"v":1,"id":"x","request":{}}`) + "\n\x01\x00\x00\x00", "0 prompt ids announced"},
	}
	for _, tt := range tests {
		if err := tt.decode([]byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.want)
		}
	}
}

// TestGenerateRequestPrompt: the prompt travels as little-endian ids after
// the JSON and comes back whole, every id value included; a prompt inside
// the JSON is read too.
func TestGenerateRequestPrompt(t *testing.T) {
	prompt := []int32{0, 1, -1, 1 << 30, 151643, 7}
	data, err := EncodeGenerateRequest("_INBOX.x", "g-1", "", engine.Request{Prompt: prompt, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), `"prompt":[`) {
		t.Errorf("the prompt went as a JSON array too: %s", data)
	}
	m, err := DecodeGenerateRequest(data)
	if err != nil || !slices.Equal(m.Request.Prompt, prompt) || m.PromptIDs != 0 || m.Request.MaxTokens != 3 {
		t.Fatalf("decoded %+v, %v; want prompt %v", m, err, prompt)
	}
	plain, _ := json.Marshal(GenerateRequest{V: Version, ID: "_INBOX.y", Request: engine.Request{Prompt: prompt, MaxTokens: 3}})
	if m, err := DecodeGenerateRequest(plain); err != nil || !slices.Equal(m.Request.Prompt, prompt) {
		t.Fatalf("a prompt in the JSON: %+v, %v", m, err)
	}
}

func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{"w-1": true, "local_2": true, "": false, "a.b": false, "a*": false, "a>": false,
		"a b": false, strings.Repeat("x", 65): false, strings.Repeat("x", 64): true} {
		if err := ValidID(id); (err == nil) != ok {
			t.Errorf("ValidID(%q) = %v", id, err)
		}
	}
}
