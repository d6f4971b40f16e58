// Package deps holds what every service is built on: the NATS connection,
// the Redis queue, names, limits, metrics, logging, tracing and events.
package deps

import (
	"context"
	"log/slog"

	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// Deps are a service's dependencies. NC, JS and Queue are required; Fill
// supplies the others' defaults.
type Deps struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Queue  *redisq.Queue
	Names  contracts.Names  // zero = default prefix "bulkaction"
	Limits contracts.Limits // zero = default limits
	// Metrics nil = a private registry (nothing exported).
	Metrics *telemetry.Metrics
	// Log nil = slog.Default().
	Log *slog.Logger
	// TracerProvider nil = the global provider.
	TracerProvider trace.TracerProvider
	// Events nil = a publisher on JS, guarded by Queue's group states
	// ([events.Publisher.Guard]).
	Events *events.Publisher
}

// Fill returns d with defaults for its optional fields.
func (d Deps) Fill() Deps {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Metrics == nil {
		d.Metrics = telemetry.NewMetrics(prometheus.NewRegistry())
	}
	if d.TracerProvider == nil {
		d.TracerProvider = otel.GetTracerProvider()
	}
	if d.Events == nil {
		d.Events = events.NewPublisher(d.JS, d.Names, d.Log, d.Metrics)
		if q := d.Queue; q != nil {
			d.Events.Guard(func(ctx context.Context, g contracts.GroupRef) (bool, error) {
				st, err := q.GroupState(ctx, g)
				return st.Terminal(), err
			})
		}
	}
	return d
}
