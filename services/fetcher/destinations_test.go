package fetcher_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// TestIngestDestinations: ingest stores an http job's URL host as its
// destination (lower-cased, without port), keeps a job's explicit one,
// and gives other jobs none; READY carries them. Past the tenant's bound
// a job is stored without its destination and counted
// (destinations_refused_total{scope="tenant"}).
func TestIngestDestinations(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{MaxDestinationsPerTenant: 3}})
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	g := contracts.Group("t1", "g")
	jobs := []contracts.SubmitJob{
		{JobID: "h1", Type: "http", Payload: json.RawMessage(`{"url":"https://API.Partner.example:8443/v1"}`)},
		{JobID: "h2", Type: "http", Destination: "acct-7.partner.example", Payload: json.RawMessage(`{"url":"https://api.partner.example/"}`)},
		{JobID: "h3", Type: "http", Payload: json.RawMessage(`{"method":"GET"}`)},
		{JobID: "m1", Type: "email", Destination: "smtp-eu"},
		{JobID: "m2", Type: "email"},
		{JobID: "m3", Type: "email", Destination: "smtp-us"}, // the tenant's fourth: past the bound
	}
	body, err := json.Marshal(&contracts.Submission{V: contracts.Version, Kind: contracts.KindJobs, Tenant: g.Tenant, GroupID: g.ID, Jobs: jobs})
	if err != nil {
		t.Fatal(err)
	}
	publishRaw(t, e, e.Names.Submit(g), string(body))
	got := map[string]string{}
	for _, m := range r.WaitJobs(t, len(jobs), 30*time.Second) {
		got[m.Job.JobID] = m.Job.Destination
	}
	want := map[string]string{"h1": "api.partner.example", "h2": "acct-7.partner.example", "h3": "", "m1": "smtp-eu", "m2": "", "m3": ""}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("READY destinations %v, want %v", got, want)
	}
	if v := testkit.Value(t, e.Metrics.DestinationsRefused.WithLabelValues("tenant")); v != 1 {
		t.Errorf("destinations refused for the tenant = %v, want 1", v)
	}
}
