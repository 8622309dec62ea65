package cluster

import (
	"strings"
	"testing"
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
	tests := []struct {
		name   string
		decode func([]byte) error
		data   string
		want   string
	}{
		{"heartbeat v2", func(b []byte) error { _, err := DecodeHeartbeat(b); return err },
			`{"v":2,"worker":"w","interval_ns":1}`, "version 2"},
		{"heartbeat bad id", func(b []byte) error { _, err := DecodeHeartbeat(b); return err },
			`{"v":1,"worker":"a.b","interval_ns":1}`, "worker id"},
		{"heartbeat no interval", func(b []byte) error { _, err := DecodeHeartbeat(b); return err },
			`{"v":1,"worker":"w"}`, "interval"},
		{"gateway heartbeat without a name", func(b []byte) error { _, err := DecodeGatewayHeartbeat(b); return err },
			`{"v":1,"interval_ns":1}`, "gateway heartbeat"},
		{"frame v0", func(b []byte) error { _, err := DecodeFrame(b); return err }, `{"seq":1}`, "version 0"},
		{"request without id", func(b []byte) error { _, err := DecodeGenerateRequest(b); return err },
			`{"v":1,"request":{}}`, "without an id"},
		{"cancel not JSON", func(b []byte) error { _, err := DecodeCancel(b); return err }, `cancel`, "decode cancel"},
		{"leave v9", func(b []byte) error { _, err := DecodeLeave(b); return err }, `{"v":9}`, "version 9"},
		{"batch v2", func(b []byte) error { _, err := DecodeEventBatch(b); return err }, `{"v":2}`, "version 2"},
		{"chunk v2", func(b []byte) error { _, err := DecodeSnapshotChunk(b); return err }, `{"v":2}`, "version 2"},
	}
	for _, tt := range tests {
		if err := tt.decode([]byte(tt.data)); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one saying %q", tt.name, err, tt.want)
		}
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
