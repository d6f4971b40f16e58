package worker_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

// TestDestinationsRefusedCounted: with one destination tracked at most, a
// worker's reports of a second one are refused by the controller and
// counted in bulk_action_destinations_refused_total; the second
// destination is not learned and its jobs still run.
func TestDestinationsRefusedCounted(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{Enabled: true, MaxDestinations: 1}})
	mux := processor.NewMux()
	ok := func(context.Context, *processor.Job) error { return nil }
	mux.HandleFunc("mail", ok)
	mux.HandleFunc("sms", ok)
	runWorker(t, b, worker.Config{Concurrency: 2}, mux)

	b.submit(t, "first", "mail", 3)
	b.waitCompleted(t, "first")
	testkit.WaitFor(t, "mail tracked", waitTimeout, func() bool {
		r, err := b.q.DestinationRates(context.Background())
		return err == nil && len(r.Rates) == 1 && r.Rates[0].Destination == "mail"
	})
	if n := counterValue(t, b.metrics.DestinationsRefused.WithLabelValues("overall")); n != 0 {
		t.Fatalf("refused %g before a second destination, want 0", n)
	}

	b.submit(t, "second", "sms", 3)
	b.waitCompleted(t, "second")
	testkit.WaitFor(t, "sms refused and counted", waitTimeout, func() bool {
		return counterValue(t, b.metrics.DestinationsRefused.WithLabelValues("overall")) >= 1
	})
	r, err := b.q.DestinationRates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rates) != 1 || r.Rates[0].Destination != "mail" {
		t.Errorf("tracked %+v, want mail only", r.Rates)
	}
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
