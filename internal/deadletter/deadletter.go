// Package deadletter sends messages a service cannot accept to the DLQ
// stream (bulkaction.dlq.<reason>) with the reason, so bad input never
// blocks a stream and is never silently lost.
package deadletter

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Message builds the DLQ message of a rejected JetStream message. Its
// Nats-Msg-Id is the message's stream and sequence, so a redelivered
// message is dead-lettered once.
func Message(names contracts.Names, msg jetstream.Msg, cause error) (*nats.Msg, contracts.DeadLetter, error) {
	dl := contracts.NewDeadLetter(msg.Subject(), msg.Data(), cause)
	data, err := json.Marshal(&dl)
	if err != nil {
		return nil, dl, err
	}
	m := nats.NewMsg(names.DLQ(dl.Reason))
	m.Data = data
	if md, err := msg.Metadata(); err == nil {
		m.Header.Set(jetstream.MsgIDHeader, "dlq:"+md.Stream+":"+strconv.FormatUint(md.Sequence.Stream, 10))
	}
	return m, dl, nil
}

// Send dead-letters one message: it publishes the dead letter, waits for
// the PubAck, counts it and terminates msg. When the DLQ cannot be reached
// msg is handed back (NakWithDelay) and the error returned, so the message
// comes again rather than being lost. It returns the reason token.
func Send(ctx context.Context, d deps.Deps, msg jetstream.Msg, cause error, nakDelay time.Duration) (string, error) {
	m, dl, err := Message(d.Names, msg, cause)
	if err == nil {
		_, err = d.JS.PublishMsg(ctx, m)
	}
	if err != nil {
		_ = msg.NakWithDelay(nakDelay)
		return dl.Reason, err
	}
	d.Metrics.DeadLetters.WithLabelValues(dl.Reason).Inc()
	return dl.Reason, msg.Term()
}
