// Package telemetry is the observability plumbing shared by every bulkaction target.
//
// It provides:
//
//   - [Metrics]: every Prometheus collector of the system, named bulk_action_*, registered on a
//     caller-supplied [prometheus.Registerer] so that several pipelines can run in one process.
//   - [NewStateCollector]: gauges for queue depths and congestion that are read from Redis and
//     JetStream at scrape time, so every replica reports the same, current values.
//   - [Server]: the HTTP endpoints /metrics, /healthz and /readyz.
//   - [NewLogger]: a log/slog logger in text or JSON form.
//   - [SetupTracing], [InjectHeader] and [ExtractHeader]: OpenTelemetry tracing configured from the
//     standard OTEL_* environment variables, with W3C trace context carried in NATS message headers.
//
// Metric names and label values are part of the operational contract: the Grafana dashboard in
// deployments/grafana/bulkaction.json is built from them, and a test in this package checks that
// every metric the dashboard queries is registered here. No metric carries a per-group label.
package telemetry
