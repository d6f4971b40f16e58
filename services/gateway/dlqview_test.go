package gateway_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// The overview counts dead letters per reason across tenants: a reason's
// subjects are one per tenant (<prefix>.dlq.<tenant>.<reason>), and dead
// letters stored before the subject named the tenant count with them.
func TestOverviewCountsDeadLettersPerReasonAcrossTenants(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := context.Background()
	js, n := s.st.Conns.JS, s.st.Conns.Names
	for _, subj := range []string{
		n.DLQ("acme", contracts.ReasonBadJSON), n.DLQ("acme", contracts.ReasonBadJSON), n.DLQ("hooli", contracts.ReasonBadJSON),
		n.DLQ("", contracts.ReasonTooLarge),
		"bulkaction.dlq." + contracts.ReasonTooLarge, // stored before the subject named the tenant
	} {
		if _, err := js.Publish(ctx, subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	var got map[string]int64
	testkit.WaitFor(t, "dead letters in the overview", 30*time.Second, func() bool {
		r := s.do("GET", "/v1/overview", "*", nil)
		if r.code != http.StatusOK {
			t.Fatalf("overview: %d %s", r.code, r.body)
		}
		var ov gateway.Overview
		r.json(t, &ov)
		if ov.DLQ == nil {
			return false
		}
		got = map[string]int64{}
		for _, c := range ov.DLQ.ByReason {
			got[c.Reason] = c.Count
		}
		return ov.DLQ.Total == 5
	})
	if len(got) != 2 || got[contracts.ReasonBadJSON] != 3 || got[contracts.ReasonTooLarge] != 2 {
		t.Errorf("dead letters by reason %v, want bad_json 3 and too_large 2", got)
	}
}
