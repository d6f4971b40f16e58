package events

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Events go to bulkaction.events.<tenant>.<groupId>. The same change
// published again (after a crash) is deduplicated, but two tenants' groups
// of the same id with the same counts are two events, and a notice is news
// every time.
func TestPublishPerTenantSubjectsAndDedup(t *testing.T) {
	t.Parallel()
	js, names := eventsStream(t)
	ctx := context.Background()
	p := NewPublisher(js, names, nil, nil)
	counts := redisq.GroupCounts{State: contracts.StateRunning, Declared: 10, Jobs: 10, Done: 4, Succeeded: 4}
	acme, globex := contracts.Group("acme", "g"), contracts.Group("globex", "g")
	for _, ch := range []Change{
		{Group: acme, Counts: counts},
		{Group: globex, Counts: counts},
		{Group: acme, Counts: counts}, // a repeat: dropped
		{Group: acme, Counts: counts, Notice: "settings differ"},
		{Group: acme, Counts: counts, Notice: "settings differ"}, // a notice is not deduplicated
	} {
		if err := p.Publish(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	want := []struct {
		g      contracts.GroupRef
		notice string
	}{{acme, ""}, {globex, ""}, {acme, "settings differ"}, {acme, "settings differ"}}
	stored := storedEvents(t, js, names)
	if len(stored) != len(want) {
		t.Fatalf("EVENTS holds %d messages, want %d", len(stored), len(want))
	}
	for i, w := range want {
		m := stored[i]
		if m.Subject != names.Events(w.g) {
			t.Errorf("event %d on %s, want %s", i, m.Subject, names.Events(w.g))
		}
		ev, err := contracts.DecodeGroupEvent(m.Data)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if ev.Ref() != w.g || ev.Notice != w.notice || ev.Succeeded != 4 || ev.Total != 10 {
			t.Errorf("event %d = %+v, want %s notice %q", i, ev, w.g, w.notice)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); (id == "") != (w.notice != "") {
			t.Errorf("event %d: Nats-Msg-Id %q", i, id)
		}
	}
}

// A running group's event built from counts read before the group ended
// must not follow the final event: the guard's check is overtaken here by
// another publisher's COMPLETED event, so the publish is refused by
// JetStream, the check runs again and finds the group ended.
func TestStaleEventNeverFollowsTheFinalOne(t *testing.T) {
	t.Parallel()
	js, names := eventsStream(t)
	ctx := context.Background()
	g := contracts.Group("acme", "g")
	running := redisq.GroupCounts{State: contracts.StateRunning, Declared: 10, Jobs: 10, Done: 4, Succeeded: 4}
	completed := redisq.GroupCounts{State: contracts.StateCompleted, Declared: 10, Jobs: 10, Done: 10, Succeeded: 10}
	other := NewPublisher(js, names, nil, nil)
	p := NewPublisher(js, names, nil, nil)
	checks, ended := 0, false
	p.Guard(func(ctx context.Context, got contracts.GroupRef) (bool, error) {
		if got != g {
			t.Errorf("guard asked about %s", got)
		}
		checks++
		if checks == 2 {
			// The group ends between this read and the publish.
			if err := other.Publish(ctx, Change{Group: g, Counts: completed, Ended: true}); err != nil {
				t.Error(err)
			}
			defer func() { ended = true }()
		}
		return ended, nil
	})
	// The first event goes through; the second is overtaken.
	for _, c := range []redisq.GroupCounts{{State: contracts.StateRunning, Declared: 10, Jobs: 10}, running} {
		if err := p.Publish(ctx, Change{Group: g, Counts: c, Progress: true}); err != nil {
			t.Fatal(err)
		}
	}
	if checks != 3 {
		t.Errorf("%d checks, want 3 (one for the first event, two for the overtaken one)", checks)
	}
	st, err := js.Stream(ctx, names.StreamEvents())
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(ctx, names.Events(g))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := contracts.DecodeGroupEvent(m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if !ev.Final() || m.Sequence != 2 {
		t.Fatalf("last event #%d %s, want the final COMPLETED as #2", m.Sequence, ev.State)
	}
	// A final event is published without asking.
	if err := p.Publish(ctx, Change{Group: g, Counts: completed}); err != nil || checks != 3 {
		t.Fatalf("final event: %v, %d checks", err, checks)
	}
}

// An event whose counts the subject's last event already covers (the same
// state, counts as high) is not published: counts never go back.
func TestGuardedCountsNeverGoBack(t *testing.T) {
	t.Parallel()
	js, names := eventsStream(t)
	ctx := context.Background()
	g := contracts.Group("acme", "g")
	p := NewPublisher(js, names, nil, nil)
	p.Guard(func(context.Context, contracts.GroupRef) (bool, error) { return false, nil })
	for _, done := range []int64{8, 3, 8, 9} {
		c := redisq.GroupCounts{State: contracts.StateRunning, Declared: -1, Jobs: 20, Done: done, Succeeded: done}
		if err := p.Publish(ctx, Change{Group: g, Counts: c, Progress: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Publish(ctx, Change{Group: g, Counts: redisq.GroupCounts{State: contracts.StatePaused, Declared: -1, Jobs: 20, Done: 9, Succeeded: 9}, Control: true}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range storedEvents(t, js, names) {
		ev, err := contracts.DecodeGroupEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %d", ev.State, ev.Succeeded))
	}
	if want := []string{"RUNNING 8", "RUNNING 9", "PAUSED 9"}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// A notice says what went wrong, not that the group reached its state: a
// state event that follows a notice in the same state is published all the
// same (a reader that leaves notices out still sees every state).
func TestNoticeDoesNotCoverAStateEvent(t *testing.T) {
	t.Parallel()
	js, names := eventsStream(t)
	ctx := context.Background()
	g := contracts.Group("acme", "g")
	p := NewPublisher(js, names, nil, nil)
	p.Guard(func(context.Context, contracts.GroupRef) (bool, error) { return false, nil })
	c := redisq.GroupCounts{State: contracts.StateAggregating, Declared: 5, Jobs: 5}
	if err := p.Publish(ctx, Change{Group: g, Counts: c, Notice: "2 submissions refused"}); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(ctx, Change{Group: g, Counts: c}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range storedEvents(t, js, names) {
		ev, err := contracts.DecodeGroupEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %q", ev.State, ev.Notice))
	}
	if want := []string{`AGGREGATING "2 submissions refused"`, `AGGREGATING ""`}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// eventsStream is a NATS server with the streams.
func eventsStream(t *testing.T) (jetstream.JetStream, contracts.Names) {
	t.Helper()
	_, _, js := testenv.NATS(t)
	names := contracts.Names{}
	if err := natsutil.EnsureStreams(context.Background(), js, names, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	return js, names
}

// storedEvents returns every message EVENTS holds, in order.
func storedEvents(t *testing.T, js jetstream.JetStream, names contracts.Names) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, names.StreamEvents())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}
