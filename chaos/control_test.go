package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// ---------------------------------------------------------------- T13

// t13Call is how long each call of a T13 job takes: long enough that the
// group still runs while its pauses and resumes go by.
const t13Call = time.Second

// t13: pairs of pause and resume on one group, published with the client
// as producers do, while its jobs run (calls at the side-effects endpoint)
// and redis-server is frozen (SIGSTOP) or killed -9 and restarted between
// them. The two fetchers share SUBMIT, and a message retried after a Redis
// error comes back behind later ones, so the messages reach Redis out of
// publish order; each applies only if it is newer than the last one the
// group took (docs/ARCHITECTURE.md §6.1). A watcher samples the group's
// meta all along: whenever its ctlSeq names a message published, the group
// is PAUSED if and only if that message is a pause, and ctlSeq never goes
// back. Just after the last message (a resume) has been applied, the group
// must not be PAUSED; it then completes, and every job is called exactly
// once (no worker is killed, so no at-least-once case applies).
func t13(t *testing.T, p profile) run {
	se := newSideEffects(t)
	w := workload{Tenants: 1, Groups: 1, Jobs: p.t13Jobs, Job: se.job("t13", t13Call)}
	c := &controlRun{pairs: p.t13Pairs, ref: w.plans("t13")[0].ref, total: w.total()}
	return run{
		id: "T13",
		opts: envOptions{Fetchers: 2, Settings: map[string]string{
			"HTTP_ALLOWED_HOSTS": "127.0.0.1", "JOB_TIMEOUT_MS": "10000", "DUPLICATE_WINDOW": "5s",
		}},
		w:            w,
		timeout:      p.settle,
		maxFaultTime: 15 * time.Minute,
		faults:       c.run,
		check: func(e *env, _ *tally) []string {
			out := c.problems()
			if n, err := e.controlNotices(c.ref); err != nil {
				out = append(out, "EVENTS: "+err.Error())
			} else {
				c.notef("EVENTS: %d pauses or resumes superseded, %d unchanged", n["superseded"], n["unchanged"])
			}
			return append(out, se.check("t13", w)[1:]...)
		},
		note: func() string {
			return strings.Join(append(c.notesList(), se.check("t13", w)[0]), "; ")
		},
	}
}

// controlRun is T13's fault phase and what it found.
type controlRun struct {
	pairs int
	ref   contracts.GroupRef
	total int

	mu    sync.Mutex
	seqs  map[uint64]contracts.Kind // SUBMIT sequence of each message published
	probs []string
	notes []string
}

func (c *controlRun) problemf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probs = append(c.probs, fmt.Sprintf(format, args...))
}

func (c *controlRun) notef(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

func (c *controlRun) problems() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.probs...)
}

func (c *controlRun) notesList() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.notes...)
}

// meta reads the group's status and ctlSeq in one command.
func (c *controlRun) meta(e *env) (contracts.GroupState, uint64, map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	v, err := e.rdb.HMGet(ctx, e.keys.GroupMeta(c.ref), "status", "ctlSeq", "doneJobs", "declaredTotal").Result()
	if err != nil {
		return "", 0, nil, err
	}
	s := func(i int) string { x, _ := v[i].(string); return x }
	seq, _ := strconv.ParseUint(s(1), 10, 64)
	return contracts.GroupState(s(0)), seq, map[string]string{"doneJobs": s(2), "declaredTotal": s(3)}, nil
}

// run publishes the pairs while faults hit Redis, then checks the state the
// last message left. The publishing goes on whatever ctx says: every pair
// is published, and the last message is always a resume.
func (c *controlRun) run(_ context.Context, e *env) string {
	c.seqs = map[uint64]contracts.Kind{}
	bg := context.Background()
	// The pairs start once every job is submitted (the seal is applied), so
	// that the group's last SUBMIT message is always the control message
	// just published.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, _, m, err := c.meta(e)
		if err == nil && m["declaredTotal"] == strconv.Itoa(c.total) {
			if st.Terminal() {
				c.problemf("the group ended before the first pause")
			}
			break
		}
		if time.Now().After(deadline) {
			c.problemf("the group was not sealed after 3m (meta %v)", m)
			return "no pause or resume: the group was not sealed"
		}
		time.Sleep(100 * time.Millisecond)
	}
	stream, err := e.js.Stream(bg, e.names.StreamSubmit())
	if err != nil {
		c.problemf("SUBMIT: %v", err)
		return "no pause or resume: " + err.Error()
	}

	wctx, stopWatch := context.WithCancel(bg)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); c.watch(wctx, e) }()

	fctx, stopFaults := context.WithCancel(bg)
	var stops, kills int
	var frozen time.Duration
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		for i := 0; sleepRand(fctx, 300*time.Millisecond, 1200*time.Millisecond); i++ {
			if i%2 == 0 {
				d := 200*time.Millisecond + rand.N(1300*time.Millisecond)
				e.redis.signal(syscall.SIGSTOP)
				time.Sleep(d)
				e.redis.signal(syscall.SIGCONT)
				stops++
				frozen += d
				continue
			}
			e.redis.kill()
			time.Sleep(200 * time.Millisecond)
			if err := e.redis.start(); err != nil {
				c.problemf("redis restart: %v", err)
				return
			}
			kills++
		}
	}()

	cl := e.client.ForTenant(c.ref.Tenant)
	_, _, m0, _ := c.meta(e)
	start := time.Now()
	var last uint64
	var lastAt time.Time
	publish := func(kind contracts.Kind) {
		op := cl.Pause
		if kind == contracts.KindResume {
			op = cl.Resume
		}
		pctx, cancel := context.WithTimeout(bg, 2*time.Minute)
		defer cancel()
		if err := retry(pctx, func(ctx context.Context) error { return op(ctx, c.ref.ID) }); err != nil {
			c.problemf("%s not published: %v", kind, err)
			return
		}
		lastAt = time.Now()
		// The group's last message on SUBMIT is the one just published.
		var raw *jetstream.RawStreamMsg
		if err := retry(pctx, func(ctx context.Context) error {
			var err error
			raw, err = stream.GetLastMsgForSubject(ctx, e.names.Submit(c.ref))
			return err
		}); err != nil {
			c.problemf("sequence of a %s: %v", kind, err)
			return
		}
		var sub contracts.Submission
		if err := json.Unmarshal(raw.Data, &sub); err != nil || sub.Kind != kind {
			c.problemf("the group's last SUBMIT message (seq %d) is not the %s just published: %.80s", raw.Sequence, kind, raw.Data)
			return
		}
		c.mu.Lock()
		c.seqs[raw.Sequence] = kind
		c.mu.Unlock()
		last = raw.Sequence
	}
	gap := func() {
		if rand.IntN(4) > 0 { // one message in four follows the previous at once
			time.Sleep(20*time.Millisecond + rand.N(80*time.Millisecond))
		}
	}
	for i := 0; i < c.pairs; i++ {
		publish(contracts.KindPause)
		gap()
		publish(contracts.KindResume)
		gap()
	}
	took := time.Since(start)
	stopFaults()
	<-faultsDone
	e.redis.signal(syscall.SIGCONT)
	if err := e.redis.start(); err != nil { // a no-op unless the last restart failed
		c.problemf("redis start: %v", err)
	}

	// The last message (a resume) applied: the group is not PAUSED.
	var st contracts.GroupState
	var applied uint64
	var m map[string]string
	deadline = time.Now().Add(3 * time.Minute)
	for {
		var err error
		st, applied, m, err = c.meta(e)
		if err == nil && applied >= last {
			break
		}
		if time.Now().After(deadline) {
			c.problemf("the last message (resume, seq %d) not applied after 3m: ctlSeq %d, state %s", last, applied, st)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopWatch()
	<-watchDone
	switch {
	case applied != last:
	case st.Terminal():
		c.problemf("the group %s before the last message was applied", st)
	case st == contracts.StatePaused:
		c.problemf("the group is PAUSED just after the last message (a resume, seq %d) was applied", last)
	default:
		c.notef("last message (resume, SUBMIT seq %d) applied %s after its PubAck, the group %s then (%s of %d jobs done)",
			last, time.Since(lastAt).Round(time.Millisecond), st, m["doneJobs"], c.total)
	}
	c.notef("%d pairs in %s, while the jobs done went from %s to %s of %d", c.pairs, took.Round(time.Second), m0["doneJobs"], m["doneJobs"], c.total)
	if n, err := strconv.Atoi(m["doneJobs"]); err == nil && n >= c.total {
		c.problemf("every job was done before the last message was applied: the group did not run during the pairs")
	}
	if r, dead := replaySummary(e); r != "" {
		c.notef("%s", r)
		if dead > 0 {
			c.problemf("replays dead-lettered %d accepted submissions", dead)
		}
	}
	return fmt.Sprintf("%d pause/resume pairs through 2 fetchers; redis %d× SIGSTOP (%s in all, 0.2–1.5 s each) and %d× kill -9 (AOF always) between them",
		c.pairs, stops, frozen.Round(100*time.Millisecond), kills)
}

// watch samples the group's state and ctlSeq until ctx ends: ctlSeq never
// goes back, and whenever it names a message published the group is PAUSED
// if and only if that message is a pause.
func (c *controlRun) watch(ctx context.Context, e *env) {
	var prev uint64
	var samples, checked, wrong, back int
	var sample []string
	for ctx.Err() == nil {
		st, seq, _, err := c.meta(e)
		if err != nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		samples++
		if seq < prev {
			back++
			if len(sample) < 3 {
				sample = append(sample, fmt.Sprintf("ctlSeq %d after %d", seq, prev))
			}
		}
		prev = max(prev, seq)
		c.mu.Lock()
		kind, known := c.seqs[seq]
		c.mu.Unlock()
		if known && !st.Terminal() {
			checked++
			if (st == contracts.StatePaused) != (kind == contracts.KindPause) {
				wrong++
				if len(sample) < 3 {
					sample = append(sample, fmt.Sprintf("state %s after the %s of seq %d", st, kind, seq))
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.notef("watcher: %d samples of the group's meta, %d with ctlSeq naming a message published", samples, checked)
	if wrong > 0 || back > 0 {
		c.problemf("%d samples in a state other than the last message applied said, ctlSeq went back %d times (%s)", wrong, back, strings.Join(sample, ", "))
	}
}

// controlNotices counts the group's pause and resume notices on EVENTS by
// outcome ("pause had no effect: superseded" counts as superseded).
func (e *env) controlNotices(g contracts.GroupRef) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := e.js.OrderedConsumer(ctx, e.names.StreamEvents(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{e.names.Events(g)}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return out, err
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			var ev contracts.GroupEvent
			if json.Unmarshal(m.Data(), &ev) == nil && ev.Notice != "" {
				if i := strings.LastIndex(ev.Notice, ": "); i >= 0 && strings.Contains(ev.Notice, "had no effect") {
					out[ev.Notice[i+2:]]++
				}
			}
			if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return out, err
		}
		if done || got == 0 {
			return out, nil
		}
	}
}

// ---------------------------------------------------------------- T14

// t14Tenant is the tenant T14 holds at its queued-jobs quota.
const t14Tenant = "tenant-0"

// t14: a Redis rollback, as T10's, while a tenant submits faster than its
// jobs run and sits at its queued-jobs quota, so that the fetchers refuse
// some of its messages (over_quota dead letters). The Redis that comes
// back holds the jobs that finished since the snapshot as unfinished, so
// the tenant looks fuller than it was: the replay must restore every
// message accepted before the rollback all the same, and keep refused the
// ones refused then (docs/ARCHITECTURE.md §6.7). Accepted means not
// refused: once every message is applied or dead-lettered, each group is
// sealed with the jobs of its messages that no over_quota dead letter
// names, and those must all complete, counted once (the accounting
// leaves the refused jobs out). The DLQ may hold over_quota dead letters
// only, and none for a message applied before the rollback that was not
// dead-lettered by then (its sequence at or below the SUBMIT consumer's
// ack floor with Redis down).
func t14(p profile) run {
	w := workload{Tenants: 1, Groups: 3, Jobs: p.t14Jobs / 3, Rate: p.t14Rate,
		Job: func(_, _, _ int) (string, string, bool) { return "sleep", `{"ms":300}`, false }}
	// submitJobs publishes each group's jobs in chunks of Rate/20, one
	// message each.
	chunk := max(1, w.Rate/20)
	s := &quotaRun{quota: int64(p.t14Quota), rolledBack: make(chan struct{}),
		messages: uint64(w.Groups * ((w.Jobs + chunk - 1) / chunk))}
	return run{
		id:           "T14",
		w:            w,
		timeout:      p.settle + 2*time.Minute,
		maxFaultTime: 10 * time.Minute,
		dlqChecked:   true,
		submit:       func(ctx context.Context, e *env, plans []*groupPlan) error { return s.submit(ctx, e, w, plans) },
		faults:       s.faults,
		check:        func(e *env, _ *tally) []string { return s.check(e) },
		note:         func() string { return strings.Join(s.notes, "; ") },
	}
}

// quotaRun is T14's state.
type quotaRun struct {
	quota    int64
	messages uint64 // the jobs messages the workload publishes
	qOnce    sync.Once
	q        *redisq.Queue
	qErr     error
	// rolledBack is closed once the fault phase has rolled Redis back (or
	// given up); the groups are sealed after it.
	rolledBack chan struct{}
	rolled     bool
	// floor is the SUBMIT consumer's ack floor with Redis down, and
	// before the dead letters stored by then, by SUBMIT sequence.
	floor  uint64
	before map[uint64]bool
	// refused holds the job ids of the refused messages, by group; the
	// counts are of the messages and jobs left out as refused.
	refused                            map[contracts.GroupRef]map[string]bool
	refusedMsgs, refusedJobs, accepted int
	notes                              []string
}

// queue returns a redisq.Queue on the suite's Redis client.
func (s *quotaRun) queue(e *env) (*redisq.Queue, error) {
	s.qOnce.Do(func() { s.q, s.qErr = redisq.New(context.Background(), e.rdb, redisq.Config{Prefix: e.prefix}) })
	return s.q, s.qErr
}

// queued is the tenant's count of queued jobs (-1 if unknown).
func (s *quotaRun) queued(ctx context.Context, e *env) int64 {
	q, err := s.queue(e)
	if err != nil {
		return -1
	}
	tq, err := q.TenantQuota(ctx, t14Tenant)
	if err != nil {
		return -1
	}
	return tq.QueuedJobs
}

// submit sets the quota, publishes the jobs, waits for the rollback and
// for every message to be applied or dead-lettered, then seals each group
// with its accepted jobs (and leaves the refused ones out of the plans).
func (s *quotaRun) submit(ctx context.Context, e *env, w workload, plans []*groupPlan) error {
	q, err := s.queue(e)
	if err != nil {
		return err
	}
	if err := q.SetTenantQuota(ctx, t14Tenant, redisq.QuotaQueuedJobs, s.quota); err != nil {
		return err
	}
	if err := e.submitJobs(ctx, w, plans); err != nil {
		return err
	}
	select {
	case <-s.rolledBack:
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := e.waitSubmitApplied(ctx); err != nil {
		return err
	}
	dls, err := e.deadLetters(ctx)
	if err != nil {
		return err
	}
	refused := map[contracts.GroupRef]map[string]bool{}
	s.refused = refused
	for _, d := range dls {
		if d.reason != fetcher.ReasonOverQuota {
			continue
		}
		s.refusedMsgs++
		if refused[d.group] == nil {
			refused[d.group] = map[string]bool{}
		}
		for _, id := range d.jobs {
			refused[d.group][id] = true
		}
	}
	for _, p := range plans {
		var kept []client.Job
		for _, j := range p.jobs {
			if refused[p.ref][j.ID] {
				s.refusedJobs++
				continue
			}
			kept = append(kept, j)
		}
		p.jobs = kept
		s.accepted += len(kept)
	}
	return e.seal(ctx, plans)
}

// faults snapshots Redis once a third of the workload's messages are on
// SUBMIT, and rolls it back to that snapshot once two thirds are.
func (s *quotaRun) faults(ctx context.Context, e *env) string {
	rolledBack := sync.OnceFunc(func() { close(s.rolledBack) })
	defer rolledBack()
	bg := context.Background()
	msgs := func() uint64 {
		cctx, cancel := context.WithTimeout(bg, 2*time.Second)
		defer cancel()
		st, err := e.js.Stream(cctx, e.names.StreamSubmit())
		if err != nil {
			return 0
		}
		return st.CachedInfo().State.LastSeq
	}
	total := s.messages
	snap := filepath.Join(e.dir, "snapshot.rdb")
	for ctx.Err() == nil && msgs() < total/3 {
		time.Sleep(100 * time.Millisecond)
	}
	if ctx.Err() != nil {
		return "no snapshot: the run ended first"
	}
	atSeq, atDone, atQueued := msgs(), e.doneJobs(), s.queued(bg, e)
	if err := e.bgsave(snap); err != nil {
		return "snapshot failed: " + err.Error()
	}
	for ctx.Err() == nil && msgs() < total*2/3 {
		time.Sleep(100 * time.Millisecond)
	}
	laterSeq, laterDone, laterQueued := msgs(), e.doneJobs(), s.queued(bg, e)
	e.redis.kill()
	// Nothing is applied or refused while Redis is down: what the SUBMIT
	// consumer acknowledged by now was applied before the rollback.
	time.Sleep(time.Second)
	ci, err := e.submitConsumer(bg)
	if err != nil {
		return "SUBMIT consumer: " + err.Error()
	}
	s.floor = ci.AckFloor.Stream
	dls, err := e.deadLetters(bg)
	if err != nil {
		return "DLQ: " + err.Error()
	}
	s.before = map[uint64]bool{}
	for _, d := range dls {
		s.before[d.seq] = true
	}
	_ = os.RemoveAll(filepath.Join(e.redis.dir, "appendonlydir"))
	if err := copyFile(snap, filepath.Join(e.redis.dir, "dump.rdb")); err != nil {
		return "restore failed: " + err.Error()
	}
	e.redis.extra = []string{"--appendonly", "no"}
	if err := e.redis.start(); err != nil {
		return "restart failed: " + err.Error()
	}
	if err := e.rdb.ConfigSet(bg, "appendonly", "yes").Err(); err != nil {
		return "appendonly on: " + err.Error()
	}
	s.rolled = true
	rolledBack()
	// The replay restores what was accepted whatever the quota says: the
	// tenant's queued jobs may go past it for a while.
	peak := s.queued(bg, e)
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		peak = max(peak, s.queued(bg, e))
	}
	s.notes = append(s.notes, fmt.Sprintf("%s queued jobs (quota %d): %d at the snapshot, %d at the rollback, up to %d in the 15 s after it",
		t14Tenant, s.quota, atQueued, laterQueued, peak))
	return fmt.Sprintf("%s at its queued-jobs quota %d; BGSAVE at SUBMIT seq %d (%d jobs done), rolled back at seq %d (%d done; %d dead letters by then, ack floor %d)",
		t14Tenant, s.quota, atSeq, atDone, laterSeq, laterDone, len(dls), s.floor)
}

// check judges the DLQ: over_quota dead letters only, none for a message
// applied before the rollback without being refused then, no refused job
// stored; and what the replays did.
func (s *quotaRun) check(e *env) []string {
	var out []string
	if !s.rolled {
		out = append(out, "no rollback happened")
	}
	dls, err := e.deadLetters(context.Background())
	if err != nil {
		return append(out, "DLQ: "+err.Error())
	}
	other := map[string]int{}
	var late []string
	lateN, after := 0, 0
	seen := map[uint64]int{}
	for _, d := range dls {
		seen[d.seq]++
		if d.reason != fetcher.ReasonOverQuota {
			other[d.reason]++
			continue
		}
		if len(d.jobs) == 0 {
			out = append(out, fmt.Sprintf("over_quota dead letter of SUBMIT seq %d without its jobs", d.seq))
		}
		if !s.before[d.seq] {
			after++
			if d.seq <= s.floor {
				lateN++
				if len(late) < 5 {
					late = append(late, strconv.FormatUint(d.seq, 10))
				}
			}
		}
	}
	if len(other) > 0 {
		out = append(out, "dead letters other than over_quota: "+fmtCounts(other))
	}
	if lateN > 0 {
		out = append(out, fmt.Sprintf("%d submissions applied before the rollback were dead-lettered after it (SUBMIT seq %s)", lateN, strings.Join(late, ", ")))
	}
	for seq, n := range seen {
		if n > 1 {
			out = append(out, fmt.Sprintf("SUBMIT seq %d dead-lettered %d times", seq, n))
		}
	}
	// A refused message stored none of its jobs.
	ctx := context.Background()
	stored := 0
	for g, ids := range s.refused {
		// a job's hash, or its record while it is queued
		cmds := make([]*redis.IntCmd, 0, len(ids))
		recs := make([]*redis.BoolCmd, 0, len(ids))
		_, err := e.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
			for id := range ids {
				cmds = append(cmds, pl.Exists(ctx, e.keys.Job(g, id)))
				recs = append(recs, pl.HExists(ctx, e.keys.GroupQueued(g), id))
			}
			return nil
		})
		if err != nil {
			out = append(out, "refused jobs: "+err.Error())
			break
		}
		for i, c := range cmds {
			stored += int(c.Val())
			if recs[i].Val() {
				stored++
			}
		}
	}
	if stored > 0 {
		out = append(out, fmt.Sprintf("%d jobs of refused messages stored", stored))
	}
	s.notes = append(s.notes, fmt.Sprintf("%d jobs accepted; %d refused for quota (%d messages: %d before the rollback, %d after)",
		s.accepted, s.refusedJobs, s.refusedMsgs, s.refusedMsgs-after, after))
	if r, dead := replaySummary(e); r != "" {
		s.notes = append(s.notes, r)
		if dead > 0 {
			out = append(out, fmt.Sprintf("replays dead-lettered %d accepted submissions", dead))
		}
	}
	return out
}

// ---------------------------------------------------------------- helpers

// submitConsumer returns the info of SUBMIT's durable consumer (the one the
// fetchers share).
func (e *env) submitConsumer(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := e.js.Stream(cctx, e.names.StreamSubmit())
	if err != nil {
		return nil, err
	}
	cl := st.ListConsumers(cctx)
	for ci := range cl.Info() {
		if ci.Config.Durable != "" {
			return ci, nil
		}
	}
	if err := cl.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no durable consumer on %s", e.names.StreamSubmit())
}

// waitSubmitApplied waits until SUBMIT's consumer has every message
// acknowledged: each applied or dead-lettered.
func (e *env) waitSubmitApplied(ctx context.Context) error {
	for {
		ci, err := e.submitConsumer(ctx)
		if err == nil && ci.NumPending == 0 && ci.NumAckPending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("SUBMIT not applied: %w (consumer %+v, %v)", ctx.Err(), ci, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// deadLetter is one message of the DLQ, as T14 reads it.
type deadLetter struct {
	seq    uint64 // the SUBMIT sequence it rejects (its Nats-Msg-Id), 0 if none
	reason string
	group  contracts.GroupRef
	jobs   []string // the job ids of the rejected message
}

// deadLetters reads the whole DLQ.
func (e *env) deadLetters(ctx context.Context) ([]deadLetter, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := e.js.Stream(ctx, e.names.StreamDLQ())
	if err != nil {
		return nil, err
	}
	info := st.CachedInfo().State
	if info.Msgs == 0 {
		return nil, nil
	}
	cons, err := e.js.OrderedConsumer(ctx, e.names.StreamDLQ(), jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	prefix := "dlq:" + e.names.StreamSubmit() + ":"
	var out []deadLetter
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			d := deadLetter{reason: m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]}
			if id, ok := strings.CutPrefix(m.Headers().Get(jetstream.MsgIDHeader), prefix); ok {
				d.seq, _ = strconv.ParseUint(id, 10, 64)
			}
			var dl contracts.DeadLetter
			if json.Unmarshal(m.Data(), &dl) == nil {
				d.group, _ = e.names.GroupFromSubject(dl.Subject)
				var sub contracts.Submission
				if json.Unmarshal(dl.Message, &sub) == nil {
					for _, j := range sub.Jobs {
						d.jobs = append(d.jobs, j.JobID)
					}
				}
			}
			out = append(out, d)
			if md, err := m.Metadata(); err == nil && (md.NumPending == 0 || md.Sequence.Stream >= info.LastSeq) {
				done = true
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		if done {
			return out, nil
		}
		if got == 0 {
			return nil, fmt.Errorf("DLQ read stopped after %d of %d messages", len(out), info.Msgs)
		}
	}
}

var logAttr = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

// replaySummary sums the SUBMIT replays the fetchers logged (docs/
// ARCHITECTURE.md §6.7) and returns it described, with the number of
// accepted messages the replays dead-lettered.
func replaySummary(e *env) (string, int) {
	files, _ := filepath.Glob(filepath.Join(e.dir, "fetcher-*.log"))
	var n, replayed, before, dead int
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if !strings.Contains(line, "SUBMIT replayed from its stored position") {
				continue
			}
			n++
			for _, m := range logAttr.FindAllStringSubmatch(line, -1) {
				v, _ := strconv.Atoi(m[2])
				switch m[1] {
				case "replayed":
					replayed += v
				case "rejected_before":
					before += v
				case "dead_lettered":
					dead += v
				}
			}
		}
		fh.Close()
	}
	if n == 0 {
		return "", 0
	}
	return fmt.Sprintf("%d SUBMIT replays: %d messages stored again, %d left out as refused before, %d dead-lettered", n, replayed, before, dead), dead
}
