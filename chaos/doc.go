// Package chaos is bulkaction's chaos suite: it runs the real bulkaction
// binary as separate processes (2 fetchers, 2 dispatchers, 3 workers, 2
// aggregators) against a real redis-server with AOF always and NATS
// JetStream in processes of their own, injects faults (kill -9 of services
// and servers, Redis outages and rollbacks, NATS leader loss, poison jobs,
// bad inputs, clock skew, huge backoff queues), and checks that every
// group still ends with exact counts. See docs/chaos.md.
//
// The suite is TestChaos; it runs a short profile by default (part of `go
// test ./...`) and the long one with -chaos.profile=long (`make chaos`).
package chaos
