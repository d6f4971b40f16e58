package fetcher_test

import (
	"context"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// A group keeps the callback URL it was created with; a later submission
// that asks for another is reported on the group's events, not applied.
func TestCallbackURLKeptAndOtherReported(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	c := client.New(e.JS, client.Options{Tenant: "acme"})
	g := contracts.Group("acme", "cb")
	first := contracts.GroupSettings{CallbackURL: "https://hooks.example.com/a"}
	other := contracts.GroupSettings{CallbackURL: "https://hooks.example.com/b"}
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))

	if err := c.SubmitGroup(ctx, g.ID, first, clientJobs(g.ID, 0, 2)...); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "cb created", 0, func() bool { return groupInfo(t, e, g).Jobs == 2 })
	if n := len(notices(eventsOf(t, e, g))); n != 0 {
		t.Fatalf("%d notices after the submission that created the group", n)
	}
	if err := c.SubmitGroup(ctx, g.ID, other, clientJobs(g.ID, 2, 3)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	if u, err := e.Queue.CallbackURLOf(ctx, g); err != nil || u != first.CallbackURL {
		t.Errorf("callback URL %q, %v; want the first one kept", u, err)
	}
	ns := notices(eventsOf(t, e, g))
	if len(ns) != 1 || !strings.Contains(ns[0].Notice, `callbackUrl "https://hooks.example.com/b" (the group keeps https://hooks.example.com/a)`) {
		t.Errorf("%d notices (first %+v), want one naming the callbackUrl not applied", len(ns), ns)
	}
}
