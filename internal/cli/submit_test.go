package cli_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// SubmitFile publishes to the client's tenant, with the group settings on
// every jobs message, in messages of at most 100 jobs, then seals.
func TestSubmitFileTenantAndSettings(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	names := contracts.Names{}
	if err := natsutil.EnsureStreams(ctx, js, names, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 250 {
		lines = append(lines, fmt.Sprintf(`{"i":%d}`, i))
	}
	g := contracts.Group("acme", "g")
	set := contracts.GroupSettings{Priority: contracts.PriorityHigh, MaxInFlight: 5}
	jobs, err := cli.ReadJobs(strings.NewReader(strings.Join(lines, "\n")), cli.JobSpec{Group: g, Type: "sleep", Settings: set})
	if err != nil {
		t.Fatal(err)
	}
	cl := client.New(js, client.Options{Names: names, Tenant: "acme"})
	var progress []int
	if err := cli.SubmitFile(ctx, cl, g.ID, set, jobs, 200, func(n int) { progress = append(progress, n) }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(progress) != "[200 250]" {
		t.Errorf("progress %v, want [200 250]", progress)
	}

	st, err := js.Stream(ctx, names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	var sealed int64 = -1
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != names.Submit(g) {
			t.Fatalf("message %d on %s, want %s", seq, m.Subject, names.Submit(g))
		}
		sub, err := contracts.DecodeSubmission(m.Subject, m.Data, contracts.Limits{})
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		switch sub.Kind {
		case contracts.KindJobs:
			if !reflect.DeepEqual(sub.Settings(), set) {
				t.Errorf("message %d: settings %+v, want %+v", seq, sub.Settings(), set)
			}
			sizes = append(sizes, len(sub.Jobs))
		case contracts.KindSeal:
			sealed = *sub.Total
		}
	}
	// 200 then 50 jobs per call, at most 100 per message.
	if fmt.Sprint(sizes) != "[100 100 50]" {
		t.Errorf("jobs messages of %v jobs, want [100 100 50]", sizes)
	}
	if sealed != 250 {
		t.Errorf("sealed at %d, want 250", sealed)
	}
}

// CheckGroup refuses settings that differ from the group's, the in-flight
// limit included; a group of another tenant with the same id is another
// group.
func TestCheckGroupMaxInFlight(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	g := contracts.Group("acme", "g")
	enqueue(t, q, g, 2, contracts.PriorityNormal)
	five, zero := int64(5), int64(0)
	err := cli.CheckGroup(ctx, q, g, cli.GroupRequest{Jobs: 2, MaxInFlight: &five})
	if !errors.Is(err, cli.ErrGroupRefuses) || !strings.Contains(err.Error(), "--max-in-flight 5") ||
		!strings.Contains(err.Error(), "max in flight 0") {
		t.Errorf("--max-in-flight on a group without one: %v", err)
	}
	if err := cli.CheckGroup(ctx, q, g, cli.GroupRequest{Jobs: 2, MaxInFlight: &zero}); err != nil {
		t.Errorf("the group's own setting: %v", err)
	}
	if err := cli.CheckGroup(ctx, q, contracts.Group("globex", "g"), cli.GroupRequest{Jobs: 2, MaxInFlight: &five}); err != nil {
		t.Errorf("globex/g does not exist yet: %v", err)
	}
	if _, err := q.Cancel(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := cli.CheckGroup(ctx, q, g, cli.GroupRequest{Jobs: 2}); !errors.Is(err, cli.ErrGroupRefuses) || !strings.Contains(err.Error(), "already ended (CANCELLED)") {
		t.Errorf("a cancelled group: %v", err)
	}
}
