-- seal.lua: declares a group's total number of distinct jobs. Completion
-- works whether the seal comes before, during or after the jobs' results.
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: group:<gk>:jobs
-- ARGV[1]: key prefix
-- ARGV[2]: group key "<tenant>:<gid>"
-- ARGV[3]: declared total (>= 0)
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: group TTL in seconds once ended (0 = keep)
-- Returns: { outcome, transition, <group reply> } where outcome is 'sealed',
--   'same' (already sealed with this total), 'conflict' (sealed with another
--   total), 'too_many' (more distinct jobs than the total already arrived) or
--   'ended' (the group was cancelled or completed); transition is the state
--   the seal moved the group to ('AGGREGATING', 'COMPLETED') or ''. A paused
--   group is not moved to AGGREGATING (resume does it); it may complete. A
--   seal before the first job creates the group: it counts among its
--   tenant's active groups (the tenant quotas) until it ends; a seal is never
--   refused by a quota. A seal brings an abandoned group back to life
--   (lib.lua group_revive): a sealed group is never abandoned again.
local prefix, gk = ARGV[1], ARGV[2]
local total = tonumber(ARGV[3])
local now = now_ms(ARGV[4])
local group_ttl = tonumber(ARGV[5])

local m = redis.call('HMGET', KEYS[1], 'status', 'declaredTotal', 'totalJobs', 'abandonedAt')
local status = m[1]
if status and TERMINAL_GROUP[status] then
  return reply(KEYS[1], 'ended', '')
end
if m[2] then
  if tonumber(m[2]) == total then
    return reply(KEYS[1], 'same', '')
  end
  return reply(KEYS[1], 'conflict', '')
end
if num(m[3]) > total then
  return reply(KEYS[1], 'too_many', '')
end
if not status then
  status = 'CREATED'
  redis.call('HSET', KEYS[1], 'totalJobs', 0, 'doneJobs', 0, 'successCount', 0, 'failedCount', 0,
    'cancelledCount', 0, 'status', status, 'createdAt', now)
  quota_open(prefix, group_parts(gk))
elseif m[4] then
  group_revive(prefix, gk, KEYS[1], now)
end
redis.call('HSET', KEYS[1], 'declaredTotal', total, 'sealedAt', now, 'activeAt', now)

local transition = maybe_complete(prefix, gk, KEYS[1], now, group_ttl)
if transition then
  local tenant, gid = group_parts(gk)
  quota_end(prefix, tenant, gid, KEYS[1])
else
  transition = ''
  if status == 'RUNNING' and num(m[3]) == total and redis.call('LLEN', KEYS[2]) == 0 then
    redis.call('HSET', KEYS[1], 'status', 'AGGREGATING')
    transition = 'AGGREGATING'
  end
end
return reply(KEYS[1], 'sealed', transition)
