// Package apiclient is a client of bulkaction's HTTP API (the gateway
// target, services/gateway): it submits jobs as an NDJSON stream, seals,
// cancels, pauses and resumes groups, reads and lists groups and their
// failed jobs, and follows a group's Server-Sent Events, reconnecting with
// Last-Event-ID when the connection drops.
//
// Every request carries the API key as "Authorization: Bearer <key>".
// Error answers are problem+json documents, returned as a *[Problem]
// error. Every POST carries an Idempotency-Key (a random one unless the
// call gives its own), so a request that fails with 503 or a broken
// connection is retried safely (Config.Retries).
//
// The types mirror the gateway's JSON; this package does not import the
// gateway (internal packages stay below the services).
package apiclient
