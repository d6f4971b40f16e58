package dispatcher_test

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// redisZ is the inflight entry of a job whose lease has already expired.
func redisZ(j redisq.LeasedJob) redis.Z {
	return redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: j.GroupID + ":" + j.ID}
}
