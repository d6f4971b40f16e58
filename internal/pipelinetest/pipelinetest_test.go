package pipelinetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestMain(m *testing.M) { pipelinetest.Main(m) }

// publishReady publishes body on READY for job type typ with msgID, on js.
func publishReady(t *testing.T, js jetstream.JetStream, e *pipelinetest.Env, typ, msgID string, body []byte) {
	t.Helper()
	m := nats.NewMsg(e.Names.Ready(typ))
	m.Data = body
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func readyBody(t *testing.T, j redisq.LeasedJob) []byte {
	t.Helper()
	data, err := json.Marshal(contracts.ReadyJob{V: contracts.Version, GroupID: j.GroupID, JobID: j.ID, Type: j.Type, Attempt: j.Attempt})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The environment's streams, queue and reader work together, and leave no
// goroutine running once the test is done.
func TestEnvLeaseAndRead(t *testing.T) {
	testkit.CheckLeaks(t)
	e := pipelinetest.NewEnv(t, redisq.Config{})
	if d := e.Deps(); d.Queue != e.Queue || d.JS != e.JS || d.Metrics != e.Metrics || d.Log == nil {
		t.Fatalf("Deps = %+v, not on the environment", d)
	}
	for _, s := range []string{e.Names.StreamSubmit(), e.Names.StreamReady(), e.Names.StreamResult(), e.Names.StreamEvents(), e.Names.StreamDLQ()} {
		if n := e.StreamMsgs(t, s); n != 0 {
			t.Fatalf("%s holds %d messages, want 0", s, n)
		}
	}

	jobs := make([]redisq.Job, 3)
	for i := range jobs {
		jobs[i] = redisq.Job{GroupID: "g", ID: fmt.Sprintf("j%d", i), Type: "t"}
	}
	leased := e.Lease(t, jobs)
	if len(leased) != len(jobs) {
		t.Fatalf("leased %d jobs, want %d", len(leased), len(jobs))
	}
	if n := e.Inflight(t); n != int64(len(jobs)) {
		t.Fatalf("inflight = %d, want %d", n, len(jobs))
	}
	if g := e.Group(t, "g"); g.Jobs != int64(len(jobs)) {
		t.Fatalf("group jobs = %d, want %d", g.Jobs, len(jobs))
	}

	// Publish as another process would: every leased job, and one body that
	// is not a ready job.
	_, js := e.Connect(t)
	for _, j := range leased {
		publishReady(t, js, e, j.Type, contracts.ReadyMsgID(j.GroupID, j.ID, j.Attempt), readyBody(t, j))
	}
	publishReady(t, js, e, "t", "bad", []byte(`{}`))
	if stored := e.StoredMsgs(t, e.Names.StreamReady()); len(stored) != len(leased)+1 {
		t.Fatalf("READY holds %d messages, want %d", len(stored), len(leased)+1)
	}

	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	got := r.WaitJobs(t, len(leased), 0)
	e.WaitReadyDrained(t)
	r.Stop()
	for _, j := range leased {
		if n := pipelinetest.Counts(got)[j.GroupID+":"+j.ID]; n != 1 {
			t.Errorf("job %s read %d times, want 1", j.ID, n)
		}
	}
	msgs := r.Msgs()
	if len(msgs) != len(leased)+1 {
		t.Fatalf("read %d messages, want %d", len(msgs), len(leased)+1)
	}
	var invalid int
	for _, m := range msgs {
		if m.Err != nil {
			invalid++
			continue
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != m.Job.MsgID() {
			t.Errorf("message %d: Nats-Msg-Id %q, want %q", m.Seq, id, m.Job.MsgID())
		}
	}
	if invalid != 1 {
		t.Errorf("%d invalid messages read, want 1", invalid)
	}
}
