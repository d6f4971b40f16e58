package redisq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// A submit message the pipeline refuses after its producer's publish was
// acknowledged (dead-lettered as over_quota, over_total, group_ended,
// bad_seal, or invalid) is recorded in the group its subject names, so the
// producer sees it: counts, the last reason, the newest few, and the ids of
// the refused messages, by which the gateway publishes a retry of one under a
// new id instead of letting JetStream's duplicate window drop it
// (docs/ARCHITECTURE.md §6.1). Recording never creates the group.

// Limits of a group's refusal record.
const (
	// MaxRefusedIDs is how many refused message ids a group keeps (the
	// newest by SUBMIT sequence).
	MaxRefusedIDs = 1000
	// RecentRefusalsKept is how many refusals a group lists ([Refusals.Recent]).
	RecentRefusalsKept = 20
	// maxRefusalError bounds the error text kept with a refusal.
	maxRefusalError = 1024
)

var refuseScript = loadScript("refuse")

// GroupRefusals is the HASH of a group's refusal counts and its last
// refusal (lua/refuse.lua); it expires [Config.GroupTTL] after the last
// refusal.
func (k Keys) GroupRefusals(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":refusals"
}

// GroupRefusedIDs is the ZSET of a group's refused message ids, scored by
// SUBMIT sequence, the newest [MaxRefusedIDs].
func (k Keys) GroupRefusedIDs(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":refused-ids"
}

// GroupRefusedRecent is the LIST of a group's newest refusals, newest first,
// at most [RecentRefusalsKept].
func (k Keys) GroupRefusedRecent(g contracts.GroupRef) string {
	return k.prefix + "group:" + groupKey(g) + ":refused-recent"
}

// Refusal is one submit message the pipeline refused.
type Refusal struct {
	// MsgID is the message's Nats-Msg-Id ("#<seq>" when it had none).
	MsgID string
	// Seq is its SUBMIT stream sequence (0 when unknown): a redelivery of
	// a message already recorded is not counted again.
	Seq uint64
	// Reason is the dead letter's reason token (over_quota, over_total,
	// group_ended, bad_seal, invalid_field, …).
	Reason string
	// Error is the dead letter's error.
	Error string
	// Jobs is how many jobs of the message were refused (0 for a seal).
	Jobs int64
	// At is when it was recorded.
	At time.Time
}

// RefusalCount is a group's refusals of one reason.
type RefusalCount struct {
	Reason   string
	Messages int64
	Jobs     int64
}

// Refusals is what the pipeline refused of a group's submissions.
type Refusals struct {
	// Messages and Jobs count the refused messages and their refused jobs
	// (a message refused in part counts its refused jobs only).
	Messages int64
	Jobs     int64
	// ByReason splits them by reason, in reason order.
	ByReason []RefusalCount
	// Last is the newest refusal.
	Last Refusal
	// FirstAt is when the first was recorded.
	FirstAt time.Time
	// Recent lists the newest refusals, newest first, at most
	// [RecentRefusalsKept].
	Recent []Refusal
}

// RecordedRefusal is what RecordRefusal did.
type RecordedRefusal struct {
	// Recorded is false when this message (its id and sequence) was
	// recorded before: a redelivery.
	Recorded bool
	// Messages and Jobs are the group's refusal counts after it.
	Messages, Jobs int64
	// Exists reports whether the group exists; Group holds its counts.
	Exists bool
	Group  GroupCounts
}

// RecordRefusal records that a submit message of g was refused. It never
// creates the group; the record expires [Config.GroupTTL] after its last
// refusal.
func (q *Queue) RecordRefusal(ctx context.Context, g contracts.GroupRef, r Refusal) (*RecordedRefusal, error) {
	if q.sharded() {
		return q.For(g.Tenant).RecordRefusal(ctx, g, r)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("redisq: record refusal %s: %w", g, err)
	}
	if r.Reason == "" {
		return nil, errors.New("redisq: record refusal: no reason")
	}
	id := r.MsgID
	if id == "" {
		id = "#" + strconv.FormatUint(r.Seq, 10)
	}
	msg := r.Error
	if len(msg) > maxRefusalError {
		msg = msg[:maxRefusalError] + "…"
	}
	v, err := q.run(ctx, "refuse", refuseScript,
		[]string{q.keys.GroupRefusals(g), q.keys.GroupRefusedIDs(g), q.keys.GroupRefusedRecent(g), q.keys.GroupMeta(g)},
		id, r.Seq, r.Reason, max(r.Jobs, 0), msg, q.now(), secs(q.cfg.GroupTTL), MaxRefusedIDs, RecentRefusalsKept)
	if err != nil {
		return nil, err
	}
	l := toList(v)
	if len(l) < 3+groupReplyWidth {
		return nil, fmt.Errorf("redisq: refuse script: %d values", len(l))
	}
	c := parseCounts(l[3:])
	return &RecordedRefusal{Recorded: toInt(l[0]) == 1, Messages: toInt(l[1]), Jobs: toInt(l[2]),
		Exists: c.State != "", Group: c}, nil
}

// GroupRefusals returns what the pipeline refused of g's submissions, nil
// when nothing (or when the record expired).
func (q *Queue) GroupRefusals(ctx context.Context, g contracts.GroupRef) (*Refusals, error) {
	if q.sharded() {
		return q.For(g.Tenant).GroupRefusals(ctx, g)
	}
	pipe := q.rdb.Pipeline()
	h := pipe.HGetAll(ctx, q.keys.GroupRefusals(g))
	rec := pipe.LRange(ctx, q.keys.GroupRefusedRecent(g), 0, RecentRefusalsKept-1)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisq: refusals of %s: %w", g, err)
	}
	m := h.Val()
	if len(m) == 0 {
		return nil, nil
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	r := &Refusals{Messages: num("messages"), Jobs: num("jobs"), FirstAt: msTimeOf(num("firstAt")),
		Last: Refusal{MsgID: m["lastMsgId"], Reason: m["lastReason"], Error: m["lastError"], At: msTimeOf(num("lastAt"))}}
	for f, v := range m {
		if reason, ok := strings.CutPrefix(f, "messages:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			r.ByReason = append(r.ByReason, RefusalCount{Reason: reason, Messages: n, Jobs: num("jobs:" + reason)})
		}
	}
	sort.Slice(r.ByReason, func(i, j int) bool { return r.ByReason[i].Reason < r.ByReason[j].Reason })
	for _, e := range rec.Val() {
		p := strings.SplitN(e, "\n", 6)
		if len(p) < 6 {
			continue
		}
		at, _ := strconv.ParseInt(p[0], 10, 64)
		jobs, _ := strconv.ParseInt(p[2], 10, 64)
		seq, _ := strconv.ParseUint(p[3], 10, 64)
		r.Recent = append(r.Recent, Refusal{At: msTimeOf(at), Reason: p[1], Jobs: jobs, Seq: seq, MsgID: p[4], Error: p[5]})
	}
	if len(r.Recent) > 0 && r.Recent[0].MsgID == r.Last.MsgID {
		r.Last.Jobs, r.Last.Seq = r.Recent[0].Jobs, r.Recent[0].Seq
	}
	return r, nil
}

// RefusedMsgIDs returns the ids of g's refused messages that the group
// keeps (the newest [MaxRefusedIDs]); empty when none.
func (q *Queue) RefusedMsgIDs(ctx context.Context, g contracts.GroupRef) (map[string]struct{}, error) {
	if q.sharded() {
		return q.For(g.Tenant).RefusedMsgIDs(ctx, g)
	}
	ids, err := q.rdb.ZRange(ctx, q.keys.GroupRefusedIDs(g), 0, -1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("redisq: refused message ids of %s: %w", g, err)
	}
	return idSet(ids), nil
}

func idSet(ids []string) map[string]struct{} {
	out := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		out[id] = struct{}{}
	}
	return out
}

// RetryMsgID returns the id under which to publish again a message whose
// id is id, given a group's refused message ids: id itself when it was not
// refused, else the first of "<id>:r1", "<id>:r2", … not refused. A retry
// of a refused message published under its old id would be dropped by
// JetStream as a duplicate within the duplicate window; under the new id it
// is stored and applied again (its jobs are deduplicated by id, so a retry
// of a message that was in part stored stores the rest).
func RetryMsgID(refused map[string]struct{}, id string) string {
	if _, ok := refused[id]; !ok || id == "" {
		return id
	}
	for n := 1; ; n++ {
		next := id + ":r" + strconv.Itoa(n)
		if _, ok := refused[next]; !ok {
			return next
		}
	}
}

func msTimeOf(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
