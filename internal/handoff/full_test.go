package handoff_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// fillReady publishes filler messages of the job type "filler" to READY
// until the stream refuses one as full, and returns the stream.
func fillReady(t *testing.T, e *pipelinetest.Env) jetstream.Stream {
	t.Helper()
	ctx := context.Background()
	for i := 0; ; i++ {
		m := nats.NewMsg(e.Names.Ready("filler"))
		m.Data = []byte(strings.Repeat("x", 1000))
		err := natsutil.PublishAll(ctx, e.JS, []*nats.Msg{m})[0]
		if natsutil.IsStreamFull(err) {
			break
		}
		if err != nil || i > 1000 {
			t.Fatalf("filling READY: message %d: %v", i, err)
		}
	}
	st, err := e.JS.Stream(ctx, e.Names.StreamReady())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// READY at its byte limit: the room says so (every type's room 0), a
// publish into it is refused and leaves the jobs leased (nothing confirmed,
// nothing lost), and once consumers make room the same jobs are published
// and confirmed.
func TestReadyFullKeepsJobsLeased(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	const limit = 32 << 10
	if err := natsutil.EnsureStreams(ctx, e.JS, e.Names, natsutil.StreamSettings{ReadyMaxBytes: limit, MaxMsgSize: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	st := fillReady(t, e)
	if b := st.CachedInfo().State.Bytes; b > limit {
		t.Fatalf("READY holds %d bytes, beyond its limit %d", b, limit)
	}

	room := handoff.NewRoom(e.Deps(), 100)
	rs, err := room.Measure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rs.Full || rs.Capacity != 0 || rs.ByType["filler"] != 0 || rs.Least([]string{"other"}) != 0 {
		t.Fatalf("room of a full READY: %+v", rs)
	}

	var jobs []redisq.Job
	for i := range 5 {
		jobs = append(jobs, redisq.Job{Group: contracts.Group(tenant, "g"), ID: fmt.Sprintf("j%d", i), Type: "work",
			Payload: []byte(`{"pad":"` + strings.Repeat("y", 900) + `"}`)})
	}
	leased := e.Lease(t, jobs)
	ok, err := publish(ctx, e.Deps(), leased, 1, handoff.SpanAdmit)
	if len(ok) != 0 || !natsutil.IsStreamFull(err) {
		t.Fatalf("publish into a full READY: %d published, err %v; want none and a full-stream error", len(ok), err)
	}
	if n := e.Inflight(t); n != int64(len(jobs)) {
		t.Fatalf("%d jobs leased after the refused publish, want %d (kept for a re-publish)", n, len(jobs))
	}

	// The workers consume the filler: room returns.
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(e.Names.Ready("filler"))); err != nil {
		t.Fatal(err)
	}
	if rs, err := room.Measure(ctx); err != nil || rs.Full || rs.Capacity != 100 {
		t.Fatalf("room after the purge: %+v %v", rs, err)
	}
	ok, err = publish(ctx, e.Deps(), leased, 1, handoff.SpanReclaim)
	if err != nil || len(ok) != len(jobs) {
		t.Fatalf("publish once READY has room: %d published, err %v", len(ok), err)
	}
	if n := e.Inflight(t); n != 0 {
		t.Fatalf("%d jobs still leased after the publish was confirmed", n)
	}
	if n := e.StreamMsgs(t, e.Names.StreamReady()); n != uint64(len(jobs)) {
		t.Fatalf("READY holds %d messages, want the %d jobs", n, len(jobs))
	}
}
