package redisq_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestClaimSuspectsAndSoloRuns: a job claimed again while RUNNING as its
// attempt, without a hand-back, is a suspect (its holder stopped while it
// ran); one handed back on purpose is not. Solo runs are counted per
// attempt and only while the job is RUNNING as that attempt.
func TestClaimSuspectsAndSoloRuns(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{Lease: 5 * time.Second}, true)
	enqueueN(t, q, "a", 2, "", 0)
	r := admit(t, q, 2)
	if len(r.Jobs) != 2 {
		t.Fatalf("admitted %d", len(r.Jobs))
	}
	crashed, handed := r.Jobs[0], r.Jobs[1]
	d := func(j redisq.LeasedJob) redisq.Delivery {
		return redisq.Delivery{Group: j.Group, JobID: j.ID, Attempt: 1}
	}
	claim := func(j redisq.LeasedJob) redisq.Claimed {
		t.Helper()
		got, err := q.ClaimBatch(ctx, []redisq.Delivery{d(j)})
		if err != nil || len(got) != 1 || got[0].Outcome != redisq.ClaimRun {
			t.Fatalf("claim %s: %+v %v", j.ID, got, err)
		}
		return got[0]
	}
	for _, j := range []redisq.LeasedJob{crashed, handed} {
		if c := claim(j); c.Suspect || c.Claims != 1 {
			t.Fatalf("first claim of %s: %+v, want no suspect", j.ID, c)
		}
	}
	if err := q.HandBack(ctx, d(handed)); err != nil {
		t.Fatal(err)
	}
	if c := claim(crashed); !c.Suspect || c.Claims != 2 {
		t.Errorf("claim after a holder stopped: %+v, want a suspect", c)
	}
	if c := claim(handed); c.Suspect || c.Claims != 2 {
		t.Errorf("claim after a hand-back: %+v, want no suspect", c)
	}
	// The hand-back mark is used up by the claim that follows it.
	if c := claim(handed); !c.Suspect {
		t.Errorf("claim after a holder stopped (again): %+v, want a suspect", c)
	}
	for want := 1; want <= 3; want++ {
		n, ok, err := q.SoloRun(ctx, crashed.Group, crashed.ID, 1)
		if err != nil || !ok || n != want {
			t.Fatalf("solo run: %d %v %v, want %d", n, ok, err, want)
		}
	}
	if _, ok, err := q.SoloRun(ctx, crashed.Group, crashed.ID, 2); err != nil || ok {
		t.Errorf("solo run of another attempt: ok %v %v, want stale", ok, err)
	}
}
