-- cancel.lua: cancels a group, in bounded steps: its queued and backed-off
-- jobs are dropped and counted as cancelled; jobs already handed to workers
-- finish and are counted when their results arrive (a leased job not yet
-- running is cancelled when a worker claims it). A paused group is
-- cancelled the same way.
--
-- The first call makes the group CANCELLED (nothing of it is admitted or
-- released from then on: admission skips it, and release counts a due
-- backed-off job of it as cancelled), takes it out of the fair queue and of
-- its tenant's quotas, gives its keys their TTLs and lists it in the
-- cancel-sweep ZSET. Every call, the first included, then drops at most
-- ARGV[7] jobs, and for at most about ARGV[9] µs: first from the group's
-- queued list (LPOP), then by going
-- through the group's job ids (SSCAN, cursor kept in the meta's field
-- cancelSweep) for jobs still QUEUED or BACKOFF (a backed-off job leaves
-- the non-ready queue). So no call's work grows with the non-ready queue,
-- nor with the group. The call that finishes removes cancelSweep and the
-- group from the cancel-sweep ZSET. A call on a CANCELLED group with
-- cancelSweep goes on where the last one stopped (the caller's loop, or a
-- later sweep: [Queue.FinishCancels]).
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: group:<gk>:jobs
-- KEYS[3]: non-ready-queue
-- KEYS[4]: group:<gk>:ids (the ids of the jobs that left the list)
-- KEYS[5]: cancel-sweep (ZSET of group keys, every score 0, so a tenant's
--          groups are a lexical range)
-- ARGV[1]: key prefix (the fair-queue keys are built from it)
-- ARGV[2]: tenant
-- ARGV[3]: groupId
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: job TTL in seconds (0 = keep)
-- ARGV[6]: group TTL in seconds (0 = keep)
-- ARGV[7]: most jobs this call goes through (at least 1)
-- ARGV[8]: '1' = only go on with a cancel under way (a sweep): a group
--          that is not CANCELLED with cancelSweep is left alone ('ended')
-- ARGV[9]: time budget in µs (0 = none): the call stops going through jobs
--          once it is spent (lib.lua time_budget), as when ARGV[7] is
-- Returns: { outcome, dropped, more, <group reply> } where outcome is
--   'cancelled' (this call cancelled the group or went on with its cancel)
--   or 'ended' (already cancelled or completed, or, with ARGV[8], no cancel
--   under way); dropped counts the jobs this call cancelled; more is 1 while
--   the cancel has jobs left to go through. A cancel that arrives before
--   the group's first job creates the group CANCELLED, so the jobs that
--   follow are rejected as jobs of an ended group. A cancelled group leaves
--   its tenant's active groups, and all its jobs not terminal yet (running
--   ones too) leave its tenant's queued jobs (the tenant quotas); a group
--   created cancelled never counts.
local prefix, tenant, gid = ARGV[1], ARGV[2], ARGV[3]
local gk = tenant .. ':' .. gid
local now = now_ms(ARGV[4])
local job_ttl, group_ttl = tonumber(ARGV[5]), tonumber(ARGV[6])
local budget = tonumber(ARGV[7])
if budget < 1 then budget = 1 end
local sweep_only = ARGV[8] == '1'
local spent = time_budget(ARGV[9])

local m = redis.call('HMGET', KEYS[1], 'status', 'cancelSweep')
local status, cursor = m[1], m[2]
if sweep_only and (status ~= 'CANCELLED' or not cursor) then
  redis.call('ZREM', KEYS[5], gk)
  return reply(KEYS[1], 'ended', 0, 0)
end
if status == false then
  redis.call('HSET', KEYS[1], 'totalJobs', 0, 'doneJobs', 0, 'successCount', 0, 'failedCount', 0,
    'cancelledCount', 0, 'status', 'CANCELLED', 'createdAt', now, 'finishedAt', now)
  group_cleanup(prefix, gk, KEYS[1], group_ttl)
  return reply(KEYS[1], 'cancelled', 0, 0)
end
if status == 'COMPLETED' or (status == 'CANCELLED' and not cursor) then
  return reply(KEYS[1], 'ended', 0, 0)
end

if status ~= 'CANCELLED' then
  -- the first call: from here on nothing of the group is admitted or released
  for _, level in ipairs(LEVELS) do
    unqueue_group(prefix, tenant, gid, level)
  end
  quota_end(prefix, tenant, gid, KEYS[1]) -- its jobs not terminal yet, running ones too, stop counting
  cursor = '0'
  redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'finishedAt', now, 'cancelSweep', cursor)
  redis.call('HDEL', KEYS[1], 'parkedScore')
  group_cleanup(prefix, gk, KEYS[1], group_ttl)
  redis.call('ZADD', KEYS[5], 0, gk)
end

local dropped, parked = 0, 0
local function drop(job_key)
  redis.call('HSET', job_key, 'status', 'CANCELLED', 'finishedAt', now)
  if job_ttl > 0 then redis.call('EXPIRE', job_key, job_ttl) end
  dropped = dropped + 1
end

-- queued jobs: the group's list, a bounded pop at a time
local out_of_time = false
while budget > 0 and not out_of_time do
  local ids = redis.call('LPOP', KEYS[2], math.min(budget, TIME_SLICE))
  if not ids then break end
  budget = budget - #ids
  -- they leave the list: into the id set (lib.lua ids_add), which has the
  -- group TTL like the group's other keys
  ids_add(KEYS[4], ids)
  if group_ttl > 0 then redis.call('EXPIRE', KEYS[4], group_ttl, 'NX') end
  for _, jid in ipairs(ids) do
    -- a job with a record in the queued hash gets its hash (lib.lua job_take)
    local d = job_take(prefix, gk, jid)
    if d and d.status == 'QUEUED' then drop(job_key_of(prefix, gk, jid)) end
  end
  out_of_time = spent()
end

-- backed-off jobs (and any QUEUED job outside the list): through the id set
local done = false
if budget > 0 and not out_of_time and redis.call('LLEN', KEYS[2]) == 0 then
  repeat
    local r = redis.call('SSCAN', KEYS[4], cursor, 'COUNT', math.min(budget, TIME_SLICE))
    cursor = r[1]
    local page = r[2]
    for _, jid in ipairs(page) do
      local job_key = job_key_of(prefix, gk, jid)
      local st = redis.call('HGET', job_key, 'status')
      if st == 'QUEUED' then
        drop(job_key)
      elseif st == 'BACKOFF' then
        if redis.call('ZREM', KEYS[3], gk .. ':' .. jid) == 1 then parked = parked + 1 end
        drop(job_key)
      end
    end
    budget = budget - math.max(#page, 1)
  until cursor == '0' or budget <= 0 or spent()
  done = cursor == '0'
end

if parked > 0 then
  -- the group's own counter went with group_cleanup in the first call
  uncount_nonready(prefix, tenant, parked)
end
if dropped > 0 then
  redis.call('HINCRBY', KEYS[1], 'cancelledCount', dropped)
end
local more = 1
if done then
  more = 0
  redis.call('HDEL', KEYS[1], 'cancelSweep')
  redis.call('ZREM', KEYS[5], gk)
else
  redis.call('HSET', KEYS[1], 'cancelSweep', cursor)
end
return reply(KEYS[1], 'cancelled', dropped, more)
