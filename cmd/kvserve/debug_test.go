package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDebugMux(t *testing.T) {
	ts := httptest.NewServer(debugMux())
	defer ts.Close()
	for _, tc := range []struct {
		path, want string
		status     int
	}{
		{"/debug/pprof/", "goroutine", 200},
		{"/debug/pprof/goroutine?debug=1", "goroutine profile:", 200},
		{"/debug/pprof/block?debug=1", "--- contention:", 200},
		{"/debug/pprof/cmdline", "", 200},
		{"/v1/models", "", 404}, // nothing but the profiles
	} {
		resp, err := http.Get(ts.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) {
			t.Errorf("GET %s: status %d, body %.80q; want %d containing %q", tc.path, resp.StatusCode, body, tc.status, tc.want)
		}
	}
}
