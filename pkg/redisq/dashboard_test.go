package redisq_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestReadDashboard: one read holds every tenant's counts, its in-flight
// jobs over its active groups and the job types it submitted, and nothing
// of a tenant it did not find.
func TestReadDashboard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, true)
	var jobs []redisq.Job
	for i := 0; i < 6; i++ {
		jobs = append(jobs, redisq.Job{Group: G("t1/g1"), ID: fmt.Sprintf("a%d", i), Type: []string{"mail", "sms"}[i%2], Payload: []byte(`{}`)})
	}
	for i := 0; i < 3; i++ {
		jobs = append(jobs, redisq.Job{Group: G("t2/g2"), ID: fmt.Sprintf("b%d", i), Type: "report", Payload: []byte(`{}`)})
	}
	if _, err := q.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if js, err := q.DequeueBatch(ctx, 4); err != nil || len(js) != 4 {
		t.Fatalf("dequeued %d: %v", len(js), err)
	}
	d, err := q.ReadDashboard(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	t1, t2 := d.Tenant("t1"), d.Tenant("t2")
	if !slices.Equal(t1.Types, []string{"mail", "sms"}) || !slices.Equal(t2.Types, []string{"report"}) {
		t.Errorf("types: t1 %v, t2 %v", t1.Types, t2.Types)
	}
	if t1.ActiveGroups != 1 || t2.ActiveGroups != 1 || t1.QueuedJobs != 6 || t2.QueuedJobs != 3 {
		t.Errorf("counts: t1 %+v, t2 %+v", t1, t2)
	}
	if t1.InFlightJobs+t2.InFlightJobs != 4 {
		t.Errorf("in flight: t1 %d + t2 %d, want 4", t1.InFlightJobs, t2.InFlightJobs)
	}
	if n := d.Tenant("nobody"); n.ActiveGroups != 0 || n.QueuedJobs != 0 || n.InFlightJobs != 0 || len(n.Types) != 0 {
		t.Errorf("a tenant with nothing: %+v", n)
	}
	if _, ok := d.Tenants["nobody"]; ok {
		t.Error("a tenant with nothing was read")
	}
}

// TestReadDashboardDestinations: a tenant's figures name the explicit
// destinations its jobs use, not another tenant's, and none for jobs whose
// destination is their type.
func TestReadDashboardDestinations(t *testing.T) {
	t.Parallel()
	q, _ := setup(t, redisq.Config{}, true)
	enqueueDest(t, q, "t1/a", "http", "api.example.com", 2)
	enqueueDest(t, q, "t1/b", "http", "mail.example.com", 1)
	enqueueDest(t, q, "t2/c", "http", "partner.example.com", 1)
	enqueueDest(t, q, "t3/d", "mail", "mail", 1)
	d, err := q.ReadDashboard(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, want := range map[string][]string{"t1": {"api.example.com", "mail.example.com"},
		"t2": {"partner.example.com"}, "t3": {}, "nobody": {}} {
		if got := d.Tenant(tenant).Destinations; !slices.Equal(got, want) {
			t.Errorf("%s's destinations %v, want %v", tenant, got, want)
		}
	}
}
