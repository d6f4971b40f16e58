package fetcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// With shards, two fetchers split them under leases and admit each from
// its own at the shard's grant of the global limit: tenants that all
// live in one of eight shards get the whole limit (an even split of the
// limit between shards would give them an eighth), and no second of
// admissions passes it.
func TestFetchersShareShardsAndTheGlobalLimit(t *testing.T) {
	const shards, limit = 8, 300
	e := pipelinetest.NewEnv(t, redisq.Config{Shards: shards, GlobalLimit: limit})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	leases, err := e.Queue.NewShardLeases(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the shards split between the two fetchers", 30*time.Second, func() bool {
		ls, err := leases.Leases(ctx)
		if err != nil || len(ls) != shards {
			return false
		}
		per := map[string]int{}
		for _, l := range ls {
			per[l.Holder]++
		}
		return len(per) == 2 && per[ls[0].Holder] == shards/2
	})

	// four tenants, every one in shard 3
	var tenants []string
	for i := 0; len(tenants) < 4; i++ {
		if tn := fmt.Sprintf("tenant%d", i); redisq.ShardOf(tn, shards) == 3 {
			tenants = append(tenants, tn)
		}
	}
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	c := client.New(e.JS, client.Options{})
	const perTenant = 300
	for _, tn := range tenants {
		if err := c.ForTenant(tn).Submit(ctx, "g", clientJobs("g", 0, perTenant)...); err != nil {
			t.Fatal(err)
		}
	}
	msgs := r.WaitJobs(t, len(tenants)*perTenant, time.Minute)
	perSecond := map[int64]int{}
	seen := map[string]bool{}
	for _, m := range msgs {
		if seen[m.Key()] {
			t.Fatalf("job %s on READY twice", m.Key())
		}
		seen[m.Key()] = true
		perSecond[m.Stored.Unix()]++
	}
	most := 0
	for _, n := range perSecond {
		most = max(most, n)
	}
	t.Logf("jobs per second on READY: %v", perSecond)
	// READY's store times trail admission by a few ms, so a second may
	// take a few jobs of the next; a limit split evenly between the
	// shards would give these tenants limit/8 a second
	if most > limit*105/100 {
		t.Errorf("%d jobs reached READY in one second, limit %d", most, limit)
	}
	if most < limit/2 {
		t.Errorf("at most %d jobs a second reached READY: the tenants of one shard got less than half the limit %d", most, limit)
	}
}
