package fetcher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/dispatcher"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

func TestMain(m *testing.M) { pipelinetest.Main(m) }

// newFetcher returns a fetcher for tests in which a Reader stands in for the
// workers: no worker announces job types, so unless cfg says otherwise
// every type is admitted into its own READY room.
func newFetcher(t *testing.T, cfg fetcher.Config, d deps.Deps) *fetcher.Fetcher {
	t.Helper()
	if cfg.UnservedTypes == "" {
		cfg.UnservedTypes = fetcher.UnservedAdmit
	}
	f, err := fetcher.New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// payload is the payload of job i of group gid.
func payload(gid string, i int) string { return fmt.Sprintf(`{"g":%q,"i":%d}`, gid, i) }

func jobID(i int) string { return fmt.Sprintf("j%05d", i) }

// clientJobs returns jobs from..to-1 of group gid.
func clientJobs(gid string, from, to int) []client.Job {
	jobs := make([]client.Job, 0, to-from)
	for i := from; i < to; i++ {
		jobs = append(jobs, client.Job{ID: jobID(i), Type: "t", Payload: json.RawMessage(payload(gid, i))})
	}
	return jobs
}

func groupName(g int) string { return fmt.Sprintf("g%02d", g) }

// grp is group gid of the client's default tenant.
func grp(gid string) contracts.GroupRef { return contracts.Group(client.DefaultTenant, gid) }

// grps are the groups gids of the default tenant.
func grps(gids ...string) []contracts.GroupRef {
	out := make([]contracts.GroupRef, len(gids))
	for i, gid := range gids {
		out[i] = grp(gid)
	}
	return out
}

// jobsBody is the body of a jobs submission of jobs from..to-1 of group g
// (the group named by the subject only).
func jobsBody(g contracts.GroupRef, from, to int) string {
	var b strings.Builder
	b.WriteString(`{"v":2,"kind":"jobs","jobs":[`)
	for i := from; i < to; i++ {
		if i > from {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"jobId":%q,"type":"t","payload":%s}`, jobID(i), payload(g.ID, i))
	}
	b.WriteString("]}")
	return b.String()
}

// checkOnce fails t unless msgs hold exactly the jobs 0..n-1 of each group,
// each once, with its payload.
func checkOnce(t *testing.T, msgs []pipelinetest.Msg, groups []contracts.GroupRef, n int) {
	t.Helper()
	counts := pipelinetest.Counts(msgs)
	for _, g := range groups {
		for i := range n {
			if c := counts[g.Tenant+":"+g.ID+":"+jobID(i)]; c != 1 {
				t.Errorf("%s/%s on READY %d times, want once", g, jobID(i), c)
			}
		}
	}
	if len(msgs) != len(groups)*n {
		t.Errorf("READY got %d jobs, want %d", len(msgs), len(groups)*n)
	}
	for _, m := range msgs {
		var i int
		fmt.Sscanf(m.Job.JobID, "j%d", &i)
		if want := payload(m.Job.GroupID, i); string(m.Job.Payload) != want {
			t.Errorf("%s: payload %s, want %s", m.Key(), m.Job.Payload, want)
		}
	}
}

// groupInfo returns group g's counters; a group that does not exist has
// the zero counters (State "").
func groupInfo(t *testing.T, e *pipelinetest.Env, g contracts.GroupRef) *redisq.GroupInfo {
	t.Helper()
	info, ok, err := e.Queue.Group(context.Background(), g)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return &redisq.GroupInfo{Group: g, GroupCounts: redisq.GroupCounts{Declared: -1}}
	}
	return info
}

func TestJobsReachReadyOnceInFairOrder(t *testing.T) {
	t.Parallel()
	const nGroups, perGroup, capacity = 20, 500, 500
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()

	// READY starts full for the jobs' type so that admission waits until
	// every job is queued: from then on all groups are backlogged together.
	holdReady(t, e, capacity)
	c := client.New(e.JS, client.Options{})
	var groups []string
	for g := range nGroups {
		gid := groupName(g)
		groups = append(groups, gid)
		if err := c.Submit(ctx, gid, clientJobs(gid, 0, perGroup)...); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity, PackJobs: 1}}, e.Deps()))
	testkit.WaitFor(t, "every job queued", 60*time.Second, func() bool {
		for _, gid := range groups {
			if info := groupInfo(t, e, grp(gid)); info.Jobs != perGroup || info.Pending != perGroup {
				return false
			}
		}
		return true
	})
	if got := e.StreamMsgs(t, e.Names.StreamReady()); got != capacity {
		t.Fatalf("READY holds %d messages while full, want only the %d held", got, capacity)
	}
	// READY stays full until the reader starts: admission says so. (Its
	// first round after the jobs came may reuse an earlier measurement and
	// is not counted; the round after measures again.)
	testkit.WaitFor(t, "backpressure counted while READY is full", 10*time.Second, func() bool {
		return testkit.Value(t, e.Metrics.BackpressureRejected) > 0
	})

	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	r.WaitJobs(t, nGroups*perGroup, 120*time.Second)
	e.WaitReadyDrained(t)
	got := r.Jobs()
	checkOnce(t, got, grps(groups...), perGroup)
	if n := len(r.Msgs()) - len(got); n != capacity {
		t.Errorf("reader saw %d held messages, want %d", n, capacity)
	}

	// Fairness, in READY order, over the stretch where every group still
	// had jobs: no group has more than 2 of any 20 consecutive jobs (one
	// job per message, Ready.PackJobs 1; packs order their jobs by group,
	// so with packs of p this would hold per message, not per job).
	sort.Slice(got, func(i, j int) bool { return got[i].Seq < got[j].Seq })
	last := map[string]int{}
	for i, m := range got {
		last[m.Job.GroupID] = i
	}
	end := len(got)
	for _, i := range last {
		end = min(end, i+1)
	}
	if end < len(got)/2 {
		t.Fatalf("the first group finished after %d of %d messages: the groups were not served together", end, len(got))
	}
	for i := 0; i+20 <= end; i++ {
		per := map[string]int{}
		for _, m := range got[i : i+20] {
			per[m.Job.GroupID]++
			if per[m.Job.GroupID] > 2 {
				t.Fatalf("group %s has %d of the 20 messages from READY position %d", m.Job.GroupID, per[m.Job.GroupID], i)
			}
		}
	}
	if v := testkit.Value(t, e.Metrics.EnqueueTotal); v != nGroups*perGroup {
		t.Errorf("enqueue total %v, want %d", v, nGroups*perGroup)
	}
	if v := testkit.Value(t, e.Metrics.DequeueTotal); v != nGroups*perGroup {
		t.Errorf("dequeue total %v, want %d", v, nGroups*perGroup)
	}
}

func TestDuplicateSubmissionsChangeNothing(t *testing.T) {
	t.Parallel()
	const n, batch = 100, 10
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	c := client.New(e.JS, client.Options{BatchSize: batch})
	jobs := clientJobs("g", 0, n)
	// The same submission twice: JetStream drops the second's messages
	// (same Msg-Ids).
	for range 2 {
		if err := c.Submit(ctx, "g", jobs...); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.StreamMsgs(t, e.Names.StreamSubmit()); got != n/batch {
		t.Fatalf("SUBMIT holds %d messages, want %d", got, n/batch)
	}
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	r.WaitJobs(t, n, 0)

	// The same jobs delivered again, batched differently (a producer retry
	// after the duplicate window, a redelivery): each is a no-op.
	again := make([]*nats.Msg, n)
	for i, j := range jobs {
		data, err := json.Marshal(contracts.Submission{V: contracts.Version, Kind: contracts.KindJobs,
			Jobs: []contracts.SubmitJob{{JobID: j.ID, Type: j.Type, Payload: j.Payload}}})
		if err != nil {
			t.Fatal(err)
		}
		again[i] = nats.NewMsg(e.Names.Submit(grp("g")))
		again[i].Data = data
		again[i].Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("again-%d", i))
	}
	for _, err := range natsutil.PublishAll(ctx, e.JS, again) {
		if err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "redelivered jobs handled", 0, func() bool {
		return testkit.Value(t, e.Metrics.EnqueueDuplicateTotal) == n
	})
	if err := c.Seal(ctx, "g", n); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "group sealed", 0, func() bool { return groupInfo(t, e, grp("g")).Declared == n })
	waitSubmitDrained(t, e)

	info := groupInfo(t, e, grp("g"))
	if info.Jobs != n || info.Pending != 0 {
		t.Fatalf("group has totalJobs %d pending %d, want %d and 0", info.Jobs, info.Pending, n)
	}
	if info.State != contracts.StateAggregating {
		t.Fatalf("group state %s, want AGGREGATING (sealed, every job handed out)", info.State)
	}
	if got := e.Inflight(t); got != 0 {
		t.Fatalf("inflight %d, want 0", got)
	}
	if v := testkit.Value(t, e.Metrics.EnqueueTotal); v != n {
		t.Fatalf("enqueue total %v, want %d", v, n)
	}
	e.WaitReadyDrained(t)
	checkOnce(t, r.Jobs(), grps("g"), n)
}

var tagRE = regexp.MustCompile(`"tag":"([a-z_]+)-[0-9]+"`)

func TestInvalidMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	const perReason, valid = 200, 500
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	d := e.Deps()
	d.Limits = contracts.Limits{MaxPayloadBytes: 1024}
	big := strings.Repeat("x", 2000)
	invalid := map[string]func(i int) string{
		contracts.ReasonBadJSON: func(i int) string {
			return fmt.Sprintf(`{"tag":"bad_json-%d","v":2,"kind":"jobs",`, i)
		},
		contracts.ReasonBadVersion: func(i int) string {
			// a v1 body: one job, not a jobs array
			return fmt.Sprintf(`{"tag":"bad_version-%d","v":1,"kind":"job","groupId":"g","jobId":"v%d","type":"t"}`, i, i)
		},
		contracts.ReasonInvalidField: func(i int) string {
			// one invalid job rejects the whole message, valid jobs included
			return fmt.Sprintf(`{"tag":"invalid_field-%d","v":2,"kind":"jobs","jobs":[{"jobId":"ok%d","type":"t"},{"jobId":"bad id %d","type":"t"}]}`, i, i, i)
		},
		contracts.ReasonTooLarge: func(i int) string {
			return fmt.Sprintf(`{"tag":"too_large-%d","v":2,"kind":"jobs","jobs":[{"jobId":"big%d","type":"t","payload":{"x":%q}}]}`, i, i, big)
		},
		contracts.ReasonUnknownKind: func(i int) string {
			return fmt.Sprintf(`{"tag":"unknown_kind-%d","v":2,"kind":"frobnicate"}`, i)
		},
		contracts.ReasonSubjectMismatch: func(i int) string {
			return fmt.Sprintf(`{"tag":"subject_mismatch-%d","v":2,"kind":"jobs","tenant":"other","jobs":[{"jobId":"m%d","type":"t"}]}`, i, i)
		},
	}
	reasons := make([]string, 0, len(invalid))
	for r := range invalid {
		reasons = append(reasons, r)
	}
	slices.Sort(reasons)
	var msgs []*nats.Msg
	add := func(body string) {
		m := nats.NewMsg(e.Names.Submit(grp("g")))
		m.Data = []byte(body)
		msgs = append(msgs, m)
	}
	v := 0
	for i := range perReason {
		for k, r := range reasons {
			add(invalid[r](i))
			if (i*len(reasons)+k)%2 == 1 && v < valid {
				add(jobsBody(grp("g"), v, v+1))
				v++
			}
		}
	}
	for v < valid {
		add(jobsBody(grp("g"), v, v+1))
		v++
	}
	for i, err := range natsutil.PublishAll(ctx, e.JS, msgs) {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}

	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 1000}}, d))
	r.WaitJobs(t, valid, 0)
	total := perReason * len(reasons)
	testkit.WaitFor(t, "every invalid message dead-lettered", 0, func() bool {
		return e.StreamMsgs(t, e.Names.StreamDLQ()) >= uint64(total)
	})
	waitSubmitDrained(t, e)
	e.WaitReadyDrained(t)
	checkOnce(t, r.Jobs(), grps("g"), valid)
	if info := groupInfo(t, e, grp("g")); info.Jobs != valid {
		t.Errorf("group has %d jobs, want the %d valid ones", info.Jobs, valid)
	}
	if info := groupInfo(t, e, contracts.Group("other", "g")); info.State != "" {
		t.Errorf("a body naming tenant other created other/g (%s)", info.State)
	}

	st, err := e.JS.Stream(ctx, e.Names.StreamDLQ())
	if err != nil {
		t.Fatal(err)
	}
	byReason := map[string]int{}
	seen := map[string]bool{}
	for seq := uint64(1); seq <= uint64(total); seq++ {
		raw, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("DLQ message %d: %v", seq, err)
		}
		var dl contracts.DeadLetter
		if err := json.Unmarshal(raw.Data, &dl); err != nil {
			t.Fatalf("DLQ message %d: %v", seq, err)
		}
		body := dl.Raw + string(dl.Message)
		tag := tagRE.FindStringSubmatch(body)
		if tag == nil {
			t.Fatalf("DLQ message %d carries no tag: %s", seq, raw.Data)
		}
		if dl.Reason != tag[1] || raw.Subject != e.Names.DLQOf(dl.Subject, tag[1]) {
			t.Errorf("DLQ message %d (%s): reason %q on %s, want %q", seq, tag[0], dl.Reason, raw.Subject, tag[1])
		}
		if dl.Subject != e.Names.Submit(grp("g")) || dl.Error == "" || dl.V != contracts.Version {
			t.Errorf("DLQ message %d: subject %q error %q v %d", seq, dl.Subject, dl.Error, dl.V)
		}
		if seen[tag[0]] {
			t.Errorf("%s dead-lettered twice", tag[0])
		}
		seen[tag[0]] = true
		byReason[dl.Reason]++
	}
	for _, reason := range reasons {
		if byReason[reason] != perReason {
			t.Errorf("%d dead letters with reason %s, want %d", byReason[reason], reason, perReason)
		}
		if got := testkit.Value(t, e.Metrics.DeadLetters.WithLabelValues(reason)); got != perReason {
			t.Errorf("dead letter metric %s = %v, want %d", reason, got, perReason)
		}
	}
	if got := e.StreamMsgs(t, e.Names.StreamDLQ()); got != uint64(total) {
		t.Errorf("DLQ holds %d messages, want %d", got, total)
	}
}

// TestReadyNeverExceedsCapacity: READY's room counts jobs, with one job
// per message and with packs of several
// (Config.Ready.PackJobs): the fetcher never puts more jobs of a type on
// READY than its capacity.
func TestReadyNeverExceedsCapacity(t *testing.T) {
	t.Parallel()
	for _, pack := range []int{1, 8} {
		t.Run(fmt.Sprintf("pack=%d", pack), func(t *testing.T) {
			t.Parallel()
			readyNeverExceedsCapacity(t, pack)
		})
	}
}

func readyNeverExceedsCapacity(t *testing.T, pack int) {
	const capacity, nGroups, perGroup = 20, 4, 100
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	c := client.New(e.JS, client.Options{})
	var groups []string
	for g := range nGroups {
		groups = append(groups, groupName(g))
		if err := c.Submit(ctx, groupName(g), clientJobs(groupName(g), 0, perGroup)...); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity, PackJobs: pack}}, e.Deps()))
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{Delay: 2 * time.Millisecond})
	// The capacity counts jobs; a READY message may carry several.
	var most int
	testkit.WaitFor(t, "every job read", 60*time.Second, func() bool {
		most = max(most, e.ReadyJobs(t))
		return len(r.Jobs()) >= nGroups*perGroup
	})
	if most > capacity {
		t.Fatalf("READY held %d jobs, more than the capacity %d", most, capacity)
	}
	if most < capacity/2 {
		t.Fatalf("READY never held more than %d jobs: the slow reader was not the bottleneck", most)
	}
	if testkit.Value(t, e.Metrics.BackpressureRejected) == 0 {
		t.Fatal("no admission round was held back by a full READY")
	}
	checkOnce(t, r.Jobs(), grps(groups...), perGroup)
	msgs := map[uint64]int{}
	for _, m := range r.Jobs() {
		msgs[m.Seq]++
	}
	for seq, n := range msgs {
		if n > max(pack, 1) {
			t.Fatalf("READY message %d carried %d jobs, more than %d", seq, n, max(pack, 1))
		}
	}
	if pack > 1 && len(msgs) == len(r.Jobs()) {
		t.Fatalf("%d jobs in as many messages: no pack of several", len(msgs))
	}
}

func TestKilledFetcherLosesNothing(t *testing.T) {
	t.Parallel()
	const perGroup = 100
	e := pipelinetest.NewEnv(t, redisq.Config{Lease: 300 * time.Millisecond})
	ctx := context.Background()
	c := client.New(e.JS, client.Options{})
	groups := []string{"ga", "gb"}
	for _, g := range groups {
		if err := c.Submit(ctx, g, clientJobs(g, 0, perGroup)...); err != nil {
			t.Fatal(err)
		}
	}
	// The fetcher leases jobs and dies before publishing them: its
	// JetStream handle refuses every READY publish.
	d := e.Deps()
	d.JS = deadBeforeReady{JetStream: d.JS, ready: e.Names.Ready("")}
	stop := testkit.Start(t, newFetcher(t, fetcher.Config{
		Ready:          handoff.ReadyConfig{Capacity: 1000},
		AdmitBatchSize: 64,
	}, d))
	testkit.WaitFor(t, "every job leased", 0, func() bool { return e.Inflight(t) == int64(len(groups)*perGroup) })
	stop()
	if got := e.StreamMsgs(t, e.Names.StreamReady()); got != 0 {
		t.Fatalf("READY holds %d messages, want none before recovery", got)
	}

	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newDispatcher(t, dispatcher.Config{Ready: handoff.ReadyConfig{Capacity: 1000}, ReclaimInterval: 50 * time.Millisecond}, e.Deps()))
	testkit.WaitFor(t, "every lease recovered", 0, func() bool { return e.Inflight(t) == 0 })
	r.WaitJobs(t, len(groups)*perGroup, 0)
	e.WaitReadyDrained(t)
	got := r.Jobs()
	checkOnce(t, got, grps(groups...), perGroup)
	for _, m := range got {
		if m.Job.Attempt != 1 {
			t.Fatalf("%s: attempt %d, want 1", m.Key(), m.Job.Attempt)
		}
	}
}

// deadBeforeReady is a JetStream handle whose publishes to READY fail, as
// if the process died between leasing jobs and publishing them.
type deadBeforeReady struct {
	jetstream.JetStream
	ready string // subject prefix of READY
}

func (j deadBeforeReady) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if strings.HasPrefix(m.Subject, j.ready) {
		return nil, errors.New("killed before publishing")
	}
	return j.JetStream.PublishMsgAsync(m, opts...)
}

func newDispatcher(t *testing.T, cfg dispatcher.Config, d deps.Deps) *dispatcher.Dispatcher {
	t.Helper()
	p, err := dispatcher.New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTwoFetchersTwoDispatchers(t *testing.T) {
	t.Parallel()
	const nGroups, perGroup = 10, 200
	// Seed admission with a low limit parks most jobs, so the dispatchers
	// release them while the fetchers admit the rest.
	e := pipelinetest.NewEnv(t, redisq.Config{
		Mode: redisq.ModeSeed, GlobalLimit: 500, BaseBackoff: 100 * time.Millisecond,
		MaxBackoff: time.Second, DisableCongestion: true, Lease: 2 * time.Second,
	})
	ctx := context.Background()
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	for range 2 {
		nc, js := e.Connect(t)
		testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 500}, IngestBatchSize: 100}, e.DepsWith(nc, js)))
		nc2, js2 := e.Connect(t)
		testkit.Start(t, newDispatcher(t, dispatcher.Config{Ready: handoff.ReadyConfig{Capacity: 500}, Interval: 20 * time.Millisecond, ReclaimInterval: 100 * time.Millisecond}, e.DepsWith(nc2, js2)))
	}
	c := client.New(e.JS, client.Options{})
	var groups []string
	for g := range nGroups {
		gid := groupName(g)
		groups = append(groups, gid)
		if err := c.Submit(ctx, gid, clientJobs(gid, 0, perGroup)...); err != nil {
			t.Fatal(err)
		}
	}
	r.WaitJobs(t, nGroups*perGroup, 120*time.Second)
	testkit.WaitFor(t, "queues empty", 0, func() bool {
		return e.BackingOff(t) == 0 && e.Inflight(t) == 0
	})
	// Every hand-off is over: a duplicate would be on READY by now.
	e.WaitReadyDrained(t)
	checkOnce(t, r.Jobs(), grps(groups...), perGroup)
	if v := testkit.Value(t, e.Metrics.BackpressureAdmitted.WithLabelValues(telemetry.DestinationNonReady)); v == 0 {
		t.Fatal("no job was parked: the dispatchers had nothing to do")
	}
	if v := testkit.Value(t, e.Metrics.DispatchMoved); v == 0 {
		t.Fatal("the dispatchers moved nothing")
	}
	for _, gid := range groups {
		if info := groupInfo(t, e, grp(gid)); info.Jobs != perGroup {
			t.Errorf("group %s: totalJobs %d, want %d", gid, info.Jobs, perGroup)
		}
	}
}

func TestSealCancelAndGroupEvents(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	var msgs []*nats.Msg
	add := func(gid, body string) {
		m := nats.NewMsg(e.Names.Submit(grp(gid)))
		m.Data = []byte(body)
		msgs = append(msgs, m)
	}
	job := func(gid string, i int) { add(gid, jobsBody(grp(gid), i, i+1)) }
	seal := func(gid string, total int) {
		add(gid, fmt.Sprintf(`{"v":2,"kind":"seal","total":%d}`, total))
	}
	// "sealed": five jobs and a seal of 5; a sixth job is over the total
	// and a second seal contradicts the first.
	for i := range 5 {
		job("sealed", i)
	}
	seal("sealed", 5)
	job("sealed", 5)
	seal("sealed", 7)
	// "early": the seal comes before the jobs.
	seal("early", 3)
	for i := range 3 {
		job("early", i)
	}
	// "cancelled": three jobs, a cancel, then a job of the ended group.
	for i := range 3 {
		job("cancelled", i)
	}
	add("cancelled", `{"v":2,"kind":"cancel"}`)
	job("cancelled", 3)
	for _, err := range natsutil.PublishAll(ctx, e.JS, msgs) {
		if err != nil {
			t.Fatal(err)
		}
	}
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	waitSubmitDrained(t, e)
	testkit.WaitFor(t, "sealed groups drained", 0, func() bool {
		return groupInfo(t, e, grp("sealed")).State == contracts.StateAggregating &&
			groupInfo(t, e, grp("early")).State == contracts.StateAggregating
	})

	// Dead letters: one per reason of the fetcher.
	wantDLQ := map[string]string{fetcher.ReasonOverTotal: "sealed", fetcher.ReasonBadSeal: "sealed", fetcher.ReasonGroupEnded: "cancelled"}
	st, err := e.JS.Stream(ctx, e.Names.StreamDLQ())
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != uint64(len(wantDLQ)) {
		t.Fatalf("DLQ holds %d messages, want %d", n, len(wantDLQ))
	}
	for seq := uint64(1); seq <= uint64(len(wantDLQ)); seq++ {
		raw, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var dl contracts.DeadLetter
		if err := json.Unmarshal(raw.Data, &dl); err != nil {
			t.Fatal(err)
		}
		gid, ok := wantDLQ[dl.Reason]
		if !ok || dl.Subject != e.Names.Submit(grp(gid)) || raw.Subject != e.Names.DLQOf(dl.Subject, dl.Reason) {
			t.Fatalf("unexpected dead letter %s on %s", raw.Data, raw.Subject)
		}
		delete(wantDLQ, dl.Reason)
	}

	info := groupInfo(t, e, grp("sealed"))
	if info.Jobs != 5 || info.Declared != 5 {
		t.Errorf("sealed: jobs %d declared %d, want 5 and 5", info.Jobs, info.Declared)
	}
	if info := groupInfo(t, e, grp("cancelled")); info.State != contracts.StateCancelled || info.Jobs != 3 {
		t.Errorf("cancelled: state %s jobs %d, want CANCELLED with 3 jobs", info.State, info.Jobs)
	}

	// Group events: every state each group went through.
	want := map[string][]contracts.GroupState{
		"sealed": {contracts.StateCreated, contracts.StateRunning, contracts.StateAggregating},
		"early":  {contracts.StateCreated, contracts.StateRunning, contracts.StateAggregating},
	}
	var events map[string][]contracts.GroupState
	defer func() {
		if t.Failed() {
			t.Logf("group events: %v", events)
		}
	}()
	testkit.WaitFor(t, "group events", 0, func() bool {
		events = readEvents(t, e)
		for gid, w := range want {
			if !sameStates(events[gid], w) {
				return false
			}
		}
		c := events["cancelled"]
		return len(c) > 0 && c[0] == contracts.StateCreated && c[len(c)-1] == contracts.StateCancelled
	})
	for gid, states := range events {
		seen := map[contracts.GroupState]bool{}
		for _, s := range states {
			if seen[s] {
				t.Errorf("%s: state %s published twice: %v", gid, s, states)
			}
			seen[s] = true
		}
	}
	if v := testkit.Value(t, e.Metrics.GroupCompletions.WithLabelValues(telemetry.StateCancelled)); v != 1 {
		t.Errorf("cancelled completions %v, want 1", v)
	}
	// The admitted jobs of the cancelled group (if any) and of the others are on READY once.
	for key, n := range pipelinetest.Counts(r.Jobs()) {
		if n != 1 {
			t.Errorf("%s on READY %d times", key, n)
		}
	}
}

// sameStates reports whether got holds exactly the states of want, in any
// order (a CREATED event may be published just after the RUNNING one).
func sameStates(got, want []contracts.GroupState) bool {
	a, b := slices.Clone(got), slices.Clone(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// readEvents returns the states of the events on the EVENTS stream of the
// default tenant's groups, by groupId; notices are left out.
func readEvents(t *testing.T, e *pipelinetest.Env) map[string][]contracts.GroupState {
	t.Helper()
	out := map[string][]contracts.GroupState{}
	for g, evs := range groupEvents(t, e) {
		if g.Tenant != client.DefaultTenant {
			continue
		}
		for _, ev := range evs {
			if ev.Notice == "" {
				out[g.ID] = append(out[g.ID], ev.State)
			}
		}
	}
	return out
}

// groupEvents returns every event on the EVENTS stream, by group, in stream
// order. It fails t unless each is valid and on its group's subject.
func groupEvents(t *testing.T, e *pipelinetest.Env) map[contracts.GroupRef][]*contracts.GroupEvent {
	t.Helper()
	out := map[contracts.GroupRef][]*contracts.GroupEvent{}
	for _, raw := range e.StoredMsgs(t, e.Names.StreamEvents()) {
		ev, err := contracts.DecodeGroupEvent(raw.Data)
		if err != nil {
			t.Fatalf("event %d %s: %v", raw.Sequence, raw.Data, err)
		}
		if want := e.Names.Events(ev.Ref()); raw.Subject != want {
			t.Fatalf("event %d of %s on %s, want %s", raw.Sequence, ev.Ref(), raw.Subject, want)
		}
		out[ev.Ref()] = append(out[ev.Ref()], ev)
	}
	return out
}

func TestRedisOutageRedeliversUntilStored(t *testing.T) {
	t.Parallel()
	const n, batch = 50, 10
	srv := testenv.NewRedisServer(t)
	opt, err := redis.ParseURL(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	e := pipelinetest.NewEnvWithRedis(t, rdb, redisq.Config{Prefix: "outage:"})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))

	srv.Stop()
	c := client.New(e.JS, client.Options{BatchSize: batch})
	if err := c.Submit(ctx, "g", clientJobs("g", 0, n)...); err != nil {
		t.Fatal(err)
	}
	cons, err := e.JS.Consumer(ctx, e.Names.StreamSubmit(), fetcher.DefaultDurable)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "submissions redelivered", 0, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumRedelivered > 0
	})
	if got := e.StreamMsgs(t, e.Names.StreamSubmit()); got != n/batch {
		t.Fatalf("SUBMIT holds %d messages while Redis is down, want all %d (none acknowledged)", got, n/batch)
	}

	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	r.WaitJobs(t, n, 0)
	waitSubmitDrained(t, e)
	testkit.WaitFor(t, "nothing leased", 0, func() bool { return e.Inflight(t) == 0 })
	e.WaitReadyDrained(t)
	checkOnce(t, r.Jobs(), grps("g"), n)
}

func TestTraceContinuesFromSubmit(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	tp, rec := testkit.RecordSpans(t)
	d := e.Deps()
	d.TracerProvider = tp
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newFetcher(t, fetcher.Config{}, d))
	c := client.New(e.JS, client.Options{TracerProvider: tp})
	if err := c.Submit(context.Background(), "g", clientJobs("g", 0, 3)...); err != nil {
		t.Fatal(err)
	}
	got := r.WaitJobs(t, 3, 0)

	var submit sdktrace.ReadOnlySpan
	spans := map[string]sdktrace.ReadOnlySpan{}
	testkit.WaitFor(t, "spans ended", 0, func() bool {
		var admits []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			spans[s.SpanContext().SpanID().String()] = s
			if s.Name() == "bulkaction.submit" {
				submit = s
			}
			if s.Name() == handoff.SpanAdmit {
				admits = append(admits, s)
			}
		}
		// An ingest span may end after the admit spans it started.
		for _, a := range admits {
			if _, ok := spans[a.Parent().SpanID().String()]; !ok {
				return false
			}
		}
		return submit != nil && len(admits) == 3
	})
	for _, m := range got {
		parts := strings.Split(m.Header.Get("Traceparent"), "-")
		if len(parts) != 4 || parts[1] != submit.SpanContext().TraceID().String() {
			t.Fatalf("%s: traceparent %q is not in the submit trace %s", m.Key(), m.Header.Get("Traceparent"), submit.SpanContext().TraceID())
		}
		admit, ok := spans[parts[2]]
		if !ok || admit.Name() != handoff.SpanAdmit {
			t.Fatalf("%s: traceparent does not name an admit span", m.Key())
		}
		ingest, ok := spans[admit.Parent().SpanID().String()]
		if !ok || ingest.Name() != fetcher.SpanIngest {
			t.Fatalf("%s: the admit span's parent is not an ingest span", m.Key())
		}
		if ingest.Parent().SpanID() != submit.SpanContext().SpanID() {
			t.Fatalf("%s: the ingest span's parent is not the submit span", m.Key())
		}
	}
}

func TestRunReturnsPromptlyOnCancel(t *testing.T) {
	const n = 2000
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	// One job a message, so that the fetchers have many batches to take.
	c := client.New(e.JS, client.Options{BatchSize: 1})
	if err := c.Submit(ctx, "g", clientJobs("g", 0, n)...); err != nil {
		t.Fatal(err)
	}
	// A first run creates the shared submit consumer, whose goroutines in
	// the embedded server outlive any fetcher.
	stop := testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 10}}, e.Deps()))
	testkit.WaitFor(t, "first jobs queued", 0, func() bool { return groupInfo(t, e, grp("g")).Jobs > 0 })
	stop()

	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	nc, js := e.Connect(t)
	defer nc.Close()
	stop = testkit.StartWithin(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 10}, IngestBatchSize: 50}, e.DepsWith(nc, js)), 10*time.Second)
	before := groupInfo(t, e, grp("g")).Jobs
	testkit.WaitFor(t, "work under way", 0, func() bool { return groupInfo(t, e, grp("g")).Jobs > before })
	stop()
	// Nothing received was lost: every submission is either queued or still
	// on SUBMIT to be delivered again.
	queued := groupInfo(t, e, grp("g")).Jobs
	if left := e.SubmitLeft(t); int64(left)+queued < n {
		t.Fatalf("%d jobs queued and %d left on SUBMIT, want %d in all", queued, left, n)
	}
}

func TestNewValidates(t *testing.T) {
	e := pipelinetest.NewEnv(t, redisq.Config{})
	for _, cfg := range []fetcher.Config{
		{Ready: handoff.ReadyConfig{Capacity: -1}}, {AdmitBatchSize: -1}, {IngestBatchSize: -1}, {MaxIdle: -time.Second},
	} {
		if _, err := fetcher.New(cfg, e.Deps()); err == nil || !strings.HasPrefix(err.Error(), "fetcher: ") {
			t.Errorf("New(%+v) = %v, want an error", cfg, err)
		}
	}
	d := e.Deps()
	d.NC = nil
	if _, err := fetcher.New(fetcher.Config{}, d); err == nil {
		t.Error("New without a NATS connection succeeded")
	}
	d = e.Deps()
	d.Names = contracts.Names{Prefix: "bad prefix"}
	if _, err := fetcher.New(fetcher.Config{}, d); err == nil {
		t.Error("New with an invalid prefix succeeded")
	}
	if _, err := fetcher.New(fetcher.Config{}, e.Deps()); err != nil {
		t.Errorf("New with the zero Config: %v", err)
	}
}

// TestOversizeDeadLettersDoNotStopIngestion: rejected submissions whose
// bodies grow six times when escaped into JSON (control characters) once
// made dead letters larger than the DLQ accepts; they were handed back
// forever, filled the consumer's MaxAckPending and stopped ingestion for
// everyone. Their dead letters are now cut to fit, and the valid work
// behind them is ingested.
func TestOversizeDeadLettersDoNotStopIngestion(t *testing.T) {
	t.Parallel()
	const bad, valid, ingestBatch = 30, 50, 5 // MaxAckPending = 4 × ingestBatch < bad
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	body := bytes.Repeat([]byte{0x01}, 600_000) // 3.6 MB once escaped; the server takes 1 MB
	var msgs []*nats.Msg
	for i := range bad {
		m := nats.NewMsg(e.Names.Submit(grp("g")))
		m.Data = append([]byte(fmt.Sprintf("bad-%d ", i)), body...)
		msgs = append(msgs, m)
	}
	for i, err := range natsutil.PublishAll(ctx, e.JS, msgs) {
		if err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	c := client.New(e.JS, client.Options{})
	if err := c.Submit(ctx, "ok", clientJobs("ok", 0, valid)...); err != nil {
		t.Fatal(err)
	}

	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 1000}, IngestBatchSize: ingestBatch}, e.Deps()))
	// Moving 30 MB through the embedded server takes a while under the race
	// detector on a busy machine.
	const slow = 2 * time.Minute
	r.WaitJobs(t, valid, slow)
	testkit.WaitFor(t, "every bad message dead-lettered", slow, func() bool {
		return e.StreamMsgs(t, e.Names.StreamDLQ()) == bad
	})
	for _, m := range e.StoredMsgs(t, e.Names.StreamDLQ()) {
		if len(m.Data) > 1<<20 {
			t.Fatalf("dead letter of %d bytes", len(m.Data))
		}
		var dl contracts.DeadLetter
		if err := json.Unmarshal(m.Data, &dl); err != nil {
			t.Fatal(err)
		}
		if !dl.Truncated || dl.Size <= len(body) || !strings.HasPrefix(dl.Raw, "bad-") || dl.Reason != contracts.ReasonBadJSON {
			t.Fatalf("dead letter: truncated %v size %d reason %q raw %.20q", dl.Truncated, dl.Size, dl.Reason, dl.Raw)
		}
	}
	if n := testkit.Value(t, e.Metrics.DeadLetterFailures); n != 0 {
		t.Fatalf("dead_letter_failures_total = %v", n)
	}
}

// admitCalls counts the calls of the admission script (a redisq.Observer).
type admitCalls struct{ n atomic.Int64 }

func (a *admitCalls) ObserveLua(script string, _ time.Duration) {
	if script == "admit" {
		a.n.Add(1)
	}
}

// TestNewWorkWakesAdmissionAtOnce: with MaxIdle far away, an idle
// admission (its first round found nothing queued) is woken at once by jobs
// its own fetcher ingests (it ignores its own notification) and by jobs
// another process enqueued and announced with the work notification.
func TestNewWorkWakesAdmissionAtOnce(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"ingested", "announced"} {
		t.Run(by, func(t *testing.T) {
			t.Parallel()
			calls := &admitCalls{}
			e := pipelinetest.NewEnv(t, redisq.Config{Observer: calls})
			ctx := context.Background()
			r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
			testkit.Start(t, newFetcher(t, fetcher.Config{MaxIdle: time.Hour}, e.Deps()))
			// Nothing is queued yet: after its first round the admission
			// waits for a wake-up or MaxIdle.
			testkit.WaitFor(t, "the first admission round", 0, func() bool { return calls.n.Load() >= 1 })
			if by == "ingested" {
				if err := client.New(e.JS, client.Options{}).Submit(ctx, "a", clientJobs("a", 0, 5)...); err != nil {
					t.Fatal(err)
				}
			} else {
				var jobs []redisq.Job
				for i := range 5 {
					jobs = append(jobs, redisq.Job{Group: grp("a"), ID: jobID(i), Type: "t", Payload: []byte(payload("a", i))})
				}
				if _, err := e.Queue.EnqueueJobs(ctx, jobs); err != nil {
					t.Fatal(err)
				}
				if err := e.NC.Publish(e.Names.Notify("work"), nil); err != nil {
					t.Fatal(err)
				}
			}
			r.WaitJobs(t, 5, 20*time.Second)
			checkOnce(t, r.Jobs(), grps("a"), 5)
		})
	}
}
