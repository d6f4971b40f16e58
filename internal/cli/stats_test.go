package cli_test

import (
	"testing"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func TestStatsWithoutNATS(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	enqueue(t, q, "a", 2, contracts.PriorityNormal)
	enqueue(t, q, "b", 1, contracts.PriorityNormal)
	enqueue(t, q, "c", 1, contracts.PriorityLow)
	s, err := cli.Stats(ctx, &cli.Conn{Redis: q.Client(), Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	if s.WaitingGroups != 3 || s.GroupsPerLevel["normal"] != 2 || s.GroupsPerLevel["low"] != 1 || s.GroupsPerLevel["high"] != 0 {
		t.Errorf("groups: %d %v", s.WaitingGroups, s.GroupsPerLevel)
	}
	if s.ReadyDepth != -1 {
		t.Errorf("ReadyDepth = %d without NATS, want -1", s.ReadyDepth)
	}
	if s.Rate.Limit != 10000 || s.Congestion == nil || s.At.IsZero() {
		t.Errorf("stats = %+v", s)
	}
}
