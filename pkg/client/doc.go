// Package client is the producer SDK of bulkaction: it submits the jobs of a
// group, seals the group with its total, cancels it, and follows its state
// over NATS JetStream.
//
// A group is a bulk action split into jobs. A producer submits the jobs in as
// many [Client.Submit] calls as it likes, then declares how many distinct
// jobs the group has with [Client.Seal]; the group completes once that many
// jobs have a result. [Client.Watch] and [Client.Wait] follow the group's
// state changes.
//
//	c := client.New(js, client.Options{})
//	err := c.Submit(ctx, "promo-42",
//		client.Job{ID: "user-1", Type: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`)},
//		client.Job{ID: "user-2", Type: "email", Payload: json.RawMessage(`{"to":"b@example.com"}`)},
//	)
//	err = c.Seal(ctx, "promo-42", 2)
//	ev, err := c.Wait(ctx, "promo-42")
//
// Every message carries a Nats-Msg-Id derived from the group and job ids, so
// repeating a call after an error is safe: JetStream stores each job once
// within its duplicate window (2 minutes by default). A job id identifies
// the job within its group; submitting the same id again does not create a
// second job.
//
// Jobs run at least once, so processors must be idempotent.
//
// Submit, Seal and Cancel each start a producer span and carry its W3C trace
// context in the message headers, using the global text map propagator.
package client
