package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TestNotBeforeThroughTheAPI: a group submitted with notBefore 3 s ahead is
// accepted and counted at once, says it is scheduled until then, and is
// started (admitted, by the clock of Redis) within a second after it and
// not before; it then completes.
func TestNotBeforeThroughTheAPI(t *testing.T) {
	s := newServer(t, nil)
	nb := time.Now().Add(3 * time.Second).Truncate(time.Millisecond)
	q := "?total=5&notBefore=" + url.QueryEscape(nb.Format(time.RFC3339Nano))
	s.submit("acme", "later", q, ndjson("j", 5, `{"ms":1}`))

	testkit.WaitFor(t, "the jobs counted", 10*time.Second, func() bool { return s.seen("acme", "later").Jobs == 5 })
	v := s.group("acme", "later")
	if v.State != "CREATED" || v.StartedAt != nil {
		t.Fatalf("before its notBefore: state %s, started %v", v.State, v.StartedAt)
	}
	if v.NotBefore == nil || !v.NotBefore.Equal(nb) {
		t.Fatalf("notBefore %v, want %v", v.NotBefore, nb)
	}
	if v.Status == nil || len(v.Status.Waiting) == 0 || v.Status.Waiting[0].Reason != "scheduled" ||
		v.Status.Waiting[0].Until == nil || !v.Status.Waiting[0].Until.Equal(nb) ||
		!strings.HasPrefix(v.Status.Waiting[0].Detail, "scheduled until ") {
		t.Fatalf("waiting %+v, want scheduled until %v", v.Status, nb)
	}

	v = s.waitState("acme", "later", "COMPLETED")
	if v.StartedAt == nil {
		t.Fatal("no startedAt")
	}
	late := v.StartedAt.Sub(nb)
	t.Logf("started %v after its notBefore", late)
	if late < 0 || late > time.Second {
		t.Fatalf("started at %v, %v after its notBefore %v: want within [0, 1s]", v.StartedAt, late, nb)
	}
	if v.Succeeded != 5 {
		t.Fatalf("succeeded %d, want 5", v.Succeeded)
	}
}

// TestScheduleParametersRefused: a bad notBefore or window is refused with
// 400 invalid-parameter naming the parameter and the limit.
func TestScheduleParametersRefused(t *testing.T) {
	s := newServer(t, nil)
	far := time.Now().AddDate(2, 0, 0).Format(time.RFC3339)
	for _, tc := range []struct{ query, field, limit string }{
		{"notBefore=tomorrow", "notBefore", "RFC 3339"},
		{"notBefore=" + url.QueryEscape(far), "notBefore", "366 days"},
		{"window=" + url.QueryEscape("mon-fri 09:00-17:00 Mars/Olympus"), "window[0].zone", "IANA"},
		{"window=" + url.QueryEscape("mon-fri 09:00-17:00 UTC") + "&window=" + url.QueryEscape("someday 09:00-17:00 UTC"), "window[1]", "DAYS FROM-TO ZONE"},
		{"window=" + url.QueryEscape("mon 09:00-25:00 UTC"), "window[0].to", "24:00"},
	} {
		r := s.do("POST", "/v1/groups/bad/jobs?"+tc.query, "acme", strings.NewReader(ndjson("j", 1, `{"ms":1}`)), "Content-Type: application/x-ndjson")
		if r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.query, r.code, r.body)
			continue
		}
		p := r.problem(t)
		if len(p.Errors) == 0 || p.Errors[0].Field != tc.field || !strings.Contains(p.Errors[0].Limit+p.Errors[0].Detail, tc.limit) {
			t.Errorf("%s: %+v, want field %s and %q", tc.query, p.Errors, tc.field, tc.limit)
		}
	}
	if r := s.do("GET", "/v1/groups/bad", "acme", nil); r.code != http.StatusNotFound {
		t.Errorf("a refused submission made the group: %d", r.code)
	}
}

// TestMoveTheStartThroughTheAPI: POST …/schedule moves a waiting group's
// start later, then to now (it starts); a bad body is refused naming
// notBefore; an unknown group is 404.
func TestMoveTheStartThroughTheAPI(t *testing.T) {
	s := newServer(t, nil)
	first := time.Now().Add(time.Hour).Truncate(time.Second)
	s.submit("acme", "moved", "?total=2&notBefore="+url.QueryEscape(first.Format(time.RFC3339)), ndjson("j", 2, `{"ms":1}`))
	testkit.WaitFor(t, "the jobs counted", 10*time.Second, func() bool { return s.seen("acme", "moved").Jobs == 2 })

	later := first.Add(time.Hour)
	r := s.do("POST", "/v1/groups/moved/schedule", "acme", strings.NewReader(`{"notBefore":"`+later.Format(time.RFC3339)+`"}`), "Content-Type: application/json")
	if r.code != http.StatusAccepted {
		t.Fatalf("move later: %d %s", r.code, r.body)
	}
	testkit.WaitFor(t, "the later start", 10*time.Second, func() bool {
		v := s.group("acme", "moved")
		return v.NotBefore != nil && v.NotBefore.Equal(later) && len(v.Status.Waiting) > 0 &&
			v.Status.Waiting[0].Until != nil && v.Status.Waiting[0].Until.Equal(later)
	})
	for _, body := range []string{`{"notBefore":"soon"}`, `{}`, `{"notBefore":"2026-11-27T09:00:00+01:00","x":1}`} {
		r := s.do("POST", "/v1/groups/moved/schedule", "acme", strings.NewReader(body), "Content-Type: application/json")
		if r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", body, r.code, r.body)
			continue
		}
		if p := r.problem(t); len(p.Errors) == 0 || (p.Errors[0].Field != "notBefore" && p.Errors[0].Field != "x") {
			t.Errorf("%s: %+v, want the field named", body, p.Errors)
		}
	}
	if r := s.do("POST", "/v1/groups/nope/schedule", "acme", strings.NewReader(`{"notBefore":"2026-11-27T09:00:00Z"}`)); r.code != http.StatusNotFound {
		t.Errorf("unknown group: %d %s", r.code, r.body)
	}
	now := time.Now().Format(time.RFC3339Nano)
	if r := s.do("POST", "/v1/groups/moved/schedule", "acme", strings.NewReader(`{"notBefore":"`+now+`"}`)); r.code != http.StatusAccepted {
		t.Fatalf("move to now: %d %s", r.code, r.body)
	}
	s.waitState("acme", "moved", "COMPLETED")
}

// TestTenantWindowsThroughTheAPI: a tenant reads and sets its default
// sending windows (PUT replaces them, an empty list removes them); a group
// it creates afterwards without windows of its own takes them and waits
// outside them; bad windows are refused naming the field; an admin key
// names the tenant.
func TestTenantWindowsThroughTheAPI(t *testing.T) {
	s := newServer(t, nil)
	js := "Content-Type: application/json"
	var tw api.TenantWindows
	r := s.do("GET", "/v1/windows", "acme", nil)
	if r.code != http.StatusOK {
		t.Fatalf("GET before any: %d %s", r.code, r.body)
	}
	if r.json(t, &tw); tw.Tenant != "acme" || len(tw.Windows) != 0 {
		t.Fatalf("before any: %+v", tw)
	}
	// a window two days from now: closed today, whatever the day
	opens := time.Now().UTC().AddDate(0, 0, 2).Truncate(24 * time.Hour)
	day := contracts.Weekdays[opens.Weekday()]
	body := `{"windows":[{"zone":"UTC","days":["` + day + `"],"from":"00:00","to":"01:00"}]}`
	r = s.do("PUT", "/v1/windows", "acme", strings.NewReader(body), js)
	if r.code != http.StatusOK {
		t.Fatalf("PUT: %d %s", r.code, r.body)
	}
	if r.json(t, &tw); tw.Tenant != "acme" || len(tw.Windows) != 1 || tw.Windows[0].Zone != "UTC" {
		t.Fatalf("PUT answered %+v", tw)
	}
	if r = s.do("GET", "/v1/windows?tenant=acme", "*", nil); r.code != http.StatusOK {
		t.Fatalf("GET as admin: %d %s", r.code, r.body)
	}
	if r.json(t, &tw); len(tw.Windows) != 1 || tw.Windows[0].Days[0] != day {
		t.Fatalf("GET as admin: %+v", tw)
	}

	s.submit("acme", "dflt", "?total=1", ndjson("j", 1, `{"ms":1}`))
	testkit.WaitFor(t, "the group held outside its tenant's window", 10*time.Second, func() bool {
		v := s.seen("acme", "dflt")
		return v.Status != nil && len(v.Status.Waiting) > 0 && v.Status.Waiting[0].Reason == "outside_window" &&
			v.Status.Waiting[0].Until != nil && v.Status.Waiting[0].Until.Equal(opens)
	})

	for _, tc := range []struct{ who, path, body, field string }{
		{"acme", "/v1/windows", `{"windows":[{"zone":"Mars/Olympus","days":["mon"],"from":"09:00","to":"17:00"}]}`, "windows[0].zone"},
		{"acme", "/v1/windows", `{"windows":[{"zone":"UTC","days":["someday"],"from":"09:00","to":"17:00"}]}`, "windows[0].days[0]"},
		{"acme", "/v1/windows", `{}`, "windows"},
		{"acme", "/v1/windows", `{"windows":[],"x":1}`, "x"},
		{"*", "/v1/windows", `{"windows":[]}`, "tenant"},
	} {
		r := s.do("PUT", tc.path, tc.who, strings.NewReader(tc.body), js)
		if r.code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", tc.body, r.code, r.body)
			continue
		}
		if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Field != tc.field {
			t.Errorf("%s: %+v, want the field %s named", tc.body, p.Errors, tc.field)
		}
	}

	if r = s.do("PUT", "/v1/windows", "acme", strings.NewReader(`{"windows":[]}`), js); r.code != http.StatusOK {
		t.Fatalf("PUT none: %d %s", r.code, r.body)
	}
	if r.json(t, &tw); len(tw.Windows) != 0 {
		t.Fatalf("after removing them: %+v", tw)
	}
	s.submit("acme", "open", "?total=1", ndjson("j", 1, `{"ms":1}`))
	s.waitState("acme", "open", "COMPLETED")
	if v := s.group("acme", "dflt"); v.State == "COMPLETED" {
		t.Errorf("the group created under the windows lost them: %s", v.State)
	}
}

// TestCancelAndPauseBeforeTheStartThroughTheAPI: a group scheduled an
// hour ahead is cancelled before it starts: it ends CANCELLED with none of
// its jobs run, and its completion callback gets the final event. Another
// is paused and resumed before its start: it is PAUSED, then waits for its
// notBefore again.
func TestCancelAndPauseBeforeTheStartThroughTheAPI(t *testing.T) {
	got := make(chan []byte, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- b
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	s := newServer(t, func(c *config.Config) { c.HTTPAllowedHosts = []string{"127.0.0.1"} })
	if r := s.do("POST", "/v1/callback-secret", "acme", nil); r.code != http.StatusCreated {
		t.Fatalf("callback secret: %d %s", r.code, r.body)
	}
	nb := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	s.submit("acme", "off", "?total=3&notBefore="+nb+"&callbackUrl="+url.QueryEscape(rcv.URL+"/done"), ndjson("j", 3, `{"ms":1}`))
	s.submit("acme", "held", "?total=2&notBefore="+nb, ndjson("j", 2, `{"ms":1}`))
	testkit.WaitFor(t, "the jobs counted", 10*time.Second, func() bool {
		return s.seen("acme", "off").Jobs == 3 && s.seen("acme", "held").Jobs == 2
	})

	if r := s.do("POST", "/v1/groups/off/cancel", "acme", nil); r.code != http.StatusAccepted {
		t.Fatalf("cancel: %d %s", r.code, r.body)
	}
	v := s.waitState("acme", "off", "CANCELLED")
	if v.StartedAt != nil || v.Succeeded != 0 || v.Cancelled != 3 {
		t.Errorf("cancelled before its start: started %v, %d succeeded, %d cancelled; want never started, 3 cancelled", v.StartedAt, v.Succeeded, v.Cancelled)
	}
	select {
	case b := <-got:
		var ev contracts.GroupEvent
		if err := json.Unmarshal(b, &ev); err != nil || ev.State != contracts.StateCancelled || ev.Cancelled != 3 || ev.GroupID != "off" {
			t.Errorf("callback body %s (%v), want the CANCELLED final event", b, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no callback for the group cancelled before its start")
	}

	if r := s.do("POST", "/v1/groups/held/pause", "acme", nil); r.code != http.StatusAccepted {
		t.Fatalf("pause: %d %s", r.code, r.body)
	}
	s.waitState("acme", "held", "PAUSED")
	if r := s.do("POST", "/v1/groups/held/resume", "acme", nil); r.code != http.StatusAccepted {
		t.Fatalf("resume: %d %s", r.code, r.body)
	}
	testkit.WaitFor(t, "scheduled again after the resume", 10*time.Second, func() bool {
		v := s.group("acme", "held")
		return v.State == "CREATED" && v.Status != nil && len(v.Status.Waiting) > 0 && v.Status.Waiting[0].Reason == "scheduled"
	})
}
