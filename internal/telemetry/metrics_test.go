package telemetry

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// observeAll records one event on every collector of m, so every family appears in a Gather.
func observeAll(m *Metrics) {
	m.EnqueueTotal.Inc()
	m.EnqueueDuplicateTotal.Inc()
	m.DequeueTotal.Inc()
	m.ObserveLua("enqueue", time.Millisecond)
	m.RateLimitAllowed.Inc()
	m.RateLimitDenied.WithLabelValues(DenyReasonGlobal).Inc()
	m.DispatchMoved.Inc()
	m.ObserveDispatchCycle(3 * time.Millisecond)
	m.BackpressureAdmitted.WithLabelValues(DestinationReady).Inc()
	m.BackpressureRejected.Inc()
	m.ObserveBackoff(2 * time.Second)
	m.JobResults.WithLabelValues("email", StatusSuccess).Inc()
	m.ObserveProcessing("email", 40*time.Millisecond)
	m.RecordedResults.WithLabelValues(StatusSuccess).Inc()
	m.GroupCompletions.WithLabelValues(StateCompleted).Inc()
	m.DeadLetters.WithLabelValues("invalid").Inc()
	m.ObserveSubmitLatency(250 * time.Millisecond)
	m.GatewayRequests.WithLabelValues("getGroup", "200").Inc()
	m.GatewaySSE.Inc()
	m.GatewayKeysBadLines.Set(1)
	m.Streams.Set("READY", 2048, 3, 1<<20)
}

// gatherFamilies returns the gathered families of g by name.
func gatherFamilies(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// countSeries returns how many series g gathers for the family name.
func countSeries(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	return len(gatherFamilies(t, g)[name].GetMetric())
}

// gatherText returns what g gathers in the Prometheus text exposition format.
func gatherText(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var b strings.Builder
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatalf("encode %s: %v", mf.GetName(), err)
		}
	}
	return b.String()
}

// counterValue returns the value of the unlabelled counter name gathered from g.
func counterValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mf := gatherFamilies(t, g)[name]
	if mf == nil || len(mf.GetMetric()) != 1 {
		t.Fatalf("counter %s: %v", name, mf)
	}
	return mf.GetMetric()[0].GetCounter().GetValue()
}

var wantMetricTypes = map[string]dto.MetricType{
	"bulk_action_enqueue_total":               dto.MetricType_COUNTER,
	"bulk_action_enqueue_duplicate_total":     dto.MetricType_COUNTER,
	"bulk_action_dequeue_total":               dto.MetricType_COUNTER,
	"bulk_action_lua_duration_ms":             dto.MetricType_HISTOGRAM,
	"bulk_action_rate_limit_allowed_total":    dto.MetricType_COUNTER,
	"bulk_action_rate_limit_denied_total":     dto.MetricType_COUNTER,
	"bulk_action_dispatch_moved_total":        dto.MetricType_COUNTER,
	"bulk_action_dispatch_cycle_duration_ms":  dto.MetricType_HISTOGRAM,
	"bulk_action_backpressure_admitted_total": dto.MetricType_COUNTER,
	"bulk_action_backpressure_rejected_total": dto.MetricType_COUNTER,
	"bulk_action_congestion_backoff_ms":       dto.MetricType_HISTOGRAM,
	"bulk_action_job_results_total":           dto.MetricType_COUNTER,
	"bulk_action_job_processing_duration_ms":  dto.MetricType_HISTOGRAM,
	"bulk_action_recorded_results_total":      dto.MetricType_COUNTER,
	"bulk_action_results_fenced_total":        dto.MetricType_COUNTER,
	"bulk_action_group_completions_total":     dto.MetricType_COUNTER,
	"bulk_action_dead_letter_total":           dto.MetricType_COUNTER,
	"bulk_action_dead_letter_failures_total":  dto.MetricType_COUNTER,
	"bulk_action_submit_replayed_total":       dto.MetricType_COUNTER,
	"bulk_action_control_messages_total":      dto.MetricType_COUNTER,
	"bulk_action_executor_exits_total":        dto.MetricType_COUNTER,
	"bulk_action_destinations_refused_total":  dto.MetricType_COUNTER,
	"bulk_action_admission_held_total":        dto.MetricType_COUNTER,
	"bulk_action_job_latency_ms":              dto.MetricType_HISTOGRAM,
	"bulk_action_gateway_requests_total":      dto.MetricType_COUNTER,
	"bulk_action_gateway_sse_subscribers":     dto.MetricType_GAUGE,
	"bulk_action_gateway_keys_file_bad_lines": dto.MetricType_GAUGE,
	"bulk_action_groups_repaired_total":       dto.MetricType_COUNTER,
	"bulk_action_stream_bytes":                dto.MetricType_GAUGE,
	"bulk_action_stream_limit_bytes":          dto.MetricType_GAUGE,
	"bulk_action_stream_messages":             dto.MetricType_GAUGE,
	"bulk_action_callbacks_total":             dto.MetricType_COUNTER,
	"bulk_action_callbacks_pending":           dto.MetricType_GAUGE,
}

func TestNewMetricsRegistersEveryMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	observeAll(NewMetrics(reg))
	got := gatherFamilies(t, reg)
	for name, typ := range wantMetricTypes {
		mf, ok := got[name]
		if !ok {
			t.Errorf("metric %s not gathered", name)
			continue
		}
		if mf.GetType() != typ {
			t.Errorf("metric %s: type %v, want %v", name, mf.GetType(), typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("metric %s has no help text", name)
		}
	}
	if len(got) != len(wantMetricTypes) {
		t.Errorf("gathered %d families, want %d", len(got), len(wantMetricTypes))
	}
}

func TestNewMetricsLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	tests := []struct {
		vec    *prometheus.MetricVec
		labels []string
	}{
		{m.LuaDuration.MetricVec, []string{"script"}},
		{m.RateLimitDenied.MetricVec, []string{"reason"}},
		{m.BackpressureAdmitted.MetricVec, []string{"destination"}},
		{m.JobResults.MetricVec, []string{"type", "status"}},
		{m.ProcessingDuration.MetricVec, []string{"type"}},
		{m.RecordedResults.MetricVec, []string{"status"}},
		{m.GroupCompletions.MetricVec, []string{"state"}},
		{m.DeadLetters.MetricVec, []string{"reason"}},
	}
	for _, tt := range tests {
		vals := make([]string, len(tt.labels))
		for i := range vals {
			vals[i] = "x"
		}
		if _, err := tt.vec.GetMetricWithLabelValues(vals...); err != nil {
			t.Errorf("labels %v rejected: %v", tt.labels, err)
		}
		if _, err := tt.vec.GetMetricWithLabelValues(append(vals, "extra")...); err == nil {
			t.Errorf("labels %v: one label too many accepted", tt.labels)
		}
	}
}

func TestNewMetricsFixedLabelsStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	want := map[string]int{
		"bulk_action_rate_limit_denied_total":     3,
		"bulk_action_backpressure_admitted_total": 2,
		"bulk_action_recorded_results_total":      3,
		"bulk_action_group_completions_total":     2,
		"bulk_action_admission_held_total":        3,
	}
	for name, n := range want {
		if got := countSeries(t, reg, name); got != n {
			t.Errorf("%s: %d series before any event, want %d", name, got, n)
		}
	}
	if n := countSeries(t, reg, "bulk_action_job_results_total"); n != 0 {
		t.Errorf("bulk_action_job_results_total has %d series before any event, want 0", n)
	}
}

func TestObserveLuaUsesMillisecondsAndBuckets(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.ObserveLua("dequeue", 1500*time.Microsecond)
	m.ObserveLua("dequeue", 500*time.Microsecond)

	h := gatherFamilies(t, reg)["bulk_action_lua_duration_ms"].GetMetric()
	if len(h) != 1 {
		t.Fatalf("got %d series, want 1", len(h))
	}
	if l := h[0].GetLabel(); len(l) != 1 || l[0].GetName() != "script" || l[0].GetValue() != "dequeue" {
		t.Errorf("labels = %v, want script=dequeue", l)
	}
	hist := h[0].GetHistogram()
	if hist.GetSampleCount() != 2 || hist.GetSampleSum() != 2.0 {
		t.Errorf("count=%d sum=%v, want 2 and 2.0 ms", hist.GetSampleCount(), hist.GetSampleSum())
	}
	b := hist.GetBucket()
	if first, last := b[0].GetUpperBound(), b[len(b)-1].GetUpperBound(); first != 0.05 || last != 250 {
		t.Errorf("lua buckets span %v..%v, want 0.05..250", first, last)
	}
}

func TestHistogramBucketRanges(t *testing.T) {
	reg := prometheus.NewRegistry()
	observeAll(NewMetrics(reg))
	got := gatherFamilies(t, reg)
	tests := []struct {
		name        string
		first, last float64
	}{
		{"bulk_action_lua_duration_ms", 0.05, 250},
		{"bulk_action_congestion_backoff_ms", 100, 300000},
	}
	for _, tt := range tests {
		b := got[tt.name].GetMetric()[0].GetHistogram().GetBucket()
		if first, last := b[0].GetUpperBound(), b[len(b)-1].GetUpperBound(); first != tt.first || last != tt.last {
			t.Errorf("%s buckets span %v..%v, want %v..%v", tt.name, first, last, tt.first, tt.last)
		}
	}
	backoff := got["bulk_action_congestion_backoff_ms"].GetMetric()[0].GetHistogram()
	if backoff.GetSampleSum() != 2000 {
		t.Errorf("backoff of 2s observed as %v ms, want 2000", backoff.GetSampleSum())
	}
}

func TestNewMetricsSeveralRegistries(t *testing.T) {
	regA, regB := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, b := NewMetrics(regA), NewMetrics(regB)
	a.EnqueueTotal.Add(3)
	b.EnqueueTotal.Inc()
	if got := counterValue(t, regA, "bulk_action_enqueue_total"); got != 3 {
		t.Errorf("A enqueue = %v, want 3", got)
	}
	if got := counterValue(t, regB, "bulk_action_enqueue_total"); got != 1 {
		t.Errorf("B enqueue = %v, want 1", got)
	}
}

func TestNewMetricsPanics(t *testing.T) {
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", name)
			}
		}()
		f()
	}
	mustPanic("nil registerer", func() { NewMetrics(nil) })
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	mustPanic("same registry twice", func() { NewMetrics(reg) })
}

func TestMilliseconds(t *testing.T) {
	if got := Milliseconds(1500 * time.Microsecond); got != 1.5 {
		t.Errorf("Milliseconds(1.5ms) = %v", got)
	}
	if got := Milliseconds(2 * time.Minute); got != 120000 {
		t.Errorf("Milliseconds(2m) = %v", got)
	}
}
