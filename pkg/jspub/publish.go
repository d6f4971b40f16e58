package jspub

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishWindow publishes msgs asynchronously (each with its own headers,
// such as Nats-Msg-Id), keeping at most window of them awaiting a PubAck,
// and waits for every PubAck or for ctx to end. It returns one error per
// message, in the order of msgs: nil means the stream stored the message,
// and a PubAck reporting a duplicate counts as stored, so republishing a
// batch after a partial failure is safe when the messages carry Nats-Msg-Id
// headers. A message on a subject no stream covers gets
// jetstream.ErrNoStreamResponse after the client's retries. Messages not yet
// acknowledged when ctx ends get ctx.Err(); the server may still have
// stored them.
//
// window <= 0 means no limit beyond the JetStream handle's own
// (jetstream.WithPublishAsyncMaxPending, 4000 by default). When the handle's
// limit is reached, PublishWindow waits for its oldest outstanding message
// instead of failing.
func PublishWindow(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, window int) []error {
	errs, _ := PublishWindowSeq(ctx, js, msgs, window)
	return errs
}

// PublishWindowSeq is [PublishWindow] that also returns the highest stream
// sequence its PubAcks reported (0 when none was acknowledged): every
// message it stored is at that sequence or before it (a duplicate's PubAck
// carries the sequence of the message stored first).
func PublishWindowSeq(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg, window int) (errs []error, last uint64) {
	errs = make([]error, len(msgs))
	type pending struct {
		i int
		f jetstream.PubAckFuture
	}
	var queue []pending // outstanding futures, oldest first
	head := 0
	settle := func() {
		p := queue[head]
		queue[head] = pending{}
		head++
		var seq uint64
		seq, errs[p.i] = awaitAck(ctx, p.f)
		last = max(last, seq)
	}
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			errs[i] = err
			continue
		}
		for window > 0 && len(queue)-head >= window {
			settle()
		}
		for {
			f, err := js.PublishMsgAsync(m)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
				// The handle's window is full, possibly with other callers'
				// messages: make room by settling ours, or try again (the
				// publish itself waited for a free slot).
				if head < len(queue) {
					settle()
				}
				continue
			}
			if err != nil {
				errs[i] = err
			} else {
				queue = append(queue, pending{i: i, f: f})
			}
			break
		}
	}
	for head < len(queue) {
		settle()
	}
	return errs, last
}

// awaitAck waits for the outcome of one asynchronous publish and returns
// the stream sequence its PubAck reported.
func awaitAck(ctx context.Context, f jetstream.PubAckFuture) (uint64, error) {
	// An outcome already known wins over an ended ctx.
	select {
	case a := <-f.Ok():
		return ackSeq(a), nil
	case err := <-f.Err():
		return 0, err
	default:
	}
	select {
	case a := <-f.Ok():
		return ackSeq(a), nil
	case err := <-f.Err():
		return 0, err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func ackSeq(a *jetstream.PubAck) uint64 {
	if a == nil {
		return 0
	}
	return a.Sequence
}
