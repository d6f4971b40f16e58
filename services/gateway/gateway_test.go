package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// TestAuthAndTenantIsolation: no key or an unknown key is 401; a tenant's
// key reaches only its own groups (another tenant's is 404, as if absent,
// and a control on the same id acts on the caller's own group); an admin
// key reaches any tenant with ?tenant= and lists every tenant.
func TestAuthAndTenantIsolation(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	if r := s.do("GET", "/v1/groups", "", nil); r.code != http.StatusUnauthorized || r.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no key: %d %s", r.code, r.body)
	} else {
		r.problem(t)
	}
	req := s.do("GET", "/v1/groups", "", nil, "Authorization: Bearer bak_not-a-key")
	if req.code != http.StatusUnauthorized {
		t.Fatalf("unknown key: %d", req.code)
	}
	if r := s.do("GET", "/v1/openapi.json", "", nil); r.code != http.StatusOK {
		t.Fatalf("openapi without a key: %d", r.code)
	}

	s.submit("acme", "shared", "?total=3", ndjson("j", 3, `{"ms":1}`))
	s.waitState("acme", "shared", "COMPLETED")

	for _, probe := range []struct{ method, path string }{
		{"GET", "/v1/groups/shared"}, {"GET", "/v1/groups/shared/failures"}, {"GET", "/v1/groups/shared/events"},
		{"POST", "/v1/groups/shared/retry-failed"}, {"GET", "/v1/groups/shared?tenant=acme"},
	} {
		r := s.do(probe.method, probe.path, "hooli", nil)
		if r.code != http.StatusNotFound {
			t.Errorf("hooli %s %s: %d %s, want 404", probe.method, probe.path, r.code, r.body)
			continue
		}
		r.problem(t)
	}
	// hooli's cancel of "shared" names hooli's own group, not acme's, which
	// does not exist; with ?create=true it is created cancelled.
	if r := s.do("POST", "/v1/groups/shared/cancel", "hooli", nil); r.code != http.StatusNotFound {
		t.Fatalf("hooli cancel: %d %s, want 404", r.code, r.body)
	}
	if r := s.do("POST", "/v1/groups/shared/cancel?create=true", "hooli", nil); r.code != http.StatusAccepted {
		t.Fatalf("hooli cancel ?create=true: %d %s", r.code, r.body)
	}
	var list gateway.GroupList
	s.do("GET", "/v1/groups", "hooli", nil).json(t, &list)
	for _, g := range list.Groups {
		if g.Tenant != "hooli" {
			t.Errorf("hooli lists %s/%s", g.Tenant, g.GroupID)
		}
	}
	if v := s.group("acme", "shared"); v.State != "COMPLETED" || v.Succeeded != 3 {
		t.Errorf("acme's group after hooli's cancel: %s %d succeeded", v.State, v.Succeeded)
	}
	// admin
	if v := s.group("*", "shared?tenant=acme"); v.Tenant != "acme" || v.Succeeded != 3 {
		t.Errorf("admin read: %+v", v)
	}
	if r := s.do("GET", "/v1/groups/shared", "*", nil); r.code != http.StatusBadRequest {
		t.Errorf("admin without tenant: %d", r.code)
	} else if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Field != "tenant" {
		t.Errorf("admin without tenant: %+v", p)
	}
	s.do("GET", "/v1/groups", "*", nil).json(t, &list)
	seen := map[string]bool{}
	for _, g := range list.Groups {
		seen[g.Tenant] = true
	}
	if !seen["acme"] {
		t.Errorf("admin list %+v lacks acme's group", list.Groups)
	}
}

// TestSubmitToCompletion: an NDJSON body with settings and a total runs to
// COMPLETED; the view's counts add up; a JSON array works too.
func TestSubmitToCompletion(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	res := s.submit("acme", "promo", "?total=250&priority=high&maxInFlight=20", ndjson("c", 250, `{"ms":2}`))
	if res.Accepted != 250 || res.Total == nil || *res.Total != 250 || res.Messages < 1 {
		t.Fatalf("submit response %+v", res)
	}
	v := s.waitState("acme", "promo", "COMPLETED")
	if v.Succeeded != 250 || v.Jobs != 250 || v.Priority != "high" || v.MaxInFlight != 20 || v.Total == nil || *v.Total != 250 {
		t.Errorf("completed view %+v", v)
	}
	if v.Status == nil || v.Status.ETASeconds == nil || *v.Status.ETASeconds != 0 {
		t.Errorf("completed status %+v", v.Status)
	}
	arr := `[{"jobId":"a","type":"sleep","payload":{"ms":1}},{"jobId":"b","type":"sleep"}]`
	r := s.do("POST", "/v1/groups/arr/jobs?total=2", "acme", strings.NewReader(arr), "Content-Type: application/json")
	if r.code != http.StatusAccepted {
		t.Fatalf("array submit: %d %s", r.code, r.body)
	}
	s.waitState("acme", "arr", "COMPLETED")
	// an ended group takes no more jobs
	r = s.do("POST", "/v1/groups/arr/jobs", "acme", strings.NewReader(arr), "Content-Type: application/json")
	if r.code != http.StatusConflict {
		t.Errorf("jobs to an ended group: %d %s", r.code, r.body)
	}
}

// TestBadInputNamesLineAndFieldAndPublishesNothing: malformed JSON, a bad
// field, an oversized payload or a bad id get 400 naming the line (or
// index) and the field, and nothing of the request is published.
func TestBadInputNamesLineAndFieldAndPublishesNothing(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.MaxPayloadBytes = 1000 })
	good := ndjson("ok", 5, `{"ms":1}`)
	cases := []struct {
		name, ctype, body string
		code              int
		line              int
		index             int
		field             string
	}{
		{"malformed at line 7", "application/x-ndjson", good + `{"jobId":"x","type":"sleep"` + "\n" + `{"jobId":"y","type":"sleep"}` + "\n", 400, 6, 5, ""},
		{"missing type at line 3", "application/x-ndjson", `{"jobId":"a","type":"sleep"}` + "\n\n" + `{"jobId":"b"}` + "\n", 400, 3, 1, "type"},
		{"bad job id", "application/x-ndjson", good + `{"jobId":"a b","type":"sleep"}` + "\n", 400, 6, 5, "jobId"},
		{"payload too large", "application/x-ndjson", good + `{"jobId":"big","type":"sleep","payload":"` + strings.Repeat("x", 2000) + `"}` + "\n", 400, 6, 5, "payload"},
		{"unknown field", "application/x-ndjson", `{"jobId":"a","type":"sleep","paylod":1}` + "\n", 400, 1, 0, "paylod"},
		{"array element", "application/json", `[{"jobId":"a","type":"sleep"},{"jobId":"b","type":""}]`, 400, 0, 1, "type"},
		{"not an array", "application/json", `{"jobId":"a"}`, 400, 0, -1, ""},
		{"wrong media type", "text/plain", good, 415, 0, -1, ""},
	}
	for _, c := range cases {
		r := s.do("POST", "/v1/groups/bad/jobs?total=6", "acme", strings.NewReader(c.body), "Content-Type: "+c.ctype)
		if r.code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, r.code, r.body, c.code)
			continue
		}
		p := r.problem(t)
		if c.code != 400 {
			continue
		}
		if c.index < 0 {
			if p.Detail == "" {
				t.Errorf("%s: no detail", c.name)
			}
			continue
		}
		if len(p.Errors) != 1 {
			t.Errorf("%s: errors %+v", c.name, p.Errors)
			continue
		}
		e := p.Errors[0]
		if e.Line != c.line || e.Index == nil || *e.Index != c.index || e.Field != c.field {
			t.Errorf("%s: error %+v (index %v), want line %d index %d field %q", c.name, e, deref(e.Index), c.line, c.index, c.field)
		}
		if c.field == "payload" && !strings.Contains(e.Limit, "1000") {
			t.Errorf("%s: limit %q does not name the limit", c.name, e.Limit)
		}
	}
	if r := s.do("POST", "/v1/groups/a%20b/jobs", "acme", strings.NewReader(good), "Content-Type: application/x-ndjson"); r.code != 400 {
		t.Errorf("bad group id: %d", r.code)
	} else if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Field != "groupId" {
		t.Errorf("bad group id: %+v", p)
	}
	if r := s.do("POST", "/v1/groups/bad/jobs?priority=urgent", "acme", strings.NewReader(good), "Content-Type: application/x-ndjson"); r.code != 400 {
		t.Errorf("bad priority: %d", r.code)
	} else if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Field != "priority" {
		t.Errorf("bad priority: %+v", p)
	}
	// Nothing was published (a rejected request answers before any
	// publish): the group does not exist and SUBMIT is empty.
	if r := s.do("GET", "/v1/groups/bad", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("the rejected requests created the group: %d %s", r.code, r.body)
	}
	info, err := s.st.Conns.JS.Stream(context.Background(), s.st.Conns.Names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := info.Info(context.Background()); err != nil || st.State.Msgs != 0 && st.State.LastSeq != 0 {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("SUBMIT holds %d messages (last seq %d) after rejected requests only", st.State.Msgs, st.State.LastSeq)
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestIdempotencyKey: the same key and body replay the first response with
// Idempotent-Replayed; another body is 409; two concurrent requests with
// one key run once.
func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	body := ndjson("i", 10, `{"ms":1}`)
	first := s.do("POST", "/v1/groups/idem/jobs?total=10", "acme", strings.NewReader(body),
		"Content-Type: application/x-ndjson", "Idempotency-Key: k-1")
	if first.code != http.StatusAccepted || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v", first.code, first.header)
	}
	again := s.do("POST", "/v1/groups/idem/jobs?total=10", "acme", strings.NewReader(body),
		"Content-Type: application/x-ndjson", "Idempotency-Key: k-1")
	if again.code != first.code || string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %q %v, first %d %q", again.code, again.body, again.header, first.code, first.body)
	}
	other := s.do("POST", "/v1/groups/idem/jobs?total=10", "acme", strings.NewReader(ndjson("z", 10, `{"ms":1}`)),
		"Content-Type: application/x-ndjson", "Idempotency-Key: k-1")
	if other.code != http.StatusConflict {
		t.Errorf("another body with the key: %d %s", other.code, other.body)
	} else {
		other.problem(t)
	}
	// Keys are per tenant: hooli's k-1 is its own.
	if r := s.do("POST", "/v1/groups/idem/jobs", "hooli", strings.NewReader(body), "Content-Type: application/x-ndjson",
		"Idempotency-Key: k-1"); r.code != http.StatusAccepted || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("another tenant's same key: %d %v", r.code, r.header)
	}
	if r := s.do("POST", "/v1/groups/idem/cancel", "acme", nil, "Idempotency-Key: "+strings.Repeat("k", 300)); r.code != 400 {
		t.Errorf("a 300-character key: %d", r.code)
	}

	// Concurrent: a large body so that the requests overlap.
	big := ndjson("c", 20000, `{"ms":0}`)
	var wg sync.WaitGroup
	codes := make([]reply, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = s.do("POST", "/v1/groups/conc/jobs?total=20000", "acme", strings.NewReader(big),
				"Content-Type: application/x-ndjson", "Idempotency-Key: conc")
		}()
	}
	wg.Wait()
	fresh := 0
	for i, r := range codes {
		switch {
		case r.code == http.StatusAccepted && r.header.Get("Idempotent-Replayed") == "":
			fresh++
		case r.code == http.StatusAccepted && r.header.Get("Idempotent-Replayed") == "true":
		case r.code == http.StatusConflict:
		default:
			t.Errorf("concurrent request %d: %d %s", i, r.code, r.body)
		}
	}
	if fresh != 1 {
		t.Errorf("%d of the concurrent requests ran, want 1", fresh)
	}
	v := s.waitState("acme", "conc", "COMPLETED")
	if v.Jobs != 20000 || v.Succeeded != 20000 {
		t.Errorf("concurrent group %+v", v)
	}
}

// TestEventsStreamAndResume: the SSE stream of a group carries a state
// event per transition and progress events with ids, and ends after the
// final event; a stream dropped half way and resumed with Last-Event-ID
// loses no transition.
func TestEventsStreamAndResume(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.GlobalRps = 200 })
	if r := s.do("GET", "/v1/groups/none/events", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("events of no group: %d", r.code)
	}
	s.submit("acme", "ev", "", ndjson("e", 600, `{"ms":1}`))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// First stream: read until a couple of progress events, then drop it.
	c1, cancel1 := context.WithCancel(ctx)
	ch, resp := s.sse(c1, "acme", "ev", "")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var got []sseEvent
	for ev := range ch {
		got = append(got, ev)
		if ev.name == "progress" && len(got) >= 3 {
			break
		}
	}
	cancel1()
	last := got[len(got)-1].id
	// Meanwhile: pause, resume and seal, each a transition.
	for _, op := range []struct{ verb, state string }{{"pause", "PAUSED"}, {"resume", "RUNNING"}} {
		if r := s.do("POST", "/v1/groups/ev/"+op.verb, "acme", nil); r.code != http.StatusAccepted {
			t.Fatalf("%s: %d", op.verb, r.code)
		}
		s.waitState("acme", "ev", op.state)
	}
	if r := s.do("POST", "/v1/groups/ev/seal", "acme", strings.NewReader(`{"total":600}`)); r.code != http.StatusAccepted {
		t.Fatalf("seal: %d %s", r.code, r.body)
	}
	ch2, _ := s.sse(ctx, "acme", "ev", last)
	for ev := range ch2 {
		got = append(got, ev)
	}
	var states []string
	prevID := int64(0)
	for i, ev := range got {
		if i == 0 && ev.id == "" {
			continue // built from Redis: the group had no event yet
		}
		var id int64
		if _, err := fmt.Sscan(ev.id, &id); err != nil || id <= prevID {
			t.Errorf("event %+v: id %q not increasing after %d", ev, ev.id, prevID)
		}
		prevID = id
		if ev.name == "state" {
			states = append(states, ev.data["state"].(string))
		}
	}
	t.Logf("%d events; states %v", len(got), states)
	for _, want := range []string{"PAUSED", "COMPLETED"} {
		if !slices.Contains(states, want) {
			t.Errorf("states %v lack %s", states, want)
		}
	}
	lastEv := got[len(got)-1]
	if lastEv.data["state"] != "COMPLETED" || lastEv.data["succeeded"] != float64(600) {
		t.Errorf("last event %+v", lastEv)
	}
}

// TestFailuresAndRetryFailed: failed jobs are listed with their error and
// attempts, paginated; retry-failed resubmits them as a new group linked to
// the old one.
func TestFailuresAndRetryFailed(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	body := ndjson("ok", 20, `{"ms":1}`) + ndjson("bad", 15, `{"ms":1,"permanentFailRate":1}`)
	s.submit("acme", "mixed", "?total=35", body)
	v := s.waitState("acme", "mixed", "COMPLETED")
	if v.Failed != 15 || v.Succeeded != 20 {
		t.Fatalf("group %+v", v)
	}
	var ids []string
	cursor := ""
	for pages := 0; pages < 10; pages++ {
		r := s.do("GET", "/v1/groups/mixed/failures?limit=4&cursor="+cursor, "acme", nil)
		if r.code != 200 {
			t.Fatalf("failures: %d %s", r.code, r.body)
		}
		var fl gateway.FailureList
		r.json(t, &fl)
		for _, f := range fl.Failures {
			if f.Error == "" || f.Attempts < 1 || f.Type != "sleep" || !strings.HasPrefix(f.JobID, "bad") {
				t.Errorf("failure %+v", f)
			}
			ids = append(ids, f.JobID)
		}
		if fl.Kept != 15 {
			t.Errorf("kept %d", fl.Kept)
		}
		if fl.Next == nil {
			break
		}
		cursor = *fl.Next
	}
	slices.Sort(ids)
	if len(slices.Compact(ids)) != 15 {
		t.Errorf("failures listed %d distinct jobs: %v", len(ids), ids)
	}
	r := s.do("POST", "/v1/groups/mixed/retry-failed", "acme", nil)
	if r.code != http.StatusAccepted {
		t.Fatalf("retry-failed: %d %s", r.code, r.body)
	}
	var rr gateway.RetryResponse
	r.json(t, &rr)
	if rr.Jobs != 15 || rr.RetryOf != "mixed" || rr.GroupID == "" {
		t.Fatalf("retry response %+v", rr)
	}
	nv := s.waitState("acme", rr.GroupID, "COMPLETED")
	if nv.Jobs != 15 || nv.Failed != 15 || nv.RetryOf != "mixed" {
		t.Errorf("retry group %+v", nv)
	}
	if ov := s.group("acme", "mixed"); !slices.Contains(ov.Retries, rr.GroupID) {
		t.Errorf("old group's retries %v", ov.Retries)
	}
}

// TestListGroupsPaginatesAndFilters: a tenant's groups newest first, by
// state, over pages that neither repeat nor skip.
func TestListGroupsPaginatesAndFilters(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	for i := 0; i < 7; i++ {
		s.submit("globex", fmt.Sprintf("g%d", i), "?total=1", ndjson("x", 1, `{"ms":1}`))
	}
	s.submit("globex", "open", "", ndjson("x", 1, `{"ms":1}`)) // never sealed: stays RUNNING or AGGREGATING
	for i := 0; i < 7; i++ {
		s.waitState("globex", fmt.Sprintf("g%d", i), "COMPLETED")
	}
	var all []string
	cursor := ""
	for {
		var l gateway.GroupList
		r := s.do("GET", "/v1/groups?limit=3&state=COMPLETED&cursor="+cursor, "globex", nil)
		if r.code != 200 {
			t.Fatalf("list: %d %s", r.code, r.body)
		}
		r.json(t, &l)
		for _, g := range l.Groups {
			if g.State != "COMPLETED" {
				t.Errorf("filtered list holds %s in %s", g.GroupID, g.State)
			}
			all = append(all, g.GroupID)
		}
		if l.Next == nil {
			break
		}
		cursor = *l.Next
	}
	if len(all) != 7 || slices.Contains(all, "open") {
		t.Errorf("completed groups listed %v", all)
	}
	var l gateway.GroupList
	s.do("GET", "/v1/groups?view=full&limit=20", "globex", nil).json(t, &l)
	if len(l.Groups) != 8 || l.Groups[0].Status == nil {
		t.Errorf("full list: %d groups, first %+v", len(l.Groups), l.Groups[0])
	}
	if r := s.do("GET", "/v1/groups?state=DONE", "globex", nil); r.code != 400 {
		t.Errorf("bad state filter: %d", r.code)
	}
	if r := s.do("GET", "/v1/groups?cursor=zzz", "globex", nil); r.code != 400 {
		t.Errorf("bad cursor: %d", r.code)
	}
}
