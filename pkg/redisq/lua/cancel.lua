-- cancel.lua: cancels a group: its queued and backed-off jobs are dropped
-- and counted as cancelled; jobs already handed to workers finish and are
-- counted when their results arrive (a leased job not yet running is
-- cancelled when a worker claims it).
-- KEYS[1..3]: fair-queue:high, fair-queue:normal, fair-queue:low
-- KEYS[4]:    group:<gid>:meta
-- KEYS[5]:    group:<gid>:jobs
-- KEYS[6]:    non-ready-queue
-- ARGV[1]: key prefix
-- ARGV[2]: groupId
-- ARGV[3]: now override in ms ('' = Redis TIME)
-- ARGV[4]: job TTL in seconds (0 = keep)
-- ARGV[5]: group TTL in seconds (0 = keep)
-- Returns: { outcome, dropped, <group reply> } where outcome is 'cancelled'
--   or 'ended' (already cancelled or completed). A cancel that arrives before
--   the group's first job creates the group CANCELLED, so the jobs that
--   follow are rejected as jobs of an ended group.
local prefix, gid = ARGV[1], ARGV[2]
local now = now_ms(ARGV[3])
local job_ttl, group_ttl = tonumber(ARGV[4]), tonumber(ARGV[5])

local status = redis.call('HGET', KEYS[4], 'status')
if status == false then
  redis.call('HSET', KEYS[4], 'totalJobs', 0, 'doneJobs', 0, 'successCount', 0, 'failedCount', 0,
    'cancelledCount', 0, 'status', 'CANCELLED', 'createdAt', now, 'finishedAt', now)
  group_cleanup(prefix, gid, KEYS[4], group_ttl)
  return reply(KEYS[4], 'cancelled', 0)
end
if TERMINAL_GROUP[status] then
  return reply(KEYS[4], 'ended', 0)
end

local function drop(jid)
  local job_key = prefix .. 'job:' .. gid .. ':' .. jid
  redis.call('HSET', job_key, 'status', 'CANCELLED', 'finishedAt', now)
  if job_ttl > 0 then redis.call('EXPIRE', job_key, job_ttl) end
end

local dropped = 0
local ids = redis.call('LRANGE', KEYS[5], 0, -1)
for _, jid in ipairs(ids) do
  drop(jid)
end
dropped = #ids
redis.call('DEL', KEYS[5])
for i = 1, 3 do
  redis.call('ZREM', KEYS[i], gid)
end

-- backed-off jobs of the group
local cursor = '0'
local plen = #gid + 1
repeat
  local r = redis.call('ZSCAN', KEYS[6], cursor, 'MATCH', gid .. ':*', 'COUNT', 1000)
  cursor = r[1]
  local items = r[2]
  for i = 1, #items, 2 do
    local mem = items[i]
    if redis.call('ZREM', KEYS[6], mem) == 1 then
      drop(string.sub(mem, plen + 1))
      dropped = dropped + 1
    end
  end
until cursor == '0'

redis.call('HINCRBY', KEYS[4], 'cancelledCount', dropped)
redis.call('HSET', KEYS[4], 'status', 'CANCELLED', 'finishedAt', now)
group_cleanup(prefix, gid, KEYS[4], group_ttl)
return reply(KEYS[4], 'cancelled', dropped)
