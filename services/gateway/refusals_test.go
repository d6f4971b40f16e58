package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// TestRefusedSubmissionsAreVisibleAndRetried: two requests race for a
// tenant's last room in its quota of queued jobs (the fetcher does not read
// SUBMIT meanwhile, so both pass the gateway's own check and are answered
// 202); the pipeline stores the first and refuses the second (over_quota).
// The refusal shows in GET of the group, with its reason, and a group that
// the refused message would have created answers 404 saying so. Once the
// quota is raised, the same requests sent again are stored, not dropped as
// duplicates of the refused messages, and the sealed group completes; a
// further repeat changes nothing.
func TestRefusedSubmissionsAreVisibleAndRetried(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	ctx := context.Background()
	c := s.st.Conns
	if err := c.Queue.SetTenantQuota(ctx, "acme", redisq.QuotaQueuedJobs, 4); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.PauseConsumer(ctx, c.Names.StreamSubmit(), fetcher.DefaultDurable, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// held: 3 jobs of a type no worker takes, so they stay queued.
	s.submit("acme", "held", "", strings.ReplaceAll(ndjson("h", 3, `{}`), `"sleep"`, `"noworker"`))
	second := ndjson("s", 3, `{"ms":1}`)
	s.submit("acme", "second", "?total=3", second) // its jobs are refused, its seal creates the group
	third := ndjson("t", 2, `{"ms":1}`)
	s.submit("acme", "third", "", third) // refused: the group is never created
	if _, err := c.JS.ResumeConsumer(ctx, c.Names.StreamSubmit(), fetcher.DefaultDurable); err != nil {
		t.Fatal(err)
	}

	var v gateway.GroupView
	var body []byte
	testkit.WaitFor(t, "second's refusal shown", 30*time.Second, func() bool {
		r := s.do("GET", "/v1/groups/second", "acme", nil)
		if r.code != http.StatusOK {
			return false
		}
		r.json(t, &v)
		body = r.body
		return v.Refused != nil
	})
	d := doc(t)
	if err := d.validate(t, "/components/schemas/GroupView", body); err != nil {
		t.Errorf("GET of a group with refusals does not match the OpenAPI document: %v\n%s", err, body)
	}
	rf := v.Refused
	if v.Jobs != 0 || v.Total == nil || *v.Total != 3 || rf.Messages != 1 || rf.Jobs != 3 || rf.LastReason != fetcher.ReasonOverQuota ||
		!strings.Contains(rf.LastError, "tenant.maxQueuedJobs is 4") || rf.LastAt.IsZero() ||
		len(rf.ByReason) != 1 || rf.ByReason[0].Reason != fetcher.ReasonOverQuota || rf.ByReason[0].Jobs != 3 ||
		len(rf.Recent) != 1 || rf.Recent[0].MessageID == "" || rf.Recent[0].Jobs != 3 {
		t.Errorf("second: jobs %d, total %v, refused %+v", v.Jobs, v.Total, rf)
	}
	// Its events say so too: the notice of the refusal, or (when the
	// refusal came before the seal created it) its CREATED event.
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	evs, _ := s.sse(sctx, "acme", "second", "0")
	var refusedEv map[string]any
	for ev := range evs {
		if rf, ok := ev.data["refused"].(map[string]any); ok {
			refusedEv = rf
			break
		}
	}
	cancel()
	if refusedEv == nil || refusedEv["reason"] != fetcher.ReasonOverQuota || refusedEv["jobs"] != float64(3) {
		t.Errorf("second's events carry no refusal: %v", refusedEv)
	}

	r := s.do("GET", "/v1/groups/third", "acme", nil)
	if r.code != http.StatusNotFound {
		t.Fatalf("third: %d %s, want 404", r.code, r.body)
	}
	if err := d.validate(t, "/components/schemas/Problem", r.body); err != nil {
		t.Errorf("404 of a refused group does not match the OpenAPI document: %v\n%s", err, r.body)
	}
	p := r.problem(t)
	if p.Refused == nil || p.Refused.LastReason != fetcher.ReasonOverQuota || p.Refused.Jobs != 2 || !strings.Contains(p.Detail, "over_quota") {
		t.Errorf("third: problem %+v (refused %+v), want a 404 naming the refusal", p, p.Refused)
	}

	// The quota raised, the same requests are stored.
	if err := c.Queue.SetTenantQuota(ctx, "acme", redisq.QuotaQueuedJobs, 100); err != nil {
		t.Fatal(err)
	}
	s.submit("acme", "second", "?total=3", second)
	s.submit("acme", "third", "", third)
	v = s.waitState("acme", "second", "COMPLETED")
	if v.Jobs != 3 || v.Succeeded != 3 {
		t.Errorf("second after its retry: %d jobs, %d succeeded; want 3 and 3", v.Jobs, v.Succeeded)
	}
	testkit.WaitFor(t, "third stored", 30*time.Second, func() bool {
		r := s.do("GET", "/v1/groups/third", "acme", nil)
		if r.code != http.StatusOK {
			return false
		}
		r.json(t, &v)
		return v.Jobs == 2
	})
	// The refusals stay on record, in the listing's full view too (not in
	// its summary); a further repeat is a duplicate.
	if v = s.group("acme", "second"); v.Refused == nil || v.Refused.Messages != 1 {
		t.Errorf("second after its retry: refused %+v, want the refusal kept", v.Refused)
	}
	for view, want := range map[string]bool{"full": true, "summary": false} {
		var list gateway.GroupList
		s.do("GET", "/v1/groups?view="+view, "acme", nil).json(t, &list)
		found := false
		for _, g := range list.Groups {
			if g.GroupID == "third" {
				found = g.Refused != nil && g.Refused.Jobs == 2
			}
		}
		if found != want {
			t.Errorf("GET /v1/groups?view=%s: third's refusal shown %v, want %v", view, found, want)
		}
	}
	s.submit("acme", "third", "", third)
	time.Sleep(300 * time.Millisecond)
	if v = s.group("acme", "third"); v.Jobs != 2 || v.Refused == nil || v.Refused.Messages != 1 {
		t.Errorf("third after a repeat: %d jobs, refused %+v", v.Jobs, v.Refused)
	}
}
