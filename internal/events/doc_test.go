package events

import (
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestEventOfUnsealedGroup(t *testing.T) {
	ev := Event(contracts.Group("t", "g"), redisq.GroupCounts{State: contracts.StateRunning, Declared: -1, Jobs: 3, Done: 1, Succeeded: 1}, time.Unix(0, 0))
	if ev.Total != 0 || ev.Jobs != 3 || ev.Succeeded != 1 || ev.V != contracts.Version || ev.Tenant != "t" || ev.State != contracts.StateRunning {
		t.Fatalf("event %+v", ev)
	}
	if err := ev.Validate(); err != nil {
		t.Fatal(err)
	}
}
