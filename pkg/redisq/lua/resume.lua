-- resume.lua: resumes a paused group (docs/ARCHITECTURE.md §5): it gets back
-- the state it had (a RUNNING group that was sealed and has no job queued
-- any more moves on to AGGREGATING) and, if jobs wait, its place in its
-- tenant's queue (requeue_group: the score it had when paused). Resumes and
-- pauses apply in publish order (§6.1): given the SUBMIT sequence of its
-- message (ARGV[5]), a resume is applied only if it is newer than the last
-- pause or resume the group took (its meta's ctlSeq), which it then
-- becomes; an older one changes nothing ('superseded'). A resume the group
-- takes is activity (activeAt: abandon.lua) and brings an abandoned group
-- back to life (lib.lua group_revive).
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: group:<gk>:jobs
-- ARGV[1]: key prefix
-- ARGV[2]: group key "<tenant>:<gid>"
-- ARGV[3]: now override in ms ('' = Redis TIME)
-- ARGV[4]: ALPHA
-- ARGV[5]: SUBMIT sequence of the message ('' or '0' = unordered: applied
--          whatever came before, ctlSeq unchanged)
-- Returns: { outcome, transition, <group reply> } where outcome is 'resumed',
--   'unchanged' (not paused), 'ended' (cancelled or completed), 'unknown'
--   (no such group) or 'superseded' (a newer pause or resume was applied:
--   nothing done); transition is the state the group moved to, or ''.
local prefix, gk = ARGV[1], ARGV[2]
local now = now_ms(ARGV[3])
local seq = tonumber(ARGV[5]) or 0
local m = redis.call('HMGET', KEYS[1], 'status', 'pausedFrom', 'declaredTotal', 'totalJobs', 'ctlSeq', 'abandonedAt')
if not m[1] then
  return reply(KEYS[1], 'unknown', '')
end
if TERMINAL_GROUP[m[1]] then
  return reply(KEYS[1], 'ended', '')
end
if seq > 0 then
  if seq <= num(m[5]) then
    return reply(KEYS[1], 'superseded', '')
  end
  redis.call('HSET', KEYS[1], 'ctlSeq', seq)
end
if m[6] then
  group_revive(prefix, gk, KEYS[1], now)
end
redis.call('HSET', KEYS[1], 'activeAt', now)
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
