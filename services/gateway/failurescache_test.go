package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// TestFailuresPageSharedUntilAFailure: readers of the same page of
// GET …/failures share one read of it: the second listing runs no failures
// script in Redis (watched with MONITOR), and answers the same body. A new
// failure of the group is listed by the very next read, and another tenant
// still gets 404 for the group id.
func TestFailuresPageSharedUntilAFailure(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	const fail = `{"ms":1,"permanentFailRate":1}`
	waitFailed := func(n int) {
		t.Helper()
		testkit.WaitFor(t, strconv.Itoa(n)+" failed", time.Minute, func() bool {
			r := s.do("GET", "/v1/groups/shared", "acme", nil)
			var v gateway.GroupView
			if r.code != http.StatusOK {
				return false
			}
			r.json(t, &v)
			return v.Failed == int64(n)
		})
	}
	list := func() (gateway.FailureList, string) {
		t.Helper()
		r := s.do("GET", "/v1/groups/shared/failures?limit=50", "acme", nil)
		if r.code != http.StatusOK {
			t.Fatalf("failures: %d %s", r.code, r.body)
		}
		var fl gateway.FailureList
		r.json(t, &fl)
		return fl, string(r.body)
	}
	s.submit("acme", "shared", "", ndjson("f", 3, fail))
	waitFailed(3)

	rdb, keys := pipelinetest.Raw(s.st)
	failuresKey := strconv.Quote(keys.GroupFailures(contracts.Group("acme", "shared")))
	mon := monitor(t, s.cfg.RedisURL)
	first, b1 := list()
	second, b2 := list()
	reads := 0
	for _, l := range mon.until(rdb) {
		low := strings.ToLower(l)
		// a call is an EVALSHA (followed by an EVAL the first time,
		// when Redis answers NOSCRIPT)
		if strings.Contains(l, failuresKey) && strings.Contains(low, `"evalsha"`) {
			reads++
		}
	}
	if len(first.Failures) != 3 || first.Kept != 3 || b1 != b2 {
		t.Fatalf("first listing %+v, second %+v: want the same 3 failures", first, second)
	}
	if reads != 1 {
		t.Errorf("two listings of one page ran the failures script %d times, want 1", reads)
	}

	// a new failure: the next listing has it
	s.submit("acme", "shared", "", ndjson("g", 1, fail))
	waitFailed(4)
	if fl, _ := list(); len(fl.Failures) != 4 || fl.Kept != 4 {
		t.Errorf("after a 4th failure the listing holds %d (kept %d), want 4", len(fl.Failures), fl.Kept)
	}
	if r := s.do("GET", "/v1/groups/shared/failures?limit=50", "hooli", nil); r.code != http.StatusNotFound {
		t.Errorf("another tenant's listing of the group: %d, want 404", r.code)
	}
}
