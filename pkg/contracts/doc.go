// Package contracts defines the messages that bulkaction's services exchange over NATS JetStream,
// the subjects and streams they travel on, the Nats-Msg-Id values that make publishing idempotent,
// and the validation limits every message must satisfy.
//
// The package is pure: it imports only the standard library and performs no I/O, so producers,
// services and tools in any layer can depend on it.
//
// # Messages
//
// Every message is a JSON object with "v":1 ([Version]).
//
//   - [Submission] on <prefix>.submit.<groupId>: a job, a seal (the group's declared total) or a
//     cancel, told apart by [Submission.Kind].
//   - [ReadyJob] on <prefix>.ready.<type>: a job admitted for execution, with its attempt number.
//   - [JobResult] on <prefix>.result.<groupId>: the outcome of one attempt.
//   - [GroupEvent] on <prefix>.events.<groupId>: a group's state and counters on every
//     change of state.
//   - [DeadLetter] on <prefix>.dlq.<reason>: a rejected message together with the reason.
//
// # Validation
//
// Group and job IDs match ^[A-Za-z0-9_-]{1,128}$ and job types ^[A-Za-z0-9_-]{1,64}$, because they
// are NATS subject tokens and Redis key parts. The Decode functions ([DecodeSubmission],
// [DecodeReadyJob], [DecodeJobResult], [DecodeGroupEvent]) parse and validate a body in one step and
// never panic, whatever the input. A rejected message yields a [*ValidationError] whose Reason is the
// token used for its dead-letter subject; [Reason] extracts it from any error.
//
// Payloads are kept in the compact form that encoding/json produces when it re-encodes them, and
// size limits apply to that form, so a message that passes validation once still passes after any
// number of decode and encode round trips.
//
// # Subjects, streams and message IDs
//
// [Names] builds subjects and stream names from a prefix (default "bulkaction"); a custom prefix
// gets its own streams. [SubmitMsgID], [SealMsgID], [CancelMsgID], [ReadyMsgID] and [ResultMsgID]
// give the Nats-Msg-Id header values that let JetStream drop duplicate publishes.
package contracts
