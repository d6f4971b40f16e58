// Package consume is the one consume → handle → settle path of every
// JetStream consumer in bulkaction: the fetcher's ingest of SUBMIT, the
// worker's READY consumers and the aggregator's RESULT consumer
// (docs/ARCHITECTURE.md §6).
//
//   - [Loop] pulls batches (waiting while idle, not waiting while busy),
//     optionally bounded by [Slots], and hands them to a handler.
//   - [Open] starts a message's consumer span: the one place consumer spans
//     are opened.
//   - A handler decides each [Delivery] with one vocabulary of outcomes,
//     [Ack], [Retry] (nak with delay), [Term] and [DeadLetter], and a
//     [Settler] carries the decisions out in one place: dead letters are
//     published and awaited first (a dead letter that cannot be stored turns
//     into a retry, so nothing is lost), then every message is settled and
//     its span ended.
package consume
