package pipelinetest

import (
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Raw returns the Redis client of st and the key names of its queue's
// prefix, for a test that reads or corrupts raw state no method of
// [redisq.Queue] reads or writes. Production code sees neither: it reads
// and writes Redis through the queue's methods only.
func Raw(st *stack.Stack) (redis.UniversalClient, redisq.Keys) {
	return st.Conns.Redis, redisq.NewKeys(st.Conns.Queue.Config().Prefix)
}
