// Package gateway is bulkaction's HTTP API (docs/ARCHITECTURE.md §9,
// docs/api.md): producers in any language submit jobs, seal, cancel, pause
// and resume groups, read a group's state, position, rate and ETA, list
// their groups and failed jobs, and follow a group's events over
// Server-Sent Events.
//
// Every request carries an API key (Authorization: Bearer <key>); the keys
// file maps the SHA-256 of each key to a tenant, or to every tenant for an
// admin key ([Keys]). A tenant's key reaches only its own groups: another
// tenant's group is 404, as a group that does not exist.
//
// The gateway keeps no state of its own beyond Redis and NATS, so any number
// of replicas can serve behind a load balancer:
//   - POST …/jobs validates the whole body first, spooling the encoded
//     "jobs" messages (in memory, then in a temporary file), and publishes
//     them only when every job is valid, so a bad job at line N publishes
//     nothing; memory stays bounded whatever the size of the body;
//   - Idempotency-Key responses are kept in Redis for IdempotencyTTL;
//   - group state is read from Redis, the events from the EVENTS stream
//     (one consumer per gateway, fanned out to its SSE subscribers; a
//     resume with Last-Event-ID replays from the stream).
package gateway
