package redisq_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Groups whose keys expired leave the group indexes at the next sweep,
// without anyone listing them; live groups stay listed.
func TestPruneGroupIndexesWithoutListing(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{GroupTTL: time.Second}, false)
	ctx := context.Background()
	k := q.Keys()
	var ended []contracts.GroupRef
	for i := range 1200 { // more than a page of the sweep
		g := fmt.Sprintf("short%04d", i)
		enqueueN(t, q, g, 1, contracts.PriorityNormal, 0)
		ended = append(ended, G(g))
	}
	enqueueN(t, q, "live", 2, contracts.PriorityNormal, 0)
	enqueueN(t, q, "other/live", 1, contracts.PriorityNormal, 0)
	for _, g := range ended {
		if res, err := q.Cancel(ctx, g); err != nil || res.Outcome != redisq.Cancelled {
			t.Fatalf("cancel %s: %+v, %v", g, res, err)
		}
	}
	if n := b.rdb.ZCard(ctx, k.GroupIndex()).Val(); n != 1202 {
		t.Fatalf("group index holds %d entries, want 1202", n)
	}
	testkit.WaitFor(t, "ended groups expire", 10*time.Second, func() bool {
		return b.rdb.Exists(ctx, k.GroupMeta(ended[len(ended)-1])).Val() == 0
	})
	pruned := 0
	for range 10 { // each call bounded; a few reach the end
		n, err := q.PruneGroupIndexes(ctx, time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		pruned += n
		if pruned == len(ended) {
			break
		}
	}
	if pruned != len(ended) {
		t.Errorf("pruned %d entries, want %d", pruned, len(ended))
	}
	all := b.rdb.ZRange(ctx, k.GroupIndex(), 0, -1).Val()
	slices.Sort(all)
	if !slices.Equal(all, []string{"other:live", testTenant + ":live"}) {
		t.Errorf("group index %v, want the live groups only", all)
	}
	if got := b.rdb.ZRange(ctx, k.TenantGroupIndex(testTenant), 0, -1).Val(); !slices.Equal(got, []string{"live"}) {
		t.Errorf("tenant index %v, want [live]", got)
	}
	if got := b.rdb.ZRange(ctx, k.TenantGroupIndex("other"), 0, -1).Val(); !slices.Equal(got, []string{"live"}) {
		t.Errorf("tenant other's index %v, want [live]", got)
	}
	// Nothing left to prune: a call finds nothing and keeps the live ones.
	if n, err := q.PruneGroupIndexes(ctx, 0); n != 0 || err != nil {
		t.Errorf("second sweep pruned %d, %v", n, err)
	}
}
