package telemetry

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestResultsFencedCounter: bulk_action_results_fenced_total is one
// counter without labels, exported at 0 before any fenced result, and
// counts what the aggregator adds.
func TestResultsFencedCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	value := func() float64 {
		t.Helper()
		mf, ok := gatherFamilies(t, reg)["bulk_action_results_fenced_total"]
		if !ok {
			t.Fatal("bulk_action_results_fenced_total not gathered")
		}
		if mf.GetType() != dto.MetricType_COUNTER || len(mf.GetMetric()) != 1 || len(mf.GetMetric()[0].GetLabel()) != 0 {
			t.Fatalf("bulk_action_results_fenced_total: %v", mf)
		}
		if mf.GetHelp() == "" {
			t.Fatal("bulk_action_results_fenced_total has no help text")
		}
		return mf.GetMetric()[0].GetCounter().GetValue()
	}
	if v := value(); v != 0 {
		t.Fatalf("%v before any fenced result, want 0", v)
	}
	m.ResultsFenced.Add(3)
	if v := value(); v != 3 {
		t.Fatalf("%v after 3 fenced results, want 3", v)
	}
}
