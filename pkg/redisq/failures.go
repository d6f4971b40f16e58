package redisq

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// MaxFailuresKept is the most entries a group's failures index
// ([Keys.GroupFailures]) keeps: recording a failure beyond it drops the
// oldest entry.
const MaxFailuresKept = 10000

// MaxFailuresPage is the most entries one [Queue.Failures] call returns.
const MaxFailuresPage = 1000

// MaxFailuresPageBytes bounds the work of one [Queue.Failures] call in
// bytes as MaxFailuresPage does in entries: the call stops taking entries
// once the payloads and errors it read add up to it (at least one entry is
// taken), and its page is shorter, with a next cursor. One call thus reads
// at most this plus one payload ([contracts.DefaultMaxPayloadBytes]) from
// Redis, in one script that never holds Redis for long, whatever the
// page size asked for.
const MaxFailuresPageBytes = 4 << 20

// ErrBadCursor is returned by [Queue.Failures] for a cursor it did not issue.
var ErrBadCursor = errors.New("redisq: bad cursor")

// Failure is one failed job of a group's failures index.
type Failure struct {
	JobID string
	// Type, Attempts (the attempt that failed), Error and Payload come from
	// the job's hash. A job's hash expires [Config.JobTTL] after it failed
	// while the index lives as long as its group: once the hash is gone,
	// they are zero and only JobID and FinishedAt are known.
	Type     string
	Attempts int
	Error    string
	// FinishedAt is when the failure was recorded.
	FinishedAt time.Time
	// Payload is the job's payload, or its first [FailuresQuery.Head]
	// bytes when Truncated.
	Payload json.RawMessage
	// PayloadBytes is the size of the whole payload.
	PayloadBytes int
	// Truncated says Payload holds only the payload's first bytes.
	Truncated bool
}

// FailuresQuery selects a page of a group's failures index
// ([Queue.FailuresPage]).
type FailuresQuery struct {
	// After is the cursor of the previous page ("" = the newest entries).
	After string
	// Limit is the most entries, 1 to [MaxFailuresPage].
	Limit int
	// Head, when above 0, cuts every payload longer than Head bytes to its
	// first Head bytes (Failure.Truncated), for a listing; 0 returns whole
	// payloads.
	Head int
}

var (
	// failuresScript reads a page of a failures index (lua/failures.lua).
	failuresScript = loadScript("failures")
	// reletScript leases jobs again as new attempts (lua/relet.lua, [Queue.Relet]).
	reletScript = loadScript("relet")
)

// failureWidth is the number of reply values per entry of lua/failures.lua.
const failureWidth = 8

// Failures lists a group's failed jobs, newest first: every job whose FAILED
// result was recorded, the newest [MaxFailuresKept] of them, kept until the
// group's keys expire ([Config.GroupTTL] after it ended). after is the
// cursor of the previous page ("" = the newest entries); next is the cursor
// of the page after this one, "" when there is none. limit is 1 to
// [MaxFailuresPage]; a page holds fewer entries when their payloads reach
// [MaxFailuresPageBytes]. The cursor is opaque; failures recorded between
// two calls (newer ones) do not shift the pages, and an entry trimmed away
// meanwhile ends the listing (every older one is gone too). Payloads are
// whole; [Queue.FailuresPage] can cut them.
func (q *Queue) Failures(ctx context.Context, g contracts.GroupRef, after string, limit int) (fs []Failure, next string, err error) {
	if q.sharded() {
		return q.For(g.Tenant).Failures(ctx, g, after, limit)
	}
	return q.FailuresPage(ctx, g, FailuresQuery{After: after, Limit: limit})
}

// FailuresPage is [Queue.Failures] with the payloads cut to fq.Head bytes
// when it is set.
func (q *Queue) FailuresPage(ctx context.Context, g contracts.GroupRef, fq FailuresQuery) (fs []Failure, next string, err error) {
	if q.sharded() {
		return q.For(g.Tenant).FailuresPage(ctx, g, fq)
	}
	if err := g.Validate(); err != nil {
		return nil, "", fmt.Errorf("redisq: failures of %s: %w", g, err)
	}
	if fq.Limit < 1 || fq.Limit > MaxFailuresPage {
		return nil, "", fmt.Errorf("redisq: failures of %s: limit %d: must be between 1 and %d", g, fq.Limit, MaxFailuresPage)
	}
	last := ""
	if fq.After != "" {
		b, err := base64.RawURLEncoding.DecodeString(fq.After)
		if err != nil || contracts.ValidateID("jobId", string(b)) != nil {
			return nil, "", fmt.Errorf("redisq: failures of %s: cursor %q: %w", g, fq.After, ErrBadCursor)
		}
		last = string(b)
	}
	v, err := q.run(ctx, "failures", failuresScript, []string{q.keys.GroupFailures(g)},
		q.keys.Prefix(), groupKey(g), last, fq.Limit, max(fq.Head, 0), MaxFailuresPageBytes)
	if err != nil {
		return nil, "", err
	}
	rep := toList(v)
	if len(rep) != 2 {
		return nil, "", fmt.Errorf("redisq: failures script: %d reply values", len(rep))
	}
	l := toList(rep[0])
	if len(l)%failureWidth != 0 {
		return nil, "", fmt.Errorf("redisq: failures script: %d entry values", len(l))
	}
	fs = make([]Failure, 0, len(l)/failureWidth)
	for i := 0; i < len(l); i += failureWidth {
		e := l[i : i+failureWidth]
		f := Failure{JobID: toStr(e[0]), FinishedAt: time.UnixMilli(toInt(e[1]))}
		if toStr(e[6]) == "1" {
			f.Type, f.Error = toStr(e[2]), toStr(e[4])
			f.Attempts, _ = strconv.Atoi(toStr(e[3]))
			f.PayloadBytes = int(toInt(e[7]))
			if p := toStr(e[5]); p != "" {
				f.Payload = json.RawMessage(p)
				f.Truncated = len(p) < f.PayloadBytes
			}
		}
		fs = append(fs, f)
	}
	if toInt(rep[1]) == 1 && len(fs) > 0 {
		next = base64.RawURLEncoding.EncodeToString([]byte(fs[len(fs)-1].JobID))
	}
	return fs, next, nil
}

// Failure reads one entry of a group's failures index ([Queue.Failures])
// whole; found is false when the job is not among the group's kept
// failures. Its type, attempt, error and payload are zero once its hash
// expired ([Config.JobTTL]).
func (q *Queue) Failure(ctx context.Context, g contracts.GroupRef, jobID string) (f *Failure, found bool, err error) {
	if q.sharded() {
		return q.For(g.Tenant).Failure(ctx, g, jobID)
	}
	if err := g.Validate(); err != nil {
		return nil, false, fmt.Errorf("redisq: failure of %s: %w", g, err)
	}
	if err := contracts.ValidateID("jobId", jobID); err != nil {
		return nil, false, fmt.Errorf("redisq: failure of %s: %w", g, err)
	}
	pipe := q.rdb.Pipeline()
	score := pipe.ZScore(ctx, q.keys.GroupFailures(g), jobID)
	h := pipe.HGetAll(ctx, q.keys.Job(g, jobID))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("redisq: failure %s of %s: %w", jobID, g, err)
	}
	at, err := score.Result()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	f = &Failure{JobID: jobID, FinishedAt: time.UnixMilli(int64(at))}
	if m := h.Val(); m["status"] != "" {
		f.Type, f.Error = m["type"], m["error"]
		a := m["resultAttempt"]
		if a == "" {
			a = m["attempt"]
		}
		f.Attempts, _ = strconv.Atoi(a)
		if p := JobPayload(m); len(p) > 0 {
			f.Payload, f.PayloadBytes = json.RawMessage(p), len(p)
		}
	}
	return f, true, nil
}

// FailuresKept is the number of entries of a group's failures index
// ([Queue.Failures]): its failed jobs, at most [MaxFailuresKept].
func (q *Queue) FailuresKept(ctx context.Context, g contracts.GroupRef) (int64, error) {
	if q.sharded() {
		return q.For(g.Tenant).FailuresKept(ctx, g)
	}
	if err := g.Validate(); err != nil {
		return 0, fmt.Errorf("redisq: failures of %s: %w", g, err)
	}
	n, err := q.rdb.ZCard(ctx, q.keys.GroupFailures(g)).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: failures of %s: %w", g, err)
	}
	return n, nil
}

// FailuresVersion reads, in one round trip, what tells whether a group's
// failures index changed: the group's count of failed jobs, which the
// script that adds a failure to the index raises in the same call (nothing
// else adds to or trims the index). exists is false when the group does
// not exist (never created, or expired with its index). A reader that kept
// a page of [Queue.FailuresPage] may serve it again while the version is
// unchanged, for a bounded time: a kept failure's job hash expires on its
// own ([Config.JobTTL]), which changes the page and not the version.
func (q *Queue) FailuresVersion(ctx context.Context, g contracts.GroupRef) (version int64, exists bool, err error) {
	if q.sharded() {
		return q.For(g.Tenant).FailuresVersion(ctx, g)
	}
	if err := g.Validate(); err != nil {
		return 0, false, fmt.Errorf("redisq: failures of %s: %w", g, err)
	}
	v, err := q.rdb.HMGet(ctx, q.keys.GroupMeta(g), "status", "failedCount").Result()
	if err != nil {
		return 0, false, fmt.Errorf("redisq: failures of %s: %w", g, err)
	}
	if v[0] == nil {
		return 0, false, nil
	}
	if s, ok := v[1].(string); ok {
		version, _ = strconv.ParseInt(s, 10, 64)
	}
	return version, true, nil
}
