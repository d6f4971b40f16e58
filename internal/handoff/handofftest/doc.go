// Package handofftest sets up what the tests of the services need: a real
// Redis queue under a key prefix of the test's own, an embedded NATS
// JetStream server with every stream, service dependencies on both ([Env]),
// and a consumer that reads READY the way workers would, recording every
// message it acknowledges ([Reader]). Around them are the plumbing every
// service test shares: running a service until the test ends ([Start]),
// waiting on a condition ([WaitFor]), reading a metric ([Value]), recording
// spans ([RecordSpans]) and checking for leaked goroutines ([CheckLeaks]).
//
// The package is for tests only; a test binary that uses it must call [Main]
// (or testenv.Main) from its TestMain.
package handofftest
