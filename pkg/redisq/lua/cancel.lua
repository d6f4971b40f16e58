-- cancel.lua: cancels a group: its queued and backed-off jobs are dropped
-- and counted as cancelled; jobs already handed to workers finish and are
-- counted when their results arrive (a leased job not yet running is
-- cancelled when a worker claims it). A paused group is cancelled the same way.
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: group:<gk>:jobs
-- KEYS[3]: non-ready-queue
-- ARGV[1]: key prefix (the fair-queue keys are built from it)
-- ARGV[2]: tenant
-- ARGV[3]: groupId
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: job TTL in seconds (0 = keep)
-- ARGV[6]: group TTL in seconds (0 = keep)
-- Returns: { outcome, dropped, <group reply> } where outcome is 'cancelled'
--   or 'ended' (already cancelled or completed). A cancel that arrives before
--   the group's first job creates the group CANCELLED, so the jobs that
--   follow are rejected as jobs of an ended group. A cancelled group leaves
--   its tenant's active groups, and all its jobs not terminal yet (running
--   ones too) leave its tenant's queued jobs (the tenant quotas); a group
--   created cancelled never counts.
local prefix, tenant, gid = ARGV[1], ARGV[2], ARGV[3]
local gk = tenant .. ':' .. gid
local now = now_ms(ARGV[4])
local job_ttl, group_ttl = tonumber(ARGV[5]), tonumber(ARGV[6])

local status = redis.call('HGET', KEYS[1], 'status')
if status == false then
  redis.call('HSET', KEYS[1], 'totalJobs', 0, 'doneJobs', 0, 'successCount', 0, 'failedCount', 0,
    'cancelledCount', 0, 'status', 'CANCELLED', 'createdAt', now, 'finishedAt', now)
  group_cleanup(prefix, gk, KEYS[1], group_ttl)
  return reply(KEYS[1], 'cancelled', 0)
end
if TERMINAL_GROUP[status] then
  return reply(KEYS[1], 'ended', 0)
end

local function drop(jid)
  local job_key = prefix .. 'job:' .. gk .. ':' .. jid
  redis.call('HSET', job_key, 'status', 'CANCELLED', 'finishedAt', now)
  if job_ttl > 0 then redis.call('EXPIRE', job_key, job_ttl) end
end

local dropped = 0
local ids = redis.call('LRANGE', KEYS[2], 0, -1)
for _, jid in ipairs(ids) do
  drop(jid)
end
dropped = #ids
redis.call('DEL', KEYS[2])
for _, level in ipairs(LEVELS) do
  unqueue_group(prefix, tenant, gid, level)
end

-- backed-off jobs of the group
local cursor = '0'
local plen = #gk + 1
local parked = 0
repeat
  local r = redis.call('ZSCAN', KEYS[3], cursor, 'MATCH', gk .. ':*', 'COUNT', 1000)
  cursor = r[1]
  local items = r[2]
  for i = 1, #items, 2 do
    local mem = items[i]
    if redis.call('ZREM', KEYS[3], mem) == 1 then
      drop(string.sub(mem, plen + 1))
      dropped = dropped + 1
      parked = parked + 1
    end
  end
until cursor == '0'

if parked > 0 then
  uncount_nonready(prefix, tenant, parked)
end
quota_end(prefix, tenant, gid, KEYS[1]) -- its jobs not terminal yet, running ones too, stop counting
redis.call('HINCRBY', KEYS[1], 'cancelledCount', dropped)
redis.call('HSET', KEYS[1], 'status', 'CANCELLED', 'finishedAt', now)
redis.call('HDEL', KEYS[1], 'parkedScore')
group_cleanup(prefix, gk, KEYS[1], group_ttl)
return reply(KEYS[1], 'cancelled', dropped)
