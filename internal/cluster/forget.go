package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Forgetting a deleted tenant's KV across a cluster. A gateway (or `kvserve
// tenant delete --nats`) appends the tenant's scope to a JetStream stream;
// every worker reads that stream from its start when it starts and follows
// it afterwards, dropping the scope's blocks from every tier of its engine
// and destroying its disk key (engine.Engine.ForgetScope). A worker that
// was down when the tenant was deleted does it when it comes back, before
// its disk tier could serve anything of the scope's again (a deleted
// tenant's keys are revoked, and no other scope's hashes reach its
// blocks).

// ForgetStreamName is the JetStream stream of forgotten scopes, on
// SubjectForget.
const (
	ForgetStreamName = "KVSERVE_FORGET"
	SubjectForget    = "kvserve.forget"
)

// ForgetScope is one message of the stream: drop Scope's KV.
type ForgetScope struct {
	V     int    `json:"v"`
	Scope string `json:"scope"`
}

func (m *ForgetScope) version() int { return m.V }

// decodeForgetScope reads a ForgetScope; a scope is required.
func decodeForgetScope(data []byte) (ForgetScope, error) {
	var m ForgetScope
	if err := decode(data, &m, "forget"); err != nil {
		return ForgetScope{}, err
	}
	if m.Scope == "" {
		return ForgetScope{}, errors.New("cluster: forget message without a scope")
	}
	return m, nil
}

// forgetStream returns the stream, creating it if no process has yet.
func forgetStream(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.Stream, error) {
	st, err := js.Stream(ctx, ForgetStreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        ForgetStreamName,
			Description: "kvserve: scopes (deleted tenants) whose KV every worker drops from every tier (internal/cluster)",
			Subjects:    []string{SubjectForget},
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
			// Kept: a worker down for a month must still forget when it
			// comes back. One small message per deleted tenant.
			MaxMsgSize: 4096,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another process made it meanwhile
			st, err = js.Stream(ctx, ForgetStreamName)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: the %s stream (does the NATS server run JetStream?): %w", ForgetStreamName, err)
	}
	return st, nil
}

// Forgetter tells every worker of a cluster to drop deleted tenants' KV
// (admin.Forgetter for a gateway and the tenant commands).
type Forgetter struct {
	js jetstream.JetStream
}

// NewForgetter returns a Forgetter on nc's server, creating the stream if
// needed (replicas: its replicas when it is created; 0: one).
func NewForgetter(ctx context.Context, nc *nats.Conn, replicas int) (*Forgetter, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if _, err := forgetStream(ctx, js, replicas); err != nil {
		return nil, err
	}
	return &Forgetter{js: js}, nil
}

// ForgetScope appends scope to the stream and returns once the stream has
// it: the workers drop its KV as they read it.
func (f *Forgetter) ForgetScope(scope string) error {
	if scope == "" {
		return errors.New("cluster: forgetting needs a scope")
	}
	data, err := json.Marshal(ForgetScope{V: Version, Scope: scope})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := f.js.Publish(ctx, SubjectForget, data); err != nil {
		return fmt.Errorf("cluster: telling the workers to forget scope %s: %w", scope, err)
	}
	return nil
}

// scopeForgetter is an Engine that can drop a scope's KV (Local can; an
// adapter in front of another server cannot).
type scopeForgetter interface {
	ForgetScope(scope string) error
}

func (l localEngine) ForgetScope(scope string) error { return l.e.ForgetScope(scope) }

// followForgets reads the stream from its start and drops each scope's KV
// from the engine, until ctx ends. Called on its own goroutine.
func (w *Worker) followForgets(ctx context.Context, f scopeForgetter) {
	cc, err := w.consumeForgets(ctx, f)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("cluster: not following deleted tenants (their KV stays here until evicted)", "worker", w.cfg.ID, "err", err)
		}
		return
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
}

// consumeForgets starts an ordered consumer of the whole forget stream that
// hands each scope to f.
func (w *Worker) consumeForgets(ctx context.Context, f scopeForgetter) (jetstream.ConsumeContext, error) {
	js, err := jetstream.New(w.nc)
	if err != nil {
		return nil, err
	}
	st, err := forgetStream(ctx, js, 0)
	if err != nil {
		return nil, err
	}
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	return cons.Consume(func(m jetstream.Msg) {
		fs, err := decodeForgetScope(m.Data())
		if err != nil {
			w.log.Warn("cluster: bad message on the forget stream", "worker", w.cfg.ID, "err", err)
			return
		}
		if err := f.ForgetScope(fs.Scope); err != nil {
			w.log.Error("cluster: a deleted tenant's KV was not dropped", "worker", w.cfg.ID, "scope", fs.Scope, "err", err)
			return
		}
		w.forgotten.Add(1)
	})
}
