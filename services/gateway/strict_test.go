package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TestStrictBodies: invalid UTF-8 anywhere in a job, a field spelt in
// another case and a field given twice are refused with 400 naming the
// field and the line or index, in NDJSON and JSON-array bodies, on the
// fast path's form and the slow path's (a jobId with an escape), and so
// are the same faults in the other request bodies; nothing is published.
func TestStrictBodies(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	good := ndjson("ok", 3, `{"ms":1}`)
	cases := []struct {
		name, ctype, body string
		line, index       int
		field, detail     string
	}{
		{"payload invalid UTF-8 (fast form)", "application/x-ndjson",
			good + "{\"jobId\":\"u\",\"type\":\"sleep\",\"payload\":{\"to\":\"\xff\xfe\"}}\n", 4, 3, "payload.to", "0xff"},
		{"payload invalid UTF-8 (slow form)", "application/x-ndjson",
			good + "{\"jobId\":\"\\u0075\",\"type\":\"sleep\",\"payload\":[\"x\",\"\xfe\"]}\n", 4, 3, "payload[1]", "0xfe"},
		{"jobId invalid UTF-8", "application/x-ndjson", "{\"jobId\":\"a\xc3\",\"type\":\"sleep\"}\n", 1, 0, "jobId", "0xc3"},
		{"type invalid UTF-8, array", "application/json",
			"[{\"jobId\":\"a\",\"type\":\"sleep\"},{\"jobId\":\"b\",\"type\":\"sl\xffeep\"}]", 0, 1, "type", "0xff"},
		{"payload invalid UTF-8, array", "application/json",
			"[{\"jobId\":\"a\",\"type\":\"sleep\",\"payload\":\"\xed\xa0\x80\"}]", 0, 0, "payload", "0xed"},
		{"case-folded key", "application/x-ndjson", good + `{"jobId":"a","jobid":"b","type":"sleep"}` + "\n", 4, 3, "jobid", "case-sensitive"},
		{"case-folded key only", "application/json", `[{"JobId":"a","type":"sleep"}]`, 0, 0, "JobId", `"jobId"`},
		{"duplicate key", "application/x-ndjson", `{"type":"x","type":"sleep","jobId":"a"}` + "\n", 1, 0, "type", "twice"},
		{"duplicate key, array", "application/json", `[{"jobId":"a","type":"sleep"},{"jobId":"b","type":"sleep","payload":1,"payload":2}]`, 0, 1, "payload", "twice"},
		{"duplicate key (slow form)", "application/x-ndjson", `{"jobId":"\u0061","type":"sleep","jobId":"b"}` + "\n", 1, 0, "jobId", "twice"},
	}
	for _, c := range cases {
		r := s.do("POST", "/v1/groups/strict/jobs?total=9", "acme", strings.NewReader(c.body), "Content-Type: "+c.ctype)
		if r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.name, r.code, r.body)
			continue
		}
		p := r.problem(t)
		if len(p.Errors) != 1 {
			t.Errorf("%s: errors %+v", c.name, p.Errors)
			continue
		}
		e := p.Errors[0]
		if e.Field != c.field || e.Line != c.line || e.Index == nil || *e.Index != c.index || !strings.Contains(e.Detail, c.detail) || e.Limit == "" {
			t.Errorf("%s: error %+v (index %v), want field %q line %d index %d detail with %q", c.name, e, deref(e.Index), c.field, c.line, c.index, c.detail)
		}
		if !utf8.Valid(r.body) {
			t.Errorf("%s: the problem is not valid UTF-8: %q", c.name, r.body)
		}
	}
	bodies := []struct{ name, path, body, field string }{
		{"seal case-folded", "/v1/groups/strict/seal", `{"Total":3}`, "Total"},
		{"seal twice", "/v1/groups/strict/seal", `{"total":1,"total":2}`, "total"},
		{"seal unknown", "/v1/groups/strict/seal", `{"total":1,"jobs":2}`, "jobs"},
		{"seal trailing", "/v1/groups/strict/seal", `{"total":1} {"total":2}`, ""},
		{"retry case-folded", "/v1/groups/strict/retry-failed", `{"groupid":"x"}`, "groupid"},
		{"retry twice", "/v1/groups/strict/retry-failed", `{"groupId":"x","groupId":"y"}`, "groupId"},
		{"retry invalid UTF-8", "/v1/groups/strict/retry-failed", "{\"groupId\":\"x\xff\"}", "groupId"},
	}
	for _, c := range bodies {
		r := s.do("POST", c.path, "acme", strings.NewReader(c.body), "Content-Type: application/json")
		if r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", c.name, r.code, r.body)
			continue
		}
		if p := r.problem(t); len(p.Errors) != 1 || p.Errors[0].Field != c.field || p.Errors[0].Detail == "" {
			t.Errorf("%s: %+v, want one error naming %q", c.name, p, c.field)
		}
	}
	if r := s.do("GET", "/v1/groups/strict", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("the refused requests created the group: %d %s", r.code, r.body)
	}
	// What is valid is taken: UTF-8 beyond ASCII, escapes, a key of the
	// payload spelt in any case or given twice (the payload is the job's).
	body := "{\"jobId\":\"\\u0061\",\"type\":\"sleep\",\"payload\":{\"ms\":1,\"note\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\",\"MS\":2}}\n"
	if out := s.submit("acme", "strict-ok", "?total=1", body); out.Accepted != 1 {
		t.Errorf("accepted %d", out.Accepted)
	}
}

// TestFailuresServedAsValidJSON: a payload with invalid UTF-8 stored
// before the gateway refused it is served by GET …/failures as valid
// UTF-8 JSON (each run of invalid bytes as U+FFFD), not as raw bytes.
func TestFailuresServedAsValidJSON(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	s.submit("acme", "oldbytes", "?total=1", ndjson("bad", 1, `{"ms":1,"permanentFailRate":1}`))
	s.waitState("acme", "oldbytes", "COMPLETED")
	rdb, keys := pipelinetest.Raw(s.st)
	key := keys.Job(contracts.Group("acme", "oldbytes"), "bad0")
	if n, err := rdb.Exists(context.Background(), key).Result(); err != nil || n != 1 {
		t.Fatalf("job hash %s: %d %v", key, n, err)
	}
	if err := rdb.HSet(context.Background(), key, "payload", "{\"to\":\"\xff\xfe\",\"ms\":1}").Err(); err != nil {
		t.Fatal(err)
	}
	r := s.do("GET", "/v1/groups/oldbytes/failures", "acme", nil)
	if r.code != http.StatusOK {
		t.Fatalf("failures: %d %s", r.code, r.body)
	}
	if !utf8.Valid(r.body) {
		t.Fatalf("failures served as invalid UTF-8: %q", r.body)
	}
	var fl struct {
		Failures []struct {
			Payload map[string]any `json:"payload"`
		} `json:"failures"`
	}
	if err := json.Unmarshal(r.body, &fl); err != nil || len(fl.Failures) != 1 {
		t.Fatalf("failures %s: %v", r.body, err)
	}
	if got := fl.Failures[0].Payload["to"]; got != "\uFFFD" {
		t.Errorf("payload.to %q, want U+FFFD for the invalid bytes", got)
	}
}

// TestStrictQuery: a query parameter the operation does not take, one
// given twice that is not an array, a semicolon and malformed
// percent-encoding are refused with 400 naming the parameter, not
// ignored; an array parameter may repeat.
func TestStrictQuery(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	s.submit("acme", "q1", "?total=1", ndjson("j", 1, `{"ms":1}`))
	cases := []struct{ method, path, field, detail string }{
		{"GET", "/v1/groups/q1/failures?limit=%zz", "limit", "malformed value"},
		{"GET", "/v1/groups/q1/failures?limit=5%", "limit", "malformed value"},
		{"GET", "/v1/groups/q1/failures?li%zzmit=5", "li%zzmit", "malformed name"},
		{"GET", "/v1/groups/q1/failures?cursor=%ff", "cursor", "malformed value"},
		{"GET", "/v1/groups?limt=5", "limt", "unknown parameter"},
		{"GET", "/v1/groups/q1?view=full", "view", "unknown parameter"},
		{"GET", "/v1/groups?limit=5&limit=6", "limit", "more than once"},
		{"GET", "/v1/tenants?tenant=acme", "tenant", "unknown parameter"},
		{"GET", "/v1/openapi.json?v=2", "v", "unknown parameter"},
		{"POST", "/v1/groups/q1/seal?total=1;create=true", "total", "semicolon"},
		{"POST", "/v1/groups/q1/seal?total=1&total=2", "total", "more than once"},
		{"POST", "/v1/groups/q2/jobs?totl=1", "totl", "unknown parameter"},
	}
	for _, c := range cases {
		r := s.do(c.method, c.path, "acme", strings.NewReader(""), "Content-Type: application/x-ndjson")
		if r.code != http.StatusBadRequest {
			t.Errorf("%s %s: %d %s, want 400", c.method, c.path, r.code, r.body)
			continue
		}
		p := r.problem(t)
		if len(p.Errors) != 1 || p.Errors[0].Field != c.field || !strings.Contains(p.Errors[0].Detail, c.detail) || p.Errors[0].Limit == "" {
			t.Errorf("%s %s: %+v, want field %q, %q", c.method, c.path, p.Errors, c.field, c.detail)
		}
	}
	for _, path := range []string{"/v1/groups?state=RUNNING&state=COMPLETED", "/v1/groups?state=RUNNING,COMPLETED&limit=5&view=full",
		"/v1/groups/q1?tenant=acme", "/v1/groups/q1/failures?limit=5&cursor=", "/v1/groups?&limit=5&"} {
		if r := s.do("GET", path, "acme", nil); r.code != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, r.code, r.body)
		}
	}
	// The key is checked first: no key, no word on the query.
	if r := s.do("GET", "/v1/groups?limt=5", "", nil); r.code != http.StatusUnauthorized {
		t.Errorf("without a key: %d %s", r.code, r.body)
	}
	if r := s.do("GET", "/v1/groups/q2", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("a refused submit created its group: %d %s", r.code, r.body)
	}
}

// TestUncleanPaths: an unknown or unclean path is 404 problem+json (a
// known path with another method 405 with Allow), never a redirect or
// text/html; the dashboard's paths keep working.
func TestUncleanPaths(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	s.submit("acme", "jobs", "?total=1", ndjson("j", 1, `{"ms":1}`))
	noFollow := &http.Client{Timeout: time.Minute, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, withKey bool) reply {
		t.Helper()
		req, err := http.NewRequest(method, s.base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if withKey {
			req.Header.Set("Authorization", "Bearer "+s.keys["acme"])
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return reply{code: resp.StatusCode, header: resp.Header, body: b}
	}
	cases := []struct {
		method, path string
		code         int
		allow        string
	}{
		{"GET", "/v1/groups//jobs", 404, ""},
		{"POST", "/v1/groups//jobs", 404, ""},
		{"GET", "//v1/groups", 404, ""},
		{"GET", "/v1//groups", 404, ""},
		{"GET", "/v1/groups/jobs/./failures", 404, ""},
		{"GET", "/v1/groups/x/../jobs", 404, ""},
		{"GET", "/v1/groups/jobs/.", 404, ""},
		{"GET", "/v1/groups/", 404, ""},
		{"GET", "/v1/groups/jobs/", 404, ""},
		{"GET", "/v1/overview/", 404, ""},
		{"GET", "/v1", 404, ""},
		{"GET", "/v1/", 404, ""},
		{"GET", "/nope", 404, ""},
		{"GET", "/ui//js/app.js", 404, ""},
		{"GET", "/ui/../v1/groups", 404, ""},
		{"GET", "/v1/groups/jobs/jobs", 405, "POST"},
		{"DELETE", "/v1/groups", 405, "GET"},
		{"PUT", "/v1/groups/jobs", 405, "GET"},
		{"POST", "/ui/", 405, "GET"},
	}
	for _, c := range cases {
		r := send(c.method, c.path, true)
		if r.code != c.code || r.header.Get("Location") != "" {
			t.Errorf("%s %s: %d (Location %q) %s, want %d", c.method, c.path, r.code, r.header.Get("Location"), r.body, c.code)
			continue
		}
		r.problem(t)
		if got := r.header.Get("Allow"); c.allow != "" && !strings.Contains(got, c.allow) {
			t.Errorf("%s %s: Allow %q, want %s", c.method, c.path, got, c.allow)
		}
	}
	// The group named "jobs" is reached by its own clean path only (once
	// the fetcher has stored it: a 202 means SUBMIT has it, not Redis).
	testkit.WaitFor(t, "GET /v1/groups/jobs answers 200", 30*time.Second, func() bool {
		return send("GET", "/v1/groups/jobs", true).code == http.StatusOK
	})
	for _, c := range []struct {
		path, ctype string
		code        int
		location    string
	}{
		{"/ui/", "text/html", 200, ""},
		{"/ui/js/app.js", "javascript", 200, ""},
		{"/ui/groups", "text/html", 200, ""},
		{"/ui", "", http.StatusFound, "/ui/"},
		{"/", "", http.StatusFound, "/ui/"},
	} {
		r := send("GET", c.path, false)
		if r.code != c.code || !strings.Contains(r.header.Get("Content-Type"), c.ctype) || r.header.Get("Location") != c.location {
			t.Errorf("GET %s: %d %q (Location %q), want %d %q %q", c.path, r.code, r.header.Get("Content-Type"), r.header.Get("Location"), c.code, c.ctype, c.location)
		}
	}
}
