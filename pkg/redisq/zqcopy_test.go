package redisq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

// TestBatchAdmissionOrderEqualsSingle: a call that takes many jobs serves
// tenants' groups from a copy of their ZSETs (admit.lua); it must serve
// exactly the order that calls taking one job each (which read and write the
// ZSETs in place) serve, ties of score included (broken by member, bytewise).
func TestBatchAdmissionOrderEqualsSingle(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			ties := seed%2 == 0
			var jobs []redisq.Job
			tenants := []string{"A", "b", "C-1"}
			levels := []contracts.Priority{contracts.PriorityHigh, contracts.PriorityNormal, contracts.PriorityLow}
			for gi := 0; gi < 12; gi++ {
				g := contracts.GroupRef{Tenant: tenants[r.IntN(len(tenants))], ID: fmt.Sprintf("g%c%d", "aB_-"[r.IntN(4)], gi)}
				prio := levels[r.IntN(len(levels))]
				base := int64(r.IntN(3))
				if ties {
					base = 0
				}
				for k := 0; k < 1+r.IntN(20); k++ {
					jobs = append(jobs, redisq.Job{Group: g, ID: fmt.Sprintf("j%d", k), Type: "t", Priority: prio, BasePriority: base})
				}
			}
			r.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
			order := func(batch int) []string {
				q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
				if err := b.rdb.HSet(ctx, q.Keys().TenantWeights(), "b", 2).Err(); err != nil {
					t.Fatal(err)
				}
				for i := 0; i < len(jobs); i += 7 {
					if _, err := q.EnqueueBatch(ctx, jobs[i:min(i+7, len(jobs))]); err != nil {
						t.Fatal(err)
					}
				}
				if ties {
					// every group of a tenant and level at the score the next
					// serve gives a group of base priority 0: ties go by member
					const v = 1_706_000_001_000
					if err := b.rdb.Set(ctx, q.Keys().VClock(), v, 0).Err(); err != nil {
						t.Fatal(err)
					}
					for _, tn := range tenants {
						for _, l := range levels {
							key := q.Keys().TenantGroups(tn, l)
							ms, _ := b.rdb.ZRange(ctx, key, 0, -1).Result()
							for _, m := range ms {
								b.rdb.ZAdd(ctx, key, redis.Z{Score: v + 0.001, Member: m})
							}
						}
					}
				}
				var got []string
				for {
					js, err := q.DequeueBatch(ctx, batch)
					if err != nil {
						t.Fatal(err)
					}
					if len(js) == 0 {
						break
					}
					for _, j := range js {
						got = append(got, j.Group.String()+"/"+j.ID)
					}
				}
				return got
			}
			one, many := order(1), order(1000)
			if len(one) != len(jobs) {
				t.Fatalf("dequeued %d of %d jobs", len(one), len(jobs))
			}
			if !slices.Equal(one, many) {
				t.Fatalf("orders differ:\none at a time %v\nbatched      %v", one, many)
			}
			if mid := order(5); !slices.Equal(one, mid) {
				t.Fatalf("orders differ:\none at a time %v\n5 at a time  %v", one, mid)
			}
		})
	}
}
