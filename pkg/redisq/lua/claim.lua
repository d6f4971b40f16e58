-- claim.lua: a worker claims a delivered job before running it. The
-- delivery must carry the job's current attempt; otherwise it is stale.
-- KEYS[1]: job:<gid>:<jid>
-- KEYS[2]: group:<gid>:meta
-- KEYS[3]: inflight
-- ARGV[1]: key prefix
-- ARGV[2]: groupId
-- ARGV[3]: jobId
-- ARGV[4]: attempt carried by the delivery
-- ARGV[5]: now override in ms ('' = Redis TIME)
-- ARGV[6]: job TTL in seconds
-- ARGV[7]: group TTL in seconds
-- Returns: { outcome, transition } where outcome is 'run' (run it),
--   'stale' (another attempt is current, or the job is terminal or gone:
--   drop the delivery) or 'cancelled' (the group was cancelled: the job is
--   counted as cancelled and must not run); transition is 'COMPLETED' when
--   that cancellation settled the group's counts, else ''.
local prefix, gid, jid = ARGV[1], ARGV[2], ARGV[3]
local attempt = tonumber(ARGV[4])
local now = now_ms(ARGV[5])
local d = redis.call('HMGET', KEYS[1], 'status', 'attempt')
if d[1] == false or num(d[2]) ~= attempt or (d[1] ~= 'LEASED' and d[1] ~= 'RUNNING') then
  return { 'stale', '' }
end
redis.call('ZREM', KEYS[3], gid .. ':' .. jid)
if redis.call('HGET', KEYS[2], 'status') == 'CANCELLED' then
  cancel_job(prefix, gid, KEYS[1], KEYS[2], now, tonumber(ARGV[6]))
  return { 'cancelled', '' }
end
redis.call('HSET', KEYS[1], 'status', 'RUNNING', 'claimedAt', now)
return { 'run', '' }
