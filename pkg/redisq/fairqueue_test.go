package redisq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestEqualGroupsAlternate(t *testing.T) {
	for _, fixed := range []bool{false, true} {
		t.Run(fmt.Sprintf("sameMillisecond=%v", fixed), func(t *testing.T) {
			t.Parallel()
			q, _ := setup(t, redisq.Config{Alpha: 10000}, fixed)
			// B's name sorts first: ties must not fall back to member order.
			enqueueN(t, q, "gB", 3, "", 0)
			enqueueN(t, q, "gA", 3, "", 0)
			got := strings.Join(drain(t, q, 6), ",")
			if want := "gB,gA,gB,gA,gB,gA"; got != want {
				t.Fatalf("order %s, want %s", got, want)
			}
			if _, err := q.Dequeue(context.Background()); !errors.Is(err, redisq.ErrQueueEmpty) {
				t.Fatalf("after draining: %v", err)
			}
		})
	}
}

func TestEqualGroupsAlternateWithinOneBatch(t *testing.T) {
	q, _ := setup(t, redisq.Config{Alpha: 10000}, true)
	enqueueN(t, q, "gB", 3, "", 0)
	enqueueN(t, q, "gA", 3, "", 0)
	jobs, err := q.DequeueBatch(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range jobs {
		got = append(got, j.Group.ID+"/"+j.ID)
	}
	want := []string{"gB/j00000", "gA/j00000", "gB/j00001", "gA/j00001", "gB/j00002", "gA/j00002"}
	if !slices.Equal(got, want) {
		t.Fatalf("batch %v, want %v", got, want)
	}
}

func TestEarlierGroupServedFirst(t *testing.T) {
	q, b := setup(t, redisq.Config{Alpha: 10000}, true)
	enqueueN(t, q, "gZ", 2, "", 0)
	b.clock.advance(time.Millisecond)
	enqueueN(t, q, "gA", 2, "", 0)
	if got := drain(t, q, 1)[0]; got != "gZ" {
		t.Fatalf("first served %s, want the older gZ", got)
	}
}

func TestLowerBasePriorityFirst(t *testing.T) {
	q, _ := setup(t, redisq.Config{Alpha: 10000}, false)
	enqueueN(t, q, "normal", 2, "", 0)
	enqueueN(t, q, "premium", 2, "", -1_000_000)
	got := strings.Join(drain(t, q, 4), ",")
	if want := "premium,premium,normal,normal"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

func TestLevelsStrictlyOrdered(t *testing.T) {
	q, _ := setup(t, redisq.Config{Alpha: 10000}, false)
	enqueueN(t, q, "low", 2, contracts.PriorityLow, -1_000_000_000)
	enqueueN(t, q, "normal", 2, contracts.PriorityNormal, 0)
	enqueueN(t, q, "high", 2, contracts.PriorityHigh, 1_000_000_000)
	got := strings.Join(drain(t, q, 6), ",")
	if want := "high,high,normal,normal,low,low"; got != want {
		t.Fatalf("order %s, want %s", got, want)
	}
}

func TestEmptyGroupAtTopDoesNotHideItsLevel(t *testing.T) {
	q, b := setup(t, redisq.Config{}, false)
	ctx := context.Background()
	enqueueN(t, q, "empty", 1, "", -1000)
	enqueueN(t, q, "other", 1, "", 0)
	enqueueN(t, q, "low", 1, contracts.PriorityLow, 0)
	// The group's list empties behind the queue's back.
	if err := b.rdb.Del(ctx, q.Keys().GroupJobs(G("empty"))).Err(); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, q, 1)[0]; got != "other" {
		t.Fatalf("served %s, want the same level's next group", got)
	}
	if n, _ := b.rdb.ZCard(ctx, q.Keys().TenantGroups(testTenant, contracts.PriorityNormal)).Result(); n != 0 {
		t.Fatalf("normal level still holds %d groups", n)
	}
	if n, _ := b.rdb.ZCard(ctx, q.Keys().FairQueue(contracts.PriorityNormal)).Result(); n != 0 {
		t.Fatalf("normal level still holds %d tenants", n)
	}
}

// The reference priority cases pass with the corrected (+now) sign.
func TestFairScoreSeedCases(t *testing.T) {
	const now = 1_706_000_000_000
	older := redisq.FairScore(1706000000000, 0, 0, 100, 10000)
	newer := redisq.FairScore(1706001000000, 0, 0, 100, 10000)
	if !(older < newer) {
		t.Errorf("older request must score lower: %v vs %v", older, newer)
	}
	if !(redisq.FairScore(now, -1000000, 0, 100, 10000) < redisq.FairScore(now, 0, 0, 100, 10000)) {
		t.Error("lower basePriority must score lower")
	}
	if !(redisq.FairScore(now, 0, 95, 100, 10000) > redisq.FairScore(now, 0, 5, 100, 10000)) {
		t.Error("ALPHA > 0: the more-progressed group must score higher")
	}
	if !(redisq.FairScore(now, 0, 95, 100, -10000) < redisq.FairScore(now, 0, 5, 100, -10000)) {
		t.Error("ALPHA < 0: the more-progressed group must score lower")
	}
}

// The script and FairScore agree on the score a new group gets.
func TestScriptScoreMatchesFairScore(t *testing.T) {
	q, b := setup(t, redisq.Config{Alpha: 10000}, true)
	enqueueN(t, q, "g", 4, "", 250)
	got, err := b.rdb.ZScore(context.Background(), q.Keys().TenantGroups(testTenant, contracts.PriorityNormal), "g").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := redisq.FairScore(float64(b.clock.t.UnixMilli())+0.001, 250, 0, 4, 10000)
	if diff := got - want; diff > 1e-3 || diff < -1e-3 {
		t.Fatalf("score %f, want %f", got, want)
	}
}

func TestAlphaWeighsProgress(t *testing.T) {
	cases := []struct {
		alpha float64
		want  string // the three groups served after A's re-scored dequeue
	}{
		{10000, "gB,gB,gB"},  // fair share: the progressed group moves back
		{-10000, "gA,gA,gA"}, // SJF: the progressed group moves forward
		{0, "gB,gA,gB"},      // pure age order
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.alpha), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, _ := setup(t, redisq.Config{Alpha: tc.alpha}, true)
			enqueueN(t, q, "gA", 10, "", 0)
			enqueueN(t, q, "gB", 10, "", 0)
			first := drain(t, q, 2)
			if strings.Join(first, ",") != "gA,gB" {
				t.Fatalf("first two %v", first)
			}
			// A progresses: one of its jobs finishes.
			if _, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "gA", JobID: "j00000", Attempt: 1, Status: contracts.ResultSuccess}); err != nil {
				t.Fatal(err)
			}
			// A is still first (its score was set before), and is re-scored with its progress.
			if got := drain(t, q, 1)[0]; got != "gA" {
				t.Fatalf("third served %s", got)
			}
			if got := strings.Join(drain(t, q, 3), ","); got != tc.want {
				t.Fatalf("alpha %v: next %s, want %s", tc.alpha, got, tc.want)
			}
		})
	}
}

func TestConcurrentDequeueExactlyOnce(t *testing.T) {
	q, _ := setup(t, redisq.Config{Alpha: 10000}, false)
	const groups, perGroup = 50, 400
	for g := 0; g < groups; g++ {
		enqueueN(t, q, fmt.Sprintf("g%02d", g), perGroup, "", 0)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				n := 1 + w%7 // mix single and batched calls
				jobs, err := q.DequeueBatch(context.Background(), n)
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range jobs {
					seen[j.Group.ID+"/"+j.ID]++
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != groups*perGroup {
		t.Fatalf("%d distinct jobs dequeued, want %d", len(seen), groups*perGroup)
	}
	for k, n := range seen {
		if n != 1 {
			t.Fatalf("job %s dequeued %d times", k, n)
		}
	}
}

func TestLongRunWindowFairness(t *testing.T) {
	q, _ := setup(t, redisq.Config{Alpha: 10000}, false)
	const groups, perGroup = 20, 150
	for g := 0; g < groups; g++ {
		enqueueN(t, q, fmt.Sprintf("g%02d", g), perGroup, "", 0)
	}
	var order []string
	for len(order) < groups*perGroup {
		jobs, err := q.DequeueBatch(context.Background(), 37)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			order = append(order, j.Group.ID)
		}
	}
	if len(order) != groups*perGroup {
		t.Fatalf("dequeued %d of %d", len(order), groups*perGroup)
	}
	// Only windows in which all groups are still backlogged count.
	for i := 0; i+groups <= len(order)-groups; i++ {
		count := map[string]int{}
		for _, g := range order[i : i+groups] {
			count[g]++
			if count[g] > 2 {
				t.Fatalf("group %s served %d times in window [%d,%d): %v", g, count[g], i, i+groups, order[i:i+groups])
			}
		}
	}
}
