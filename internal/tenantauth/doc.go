// Package tenantauth builds the NATS permissions that isolate bulkaction's tenants from each other
// on the bus (docs/nats-permissions.md).
//
// The subject is authoritative for the tenant (contracts v2): the fetcher takes a submission's
// tenant from <prefix>.submit.<tenant>.<groupId> and rejects a body that names another one
// (subject_mismatch). Tenants are therefore isolated by what their NATS users may publish and
// subscribe to. [Permissions] gives one tenant's user exactly what a producer and an events reader
// need, derived from a [contracts.Names]:
//
//	publish    <prefix>.submit.<tenant>.>                                     its own submissions
//	publish    $JS.API.CONSUMER.CREATE.<EVENTS>.*.<prefix>.events.<tenant>.>  a consumer on its own events
//	publish    $JS.API.CONSUMER.MSG.NEXT.<EVENTS>.*                           pulling from that consumer
//	subscribe  <prefix>.events.<tenant>.>                                     its own events, live (core NATS)
//	subscribe  _INBOX_<tenant>.>                                              PubAcks, API replies, pulled messages
//
// The client must use the inbox prefix of [InboxPrefix] (nats.CustomInboxPrefix), so that no
// tenant can subscribe to another tenant's replies. A JetStream publish (jetstream.JetStream's
// Publish) needs nothing of the JetStream API; reading events needs an ordered consumer created by
// stream name (jetstream.JetStream's OrderedConsumer, as pkg/client's Watch does) filtered to the
// tenant's events or to one of its groups. Stream and consumer info, listing, deleting and acking
// are neither granted nor needed (the delete an ordered consumer attempts when it resets is
// refused, harmlessly: the server drops the old consumer once it is inactive). [ConfigSnippet] renders the same permissions as a nats-server
// configuration user block.
//
// The grants assume the default JetStream API prefix ($JS.API, no JetStream domain) and one NATS
// account shared by bulkaction's own service user and the tenants' users. The documentation names
// two known limitations of consumer grants in a shared account (push consumers' deliver subjects,
// consumer names); TestKnownLimitations pins them.
package tenantauth
