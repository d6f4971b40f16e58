package gateway_test

import (
	"math"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// TestETAAtHalfProgress: on a steady workload (5,000 jobs paced at 250
// jobs/s, long enough that the pipeline's first second weighs little in
// the rate), the ETA read at 50% progress is within ±25% of the time the
// group then really takes to complete, and there is a rate beside it. It
// does not run beside the package's other tests, whose load would make the
// pace itself unsteady.
func TestETAAtHalfProgress(t *testing.T) {
	s := newServer(t, func(c *config.Config) { c.GlobalRps = 250 })
	const n = 5000
	s.submit("acme", "steady", "?total=5000", ndjson("s", n, `{"ms":1}`))
	var half gateway.GroupView
	testkit.WaitFor(t, "50% progress", time.Minute, func() bool {
		r := s.do("GET", "/v1/groups/steady", "acme", nil)
		if r.code != 200 {
			return false // not ingested yet
		}
		r.json(t, &half)
		return half.Done >= n/2
	})
	at := time.Now()
	if half.Status == nil || half.Status.ETASeconds == nil || half.Status.Rate <= 0 {
		t.Fatalf("no rate or ETA at 50%%: %+v", half.Status)
	}
	eta := *half.Status.ETASeconds
	s.waitState("acme", "steady", "COMPLETED")
	actual := time.Since(at).Seconds()
	errPct := 100 * (eta - actual) / actual
	t.Logf("at %d/%d done: rate %.1f jobs/s over %.1fs, ETA %.1fs; completed %.1fs later (%+.0f%%)",
		half.Done, n, half.Status.Rate, half.Status.RateWindowSeconds, eta, actual, errPct)
	if math.Abs(errPct) > 25 {
		t.Errorf("ETA %.1fs vs %.1fs actual: %+.0f%%, want within ±25%%", eta, actual, errPct)
	}
}
