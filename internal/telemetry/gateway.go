package telemetry

import "github.com/prometheus/client_golang/prometheus"

// registerGateway creates and registers the HTTP gateway's metrics.
func (m *Metrics) registerGateway(reg prometheus.Registerer) {
	m.GatewayRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: fqName("gateway_requests_total"),
		Help: "HTTP API requests by operation and status code.",
	}, []string{"op", "code"})
	m.GatewaySSE = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: fqName("gateway_sse_subscribers"),
		Help: "Open Server-Sent Events streams of the gateway.",
	})
	m.GatewayKeysBadLines = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: fqName("gateway_keys_file_bad_lines"),
		Help: "Lines of the gateway's keys file, as last read, skipped because they are not valid key lines (the log names each).",
	})
	reg.MustRegister(m.GatewayRequests, m.GatewaySSE, m.GatewayKeysBadLines)
}
