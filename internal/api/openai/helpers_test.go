package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
)

// post and postOK are apitest.Post and apitest.PostOK.
var (
	post   = apitest.Post
	postOK = apitest.PostOK
)

func newEnv(t testing.TB, o apitest.Options) *apitest.Env {
	t.Helper()
	o.Dialects = append([]api.Dialect{New()}, o.Dialects...)
	return apitest.New(t, o)
}

// sseEvents splits an SSE body into its data payloads (and event names).
func sseEvents(t testing.TB, body []byte) (names []string, data []string) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	name := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			names = append(names, name)
			data = append(data, strings.TrimPrefix(line, "data: "))
			name = ""
		case line == "":
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return names, data
}

// checkErrorShape checks an OpenAI error body and returns its type.
func checkErrorShape(t testing.TB, data []byte) errorObject {
	t.Helper()
	var raw map[string]map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatalf("error body %s: %v", data, err)
	}
	obj, ok := raw["error"]
	if !ok {
		t.Fatalf("error body without error: %s", data)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := obj[k]; !ok {
			t.Fatalf("error body lacks %q: %s", k, data)
		}
	}
	var eb errorBody
	_ = json.Unmarshal(data, &eb)
	if eb.Error.Message == "" || eb.Error.Type == "" {
		t.Fatalf("error without message or type: %s", data)
	}
	return eb.Error
}
