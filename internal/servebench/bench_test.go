package servebench

import (
	"bytes"
	"strings"
	"testing"
)

// BenchmarkStreamChunk measures the client's cost per streamed chunk: SSE
// parsing plus chunk decoding, the work done between a chunk's arrival and
// its timestamp being used.
func BenchmarkStreamChunk(b *testing.B) {
	const chunks = 256
	var sb strings.Builder
	for range chunks {
		sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	stream := []byte(sb.String())
	var c Chunk
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		sr := NewSSEReader(bytes.NewReader(stream))
		for range chunks {
			ev, err := sr.Next()
			if err != nil {
				b.Fatal(err)
			}
			if err := ParseChunk(ev.Data, &c); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chunks), "ns/chunk")
}
