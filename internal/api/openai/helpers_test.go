package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/api/apitest"
)

func newEnv(t testing.TB, o apitest.Options) *apitest.Env {
	t.Helper()
	o.Dialects = append([]api.Dialect{New()}, o.Dialects...)
	return apitest.New(t, o)
}

// post sends body as JSON and returns the response status and body.
func post(t testing.TB, url string, body any, header ...string) (int, []byte, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest("POST", url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data, resp.Header
}

// postOK posts and decodes a 200 response into out.
func postOK(t testing.TB, url string, body any, out any) {
	t.Helper()
	status, data, _ := post(t, url, body)
	if status != 200 {
		t.Fatalf("status %d: %s", status, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
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
