package gateway_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestJobRatePacesReading: a tenant's jobs are charged to its job rate as
// the gateway reads them, accepted or not, and reading waits once the
// tenant's burst is spent. An upload refused for its size (413) has still
// spent the rate, so a tenant cannot make the gateway parse jobs faster
// than its job rate by sending requests that are refused.
func TestJobRatePacesReading(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) {
		c.GatewayTenantJobRate = 1000 // 10,000 at once
		c.GatewayMaxJobsPerRequest = 12_000
	})
	start := time.Now()
	r := s.do("POST", "/v1/groups/paced/jobs", "acme", strings.NewReader(ndjson("p-", 12_001, "{}")), "Content-Type: application/x-ndjson")
	took := time.Since(start)
	if r.code != http.StatusRequestEntityTooLarge {
		t.Fatalf("%d %s", r.code, r.body)
	}
	// 12,000 jobs read at 1,000/s past a burst of 10,000: at least 2 s of
	// waiting, less what reading itself took.
	if took < 1500*time.Millisecond {
		t.Errorf("12,001 jobs read in %s: reading did not wait for the job rate", took)
	}
	// The refused upload spent the rate: the tenant's next request of
	// more than what is left is read at the rate too.
	start = time.Now()
	s.submit("acme", "paced", "", ndjson("q-", 4000, "{}"))
	if took := time.Since(start); took < time.Second {
		t.Errorf("4,000 more jobs right after read in %s: the refused upload's jobs were not charged", took)
	}
	// Another tenant is not held back.
	s.submit("hooli", "paced", "", ndjson("h-", 100, "{}"))
}

// doorCalls is how many times the gateway ran the door script.
func doorCalls(t *testing.T, s *server) uint64 {
	t.Helper()
	h, err := s.st.Metrics.LuaDuration.GetMetricWithLabelValues("door")
	if err != nil {
		t.Fatal(err)
	}
	var m dto.Metric
	if err := h.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// TestRefusedTenantCostsRedisLittle: once a rate refused a tenant, the
// gateway refuses its next requests by itself until the refusal's time is
// up (Redis is not asked once per request of a flood), with the same 429
// and headers; then the tenant passes again.
func TestRefusedTenantCostsRedisLittle(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GatewayTenantRequestRate = 1 }) // 10 per 10 s
	for i := 0; ; i++ {
		if r := s.do("GET", "/v1/groups", "acme", nil); r.code == http.StatusTooManyRequests {
			break
		}
		if i > 20 {
			t.Fatal("never refused")
		}
	}
	before := doorCalls(t, s)
	var last reply
	for range 200 {
		last = s.do("GET", "/v1/groups", "acme", nil)
		if last.code != http.StatusTooManyRequests {
			t.Fatalf("%d %s", last.code, last.body)
		}
	}
	if calls := doorCalls(t, s) - before; calls > 10 {
		t.Errorf("200 refused requests ran the door script %d times", calls)
	}
	if p := last.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != string(redisq.DoorRequestRate) {
		t.Errorf("errors %+v", p.Errors)
	}
	ra, err := strconv.Atoi(last.header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 2 {
		t.Fatalf("Retry-After %q", last.header.Get("Retry-After"))
	}
	if got := last.header.Get("RateLimit"); !strings.HasPrefix(got, `"requests";r=0;t=`) {
		t.Errorf("RateLimit %q", got)
	}
	if got := last.header.Get("RateLimit-Policy"); got != `"requests";q=10;w=10` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if r := s.do("GET", "/v1/groups", "hooli", nil); r.code != http.StatusOK {
		t.Errorf("another tenant: %d", r.code)
	}
	time.Sleep(time.Duration(ra) * time.Second)
	if r := s.do("GET", "/v1/groups", "acme", nil); r.code != http.StatusOK {
		t.Errorf("after Retry-After: %d %s", r.code, r.body)
	}
}
