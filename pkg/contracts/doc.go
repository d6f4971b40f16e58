// Package contracts defines the messages that bulkaction's services exchange over NATS JetStream
// (contract v2), the subjects and streams they travel on, the Nats-Msg-Id values that make
// publishing idempotent, the validation limits every message must satisfy, and a JSON Schema of
// the messages for producers in other languages.
//
// The package is pure: it imports only the standard library and performs no I/O, so producers,
// services and tools in any layer can depend on it.
//
// # Groups and subjects
//
// A group is identified by its tenant and its groupId ([GroupRef]): two tenants may use the same
// groupId without touching each other. Both are subject tokens, and the subject is authoritative:
// a body may name them, but then it must name the subject's, or it is rejected
// ([ReasonSubjectMismatch]). NATS permissions are granted on subjects, so a tenant's user is
// allowed <prefix>.submit.<tenant>.> ([Names.SubmitTenant]) and <prefix>.events.<tenant>.>
// ([Names.EventsTenant]).
//
// # Messages
//
// Every message is a JSON object with "v":2 ([Version]); a v1 body is rejected ([ReasonBadVersion]).
//
//   - [Submission] on <prefix>.submit.<tenant>.<groupId>, told apart by [Submission.Kind]: "jobs"
//     (1..[MaxBatch] jobs, with optional [GroupSettings] for the group it creates), "seal" (the
//     group's declared total), "cancel", "pause" or "resume".
//   - [ReadyBatch] on <prefix>.ready.<type>: 1..[MaxBatch] jobs admitted for execution, all of that
//     type, each with its tenant, groupId and attempt number.
//   - [ResultBatch] on <prefix>.result.<tenant>.<groupId>: the outcomes of 1..[MaxBatch] attempts.
//   - [GroupEvent] on <prefix>.events.<tenant>.<groupId>: the public status feed, a group's state
//     (CREATED, RUNNING, AGGREGATING, PAUSED, COMPLETED, CANCELLED) and counts.
//   - [DeadLetter] on <prefix>.dlq.<tenant>.<reason>: a rejected message together with the reason, bounded
//     in size ([DeadLetter.Encode]).
//
// # Validation
//
// Tenants match ^[A-Za-z0-9_-]{1,64}$, group and job IDs ^[A-Za-z0-9_-]{1,128}$ and job types
// ^[A-Za-z0-9_-]{1,64}$, because they are NATS subject tokens and Redis key parts. A batch is
// validated as a whole: one invalid item rejects the message, and the error names it by index
// ("jobs[3].type", "results[1].status"); the job IDs of a jobs message are distinct. The Decode
// functions ([DecodeSubmission], [DecodeReadyBatch], [DecodeResultBatch], [DecodeGroupEvent])
// parse and validate a body in one step and never panic, whatever the input; those of a subject
// with a group take the tenant and groupId from it. A rejected message yields a
// [*ValidationError] whose Reason is the token used for its dead-letter subject; [Reason]
// extracts it from any error.
//
// Payloads are kept in the compact form that encoding/json produces when it re-encodes them, and
// size limits apply to that form, so a message that passes validation once still passes after any
// number of decode and encode round trips.
//
// # JSON Schema
//
// [Schema] returns a JSON Schema (draft 2020-12, "$id" [SchemaID]) of every message, with one
// definition per message under "$defs" (submission, readyBatch, resultBatch, groupEvent,
// deadLetter), for a gateway to serve and other languages to validate against. Its patterns and
// limits are this package's constants, and its tests check that it judges bodies as the Decode
// functions do, except for what a schema of the body alone cannot say: the subject's authority,
// distinct job IDs, one type per ready message, the payload limit, and that integers are written
// without a fraction or exponent.
//
// # Subjects, streams and message IDs
//
// [Names] builds subjects and stream names from a prefix (default "bulkaction"); a custom prefix
// gets its own streams. [JobsMsgID], [SubmitMsgID], [SealMsgID], [CancelMsgID], [ReadyMsgID] and
// [ResultMsgID], and the MsgID methods of the messages, give the Nats-Msg-Id header values that
// let JetStream drop duplicate publishes; a pause or a resume has none.
package contracts
