-- resume.lua: resumes a paused group (docs/ARCHITECTURE.md §5): it gets back
-- the state it had (a RUNNING group that was sealed and has no job queued
-- any more moves on to AGGREGATING) and, if jobs wait, its place in its
-- tenant's queue (requeue_group: the score it had when paused).
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: group:<gk>:jobs
-- ARGV[1]: key prefix
-- ARGV[2]: group key "<tenant>:<gid>"
-- ARGV[3]: now override in ms ('' = Redis TIME)
-- ARGV[4]: ALPHA
-- Returns: { outcome, transition, <group reply> } where outcome is 'resumed',
--   'unchanged' (not paused), 'ended' (cancelled or completed) or 'unknown'
--   (no such group); transition is the state the group moved to, or ''.
local prefix, gk = ARGV[1], ARGV[2]
local now = now_ms(ARGV[3])
local m = redis.call('HMGET', KEYS[1], 'status', 'pausedFrom', 'declaredTotal', 'totalJobs')
if not m[1] then
  return reply(KEYS[1], 'unknown', '')
end
if TERMINAL_GROUP[m[1]] then
  return reply(KEYS[1], 'ended', '')
end
if m[1] ~= 'PAUSED' then
  return reply(KEYS[1], 'unchanged', '')
end
local status = m[2] or 'CREATED'
if status == 'RUNNING' and m[3] and num(m[4]) >= tonumber(m[3]) and redis.call('LLEN', KEYS[2]) == 0 then
  status = 'AGGREGATING'
end
redis.call('HSET', KEYS[1], 'status', status)
redis.call('HDEL', KEYS[1], 'pausedFrom', 'pausedAt')
requeue_group(prefix, gk, now, tonumber(ARGV[4]))
return reply(KEYS[1], 'resumed', status)
