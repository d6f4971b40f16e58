package events

import (
	"context"
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
	_, _, js := testenv.NATS(t)
	ctx := context.Background()
	names := contracts.Names{}
	if err := natsutil.EnsureStreams(ctx, js, names, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
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
	st, err := js.Stream(ctx, names.StreamEvents())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		g      contracts.GroupRef
		notice string
	}{{acme, ""}, {globex, ""}, {acme, "settings differ"}, {acme, "settings differ"}}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(want)) {
		t.Fatalf("EVENTS holds %d messages, want %d", info.State.Msgs, len(want))
	}
	for i, w := range want {
		m, err := st.GetMsg(ctx, info.State.FirstSeq+uint64(i))
		if err != nil {
			t.Fatal(err)
		}
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
