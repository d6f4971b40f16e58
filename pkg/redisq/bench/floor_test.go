package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The floor of the batch cycle: what a fair queue that keeps no state
// beyond its lists costs on the same redis-server, in the shape of
// benchBatch (100 groups of one tenant, 100 jobs of one group per enqueue
// call, 100 jobs per take, so each group gives one job per take, as
// docs/ARCHITECTURE.md §4 serves them). Both scripts do less than any
// queue that counts its jobs exactly can: enqueue keeps no idempotency,
// quotas or type index, and the take keeps no lease (no attempt, no job
// state, no id set, no group counts), reads no rate gate and returns only
// ids and records. batch_cycle_ratio_to_raw can be no higher than
// floor_batch_cycle_ratio_to_raw, measured beside it.

// floorEnqueueScript appends jobs to one group (ARGV[1]): ids to its list,
// records to its hash, its total, and the group to its tenant's ZSET.
const floorEnqueueScript = `
local g = ARGV[1]
local ids, kv = {}, {}
for i = 2, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  kv[#kv + 1] = ARGV[i]
  kv[#kv + 1] = ARGV[i + 1]
end
redis.call('RPUSH', 'floor:jobs:' .. g, unpack(ids))
redis.call('HSET', 'floor:queued:' .. g, unpack(kv))
redis.call('HINCRBY', 'floor:meta:' .. g, 'totalJobs', #ids)
redis.call('ZADD', KEYS[1], 'NX', 0, g)
return #ids
`

// floorTakeScript takes one job from each of the first ARGV[1] groups of
// the tenant's ZSET (KEYS[1]) in score order: reads the group's gate
// (status and in-flight limit), pops its next id and reads its record,
// puts the job in flight (KEYS[2]) and the group behind the others.
const floorTakeScript = `
local r = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local out, inflight, rescore = {}, {}, {}
for i = 1, #r, 2 do
  local g = r[i]
  local m = redis.call('HMGET', 'floor:meta:' .. g, 'status', 'inFlight', 'maxInFlight')
  local jid = m[1] ~= 'PAUSED' and redis.call('LPOP', 'floor:jobs:' .. g)
  if jid then
    out[#out + 1] = jid
    out[#out + 1] = redis.call('HGET', 'floor:queued:' .. g, jid)
    inflight[#inflight + 1] = ARGV[2]
    inflight[#inflight + 1] = g .. ':' .. jid
    rescore[#rescore + 1] = tonumber(r[i + 1]) + 1
    rescore[#rescore + 1] = g
  end
end
if #inflight > 0 then
  redis.call('ZADD', KEYS[2], unpack(inflight))
  redis.call('ZADD', KEYS[1], unpack(rescore))
end
return out
`

// benchFloorCycle runs benchBatch's cycle on the floor scripts and returns
// its jobs/s.
func benchFloorCycle(b *testing.B) float64 {
	b.StopTimer()
	s := startServer(b)
	ctx := context.Background()
	n := size(b, batchJobs)
	rec := "1764300000000:14:0:send-promotion"
	enq, take := redis.NewScript(floorEnqueueScript), redis.NewScript(floorTakeScript)
	calls := make([][]any, 0, n/batchSize+1)
	for i := 0; i < n; i += batchSize {
		args := []any{groupID((i / batchSize) % benchGroups)}
		for k := i; k < min(i+batchSize, n); k++ {
			args = append(args, jobID(k), rec+string(payload(k)))
		}
		calls = append(calls, args)
	}
	tq := []string{"floor:tenant:groups", "floor:inflight"}
	b.StartTimer()
	start := time.Now()
	for _, args := range calls {
		if err := enq.Run(ctx, s.rdb, tq[:1], args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	enqT := time.Since(start)
	start = time.Now()
	deadline := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	for got := 0; got < n; {
		r, err := take.Run(ctx, s.rdb, tq, batchSize, deadline).Slice()
		if err != nil {
			b.Fatal(err)
		}
		if len(r) == 0 {
			b.Fatalf("floor queue empty after %d of %d jobs", got, n)
		}
		got += len(r) / 2
	}
	deqT := time.Since(start)
	b.StopTimer()

	b.ReportMetric(figure("floor_enqueue_batch100_jobs_per_s", float64(n)/enqT.Seconds()), "enq-jobs/s")
	b.ReportMetric(figure("floor_dequeue_batch100_jobs_per_s", float64(n)/deqT.Seconds()), "deq-jobs/s")
	cycle := float64(n) / (enqT + deqT).Seconds()
	b.ReportMetric(figure("floor_batch_cycle_jobs_per_s", cycle), "cycle-jobs/s")
	return cycle
}
