package fetcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// TestTenantSharesOverTime: two backlogged tenants, A with one group of
// 10,000 jobs and B with 20 groups of 500, share paced admission by their
// weights in every 2-second window: B's twenty groups give it no more than
// A's one.
func TestTenantSharesOverTime(t *testing.T) {
	t.Parallel()
	for _, weightA := range []int{1, 2} {
		t.Run(fmt.Sprintf("weights_%d_1", weightA), func(t *testing.T) {
			t.Parallel()
			testTenantShares(t, weightA)
		})
	}
}

func testTenantShares(t *testing.T, weightA int) {
	const (
		capacity  = 500
		limit     = 2000 // jobs/s
		nA        = 10000
		nB, perB  = 20, 500
		window    = 2 * time.Second
		run       = 6500 * time.Millisecond
		minWindow = 200 // jobs: a window with fewer (a starved machine) is not measured
		tolerance = 0.05
	)
	e := pipelinetest.NewEnv(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: limit})
	ctx := context.Background()
	holdReady(t, e, capacity)
	if weightA != 1 {
		if err := e.Queue.SetTenantWeight(ctx, "A", weightA); err != nil {
			t.Fatal(err)
		}
	}
	c := client.New(e.JS, client.Options{})
	a := contracts.Group("A", "big")
	var bs []contracts.GroupRef
	for i := range nB {
		bs = append(bs, contracts.Group("B", groupName(i)))
	}
	stop := testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity}}, e.Deps()))
	if err := c.ForTenant("A").Submit(ctx, a.ID, clientJobs(a.ID, 0, nA)...); err != nil {
		t.Fatal(err)
	}
	for _, g := range bs {
		if err := c.ForTenant("B").Submit(ctx, g.ID, clientJobs(g.ID, 0, perB)...); err != nil {
			t.Fatal(err)
		}
	}
	pending := func(gs ...contracts.GroupRef) (n int64) {
		for _, g := range gs {
			n += groupInfo(t, e, g).Pending
		}
		return n
	}
	testkit.WaitFor(t, "every job queued", 60*time.Second, func() bool {
		return pending(a) == nA && pending(bs...) == nB*perB
	})

	// READY drains: admission starts with both tenants backlogged.
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	var first pipelinetest.Msg
	testkit.WaitFor(t, "first job", 0, func() bool {
		jobs := r.Jobs()
		if len(jobs) > 0 {
			first = jobs[0]
		}
		return len(jobs) > 0
	})
	t0 := first.At
	time.Sleep(time.Until(t0.Add(run)))
	stop()
	end := time.Now()
	if pa, pb := pending(a), pending(bs...); pa == 0 || pb == 0 {
		t.Fatalf("a tenant ran out of jobs (A %d, B %d queued): the run did not keep both backlogged", pa, pb)
	}

	got := r.Jobs()
	n := int(end.Sub(t0) / window)
	perA, perB2 := make([]int, n), make([]int, n)
	total := 0
	for _, m := range got {
		k := int(m.At.Sub(t0) / window)
		if k >= n {
			continue
		}
		total++
		switch m.Job.Tenant {
		case "A":
			perA[k]++
		case "B":
			perB2[k]++
		default:
			t.Fatalf("%s: unknown tenant", m.Key())
		}
	}
	t.Logf("weights A:B %d:1, %d jobs in %d full windows of %s (%.0f jobs/s, limit %d/s)",
		weightA, total, n, window, float64(total)/(float64(n)*window.Seconds()), limit)
	measured := 0
	for k := range n {
		ca, cb := perA[k], perB2[k]
		if ca+cb < minWindow {
			t.Logf("window %d: A %d B %d: fewer than %d jobs, not measured", k, ca, cb, minWindow)
			continue
		}
		measured++
		// Shares normalised by weight: equal when fair.
		xa, xb := float64(ca)/float64(weightA), float64(cb)
		ratio := xa / xb
		jain := (xa + xb) * (xa + xb) / (2 * (xa*xa + xb*xb))
		t.Logf("window %d: A %d B %d, A/B = %.3f (want %d), Jain %.5f", k, ca, cb, float64(ca)/float64(cb), weightA, jain)
		if math.Abs(ratio-1) > tolerance || math.IsNaN(ratio) {
			t.Errorf("window %d: A %d B %d: ratio %.3f, want %d within ±5%%", k, ca, cb, float64(ca)/float64(cb), weightA)
		}
		if jain < 0.99 {
			t.Errorf("window %d: Jain's index %.4f of the weighted shares, want >= 0.99", k, jain)
		}
	}
	if measured < 2 {
		t.Fatalf("only %d windows of at least %d jobs measured, want 2 or more", measured, minWindow)
	}
}

// TestTenantsShareGroupIDs: two tenants use the same groupIds; a seal or a
// cancel of one tenant's group leaves the other's alone, and each tenant's
// jobs reach READY as its own.
func TestTenantsShareGroupIDs(t *testing.T) {
	t.Parallel()
	const capacity, n, more = 50, 100, 10
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	holdReady(t, e, capacity)
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity}}, e.Deps()))
	c := client.New(e.JS, client.Options{})
	c1 := c.ForTenant("t1")
	s1, s2 := contracts.Group("t1", "s"), contracts.Group("t2", "s")
	x1, x2 := contracts.Group("t1", "x"), contracts.Group("t2", "x")
	submit := func(cl *client.Client, g contracts.GroupRef, from, to int) {
		t.Helper()
		jobs := make([]client.Job, 0, to-from)
		for i := from; i < to; i++ {
			jobs = append(jobs, client.Job{ID: jobID(i), Type: "t", Payload: tenantPayload(g, i)})
		}
		if err := cl.Submit(ctx, g.ID, jobs...); err != nil {
			t.Fatal(err)
		}
	}
	// While READY is held full: n jobs in each group; t1/s is sealed and
	// t1/x cancelled; then more jobs for every group.
	for _, g := range []contracts.GroupRef{s1, s2, x1, x2} {
		submit(c.ForTenant(g.Tenant), g, 0, n)
	}
	if err := c1.Seal(ctx, "s", n); err != nil {
		t.Fatal(err)
	}
	if err := c1.Cancel(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	for _, g := range []contracts.GroupRef{s1, s2, x1, x2} {
		submit(c.ForTenant(g.Tenant), g, n, n+more)
	}
	// Every submission applied (or dead-lettered), not merely counted as
	// delivered: the checks below and opening READY need t1/x cancelled.
	waitSubmitDrained(t, e)

	check := func(g contracts.GroupRef, state contracts.GroupState, declared, jobs, pending, cancelled int64) {
		t.Helper()
		info := groupInfo(t, e, g)
		if info.State != state || info.Declared != declared || info.Jobs != jobs || info.Pending != pending || info.Cancelled != cancelled {
			t.Errorf("%s: state %s declared %d jobs %d pending %d cancelled %d; want %s %d %d %d %d", g,
				info.State, info.Declared, info.Jobs, info.Pending, info.Cancelled, state, declared, jobs, pending, cancelled)
		}
	}
	check(s1, contracts.StateCreated, n, n, n, 0)
	check(s2, contracts.StateCreated, -1, n+more, n+more, 0)
	check(x1, contracts.StateCancelled, -1, n, 0, n)
	check(x2, contracts.StateCreated, -1, n+more, n+more, 0)
	dls := deadLetters(t, e)
	reasons := map[string]int{}
	for _, dl := range dls {
		reasons[dl.Subject+" "+dl.Reason]++
	}
	if len(dls) != 2 || reasons[e.Names.Submit(s1)+" "+fetcher.ReasonOverTotal] != 1 ||
		reasons[e.Names.Submit(x1)+" "+fetcher.ReasonGroupEnded] != 1 {
		t.Errorf("dead letters %v, want t1/s's extra jobs over_total and t1/x's group_ended", reasons)
	}
	if t.Failed() {
		// What READY would then get says nothing more.
		t.FailNow()
	}

	// READY drains: every job of t1/s, t2/s and t2/x, none of t1/x.
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	wantN := map[contracts.GroupRef]int{s1: n, s2: n + more, x2: n + more}
	r.WaitJobs(t, 3*n+2*more, 0)
	testkit.WaitFor(t, "t1/s drained", 0, func() bool { return groupInfo(t, e, s1).State == contracts.StateAggregating })
	e.WaitReadyDrained(t)
	got := r.Jobs()
	if by := readyByGroup(got); len(by) != len(wantN) || by[s1] != wantN[s1] || by[s2] != wantN[s2] || by[x2] != wantN[x2] {
		t.Errorf("READY got %v, want %v", by, wantN)
	}
	for k, cnt := range pipelinetest.Counts(got) {
		if cnt != 1 {
			t.Errorf("%s on READY %d times", k, cnt)
		}
	}
	for _, m := range got {
		var p struct {
			Tenant string `json:"tenant"`
			G      string `json:"g"`
		}
		if err := json.Unmarshal(m.Job.Payload, &p); err != nil {
			t.Fatalf("%s: payload %s: %v", m.Key(), m.Job.Payload, err)
		}
		if p.Tenant != m.Job.Tenant || p.G != m.Job.GroupID {
			t.Fatalf("%s carries the payload of %s/%s", m.Key(), p.Tenant, p.G)
		}
	}
	check(s2, contracts.StateRunning, -1, n+more, 0, 0)
	check(x2, contracts.StateRunning, -1, n+more, 0, 0)

	// Each group's events are its own: only t1/x was cancelled, only t1/s
	// drained.
	evs := groupEvents(t, e)
	for g, st := range map[contracts.GroupRef]contracts.GroupState{x1: contracts.StateCancelled, s1: contracts.StateAggregating} {
		other := contracts.Group("t2", g.ID)
		if !containsState(evs[g], st) || containsState(evs[other], st) {
			t.Errorf("%s: events %s; %s: events %s; want %s for %s only", g, describe(evs[g]), other, describe(evs[other]), st, g)
		}
	}
	if v := testkit.Value(t, e.Metrics.GroupCompletions.WithLabelValues(telemetry.StateCancelled)); v != 1 {
		t.Errorf("cancelled groups %v, want 1", v)
	}
}

func containsState(evs []*contracts.GroupEvent, s contracts.GroupState) bool {
	for _, ev := range evs {
		if ev.State == s && ev.Notice == "" {
			return true
		}
	}
	return false
}

// TestSubjectMismatchIsDeadLettered: the subject names the group; a body
// that names another tenant or groupId is dead-lettered subject_mismatch
// and changes nothing, while one that agrees with the subject is accepted.
func TestSubjectMismatchIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	g := contracts.Group("A", "g")
	subject := e.Names.Submit(g)
	bad := []string{
		`{"v":2,"kind":"jobs","tenant":"B","jobs":[{"jobId":"j1","type":"t"}]}`,
		`{"v":2,"kind":"jobs","tenant":"A","groupId":"h","jobs":[{"jobId":"j2","type":"t"}]}`,
		`{"v":2,"kind":"seal","tenant":"B","total":1}`,
		`{"v":2,"kind":"cancel","tenant":"B","groupId":"g"}`,
		`{"v":2,"kind":"pause","tenant":"B"}`,
	}
	for _, body := range bad {
		publishRaw(t, e, subject, body)
	}
	publishRaw(t, e, subject, `{"v":2,"kind":"jobs","tenant":"A","groupId":"g","jobs":[{"jobId":"ok","type":"t"}]}`)
	waitSubmitDrained(t, e)
	got := r.WaitJobs(t, 1, 0)

	dls := deadLetters(t, e)
	if len(dls) != len(bad) {
		t.Fatalf("%d dead letters, want %d", len(dls), len(bad))
	}
	for i, dl := range dls {
		if dl.Reason != contracts.ReasonSubjectMismatch || dl.On != e.Names.DLQOf(subject, contracts.ReasonSubjectMismatch) ||
			dl.Subject != subject || string(dl.Message) != bad[i] || dl.Error == "" {
			t.Errorf("dead letter %d: reason %q on %s, subject %s, message %s, error %q; want subject_mismatch of %s",
				i, dl.Reason, dl.On, dl.Subject, dl.Message, dl.Error, bad[i])
		}
	}
	if v := testkit.Value(t, e.Metrics.DeadLetters.WithLabelValues(contracts.ReasonSubjectMismatch)); v != float64(len(bad)) {
		t.Errorf("subject_mismatch dead letters %v, want %d", v, len(bad))
	}
	info := groupInfo(t, e, g)
	if info.State != contracts.StateRunning || info.Jobs != 1 || info.Declared != -1 {
		t.Errorf("A/g: state %s jobs %d declared %d, want RUNNING with the one agreeing job, not sealed", info.State, info.Jobs, info.Declared)
	}
	for _, other := range []contracts.GroupRef{contracts.Group("B", "g"), contracts.Group("A", "h")} {
		if _, ok, err := e.Queue.Group(ctx, other); err != nil || ok {
			t.Errorf("%s exists (%v, %v): a mismatched body was applied", other, ok, err)
		}
	}
	if len(got) != 1 || got[0].Key() != "A:g:ok" {
		t.Errorf("READY got %v, want A:g:ok only", keys(got))
	}
}

func keys(msgs []pipelinetest.Msg) string {
	var ks []string
	for _, m := range msgs {
		ks = append(ks, m.Key())
	}
	return strings.Join(ks, " ")
}
