package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The floors of the batch cycle: what a fair queue that keeps no state
// beyond its lists costs on the same redis-server, in the shape of
// benchBatch (100 groups of one tenant, 100 jobs of one group per enqueue
// call, 100 jobs per take, so each group gives one job per take, as
// docs/ARCHITECTURE.md §4 serves them). The scripts do less than a queue
// that counts its jobs exactly: enqueue keeps no idempotency, quotas or
// type index, and the take keeps no lease (no attempt, no job state, no id
// set, no group counts), reads no rate gate and returns only the jobs.
// Two layouts:
//   - floor: §3.1's, a list of ids and a hash of records per group, and a
//     meta hash per group read for its gate (status, in-flight limit) when
//     the group is served: batch_cycle_ratio_to_raw can be no higher than
//     floor_batch_cycle_ratio_to_raw, measured beside it;
//   - floor-records-in-list: the records themselves in the group's list
//     (a pop returns the job) and the gates of all of a tenant's groups in
//     one hash read once per take: one command per group served.

// floorLib is in front of every floor script: added counts n jobs into
// group g and queues it; taken appends a job taken from group g (score: its
// score in the tenant's ZSET) to the reply, the inflight set and the
// groups to re-score, which finish writes; first_groups reads the first
// ARGV[1] groups of the tenant's ZSET (KEYS[1]) with their scores.
const floorLib = `
local function added(g, n)
  redis.call('HINCRBY', 'floor:meta:' .. g, 'totalJobs', n)
  redis.call('ZADD', KEYS[1], 'NX', 0, g)
  return n
end
local out, inflight, rescore = {}, {}, {}
local function taken(g, score, jid, a, b)
  out[#out + 1] = a
  if b then out[#out + 1] = b end
  inflight[#inflight + 1] = ARGV[2]
  inflight[#inflight + 1] = g .. ':' .. jid
  rescore[#rescore + 1] = tonumber(score) + 1
  rescore[#rescore + 1] = g
end
local function finish()
  if #inflight > 0 then
    redis.call('ZADD', KEYS[2], unpack(inflight))
    redis.call('ZADD', KEYS[1], unpack(rescore))
  end
  return out
end
local function first_groups()
  return redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
end
`

// floorEnqueueScript appends jobs to one group (ARGV[1]): ids to its list,
// records to its hash.
const floorEnqueueScript = floorLib + `
local g = ARGV[1]
local ids, kv = {}, {}
for i = 2, #ARGV, 2 do
  ids[#ids + 1] = ARGV[i]
  kv[#kv + 1] = ARGV[i]
  kv[#kv + 1] = ARGV[i + 1]
end
redis.call('RPUSH', 'floor:jobs:' .. g, unpack(ids))
redis.call('HSET', 'floor:queued:' .. g, unpack(kv))
return added(g, #ids)
`

// floorTakeScript takes one job from each of the first ARGV[1] groups of
// the tenant's ZSET (KEYS[1]) in score order: reads the group's
// gate (status and in-flight limit), pops its next id and reads its
// record, puts the job in flight (KEYS[2]) and the group behind the others.
const floorTakeScript = floorLib + `
local r = first_groups()
for i = 1, #r, 2 do
  local g = r[i]
  local m = redis.call('HMGET', 'floor:meta:' .. g, 'status', 'inFlight', 'maxInFlight')
  local jid = m[1] ~= 'PAUSED' and redis.call('LPOP', 'floor:jobs:' .. g)
  if jid then taken(g, r[i + 1], jid, jid, redis.call('HGET', 'floor:queued:' .. g, jid)) end
end
return finish()
`

// floorListedEnqueueScript appends records "<id>|<record>" to one group's
// list.
const floorListedEnqueueScript = floorLib + `
local g = ARGV[1]
local recs = {}
for i = 2, #ARGV, 2 do recs[#recs + 1] = ARGV[i] .. '|' .. ARGV[i + 1] end
redis.call('RPUSH', 'floor:jobs:' .. g, unpack(recs))
return added(g, #recs)
`

// floorListedTakeScript takes one job from each of the first ARGV[1]
// groups of the tenant's ZSET as floorTakeScript does, but reads the gates
// of all of them in one HMGET of the tenant's gate hash (KEYS[3]) and pops
// each group's next record itself.
const floorListedTakeScript = floorLib + `
local r = first_groups()
if #r == 0 then return {} end
local names = {}
for i = 1, #r, 2 do names[#names + 1] = r[i] end
local gates = redis.call('HMGET', KEYS[3], unpack(names))
for i = 1, #r, 2 do
  local g = r[i]
  local rec = gates[(i + 1) / 2] ~= 'PAUSED' and redis.call('LPOP', 'floor:jobs:' .. g)
  if rec then taken(g, r[i + 1], string.sub(rec, 1, string.find(rec, '|', 1, true) - 1), rec) end
end
return finish()
`

// floorLayout is a floor's scripts: its figures are named after it, and
// its take replies with perJob values per job taken.
type floorLayout struct {
	name, enqueue, take string
	perJob              int
}

var (
	floorIDs    = floorLayout{"floor", floorEnqueueScript, floorTakeScript, 2}
	floorListed = floorLayout{"floor_records_in_list", floorListedEnqueueScript, floorListedTakeScript, 1}
)

// benchFloorCycle runs benchBatch's cycle on a floor's scripts, reports
// its figures and returns its jobs/s.
func benchFloorCycle(b *testing.B, l floorLayout) float64 {
	b.StopTimer()
	s := startServer(b)
	ctx := context.Background()
	n := size(b, batchJobs)
	rec := "1764300000000:14:0:send-promotion"
	enq, take := redis.NewScript(l.enqueue), redis.NewScript(l.take)
	calls := make([][]any, 0, n/batchSize+1)
	for i := 0; i < n; i += batchSize {
		args := []any{groupID((i / batchSize) % benchGroups)}
		for k := i; k < min(i+batchSize, n); k++ {
			args = append(args, jobID(k), rec+string(payload(k)))
		}
		calls = append(calls, args)
	}
	tq := []string{"floor:tenant:groups", "floor:inflight", "floor:tenant:gates"}
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
		got += len(r) / l.perJob
	}
	deqT := time.Since(start)
	b.StopTimer()

	b.ReportMetric(figure(l.name+"_enqueue_batch100_jobs_per_s", float64(n)/enqT.Seconds()), "enq-jobs/s")
	b.ReportMetric(figure(l.name+"_dequeue_batch100_jobs_per_s", float64(n)/deqT.Seconds()), "deq-jobs/s")
	cycle := float64(n) / (enqT + deqT).Seconds()
	b.ReportMetric(figure(l.name+"_batch_cycle_jobs_per_s", cycle), "cycle-jobs/s")
	return cycle
}
