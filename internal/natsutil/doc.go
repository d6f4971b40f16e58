// Package natsutil holds the NATS JetStream plumbing shared by every target:
// an embedded server for development and tests ([StartEmbedded]), the stream
// layout of docs/ARCHITECTURE.md §3 ([StreamConfigs], [EnsureStreams]), and batched
// asynchronous publishing with one outcome per message ([PublishAll]).
//
// The five streams are derived from a [contracts.Names]:
//
//	<PREFIX>_SUBMIT  <prefix>.submit.>  work queue (consumed by the fetcher)
//	<PREFIX>_READY   <prefix>.ready.>   work queue (one pull consumer per job type)
//	<PREFIX>_RESULT  <prefix>.result.>  work queue (consumed by the aggregator)
//	<PREFIX>_EVENTS  <prefix>.events.>  limits (group state changes, kept 7 days, 1 GiB)
//	<PREFIX>_DLQ     <prefix>.dlq.>     limits (rejected messages, kept 7 days, 1 GiB, 1000 per tenant and reason)
//
// Beside them, the key-value bucket <PREFIX>_TENANTS ([TenantsBucketConfig])
// is the durable record of the tenant settings SUBMIT does not carry.
//
// Every stream keeps a duplicate window (2 minutes by default) so that a
// publisher retrying with the same Nats-Msg-Id stores the message once.
package natsutil
