package natsutil

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/pkg/jspub"
)

// PublishAll publishes msgs to JetStream asynchronously (each with its own
// headers, such as Nats-Msg-Id), waits for every PubAck or for ctx to end,
// and returns one error per message, in the order of msgs. A nil error means
// the stream stored the message; a PubAck reporting a duplicate counts as
// stored. A message on a subject no stream covers gets
// jetstream.ErrNoStreamResponse; messages not acknowledged when ctx ends get
// ctx.Err().
//
// The number of messages awaiting a PubAck is bounded only by the JetStream
// handle (jetstream.WithPublishAsyncMaxPending, 4000 by default);
// [jspub.PublishWindow] takes an explicit window.
func PublishAll(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) []error {
	return jspub.PublishWindow(ctx, js, msgs, 0)
}
