package fetcher_test

import (
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// publishWithID publishes body on subject under a message id.
func publishWithID(t *testing.T, e *pipelinetest.Env, subject, id, body string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	m.Header.Set(nats.MsgIdHdr, id)
	if _, err := e.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

// TestRefusalsAreRecordedInTheirGroup: every message the fetcher
// dead-letters after its publish was acknowledged is recorded in the group
// its subject names, with its reason, its refused jobs and its message id
// (an over_quota message, a message beyond a sealed total, a bad seal, an
// invalid message); a group that exists gets a notice event carrying its
// refused counts; a group that does not exist is not created by it.
func TestRefusalsAreRecordedInTheirGroup(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{TenantMaxQueuedJobs: 10})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	g, h, s := contracts.Group("t1", "g"), contracts.Group("t1", "h"), contracts.Group("t2", "s")

	publishWithID(t, e, e.Names.Submit(g), "t1:g:a", jobsBody(g, 0, 8))
	publishWithID(t, e, e.Names.Submit(g), "t1:g:b", jobsBody(g, 6, 12)) // 2 known, 4 new: over the quota of 10
	publishWithID(t, e, e.Names.Submit(h), "t1:h:a", jobsBody(h, 0, 3))  // a new group: over too
	publishWithID(t, e, e.Names.Submit(s), "t2:s:a", jobsBody(s, 0, 3))
	publishWithID(t, e, e.Names.Submit(s), "t2:s:seal:2", `{"v":2,"kind":"seal","total":2}`) // below its 3 jobs
	publishWithID(t, e, e.Names.Submit(s), "t2:s:bad", `{"v":2,"kind":"jobs","jobs":[{"jobId":"x","type":""},{"jobId":"y","type":"t"}]}`)
	waitSubmitDrained(t, e)

	rg, err := e.Queue.GroupRefusals(ctx, g)
	if err != nil || rg == nil {
		t.Fatalf("refusals of %s: %+v, %v", g, rg, err)
	}
	if r := rg; r.Messages != 1 || r.Jobs != 4 || r.Last.Reason != fetcher.ReasonOverQuota || r.Last.MsgID != "t1:g:b" ||
		!strings.Contains(r.Last.Error, "tenant.maxQueuedJobs is 10") || r.Last.At.IsZero() {
		t.Errorf("refusals of %s: %+v", g, r)
	}
	if r, err := e.Queue.GroupRefusals(ctx, h); err != nil || r == nil || r.Messages != 1 || r.Jobs != 3 || r.Last.Reason != fetcher.ReasonOverQuota {
		t.Errorf("refusals of %s: %+v, %v", h, r, err)
	}
	if _, ok, err := e.Queue.Group(ctx, h); err != nil || ok {
		t.Errorf("%s exists after its only message was refused (%v)", h, err)
	}
	r, err := e.Queue.GroupRefusals(ctx, s)
	if err != nil || r == nil {
		t.Fatalf("refusals of %s: %+v, %v", s, r, err)
	}
	if r.Messages != 2 || r.Jobs != 2 || r.Last.Reason != contracts.ReasonInvalidField {
		t.Errorf("refusals of %s: %+v", s, r)
	}
	reasons := map[string]int64{}
	for _, c := range r.ByReason {
		reasons[c.Reason] = c.Messages
	}
	if reasons[fetcher.ReasonBadSeal] != 1 || len(reasons) != 2 {
		t.Errorf("refusals of %s by reason: %+v", s, r.ByReason)
	}
	ids, err := e.Queue.RefusedMsgIDs(ctx, g)
	if err != nil || redisq.RetryMsgID(ids, "t1:g:b") != "t1:g:b:r1" || redisq.RetryMsgID(ids, "t1:g:a") != "t1:g:a" {
		t.Errorf("refused ids of %s: %v, %v", g, ids, err)
	}

	// The group that exists got a notice carrying its refused counts.
	var refused []*contracts.GroupEvent
	testkit.WaitFor(t, "a refusal notice of "+g.String(), 0, func() bool {
		refused = refused[:0]
		for _, ev := range notices(eventsOf(t, e, g)) {
			if ev.Refused != nil {
				refused = append(refused, ev)
			}
		}
		return len(refused) > 0
	})
	ev := refused[len(refused)-1]
	if *ev.Refused != (contracts.RefusedCounts{Messages: 1, Jobs: 4, Reason: fetcher.ReasonOverQuota}) ||
		!strings.Contains(ev.Notice, "over_quota") || ev.Jobs != 8 {
		t.Errorf("refusal notice of %s: %+v (refused %+v)", g, ev, ev.Refused)
	}
	if evs := eventsOf(t, e, h); len(evs) != 0 {
		t.Errorf("events of %s, which does not exist: %s", h, describe(evs))
	}

	// A refused message redelivered (its dead letter not stored, say) is
	// not counted again: the same stream sequence.
	if rg.Last.Seq == 0 {
		t.Fatalf("refusal of %s without its SUBMIT sequence: %+v", g, rg.Last)
	}
	if rec, err := e.Queue.RecordRefusal(ctx, g, redisq.Refusal{MsgID: "t1:g:b", Seq: rg.Last.Seq, Reason: fetcher.ReasonOverQuota, Jobs: 4}); err != nil {
		t.Fatal(err)
	} else if r2, _ := e.Queue.GroupRefusals(ctx, g); rec.Recorded || r2.Messages != 1 {
		t.Errorf("a redelivery was counted again: %+v", r2)
	}
}
