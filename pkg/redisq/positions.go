package redisq

import (
	"context"
	"fmt"
)

var positionScript = loadScript("position")

// Position is a consumer's position in a retained log: every message of the
// log up to Seq was applied to Redis (docs/ARCHITECTURE.md §6.7).
type Position struct {
	// Seq is the stream sequence up to which every message was applied (0:
	// none is known to be).
	Seq uint64
	// Current reports whether the Redis server process answering stored
	// Seq. A restarted server, one restored from an older snapshot, or a
	// replica promoted in a failover is another process: its position is
	// not current until a replay from it resets it ([Queue.ResetPosition]),
	// because the writes after it may be lost.
	Current bool
	// RunID is the run id of the server that answered; StoredRunID the one
	// stored with Seq (read only: [Queue.Position]).
	RunID, StoredRunID string
	// Shards are the positions of each shard, in order, with more than one
	// shard (nil with one): each shard keeps its own, since a failover loses
	// the writes of the shards on one primary only. Seq, RunID and
	// StoredRunID are then the lowest shard's, and Current whether every
	// shard's is.
	Shards []Position
}

// Position reads the position of log.
func (q *Queue) Position(ctx context.Context, log string) (Position, error) {
	return q.position(ctx, log, "read", 0, 0, "")
}

// AdvancePosition moves log's position forward to seq (never backward),
// only while the position is current: once the server is another process
// it returns the stored position with Current false and moves nothing.
func (q *Queue) AdvancePosition(ctx context.Context, log string, seq uint64) (Position, error) {
	return q.position(ctx, log, "advance", seq, 0, "")
}

// ResetPosition sets log's position to seq and makes it current, if it is
// still from (Seq and StoredRunID) as read before a replay: a replay from
// from.Seq+1 up to seq was applied. When another replay reset it first,
// it changes nothing and returns the position as it is.
func (q *Queue) ResetPosition(ctx context.Context, log string, from Position, seq uint64) (Position, error) {
	if q.sharded() {
		if len(from.Shards) != len(q.shards) {
			return Position{}, fmt.Errorf("redisq: reset position of %s: %d shard positions read, %d shards", log, len(from.Shards), len(q.shards))
		}
		return q.positionSharded(ctx, log, "reset", seq, from.Shards)
	}
	return q.position(ctx, log, "reset", seq, from.Seq, from.StoredRunID)
}

func (q *Queue) position(ctx context.Context, log, op string, seq, fromSeq uint64, fromRID string) (Position, error) {
	if q.sharded() {
		return q.positionSharded(ctx, log, op, seq, nil)
	}
	v, err := q.run(ctx, "position", positionScript, []string{q.keys.Positions()}, log, op, seq, fromSeq, fromRID)
	if err != nil {
		return Position{}, err
	}
	a, ok := v.([]any)
	if !ok || len(a) < 3 {
		return Position{}, fmt.Errorf("redisq: position script: unexpected reply %v", v)
	}
	p := Position{Seq: uint64(toInt(a[0])), Current: toInt(a[1]) == 1, RunID: toStr(a[2])}
	if len(a) > 3 {
		p.StoredRunID = toStr(a[3])
	}
	return p, nil
}

// positionSharded runs the position script op on every shard (reset: from
// each shard's own position read before, in from) and merges the answers
// (Position.Shards).
func (q *Queue) positionSharded(ctx context.Context, log, op string, seq uint64, from []Position) (Position, error) {
	ps := make([]Position, len(q.shards))
	err := q.eachShard(func(i int, s *Queue) (err error) {
		var f Position
		if from != nil {
			f = from[i]
		}
		ps[i], err = s.position(ctx, log, op, seq, f.Seq, f.StoredRunID)
		return err
	})
	if err != nil {
		return Position{}, err
	}
	low := 0 // the shard whose position is lowest
	for i, s := range ps {
		if s.Seq < ps[low].Seq {
			low = i
		}
	}
	p := Position{Seq: ps[low].Seq, Current: true, RunID: ps[low].RunID, StoredRunID: ps[low].StoredRunID, Shards: ps}
	for _, s := range ps {
		p.Current = p.Current && s.Current
	}
	return p, nil
}
