package servebench

import (
	"bytes"
	"flag"
	"image/png"
	"net/http"
	"os"
	"testing"
	"time"
)

var pngOut = flag.String("png-out", "", "also write TestWritePNG's chart to this file, to look at")

// TestWritePNG draws an agent run against the fake (with server timings)
// and checks the result is a PNG of the intended size with drawn content.
func TestWritePNG(t *testing.T) {
	f := &fakeBackend{Model: "m", TTFT: 20 * time.Millisecond, PerToken: 20 * time.Microsecond, ITL: 2 * time.Millisecond, Timing: true,
		Fault: func(n int) string {
			if n == 3 {
				return "429"
			}
			return ""
		}}
	var res *Result
	bubble(t, f, func(c *http.Client) {
		w := mustWorkload(t, "agent", WorkloadOptions{Seed: 1, PromptScale: 0.1, TimeScale: 0.01})
		res = run(t, c, Config{Model: "m", Workload: w, Concurrency: 4, Requests: 60, MaxTokens: 8})
	})
	var buf bytes.Buffer
	if err := WritePNG(&buf, res); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	b := img.Bounds()
	if b.Dx() != 2000 || b.Dy() != 1200 {
		t.Fatalf("size %v", b)
	}
	colors := map[uint32]bool{}
	for y := b.Min.Y; y < b.Max.Y; y += 7 {
		for x := b.Min.X; x < b.Max.X; x += 7 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[r>>8<<16|g>>8<<8|bl>>8] = true
		}
	}
	if len(colors) < 8 {
		t.Fatalf("only %d colours: nothing drawn?", len(colors))
	}
	if *pngOut != "" {
		if err := os.WriteFile(*pngOut, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A run with no successful request still draws.
	empty := &Result{Report: Report{Workload: "chat"}}
	if err := WritePNG(&bytes.Buffer{}, empty); err != nil {
		t.Fatal(err)
	}
}
