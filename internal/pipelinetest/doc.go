// Package pipelinetest sets up what the tests of the pipeline need: a real
// Redis queue under a key prefix of the test's own, an embedded NATS
// JetStream server with every stream, service dependencies on both ([Env]),
// and a consumer that reads READY the way workers would, recording every
// message it acknowledges ([Reader]). The servers come from
// internal/testenv; the plumbing that needs none (running a service until
// the test ends, waiting on a condition, reading a metric, recording spans,
// checking for leaked goroutines) is in internal/testkit.
//
// The package is for tests only; a test binary that uses it must call [Main]
// (or testenv.Main) from its TestMain.
package pipelinetest
