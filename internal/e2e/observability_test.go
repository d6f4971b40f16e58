package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// scrape parses /metrics into "name{labels}" -> value (histograms: _count).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	code, body := get(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, f := range fams {
		for _, m := range f.Metric {
			var labels []string
			for _, l := range m.Label {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			key := name
			if len(labels) > 0 {
				key += "{" + strings.Join(labels, ",") + "}"
			}
			switch {
			case m.Counter != nil:
				out[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				out[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				out[key+"_count"] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func TestMetricsMatchARun(t *testing.T) {
	e := newEnv(t)
	r := e.start(e.config(nil), stack.PipelineTargets, nil)
	const n = 700
	e.submit("m1", "noop", 500, `{}`, "")
	e.submit("m2", "noop", 200, `{}`, contracts.PriorityHigh)
	e.wait("m1", time.Minute)
	e.wait("m2", time.Minute)
	addr := r.st.Server.Addr()
	var m map[string]float64
	testkit.WaitFor(t, "gauges back at zero", 10*time.Second, func() bool {
		m = scrape(t, addr)
		return m["bulk_action_ready_queue_size"] == 0 && m["bulk_action_non_ready_queue_size"] == 0 &&
			m["bulk_action_inflight_size"] == 0 && m["bulk_action_queue_groups{priority=normal}"] == 0 &&
			m["bulk_action_queue_groups{priority=high}"] == 0
	})
	want := map[string]float64{
		"bulk_action_enqueue_total":                               n,
		"bulk_action_dequeue_total":                               n,
		"bulk_action_rate_limit_allowed_total":                    n,
		"bulk_action_recorded_results_total{status=SUCCESS}":      n,
		"bulk_action_job_results_total{status=SUCCESS,type=noop}": n,
		"bulk_action_group_completions_total{state=COMPLETED}":    2,
		"bulk_action_state_up":                                    1,
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	for k := range m {
		if strings.Contains(k, "group=") || strings.Contains(k, "groupId=") {
			t.Errorf("per-group label in %s", k)
		}
	}
	// Rate shares are per tenant: the gauge counts tenants, not groups.
	if _, ok := m["bulk_action_active_tenants"]; !ok {
		t.Error("no bulk_action_active_tenants gauge")
	}
	if _, ok := m["bulk_action_active_groups"]; ok {
		t.Error("bulk_action_active_groups is still exported")
	}
}

func TestReadyzFollowsRedis(t *testing.T) {
	srv := testenv.NewRedisServer(t)
	e := newEnv(t)
	e.redisURL = srv.URL()
	r := e.start(e.config(nil), []string{stack.TargetAggregator}, nil)
	url := "http://" + r.st.Server.Addr()
	if code, _ := get(t, url+"/readyz"); code != 200 {
		t.Fatalf("readyz %d before stopping redis", code)
	}
	srv.Stop()
	testkit.WaitFor(t, "readyz 503", 10*time.Second, func() bool { code, _ := get(t, url+"/readyz"); return code == 503 })
	_, body := get(t, url+"/readyz")
	if !strings.Contains(body, "redis") {
		t.Fatalf("readyz body does not name redis: %s", body)
	}
	if code, _ := get(t, url+"/healthz"); code != 200 {
		t.Fatalf("healthz %d while redis is down", code)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "readyz 200", 15*time.Second, func() bool { code, _ := get(t, url+"/readyz"); return code == 200 })
}

// One job's spans across fetcher, worker and aggregator share one trace; a
// retried job shows its backoff and both attempts.
func TestTraceOfARetriedJob(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(prevTP); otel.SetTextMapPropagator(prevProp) })

	e := newEnv(t)
	mux := processor.NewMux()
	var calls int
	mux.HandleFunc("once-flaky", func(ctx context.Context, job *processor.Job) error {
		calls++
		if job.Attempt == 1 {
			return errors.New("transient")
		}
		return nil
	})
	e.start(e.config(func(c *config.Config) { c.WorkerCount = 1 }), stack.PipelineTargets, mux)
	e.submit("traced", "once-flaky", 1, `{}`, "")
	e.wait("traced", 30*time.Second)

	var submit sdktrace.ReadOnlySpan
	// The process span of attempt 2 ends after its result is recorded
	// (it acks READY last): wait for both.
	testkit.WaitFor(t, "record span and both process spans", 10*time.Second, func() bool {
		var record, process int
		for _, s := range rec.Ended() {
			switch s.Name() {
			case "bulkaction.record":
				record++
			case "bulkaction.process":
				process++
			}
		}
		return record >= 1 && process >= 2
	})
	spans := rec.Ended()
	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byName[s.Name()] = append(byName[s.Name()], s)
		if s.Name() == "bulkaction.submit" {
			submit = s
		}
	}
	if submit == nil {
		t.Fatalf("no submit span among %v", names(spans))
	}
	// The job's spans form one trace rooted at the submit span; the seal
	// has a trace of its own.
	trace := submit.SpanContext().TraceID()
	ids := map[string]bool{}
	inTrace := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		if s.SpanContext().TraceID() == trace {
			ids[s.SpanContext().SpanID().String()] = true
			inTrace[s.Name()] = append(inTrace[s.Name()], s)
		} else if s.Name() == "bulkaction.process" || s.Name() == "bulkaction.record" || s.Name() == "bulkaction.admit" {
			t.Errorf("span %s outside the job's trace", s.Name())
		}
	}
	for _, s := range spans {
		if s.SpanContext().TraceID() != trace || s == submit {
			continue
		}
		if !ids[s.Parent().SpanID().String()] {
			t.Errorf("span %s: parent %s not in the trace", s.Name(), s.Parent().SpanID())
		}
	}
	for _, want := range []string{"bulkaction.ingest", "bulkaction.admit", "bulkaction.backoff", "bulkaction.release", "bulkaction.process", "bulkaction.record"} {
		if len(inTrace[want]) == 0 {
			t.Errorf("no %s span in the job's trace; spans: %v", want, names(spans))
		}
	}
	byName = inTrace
	attempts := map[int64]bool{}
	for _, s := range byName["bulkaction.process"] {
		for _, a := range s.Attributes() {
			if strings.HasSuffix(string(a.Key), "attempt") && a.Value.Type() == attribute.INT64 {
				attempts[a.Value.AsInt64()] = true
			}
		}
	}
	if !attempts[1] || !attempts[2] {
		t.Errorf("process spans' attempts %v, want 1 and 2", attempts)
	}
	if calls != 2 {
		t.Errorf("processor ran %d times", calls)
	}
}

func names(spans []sdktrace.ReadOnlySpan) string {
	var s []string
	for _, x := range spans {
		s = append(s, fmt.Sprintf("%s(parent %s)", x.Name(), x.Parent().SpanID()))
	}
	return strings.Join(s, ", ")
}
