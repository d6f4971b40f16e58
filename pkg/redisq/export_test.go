package redisq

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// The queue's own tests reach its raw state through these; no code outside
// pkg/redisq sees the key layout or the client through a Queue.

// Keys returns the queue's key builder.
func (q *Queue) Keys() Keys { return q.keys }

// Client returns the queue's Redis client.
func (q *Queue) Client() redis.UniversalClient { return q.rdb }

// UngatedLimit is a global limit per window no test reaches: a Config with
// it admits in fair order with no rate gate to speak of.
const UngatedLimit = 1 << 30

// ErrQueueEmpty is returned by Dequeue when no job waits.
var ErrQueueEmpty = errors.New("redisq: queue empty")

// Dequeue takes the next job in fair order as DequeueBatch does; it returns
// ErrQueueEmpty when no job waits.
func (q *Queue) Dequeue(ctx context.Context) (*LeasedJob, error) {
	jobs, err := q.DequeueBatch(ctx, 1)
	if err != nil {
		return nil, err
	}
	if len(jobs) == 0 {
		return nil, ErrQueueEmpty
	}
	return &jobs[0], nil
}

// DequeueBatch takes up to n jobs in fair order as the pipeline hands them
// to a worker: admitted past every rate gate (UngatedLimit, no per-type
// limits) and confirmed (LEASED, their leases ended, as once on READY). The
// queue's own mode, READY rooms and in-flight limits apply.
func (q *Queue) DequeueBatch(ctx context.Context, n int) ([]LeasedJob, error) {
	r, err := q.admit(ctx, n, UngatedLimit, "", admitOptions{})
	if err != nil {
		return nil, err
	}
	if err := q.Confirm(ctx, r.Jobs...); err != nil {
		return nil, err
	}
	return r.Jobs, nil
}
