package redisq

import "github.com/redis/go-redis/v9"

// The queue's own tests reach its raw state through these; no code outside
// pkg/redisq sees the key layout or the client through a Queue.

// Keys returns the queue's key builder.
func (q *Queue) Keys() Keys { return q.keys }

// Client returns the queue's Redis client.
func (q *Queue) Client() redis.UniversalClient { return q.rdb }
