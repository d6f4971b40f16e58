package telemetry

import "github.com/prometheus/client_golang/prometheus"

// StreamKinds are the values of the stream gauges' stream label: the kinds
// of the five JetStream streams (docs/ARCHITECTURE.md §3), whatever
// SUBJECT_PREFIX names them.
var StreamKinds = []string{"SUBMIT", "READY", "RESULT", "EVENTS", "DLQ"}

// StreamGauges are the streams' fill gauges, labelled by stream kind
// ([StreamKinds]). The dispatchers set them periodically from the streams'
// state ([StreamGauges.Set]); the other targets do not report them, so
// dashboards and alerts aggregate them with max by (stream).
type StreamGauges struct {
	// Bytes is bulk_action_stream_bytes{stream}: bytes the stream holds.
	Bytes *prometheus.GaugeVec
	// LimitBytes is bulk_action_stream_limit_bytes{stream}: the stream's
	// byte limit (STREAM_*_MAX_BYTES); 0 when it has none (EVENTS and DLQ
	// are bounded by age).
	LimitBytes *prometheus.GaugeVec
	// Messages is bulk_action_stream_messages{stream}: messages the
	// stream holds.
	Messages *prometheus.GaugeVec
}

// Set records one stream's state. stream is its kind ([StreamKinds]).
func (g *StreamGauges) Set(stream string, bytes, messages uint64, limitBytes int64) {
	g.Bytes.WithLabelValues(stream).Set(float64(bytes))
	g.Messages.WithLabelValues(stream).Set(float64(messages))
	g.LimitBytes.WithLabelValues(stream).Set(float64(max(limitBytes, 0)))
}

func (m *Metrics) registerStreams(reg prometheus.Registerer) {
	vec := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"stream"})
	}
	m.Streams = &StreamGauges{
		Bytes: vec(fqName("stream_bytes"), "Bytes held by each JetStream stream (SUBMIT, READY, RESULT, EVENTS, DLQ), "+
			"read periodically by the dispatchers."),
		LimitBytes: vec(fqName("stream_limit_bytes"), "Byte limit of each JetStream stream (0 = none); a work stream "+
			"at its limit refuses publishes."),
		Messages: vec(fqName("stream_messages"), "Messages held by each JetStream stream, read periodically by the dispatchers."),
	}
	reg.MustRegister(m.Streams.Bytes, m.Streams.LimitBytes, m.Streams.Messages)
}
