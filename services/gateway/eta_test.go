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
// jobs/s), the view read at 50% progress has a rate and an ETA, and both
// are true to what the test itself saw: the rate is the jobs done per second
// over the rate's window, as counted from the test's own readings of the
// group (within ±25%), and the ETA is the jobs left at that rate. How close
// the ETA comes to the time the group then really takes is logged, not
// asserted: on a shared machine the pace of the second half is not the
// first half's (the accuracy figure belongs to a quiet machine).
func TestETAAtHalfProgress(t *testing.T) {
	s := newServer(t, func(c *config.Config) { c.GlobalRps = 250 })
	const n = 5000
	s.submit("acme", "steady", "?total=5000", ndjson("s", n, `{"ms":1}`))
	type sample struct {
		at   time.Time
		done int64
	}
	var seen []sample
	var half gateway.GroupView
	var at time.Time
	testkit.WaitFor(t, "50% progress", time.Minute, func() bool {
		r := s.do("GET", "/v1/groups/steady", "acme", nil)
		if r.code != 200 {
			return false // not ingested yet
		}
		r.json(t, &half)
		at = time.Now()
		seen = append(seen, sample{at, half.Done})
		return half.Done >= n/2
	})
	if half.Status == nil || half.Status.ETASeconds == nil || half.Status.Rate <= 0 || half.Status.RateWindowSeconds <= 0 {
		t.Fatalf("no rate or ETA at 50%%: %+v", half.Status)
	}
	rate, window, eta := half.Status.Rate, half.Status.RateWindowSeconds, *half.Status.ETASeconds
	// the test's own count over the same window: the last reading at or
	// before its start
	from := seen[0]
	for _, x := range seen {
		if at.Sub(x.at).Seconds() >= window {
			from = x
		}
	}
	observed := float64(half.Done-from.done) / at.Sub(from.at).Seconds()
	if d := 100 * (rate - observed) / observed; math.Abs(d) > 25 {
		t.Errorf("rate %.1f jobs/s over %.1fs, but %d jobs were done in the last %.1fs (%.1f jobs/s, %+.0f%%), want within ±25%%",
			rate, window, half.Done-from.done, at.Sub(from.at).Seconds(), observed, d)
	}
	left := float64(n - half.Done)
	if want := math.Ceil(left / rate); math.Abs(eta-want) > 1 {
		t.Errorf("ETA %.0fs with %.0f jobs left at %.1f jobs/s, want %.0fs", eta, left, rate, want)
	}
	s.waitState("acme", "steady", "COMPLETED")
	actual := time.Since(at).Seconds()
	t.Logf("at %d/%d done: rate %.1f jobs/s over %.1fs (the test counted %.1f), ETA %.1fs; completed %.1fs later (%+.0f%%)",
		half.Done, n, rate, window, observed, eta, actual, 100*(eta-actual)/actual)
}
