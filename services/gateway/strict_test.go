package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

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
	q := s.st.Conns.Queue
	key := q.Keys().Job(contracts.Group("acme", "oldbytes"), "bad0")
	if n, err := q.Client().Exists(context.Background(), key).Result(); err != nil || n != 1 {
		t.Fatalf("job hash %s: %d %v", key, n, err)
	}
	if err := q.Client().HSet(context.Background(), key, "payload", "{\"to\":\"\xff\xfe\",\"ms\":1}").Err(); err != nil {
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
