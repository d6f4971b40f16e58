package gateway_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestRepeatedJobIDIsRefused: a request that repeated a job id with
// ?total=2 was accepted, ran one job, and the group stayed RUNNING for
// ever. It is now refused, naming both lines, and nothing is published.
func TestRepeatedJobIDIsRefused(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	body := `{"jobId":"a","type":"sleep","payload":{"ms":1}}` + "\n" + `{"jobId":"b","type":"sleep"}` + "\n\n" + `{"jobId":"a","type":"sleep","payload":{"ms":2}}` + "\n"
	r := s.do("POST", "/v1/groups/dup/jobs?total=2", "acme", strings.NewReader(body), "Content-Type: application/x-ndjson")
	if r.code != http.StatusBadRequest {
		t.Fatalf("repeated id: %d %s, want 400", r.code, r.body)
	}
	p := r.problem(t)
	if !strings.Contains(p.Detail, `line 4: jobId "a" repeats the job id of line 1`) || len(p.Errors) != 1 || p.Errors[0].Field != "jobId" {
		t.Errorf("problem %+v", p)
	}
	arr := `[{"jobId":"a","type":"sleep"},{"jobId":"a","type":"sleep"}]`
	r = s.do("POST", "/v1/groups/dup/jobs", "acme", strings.NewReader(arr), "Content-Type: application/json")
	if r.code != http.StatusBadRequest || !strings.Contains(r.problem(t).Detail, `jobs[1]: jobId "a" repeats the job id of jobs[0]`) {
		t.Errorf("repeated id in an array: %d %s", r.code, r.body)
	}
	// A total below the body's jobs would be refused by the seal later.
	r = s.do("POST", "/v1/groups/dup/jobs?total=1", "acme", strings.NewReader(ndjson("j", 2, "{}")), "Content-Type: application/x-ndjson")
	if r.code != http.StatusBadRequest || !strings.Contains(r.problem(t).Detail, "total 1 is less than the 2 distinct jobs") {
		t.Errorf("total below the jobs: %d %s", r.code, r.body)
	}
	if r := s.do("GET", "/v1/groups/dup", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("a refused request created the group: %d %s", r.code, r.body)
	}
}
