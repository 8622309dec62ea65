package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/api/apitest"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// FuzzRead: whatever an external engine streams back, reading it never
// panics or hangs, and every sample ends exactly once.
func FuzzRead(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"index\":0,\"text\":\"hi\",\"finish_reason\":null}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"index\":1,\"text\":\"x\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":2}}}\n\n",
		"data: {\"error\":{\"message\":\"boom\"}}\n\n",
		"data: {\"choices\":[{\"index\":7}]}\n\n",
		"data: not json\n\n",
		": keep-alive\n\nevent: x\ndata: [DONE]\n\n",
		"",
	} {
		f.Add(s)
	}
	mf, err := model.Open(apitest.BPEModelFile(f), gguf.Mapped, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer mf.Close()
	tok, err := tokenizer.FromGGUF(mf.GGUF)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body string) {
		e := &Engine{cfg: Config{Now: time.Now}}
		j := &job{e: e, n: 2, cancel: func() {}, notify: make(chan struct{}, 1), finished: make([]bool, 2)}
		e.running.Add(1)
		j.read(io.NopCloser(strings.NewReader(body)), tok)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ends := map[int]int{}
		var buf []engine.Output
		for {
			var err error
			buf, err = j.Recv(ctx, buf[:0])
			for _, o := range buf {
				if o.Finish != engine.FinishNone {
					ends[o.Index]++
				}
				if o.Index < 0 || o.Index >= 2 {
					t.Fatalf("output for sample %d of 2", o.Index)
				}
			}
			if errors.Is(err, engine.ErrDone) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if ends[0] != 1 || ends[1] != 1 {
			t.Fatalf("samples ended %v times, want once each", ends)
		}
		if e.running.Load() != 0 {
			t.Fatal("the request is still counted running")
		}
	})
}

// FuzzRefusal: any error response an external engine sends becomes an
// error with a bounded message, never a panic.
func FuzzRefusal(f *testing.F) {
	for _, s := range []string{`{"error":{"message":"bad"}}`, `{"error":"bad"}`, `{"message":"m"}`, `<html>`, ``} {
		f.Add(400, s)
	}
	f.Fuzz(func(t *testing.T, status int, body string) {
		err := refusal(&http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body))})
		if err == nil || len(err.Error()) > 1024 {
			t.Fatalf("refusal: %v", err)
		}
	})
}
