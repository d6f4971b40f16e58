// Package handofftest sets up what the tests of the services that feed the
// READY stream need: a real Redis queue under a key prefix of the test's own,
// an embedded NATS JetStream server with every stream, service dependencies
// on both ([Env]), and a consumer that reads READY the way workers would,
// recording every message it acknowledges ([Reader]).
//
// The package is for tests only; a test binary that uses it must call
// testenv.Main from its TestMain.
package handofftest
