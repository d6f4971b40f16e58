// Package testenv starts the real servers the test suites run against: a
// private redis-server per test binary (or the server named by
// BULKACTION_TEST_REDIS_URL) and embedded NATS JetStream servers.
//
// A package whose tests use Redis calls [Main] from its TestMain so the server
// is stopped when the binary exits:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// Each test gets its own key prefix from [Redis], so tests may run in
// parallel against one server. A missing redis-server fails the test with a
// message saying how to install it; it never skips.
package testenv
