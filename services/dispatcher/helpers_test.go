package dispatcher_test

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// member is a job's member in the inflight and non-ready ZSETs,
// "<tenant>:<groupId>:<jobId>" (also pipelinetest.Msg.Key).
func member(j redisq.LeasedJob) string { return j.Group.Tenant + ":" + j.Group.ID + ":" + j.ID }

// redisZ is the inflight entry of a job whose lease has already expired.
func redisZ(j redisq.LeasedJob) redis.Z {
	return redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: member(j)}
}
