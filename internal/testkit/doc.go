// Package testkit is the plumbing the test suites share, with no knowledge
// of Redis, NATS or the pipeline: running a service until the test ends
// ([Start], [StartWithin]), waiting on a condition ([WaitFor]), reading a
// Prometheus metric ([Value], [MustValue]), recording spans
// ([RecordSpans]), logging into the test log ([Logger], [Writer]) and
// checking for leaked goroutines ([CheckLeaks], [Main]).
//
// Tests that need the servers of the pipeline use internal/pipelinetest,
// which builds on this package. The package is for tests only.
package testkit
