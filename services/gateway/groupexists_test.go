package gateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/services/gateway"
)

// TestControlsOfUnknownGroups: POST …/seal or …/pause on a new id (a typo)
// answered 202 and created a group that GET /v1/groups never listed but
// that counted against its tenant's active groups. Such a control is now
// 404 unless ?create=true, and a group created that way is listed.
func TestControlsOfUnknownGroups(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	for _, c := range []struct{ verb, body string }{{"seal", `{"total":3}`}, {"pause", ""}, {"cancel", ""}, {"resume", ""}} {
		r := s.do("POST", "/v1/groups/newsletter-24/"+c.verb, "acme", strings.NewReader(c.body))
		if r.code != http.StatusNotFound {
			t.Errorf("%s of an unknown group: %d %s, want 404", c.verb, r.code, r.body)
			continue
		}
		if p := r.problem(t); !strings.Contains(p.Detail, "no such group") || strings.Contains(p.Detail, "create=true") != (c.verb != "resume") {
			t.Errorf("%s: detail %q", c.verb, p.Detail)
		}
	}
	if r := s.do("POST", "/v1/groups/x/resume?create=true", "acme", nil); r.code != http.StatusBadRequest {
		t.Errorf("resume ?create=true: %d %s, want 400", r.code, r.body)
	}
	var list gateway.GroupList
	s.do("GET", "/v1/groups", "acme", nil).json(t, &list)
	if len(list.Groups) != 0 {
		t.Fatalf("refused controls created groups: %+v", list.Groups)
	}

	// ?create=true: the group is created and listed.
	if r := s.do("POST", "/v1/groups/early/pause?create=true", "acme", nil); r.code != http.StatusAccepted {
		t.Fatalf("pause ?create=true: %d %s", r.code, r.body)
	}
	if r := s.do("POST", "/v1/groups/sealed-first/seal?create=true", "acme", strings.NewReader(`{"total":2}`)); r.code != http.StatusAccepted {
		t.Fatalf("seal ?create=true: %d %s", r.code, r.body)
	}
	s.waitState("acme", "early", "PAUSED")
	s.waitState("acme", "sealed-first", "CREATED")
	s.do("GET", "/v1/groups", "acme", nil).json(t, &list)
	ids := map[string]bool{}
	for _, g := range list.Groups {
		ids[g.GroupID] = true
	}
	if !ids["early"] || !ids["sealed-first"] {
		t.Errorf("groups created by ?create=true are not listed: %v", ids)
	}

	// Jobs, then a seal at once: the jobs' messages make the group known
	// even before the fetcher stores them.
	s.submit("acme", "quick", "", ndjson("q", 3, `{"ms":1}`))
	if r := s.do("POST", "/v1/groups/quick/seal", "acme", strings.NewReader(`{"total":3}`)); r.code != http.StatusAccepted {
		t.Fatalf("seal right after the jobs: %d %s", r.code, r.body)
	}
	s.waitState("acme", "quick", "COMPLETED")
	// Pause and resume of an ended group: 409 group-ended.
	for _, verb := range []string{"pause", "resume"} {
		r := s.do("POST", "/v1/groups/quick/"+verb, "acme", nil)
		if r.code != http.StatusConflict || !strings.Contains(r.problem(t).Type, "group-ended") {
			t.Errorf("%s of a completed group: %d %s, want 409 group-ended", verb, r.code, r.body)
		}
	}
}
