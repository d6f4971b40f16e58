package telemetry

import "github.com/prometheus/client_golang/prometheus"

// Label values of bulk_action_callbacks_total{outcome}: how each attempt of
// a completion callback ended.
const (
	// CallbackDelivered: the receiver answered 2xx.
	CallbackDelivered = "delivered"
	// CallbackRetry: the attempt failed and another is scheduled.
	CallbackRetry = "retry"
	// CallbackFailed: the attempt failed and the retry budget is spent: the
	// delivery is failed until retried by hand.
	CallbackFailed = "failed"
)

// CallbackOutcomes lists the label values of bulk_action_callbacks_total.
var CallbackOutcomes = []string{CallbackDelivered, CallbackRetry, CallbackFailed}

func (m *Metrics) registerCallbacks(reg prometheus.Registerer) {
	m.Callbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: fqName("callbacks_total"),
		Help: "Attempts of completion callbacks, by outcome (delivered, retry, failed: the retry budget is spent).",
	}, []string{"outcome"})
	m.CallbacksPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: fqName("callbacks_pending"),
		Help: "Completion callbacks waiting for delivery (due, leased or backing off), as an aggregator last saw.",
	})
	reg.MustRegister(m.Callbacks, m.CallbacksPending)
	for _, o := range CallbackOutcomes {
		m.Callbacks.WithLabelValues(o)
	}
}
