package redisq

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// MaxFailuresKept is the most entries a group's failures index
// ([Keys.GroupFailures]) keeps: recording a failure beyond it drops the
// oldest entry.
const MaxFailuresKept = 10000

// MaxFailuresPage is the most entries one [Queue.Failures] call returns.
const MaxFailuresPage = 1000

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
	Payload    json.RawMessage
}

var (
	// failuresScript reads a page of a failures index (lua/failures.lua).
	failuresScript = loadScript("failures")
	// reletScript leases jobs again as new attempts (lua/relet.lua, [Queue.Relet]).
	reletScript = loadScript("relet")
)

// failureWidth is the number of reply values per entry of lua/failures.lua.
const failureWidth = 7

// Failures lists a group's failed jobs, newest first: every job whose FAILED
// result was recorded, the newest [MaxFailuresKept] of them, kept until the
// group's keys expire ([Config.GroupTTL] after it ended). after is the
// cursor of the previous page ("" = the newest entries); next is the cursor
// of the page after this one, "" when there is none. limit is 1 to
// [MaxFailuresPage]. The cursor is opaque; failures recorded between two
// calls (newer ones) do not shift the pages, and an entry trimmed away
// meanwhile ends the listing (every older one is gone too).
func (q *Queue) Failures(ctx context.Context, g contracts.GroupRef, after string, limit int) (fs []Failure, next string, err error) {
	if err := g.Validate(); err != nil {
		return nil, "", fmt.Errorf("redisq: failures of %s: %w", g, err)
	}
	if limit < 1 || limit > MaxFailuresPage {
		return nil, "", fmt.Errorf("redisq: failures of %s: limit %d: must be between 1 and %d", g, limit, MaxFailuresPage)
	}
	last := ""
	if after != "" {
		b, err := base64.RawURLEncoding.DecodeString(after)
		if err != nil || contracts.ValidateID("jobId", string(b)) != nil {
			return nil, "", fmt.Errorf("redisq: failures of %s: cursor %q: %w", g, after, ErrBadCursor)
		}
		last = string(b)
	}
	v, err := q.run(ctx, "failures", failuresScript, []string{q.keys.GroupFailures(g)},
		q.keys.Prefix(), groupKey(g), last, limit)
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
			if p := toStr(e[5]); p != "" {
				f.Payload = json.RawMessage(p)
			}
		}
		fs = append(fs, f)
	}
	if toInt(rep[1]) == 1 && len(fs) > 0 {
		next = base64.RawURLEncoding.EncodeToString([]byte(fs[len(fs)-1].JobID))
	}
	return fs, next, nil
}

// FailuresKept is the number of entries of a group's failures index
// ([Queue.Failures]): its failed jobs, at most [MaxFailuresKept].
func (q *Queue) FailuresKept(ctx context.Context, g contracts.GroupRef) (int64, error) {
	if err := g.Validate(); err != nil {
		return 0, fmt.Errorf("redisq: failures of %s: %w", g, err)
	}
	n, err := q.rdb.ZCard(ctx, q.keys.GroupFailures(g)).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: failures of %s: %w", g, err)
	}
	return n, nil
}
