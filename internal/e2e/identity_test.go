package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// jobStates is one atomic reading (MULTI/EXEC) of a group's counters and of
// the status of every one of its jobs.
type jobStates struct {
	info     redisq.GroupInfo
	byStatus map[string]int64 // job status -> jobs; "" = no job hash yet
	parked   int64            // the group's members of the non-ready queue
}

// readJobStates reads the group's meta, queued list length and non-ready
// counter together with the status of each of the n jobs "job-000000".. and
// their membership of the non-ready queue, in one transaction.
func readJobStates(ctx context.Context, rdb redis.UniversalClient, k redisq.Keys, g contracts.GroupRef, n int) (*jobStates, error) {
	pipe := rdb.TxPipeline()
	meta := pipe.HGetAll(ctx, k.GroupMeta(g))
	pending := pipe.LLen(ctx, k.GroupJobs(g))
	nonReady := pipe.Get(ctx, k.CongestionCount(g))
	members := make([]string, n)
	jids := make([]string, n)
	statuses := make([]*redis.StringCmd, n)
	for i := range n {
		jid := fmt.Sprintf("job-%06d", i)
		members[i] = g.Tenant + ":" + g.ID + ":" + jid
		jids[i] = jid
		statuses[i] = pipe.HGet(ctx, k.Job(g, jid), "status")
	}
	// a queued job that has not left the list has a record, not a hash
	queued := pipe.HMGet(ctx, k.GroupQueued(g), jids...)
	scores := pipe.ZMScore(ctx, k.NonReadyQueue(), members...)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	m := meta.Val()
	num := func(f string) int64 {
		var x int64
		fmt.Sscan(m[f], &x)
		return x
	}
	st := &jobStates{byStatus: map[string]int64{}}
	st.info.State = contracts.GroupState(m["status"])
	st.info.Jobs, st.info.Done, st.info.Cancelled = num("totalJobs"), num("doneJobs"), num("cancelledCount")
	st.info.InFlight, st.info.MaxInFlight = num("inFlight"), num("maxInFlight")
	st.info.Pending = pending.Val()
	st.info.NonReady, _ = nonReady.Int64()
	for i, c := range statuses {
		if queued.Val()[i] != nil {
			st.byStatus["QUEUED"]++
		} else {
			st.byStatus[c.Val()]++
		}
	}
	for _, s := range scores.Val() {
		if s != 0 {
			st.parked++
		}
	}
	return st, nil
}

// TestCountsMatchJobStates samples running groups many times, each time in
// one transaction, and checks status's counting identity against the jobs
// themselves: Jobs = Pending + InFlight + NonReady + Done + Cancelled,
// where InFlight (derived from the counters, as status does) equals the
// jobs LEASED or RUNNING, Pending the jobs QUEUED, NonReady the jobs
// BACKOFF and the group's members of the non-ready queue, Done the jobs
// SUCCESS or FAILED; and for the group with a maxInFlight, the meta
// inFlight kept for the limit equals the jobs LEASED or RUNNING too.
// Meanwhile status read as the CLI does adds up at every reading, and the
// aggregators leave a progress history that status measures the rate over.
func TestCountsMatchJobStates(t *testing.T) {
	e := newEnv(t)
	cfg := e.config(nil)
	mux := processor.NewMux()
	mux.HandleFunc("idt", func(ctx context.Context, job *processor.Job) error {
		time.Sleep(10 * time.Millisecond)
		h := fnv.New32a()
		h.Write([]byte(job.GroupID + job.JobID))
		if job.Attempt == 1 && h.Sum32()%8 == 0 {
			return errors.New("transient") // backs off, then succeeds
		}
		return nil
	})
	r := e.start(cfg, stack.PipelineTargets, mux)
	q := r.st.Conns.Queue
	rdb, keys := pipelinetest.Raw(r.st)
	const n, nLimited, limit = 2000, 200, 8
	free, limited := ref("free"), ref("limited")

	submit := func(gid string, n int, settings contracts.GroupSettings) {
		t.Helper()
		jobs := make([]client.Job, n)
		for i := range jobs {
			jobs[i] = client.Job{ID: fmt.Sprintf("job-%06d", i), Type: "idt", Payload: []byte(`{}`)}
		}
		ctx := context.Background()
		if err := e.client.SubmitGroup(ctx, gid, settings, jobs...); err != nil {
			t.Fatal(err)
		}
		if err := e.client.Seal(ctx, gid, int64(n)); err != nil {
			t.Fatal(err)
		}
	}
	submit("limited", nLimited, contracts.GroupSettings{MaxInFlight: limit})
	submit("free", n, contracts.GroupSettings{})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	checks := map[contracts.GroupRef]int{}
	seen := map[string]int{} // what the readings covered
	check := func(g contracts.GroupRef, total int) (ended bool) {
		t.Helper()
		st, err := readJobStates(ctx, rdb, keys, g, total)
		if err != nil {
			t.Fatal(err)
		}
		if st.info.State == "" {
			return false // not ingested yet
		}
		i, b := st.info, st.byStatus
		checks[g]++
		inFlight := i.Jobs - i.Pending - i.NonReady - i.Done - i.Cancelled
		running := b["LEASED"] + b["RUNNING"]
		type pair struct {
			what      string
			got, want int64
		}
		pairs := []pair{
			{"jobs received vs job hashes", i.Jobs, int64(total) - b[""]},
			{"pending vs QUEUED", i.Pending, b["QUEUED"]},
			{"nonReady vs BACKOFF", i.NonReady, b["BACKOFF"]},
			{"nonReady vs the non-ready queue", i.NonReady, st.parked},
			{"derived inFlight vs LEASED/RUNNING", inFlight, running},
			{"done vs SUCCESS/FAILED", i.Done, b["SUCCESS"] + b["FAILED"]},
			{"cancelled vs CANCELLED", i.Cancelled, b["CANCELLED"]},
		}
		if i.MaxInFlight > 0 {
			pairs = append(pairs, pair{"meta inFlight vs LEASED/RUNNING", i.InFlight, running})
		}
		for _, p := range pairs {
			if p.got != p.want {
				t.Fatalf("%s reading %d (%s): %s: %d != %d; counts %+v, job states %v",
					g.ID, checks[g], i.State, p.what, p.got, p.want, i.GroupCounts, b)
			}
		}
		if i.MaxInFlight > 0 && i.InFlight > i.MaxInFlight {
			t.Fatalf("%s: %d in flight, above its limit of %d", g.ID, i.InFlight, i.MaxInFlight)
		}
		if inFlight > 0 {
			seen[g.ID+" in flight"]++
		}
		if i.NonReady > 0 {
			seen[g.ID+" backing off"]++
		}
		if i.Pending > 0 {
			seen[g.ID+" queued"]++
		}

		s, err := status.Read(ctx, q, g, status.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if raw := s.Jobs - s.Queued - s.BackingOff - s.Done - s.Cancelled; raw != s.InFlight {
			t.Fatalf("%s status: jobs %d - queued %d - backing off %d - done %d - cancelled %d = %d, in flight %d",
				g.ID, s.Jobs, s.Queued, s.BackingOff, s.Done, s.Cancelled, raw, s.InFlight)
		}
		return i.State.Terminal()
	}
	freeDone, limitedDone := false, false
	for !freeDone || !limitedDone {
		if ctx.Err() != nil {
			t.Fatalf("the groups did not complete: %v", ctx.Err())
		}
		if !freeDone {
			freeDone = check(free, n)
		}
		if !limitedDone {
			limitedDone = check(limited, nLimited)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("readings: %v; covered %v", checks, seen)
	for _, want := range []string{"free in flight", "free backing off", "free queued", "limited in flight"} {
		if seen[want] == 0 {
			t.Errorf("no reading with %s", want)
		}
	}
	if checks[free] < 50 {
		t.Errorf("only %d readings of the running group", checks[free])
	}

	// The aggregators wrote progress samples while the group ran, and the
	// history expires with the group.
	samples, err := q.Progress(context.Background(), free)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) < 2 {
		t.Errorf("%d progress samples of a group that ran for seconds, want several", len(samples))
	}
	if ttl := rdb.TTL(context.Background(), keys.GroupProgress(free)).Val(); ttl <= 0 {
		t.Errorf("progress history TTL %s after the group ended, want the group TTL", ttl)
	}
}
