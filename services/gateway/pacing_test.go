package gateway_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
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
