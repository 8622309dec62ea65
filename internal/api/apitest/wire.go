package apitest

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/engine"
)

// Wire wraps a backend so that everything crossing it goes through JSON, as
// it would to a remote worker: the request is encoded and decoded before it
// is submitted, and so is every output on its way back. A dialect whose
// tests pass over Wire depends on nothing but the data.
func Wire(b api.Backend) api.Backend { return wire{b} }

type wire struct{ next api.Backend }

func (w wire) Submit(ctx context.Context, r engine.Request) (api.Stream, error) {
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("apitest: wire: encode the request: %w", err)
	}
	var back engine.Request
	if err := json.Unmarshal(data, &back); err != nil {
		return nil, fmt.Errorf("apitest: wire: decode the request: %w", err)
	}
	s, err := w.next.Submit(ctx, back)
	if err != nil {
		return nil, err
	}
	return &wireStream{Stream: s}, nil
}

type wireStream struct {
	api.Stream
	buf []engine.Output
}

func (s *wireStream) Recv(ctx context.Context, dst []engine.Output) ([]engine.Output, error) {
	var err error
	s.buf, err = s.Stream.Recv(ctx, s.buf[:0])
	for _, o := range s.buf {
		data, merr := json.Marshal(o)
		if merr != nil {
			return dst, fmt.Errorf("apitest: wire: encode an output: %w", merr)
		}
		var back engine.Output
		if uerr := json.Unmarshal(data, &back); uerr != nil {
			return dst, fmt.Errorf("apitest: wire: decode an output: %w", uerr)
		}
		dst = append(dst, back)
	}
	return dst, err
}

// QueueTime passes the engine's queue time through when it has one.
func (s *wireStream) QueueTime() time.Duration {
	if q, ok := s.Stream.(interface{ QueueTime() time.Duration }); ok {
		return q.QueueTime()
	}
	return 0
}
