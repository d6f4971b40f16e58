package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// ErrWatchEnded is returned by [Client.Wait] when the group's events stop
// before a terminal one while ctx is still live, for example because the
// connection closed.
var ErrWatchEnded = errors.New("client: watch ended before the group reached a terminal state")

// Watch streams the events of the client's tenant's group, starting from the first one the
// EVENTS stream holds, so a late watcher still sees the group's history. It
// uses an ordered consumer: events arrive once each, in order. Messages that
// are not valid v2 events of this group are skipped.
//
// The channel is closed after the group's final event has been delivered
// (COMPLETED, or CANCELLED once every job is accounted for: see
// [contracts.GroupEvent.Final]), when ctx ends, or when the consumer fails for good (the
// connection closed, the stream was deleted). The caller must receive until
// the channel is closed or cancel ctx.
func (c *Client) Watch(ctx context.Context, groupID string) (<-chan contracts.GroupEvent, error) {
	g, err := c.group(groupID)
	if err != nil {
		return nil, fmt.Errorf("client: watch: %w", err)
	}
	cons, err := c.js.OrderedConsumer(ctx, c.names.StreamEvents(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.names.Events(g)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("client: watch %s: %w", groupID, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("client: watch %s: %w", groupID, err)
	}
	ch := make(chan contracts.GroupEvent)
	go func() {
		defer close(ch)
		defer it.Stop()
		for {
			msg, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				return // ctx ended, or the iterator closed for good
			}
			var ev contracts.GroupEvent
			if json.Unmarshal(msg.Data(), &ev) != nil || ev.Validate() != nil || ev.Ref() != g {
				continue
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
			if ev.Final() {
				return
			}
		}
	}()
	return ch, nil
}

// Wait blocks until the group's final event (COMPLETED, or CANCELLED with
// succeeded + failed + cancelled == jobs: the jobs that were running when
// it was cancelled have settled) and returns it; a group already final
// returns at once. It returns ctx.Err() if ctx ends first and [ErrWatchEnded] if the
// events stop for another reason.
func (c *Client) Wait(ctx context.Context, groupID string) (contracts.GroupEvent, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := c.Watch(ctx, groupID)
	if err != nil {
		return contracts.GroupEvent{}, err
	}
	for ev := range events {
		if ev.Final() {
			return ev, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return contracts.GroupEvent{}, err
	}
	return contracts.GroupEvent{}, ErrWatchEnded
}
