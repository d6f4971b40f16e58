// Package client is the producer SDK of bulkaction: it submits the jobs of a
// tenant's groups, seals a group with its total, cancels, pauses and resumes
// it, and follows its state over NATS JetStream.
//
// A group is a bulk action split into jobs, named by its tenant and its group
// id: two tenants may use the same group id without touching each other. A
// Client is bound to one tenant ([Options.Tenant], "default" when empty);
// [Client.ForTenant] returns a client of another tenant on the same
// connection. A producer submits the jobs in as many [Client.Submit] calls
// as it likes, then declares how many distinct jobs the group has with
// [Client.Seal]; the group completes once that many jobs have a result.
// [Client.Watch] and [Client.Wait] follow the group's events.
//
//	c := client.New(js, client.Options{Tenant: "acme"})
//	err := c.Submit(ctx, "promo-42",
//		client.Job{ID: "user-1", Type: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`)},
//		client.Job{ID: "user-2", Type: "email", Payload: json.RawMessage(`{"to":"b@example.com"}`)},
//	)
//	err = c.Seal(ctx, "promo-42", 2)
//	ev, err := c.Wait(ctx, "promo-42")
//
// Jobs travel in messages of up to [Options.BatchSize] jobs (100 by
// default), each kept within the message limit. [Client.SubmitGroup] also
// gives the group its settings (priority level, base priority, in-flight
// limit, completion callback); they apply when the message creates the
// group, and a group that already exists keeps its own (its event stream
// carries a notice). A [contracts.GroupSettings.CallbackURL] has the group's
// final event POSTed there when it ends, signed in the Standard Webhooks
// format with the tenant's callback secret (receivers check it with any
// Standard Webhooks library, or package webhook's Verify).
// [contracts.GroupSettings.NotBefore] holds the group's jobs back until a
// time ([Client.Reschedule] moves it before the group starts), and
// [contracts.GroupSettings.Windows] admits them only while one of the
// group's sending windows is open (a weekly IANA-zone window, e.g. from the
// text form of [contracts.ParseWindow]).
//
// Every jobs, seal and cancel message carries a Nats-Msg-Id derived from the
// group and job ids, so repeating a call after an error is safe: JetStream
// stores each message once within its duplicate window (2 minutes by
// default), and beyond it the queue recognises a job id already in its group
// for as long as the group lives: submitting the same id again does not
// create a second job.
//
// An acknowledged publish means stored, not accepted: the pipeline may still
// refuse a message (dead-letter it as over_quota when two producers raced for
// the tenant's last room in its quota, over_total, group_ended or bad_seal).
// A refusal is recorded in the group: the group's event stream carries a
// notice with [contracts.GroupEvent.Refused], and the HTTP API's group
// reading lists it. The client keeps its message ids, so a call repeated
// within the duplicate window after a refusal is dropped by JetStream as a
// duplicate of the refused message and changes nothing; repeat it after the
// window (the stored jobs stay duplicates), or submit through the HTTP
// gateway, which publishes a message its group refused under a new id.
//
// A tenant's NATS user is usually allowed to publish only to its own submit
// subjects and to read only its own events (docs/nats-permissions.md). Such a
// user receives replies on an inbox of its own: connect with
// nats.CustomInboxPrefix("_INBOX_" + tenant).
//
// Jobs run at least once, so processors must be idempotent.
//
// Submit, Seal, Cancel, Pause and Resume each start a producer span and carry
// its W3C trace context in the message headers, using the global text map
// propagator.
package client
