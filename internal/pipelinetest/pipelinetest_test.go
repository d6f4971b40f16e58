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

// readyBatch returns the READY batch of leased jobs.
func readyBatch(js ...redisq.LeasedJob) *contracts.ReadyBatch {
	b := &contracts.ReadyBatch{V: contracts.Version}
	for _, j := range js {
		b.Jobs = append(b.Jobs, contracts.ReadyJob{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Type: j.Type, Attempt: j.Attempt})
	}
	return b
}

func encode(t *testing.T, b *contracts.ReadyBatch) []byte {
	t.Helper()
	data, err := json.Marshal(b)
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

	g := contracts.Group("acme", "g")
	jobs := make([]redisq.Job, 3)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%d", i), Type: "t"}
	}
	leased := e.Lease(t, jobs)
	if len(leased) != len(jobs) {
		t.Fatalf("leased %d jobs, want %d", len(leased), len(jobs))
	}
	if n := e.Inflight(t); n != int64(len(jobs)) {
		t.Fatalf("inflight = %d, want %d", n, len(jobs))
	}
	if info := e.Group(t, g); info.Jobs != int64(len(jobs)) {
		t.Fatalf("group jobs = %d, want %d", info.Jobs, len(jobs))
	}

	// Publish as another process would: the first leased job alone, the
	// others as one batch, and one body that is not a ready batch.
	_, js := e.Connect(t)
	one, two := readyBatch(leased[0]), readyBatch(leased[1:]...)
	if one.MsgID() != contracts.ReadyMsgID(g, leased[0].ID, leased[0].Attempt) {
		t.Fatalf("a batch of one has Nats-Msg-Id %q", one.MsgID())
	}
	publishReady(t, js, e, "t", one.MsgID(), encode(t, one))
	publishReady(t, js, e, "t", two.MsgID(), encode(t, two))
	publishReady(t, js, e, "t", "bad", []byte(`{}`))
	if stored := e.StoredMsgs(t, e.Names.StreamReady()); len(stored) != 3 {
		t.Fatalf("READY holds %d messages, want 3", len(stored))
	}

	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	got := r.WaitJobs(t, len(leased), 0)
	e.WaitReadyDrained(t)
	r.Stop()
	for _, j := range leased {
		if n := pipelinetest.Counts(got)["acme:g:"+j.ID]; n != 1 {
			t.Errorf("job %s read %d times, want 1", j.ID, n)
		}
	}
	// One record per job: the batch of two gives two records sharing its
	// stream sequence and headers.
	msgs := r.Msgs()
	if len(msgs) != len(leased)+1 {
		t.Fatalf("read %d records, want %d", len(msgs), len(leased)+1)
	}
	var invalid int
	perSeq := map[uint64][]pipelinetest.Msg{}
	for _, m := range msgs {
		if m.Err != nil {
			invalid++
			continue
		}
		if m.Job.Ref() != g || m.Key() != "acme:g:"+m.Job.JobID {
			t.Errorf("message %d: job %+v, key %q", m.Seq, m.Job, m.Key())
		}
		perSeq[m.Seq] = append(perSeq[m.Seq], m)
	}
	if invalid != 1 {
		t.Errorf("%d invalid messages read, want 1", invalid)
	}
	if len(perSeq) != 2 {
		t.Fatalf("jobs came from %d messages, want 2", len(perSeq))
	}
	for seq, ms := range perSeq {
		want := one.MsgID()
		if len(ms) == 2 {
			want = two.MsgID()
		}
		for _, m := range ms {
			if id := m.Header.Get(jetstream.MsgIDHeader); id != want {
				t.Errorf("message %d: Nats-Msg-Id %q, want %q", seq, id, want)
			}
		}
	}
}
