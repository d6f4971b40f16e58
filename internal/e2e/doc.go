// Package e2e holds the end-to-end tests: every target in one process on a
// real redis-server and an embedded NATS JetStream server, driven through
// the producer SDK.
package e2e
