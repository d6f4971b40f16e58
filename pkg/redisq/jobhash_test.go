package redisq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// jsonOfLen is a JSON string of exactly n bytes (n = 0: no payload); its
// characters cycle through digits so that some parts read as integers.
func jsonOfLen(n int) []byte {
	if n == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; b.Len() < n-1; i++ {
		b.WriteByte("1234567890abcdef"[i%16])
	}
	b.WriteByte('"')
	return []byte(b.String())
}

// TestJobHashKeepsPayloads: a job's payload, whatever its size, comes back
// whole from its queued record, admission, reclaim and the failures index;
// a queued job has no hash until it is admitted, and a job hash whose
// payload fits 100 parts of 64 bytes stays a listpack at Redis's default
// hash-max-listpack-value.
func TestJobHashKeepsPayloads(t *testing.T) {
	ctx := context.Background()
	sizes := []int{0, 1, 2, 63, 64, 65, 100, 128, 129, 6400, 6401, 20_000}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			q, b := setup(t, redisq.Config{Lease: 5 * time.Second}, true)
			p := jsonOfLen(n)
			job := redisq.Job{Group: G("g"), ID: "j", Type: "t", Payload: p, Trace: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
			if o, err := q.Enqueue(ctx, job); err != nil || o != redisq.Added {
				t.Fatalf("enqueue: %v %v", o, err)
			}
			key := q.Keys().Job(G("g"), "j")
			queued, err := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("g"), "j")
			if err != nil {
				t.Fatal(err)
			}
			if got := redisq.JobPayload(queued); !bytes.Equal(got, p) || queued["status"] != "QUEUED" || queued["type"] != "t" ||
				queued["trace"] != job.Trace || queued["createdAt"] == "" {
				t.Fatalf("queued job %v, payload %q, want %q", queued, got, p)
			}
			if n := b.rdb.Exists(ctx, key).Val(); n != 0 {
				t.Fatal("a queued job has a hash")
			}
			r := admit(t, q, 1)
			if len(r.Jobs) != 1 || !bytes.Equal(r.Jobs[0].Payload, p) || r.Jobs[0].Type != "t" || r.Jobs[0].Trace != job.Trace || r.Jobs[0].Attempt != 1 {
				t.Fatalf("admitted %+v", r.Jobs)
			}
			h, err := b.rdb.HGetAll(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := redisq.JobPayload(h); !bytes.Equal(got, p) || h["status"] != "LEASED" || h["createdAt"] != queued["createdAt"] {
				t.Fatalf("admitted job's hash %v, payload %q, want %q", h, got, p)
			}
			if b.rdb.Exists(ctx, q.Keys().GroupQueued(G("g"))).Val() != 0 {
				t.Fatal("the admitted job's record is left in its group's queued hash")
			}
			enc, _ := b.rdb.ObjectEncoding(ctx, key).Result()
			if want := n <= redisq.PayloadChunk*redisq.PayloadChunksMax; (enc == "listpack") != want {
				t.Fatalf("encoding %s with a payload of %d bytes", enc, n)
			}
			b.clock.advance(6 * time.Second)
			rc, err := q.Reclaim(ctx, 1)
			if err != nil || len(rc.Jobs) != 1 || !bytes.Equal(rc.Jobs[0].Payload, p) || rc.Jobs[0].Type != "t" || rc.Jobs[0].Trace != job.Trace {
				t.Fatalf("reclaimed %+v %v", rc, err)
			}
			res := contracts.JobResult{Tenant: testTenant, GroupID: "g", JobID: "j", Attempt: 1, Status: contracts.ResultFailed, Error: "boom"}
			if _, err := q.Record(ctx, res); err != nil {
				t.Fatal(err)
			}
			fs, _, err := q.Failures(ctx, G("g"), "", 10)
			if err != nil || len(fs) != 1 || fs[0].Type != "t" || fs[0].Error != "boom" || fs[0].Attempts != 1 {
				t.Fatalf("failures %+v %v", fs, err)
			}
			if !bytes.Equal(fs[0].Payload, json.RawMessage(p)) {
				t.Fatalf("failure payload %q, want %q", fs[0].Payload, p)
			}
		})
	}
}

// TestJobIDsOfQueuedJobs: a queued job has no entry in its group's id set
// (its hash makes a re-sent id a duplicate); a job that leaves the list,
// admitted or cancelled, enters the set, so its id stays a duplicate after
// its hash is gone, and an ended group's id set has the group TTL.
func TestJobIDsOfQueuedJobs(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{JobTTL: time.Second, GroupTTL: time.Hour}, false)
	enqueueN(t, q, "g", 4, "", 0)
	ids := q.Keys().GroupIDs(G("g"))
	if n := b.rdb.Exists(ctx, ids).Val(); n != 0 {
		t.Fatal("queued jobs made an id set")
	}
	resend := func(want redisq.EnqueueOutcome, jids ...string) {
		t.Helper()
		for _, jid := range jids {
			if o, err := q.Enqueue(ctx, redisq.Job{Group: G("g"), ID: jid, Type: "t"}); err != nil || o != want {
				t.Fatalf("re-sent %s: %v %v, want %v", jid, o, err, want)
			}
		}
	}
	resend(redisq.Duplicate, "j00000", "j00003")
	drain(t, q, 1)
	if m := b.rdb.SMembers(ctx, ids).Val(); fmt.Sprint(m) != "[j00000]" {
		t.Fatalf("id set %v after one admission", m)
	}
	if _, err := q.Cancel(ctx, G("g")); err != nil {
		t.Fatal(err)
	}
	if n := b.rdb.SCard(ctx, ids).Val(); n != 4 {
		t.Fatalf("id set of %d after the cancel, want 4", n)
	}
	if ttl := b.rdb.TTL(ctx, ids).Val(); ttl <= 59*time.Minute {
		t.Fatalf("the cancelled group's id set has TTL %v", ttl)
	}
	for i := 0; i < 4; i++ {
		b.rdb.Del(ctx, q.Keys().Job(G("g"), fmt.Sprintf("j%05d", i)))
	}
	resend(redisq.Duplicate, "j00000", "j00001", "j00002", "j00003")
	resend(redisq.RejectedEnded, "j00004")
}

// TestCancelOfNeverAdmittedGroupGivesIDsTTL: a group cancelled before any
// of its jobs was admitted makes its id set in the cancel, with the group
// TTL like its other keys.
func TestCancelOfNeverAdmittedGroupGivesIDsTTL(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GroupTTL: time.Hour}, false)
	enqueueN(t, q, "g", 3, "", 0)
	if _, err := q.Cancel(ctx, G("g"), redisq.SweepChunk(1)); err != nil {
		t.Fatal(err)
	}
	ids := q.Keys().GroupIDs(G("g"))
	if n, ttl := b.rdb.SCard(ctx, ids).Val(), b.rdb.TTL(ctx, ids).Val(); n != 3 || ttl <= 59*time.Minute {
		t.Fatalf("id set of %d with TTL %v", n, ttl)
	}
}

// TestAbandonReachesJobHashes: abandoning a group gives the hashes of its
// jobs (all in its id set: a group with jobs queued is never abandoned) the
// group TTL too, in steps, where they have none.
func TestAbandonReachesJobHashes(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour}, true)
	enqueueN(t, q, "idle", 7, "", 0)
	for _, j := range admit(t, q, 7).Jobs {
		if _, err := q.Record(ctx, contracts.JobResult{Tenant: testTenant, GroupID: "idle", JobID: j.ID, Attempt: j.Attempt,
			Status: contracts.ResultSuccess}); err != nil {
			t.Fatal(err)
		}
		b.rdb.Persist(ctx, q.Keys().Job(G("idle"), j.ID)) // as if its TTL were lost
	}
	b.clock.advance(25 * time.Hour)
	got, err := q.AbandonIdle(ctx, 24*time.Hour, redisq.SweepChunk(2))
	if err != nil || len(got) != 1 {
		t.Fatalf("abandoned %v %v", got, err)
	}
	for i := 0; i < 7; i++ {
		if ttl := b.rdb.TTL(ctx, q.Keys().Job(G("idle"), fmt.Sprintf("j%05d", i))).Val(); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("job %d of the abandoned group has TTL %v", i, ttl)
		}
	}
}

// TestJobHashLeftFromAnEarlierGroup: a job hash left over from an earlier
// group of the same name (its keys expired before the hash: JobTTL longer
// than GroupTTL) does not make the job a duplicate of the new group; the
// job's hash is made anew.
func TestJobHashLeftFromAnEarlierGroup(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 1_000_000, Window: time.Hour, Burst: time.Hour}, true)
	k := q.Keys()
	// a finished job and a job leased when its group ended
	b.rdb.HSet(ctx, k.Job(G("g"), "done"), "status", "SUCCESS", "attempt", 3, "createdAt", 1, "error", "x")
	b.rdb.Expire(ctx, k.Job(G("g"), "done"), time.Hour)
	b.rdb.HSet(ctx, k.Job(G("g"), "lost"), "status", "LEASED", "attempt", 2, "createdAt", 1)
	// the new group exists before the second message
	enqueueN(t, q, "g", 1, "", 0)
	out, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: G("g"), ID: "done", Type: "t"}, {Group: G("g"), ID: "lost", Type: "t"}})
	if err != nil || out[0] != redisq.Added || out[1] != redisq.Added {
		t.Fatalf("jobs of an earlier group: %v %v", out, err)
	}
	for _, jid := range []string{"done", "lost"} {
		h, err := redisq.ReadJob(ctx, b.rdb, k, G("g"), jid)
		if err != nil || h["status"] != "QUEUED" || h["attempt"] != "" || h["error"] != "" || b.rdb.Exists(ctx, k.Job(G("g"), jid)).Val() != 0 {
			t.Fatalf("job %s: %v %v (the hash left over must go)", jid, h, err)
		}
	}
	// admitted, they get hashes of their own: nothing of the earlier ones
	for _, j := range admit(t, q, 3).Jobs {
		h := b.rdb.HGetAll(ctx, k.Job(G("g"), j.ID)).Val()
		if h["status"] != "LEASED" || h["attempt"] != "1" || h["error"] != "" || b.rdb.TTL(ctx, k.Job(G("g"), j.ID)).Val() != -1 {
			t.Fatalf("hash of %s: %v", j.ID, h)
		}
	}
	if o, _ := q.Enqueue(ctx, redisq.Job{Group: G("g"), ID: "done", Type: "t"}); o != redisq.Duplicate {
		t.Fatalf("re-sent job: %v", o)
	}
	// a hash left over for a group that does not exist yet
	b.rdb.HSet(ctx, k.Job(G("new"), "lost"), "status", "RUNNING", "attempt", 2, "createdAt", 1)
	if o, _ := q.Enqueue(ctx, redisq.Job{Group: G("new"), ID: "lost", Type: "t"}); o != redisq.Added {
		t.Fatalf("job of a new group with a hash left over: %v", o)
	}
	if h, _ := redisq.ReadJob(ctx, b.rdb, k, G("new"), "lost"); h["status"] != "QUEUED" || h["attempt"] != "" {
		t.Fatalf("job %v: a hash left over", h)
	}
}

// bigAdmission is a configuration whose admission takes every job asked for.
var bigAdmission = redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 1_000_000, Window: time.Hour, Burst: time.Hour}

// jobKeys lists the job hashes under the queue's prefix.
func jobKeys(t *testing.T, q *redisq.Queue, b *testBundle) []string {
	t.Helper()
	keys, err := b.rdb.Keys(context.Background(), q.Keys().Prefix()+"job:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestQueuedJobsHaveRecordsNotHashes: a queued job is a record in its
// group's queued hash, with no hash of its own, until it leaves the list:
// admitted, it gets its hash and its record goes; cancelled, the same, its
// hash CANCELLED with the job TTL; and the queued hash goes with its last
// record.
func TestQueuedJobsHaveRecordsNotHashes(t *testing.T) {
	ctx := context.Background()
	cfg := bigAdmission
	cfg.JobTTL = time.Hour
	q, b := setup(t, cfg, true)
	enqueueN(t, q, "g", 5, "", 0)
	if keys := jobKeys(t, q, b); len(keys) != 0 {
		t.Fatalf("queued jobs made hashes %v", keys)
	}
	qk := q.Keys().GroupQueued(G("g"))
	if n := b.rdb.HLen(ctx, qk).Val(); n != 5 {
		t.Fatalf("%d records, want 5", n)
	}
	r := admit(t, q, 2)
	if len(r.Jobs) != 2 {
		t.Fatalf("admitted %d jobs", len(r.Jobs))
	}
	for _, j := range r.Jobs {
		if string(j.Payload) != `{}` || j.Type != "t" || j.Attempt != 1 {
			t.Fatalf("admitted %+v", j)
		}
		h := b.rdb.HGetAll(ctx, q.Keys().Job(G("g"), j.ID)).Val()
		if h["status"] != "LEASED" || h["attempt"] != "1" || h["payload"] != `{}` || h["type"] != "t" {
			t.Fatalf("admitted job's hash %v", h)
		}
		if b.rdb.HExists(ctx, qk, j.ID).Val() {
			t.Fatalf("admitted job %s kept its record", j.ID)
		}
	}
	if n := b.rdb.HLen(ctx, qk).Val(); n != 3 {
		t.Fatalf("%d records after two admissions, want 3", n)
	}
	if h, err := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("g"), "j00004"); err != nil || h["status"] != "QUEUED" || h["payload"] != `{}` {
		t.Fatalf("queued job %v %v", h, err)
	}
	if _, err := q.Cancel(ctx, G("g")); err != nil {
		t.Fatal(err)
	}
	if b.rdb.Exists(ctx, qk).Val() != 0 {
		t.Fatal("the cancelled group's queued hash is left")
	}
	for _, jid := range []string{"j00002", "j00003", "j00004"} {
		key := q.Keys().Job(G("g"), jid)
		h := b.rdb.HGetAll(ctx, key).Val()
		if ttl := b.rdb.TTL(ctx, key).Val(); h["status"] != "CANCELLED" || h["payload"] != `{}` || ttl <= 0 || ttl > time.Hour {
			t.Fatalf("cancelled job %s: %v, TTL %v", jid, h, ttl)
		}
	}
}

// TestQueuedJobHashOfAnEarlierVersion: a queued job whose hash an earlier
// version wrote (no record) is a duplicate when sent again, keeps its place,
// and is admitted with its type, trace and payload, like a job queued now.
func TestQueuedJobHashOfAnEarlierVersion(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, bigAdmission, true)
	trace := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	p := jsonOfLen(100)
	colons := []byte(`{"at":"12:30:00","n":1}`) // a record's payload may hold its separator
	jobs := []redisq.Job{{Group: G("g"), ID: "old", Type: "t1", Payload: p, Trace: trace}, {Group: G("g"), ID: "new", Type: "t2", Payload: colons}}
	if out, err := q.EnqueueBatch(ctx, jobs); err != nil || out[0] != redisq.Added || out[1] != redisq.Added {
		t.Fatalf("enqueue: %v %v", out, err)
	}
	// the earlier layout: the job's hash, its payload in 64-byte parts
	h, err := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("g"), "old")
	if err != nil {
		t.Fatal(err)
	}
	b.rdb.HDel(ctx, q.Keys().GroupQueued(G("g")), "old")
	b.rdb.HSet(ctx, q.Keys().Job(G("g"), "old"), "type", "t1", "status", "QUEUED", "createdAt", h["createdAt"], "trace", trace,
		"p1", string(p[:64]), "p2", string(p[64:]))
	if o, err := q.Enqueue(ctx, jobs[0]); err != nil || o != redisq.Duplicate {
		t.Fatalf("re-sent job of the earlier layout: %v %v", o, err)
	}
	if h, _ := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("g"), "old"); h["status"] != "QUEUED" || !bytes.Equal(redisq.JobPayload(h), p) {
		t.Fatalf("ReadJob of the earlier layout: %v", h)
	}
	r := admit(t, q, 2)
	if len(r.Jobs) != 2 {
		t.Fatalf("admitted %+v", r.Jobs)
	}
	for i, want := range []struct {
		id, typ, trace string
		payload        []byte
	}{{"old", "t1", trace, p}, {"new", "t2", "", colons}} {
		j := r.Jobs[i]
		if j.ID != want.id || j.Type != want.typ || j.Trace != want.trace || !bytes.Equal(j.Payload, want.payload) || j.Attempt != 1 {
			t.Fatalf("admitted %d: %+v, want %+v", i, j, want)
		}
	}
	res := contracts.JobResult{Tenant: testTenant, GroupID: "g", JobID: "old", Attempt: 1, Status: contracts.ResultSuccess}
	if rr, err := q.Record(ctx, res); err != nil || rr.Outcome != redisq.Recorded {
		t.Fatalf("record: %+v %v", rr, err)
	}
}

// TestResultOfAQueuedJobIsFenced: a result for a job that is queued (a
// record: it was never handed out) is fenced, as for a queued job's hash,
// with the job's createdAt; the job stays queued.
func TestResultOfAQueuedJobIsFenced(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, bigAdmission, true)
	enqueueN(t, q, "g", 1, "", 0)
	res := contracts.JobResult{Tenant: testTenant, GroupID: "g", JobID: "j00000", Attempt: 1, Status: contracts.ResultSuccess}
	r, err := q.Record(ctx, res)
	if err != nil || r.Outcome != redisq.FencedResult || r.CreatedAtMs != 1_706_000_000_000 {
		t.Fatalf("result of a queued job: %+v %v", r, err)
	}
	if h, _ := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("g"), "j00000"); h["status"] != "QUEUED" {
		t.Fatalf("job after the fenced result: %v", h)
	}
	if n := len(admit(t, q, 1).Jobs); n != 1 {
		t.Fatalf("admitted %d jobs", n)
	}
}

// TestAdmissionTakesRunsOfAGroupInOrder: admission pops a group's jobs in
// runs (admit.lua group_job). The jobs of a run it does not take (held for
// their type's room, or left when the call ends at its rate) go back to the
// front of the list in order with their records, and a job of the earlier
// hash layout inside a run is read from its hash.
func TestAdmissionTakesRunsOfAGroupInOrder(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, bigAdmission, true)
	var jobs []redisq.Job
	for i := range 16 {
		typ := "a"
		if i == 3 {
			typ = "b"
		}
		jobs = append(jobs, redisq.Job{Group: G("g"), ID: fmt.Sprintf("j%02d", i), Type: typ, Payload: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	if _, err := q.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	qk := q.Keys().GroupQueued(G("g"))
	// j01, in the second run of the first call, has the earlier layout
	h, err := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("g"), "j01")
	if err != nil {
		t.Fatal(err)
	}
	b.rdb.HDel(ctx, qk, "j01")
	b.rdb.HSet(ctx, q.Keys().Job(G("g"), "j01"), "type", "a", "status", "QUEUED", "createdAt", h["createdAt"], "payload", `{"n":1}`)

	payloads := map[string]string{}
	for _, j := range jobs {
		payloads[j.ID] = string(j.Payload)
	}
	ids := func(js []redisq.LeasedJob) []string {
		var s []string
		for _, j := range js {
			if string(j.Payload) != payloads[j.ID] || j.Attempt != 1 {
				t.Fatalf("job %s: payload %s attempt %d", j.ID, j.Payload, j.Attempt)
			}
			s = append(s, j.ID)
		}
		return s
	}
	left := func(want []string) {
		t.Helper()
		l := b.rdb.LRange(ctx, q.Keys().GroupJobs(G("g")), 0, -1).Val()
		if fmt.Sprint(l) != fmt.Sprint(want) {
			t.Fatalf("list %v, want %v", l, want)
		}
		for _, id := range want {
			if !b.rdb.HExists(ctx, qk, id).Val() {
				t.Fatalf("queued job %s lost its record", id)
			}
		}
		if n := b.rdb.HLen(ctx, qk).Val(); n != int64(len(want)) {
			t.Fatalf("%d records, want %d (the taken jobs' dropped)", n, len(want))
		}
	}
	idsFrom := func(lo, hi int) []string {
		var s []string
		for i := lo; i < hi; i++ {
			s = append(s, fmt.Sprintf("j%02d", i))
		}
		return s
	}

	// runs of 1, 2, 4: j00..j02 taken, then j03 (type b, no room) is held
	// with the 3 jobs after it in its run
	r, err := q.Admit(ctx, 100, redisq.WithTypeRooms(map[string]int{"a": 100, "b": 0}, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := ids(r.Jobs); fmt.Sprint(got) != fmt.Sprint(idsFrom(0, 3)) || r.Held["b"] != 1 {
		t.Fatalf("admitted %v held %v, want %v and b held", got, r.Held, idsFrom(0, 3))
	}
	left(idsFrom(3, 16))
	// a run never takes more than the call may: 3 jobs in runs of 1 and 2
	if r = admit(t, q, 3); fmt.Sprint(ids(r.Jobs)) != fmt.Sprint(idsFrom(3, 6)) {
		t.Fatalf("admitted %v, want %v", ids(r.Jobs), idsFrom(3, 6))
	}
	left(idsFrom(6, 16))
	// the room of a runs out inside the second run
	r, err = q.Admit(ctx, 100, redisq.WithTypeRooms(map[string]int{"a": 2}, 0))
	if err != nil || fmt.Sprint(ids(r.Jobs)) != fmt.Sprint(idsFrom(6, 8)) {
		t.Fatalf("admitted %v %v, want %v", ids(r.Jobs), err, idsFrom(6, 8))
	}
	left(idsFrom(8, 16))
	if r = admit(t, q, 100); fmt.Sprint(ids(r.Jobs)) != fmt.Sprint(idsFrom(8, 16)) {
		t.Fatalf("admitted %v, want %v", ids(r.Jobs), idsFrom(8, 16))
	}
	left(nil)
	for _, j := range jobs {
		if h, err := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("g"), j.ID); err != nil || h["status"] != "LEASED" || h["attempt"] != "1" {
			t.Fatalf("job %s: %v %v", j.ID, h, err)
		}
	}
}
