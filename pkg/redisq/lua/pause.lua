-- pause.lua: pauses a group (docs/ARCHITECTURE.md §5): admission skips it and
-- it keeps its place. It leaves its tenant's queue with its score saved
-- (parkedScore) and its state saved (pausedFrom); jobs that arrive, are
-- released from backoff or reclaimed meanwhile go into its list only. Jobs
-- already admitted run and are recorded as usual. A pause that arrives
-- before the group's first job creates the group PAUSED; it counts among
-- its tenant's active groups (the tenant quotas, which never refuse a pause).
-- Pauses and resumes apply in publish order (§6.1): given the SUBMIT
-- sequence of its message (ARGV[5]), a pause is applied only if it is newer
-- than the last pause or resume the group took (its meta's ctlSeq), which it
-- then becomes; an older one changes nothing ('superseded'). A pause the
-- group takes is activity (pausedAt, activeAt: abandon.lua) and brings an
-- abandoned group back to life (lib.lua group_revive).
-- KEYS[1]: group:<gk>:meta
-- ARGV[1]: key prefix (the fair-queue keys are built from it)
-- ARGV[2]: tenant
-- ARGV[3]: groupId
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: SUBMIT sequence of the message ('' or '0' = unordered: applied
--          whatever came before, ctlSeq unchanged)
-- Returns: { outcome, transition, <group reply> } where outcome is 'paused',
--   'unchanged' (already paused), 'ended' (cancelled or completed: nothing
--   done) or 'superseded' (a newer pause or resume was applied: nothing
--   done); transition is 'PAUSED' when the state changed, else ''.
local prefix, tenant, gid = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms(ARGV[4])
local seq = tonumber(ARGV[5]) or 0
local m = redis.call('HMGET', KEYS[1], 'status', 'priorityLevel', 'ctlSeq', 'abandonedAt')
if not m[1] then
  redis.call('HSET', KEYS[1], 'totalJobs', 0, 'doneJobs', 0, 'successCount', 0, 'failedCount', 0,
    'cancelledCount', 0, 'status', 'PAUSED', 'pausedFrom', 'CREATED', 'createdAt', now, 'pausedAt', now,
    'activeAt', now)
  if seq > 0 then redis.call('HSET', KEYS[1], 'ctlSeq', seq) end
  quota_open(prefix, tenant, gid)
  return reply(KEYS[1], 'paused', 'PAUSED')
end
if TERMINAL_GROUP[m[1]] then
  return reply(KEYS[1], 'ended', '')
end
if seq > 0 then
  if seq <= num(m[3]) then
    return reply(KEYS[1], 'superseded', '')
  end
  redis.call('HSET', KEYS[1], 'ctlSeq', seq)
end
if m[4] then
  group_revive(prefix, tenant .. ':' .. gid, KEYS[1], now)
end
redis.call('HSET', KEYS[1], 'activeAt', now)
if m[1] == 'PAUSED' then
  return reply(KEYS[1], 'unchanged', '')
end
redis.call('HSET', KEYS[1], 'status', 'PAUSED', 'pausedFrom', m[1], 'pausedAt', now)
if m[2] then
  local score = unqueue_group(prefix, tenant, gid, m[2])
  if score then
    redis.call('HSET', KEYS[1], 'parkedScore', score)
  end
end
return reply(KEYS[1], 'paused', 'PAUSED')
