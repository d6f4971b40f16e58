-- retry.lua: sends a running job back to the non-ready queue after a
-- retryable error or a 429, with the congestion-aware backoff (a
-- Retry-After given by the worker wins).
-- KEYS[1]: job:<gid>:<jid>
-- KEYS[2]: group:<gid>:meta
-- KEYS[3]: active-groups
-- ARGV[1]: key prefix
-- ARGV[2]: groupId
-- ARGV[3]: jobId
-- ARGV[4]: attempt that failed
-- ARGV[5]: now override in ms ('' = Redis TIME)
-- ARGV[6]: retry-after in ms (-1 = none)
-- ARGV[7]: global limit per window (the group's rate is its share of it)
-- ARGV[8]: base backoff ms
-- ARGV[9]: max backoff ms
-- ARGV[10]: '1' congestion-aware, '0' fixed base
-- ARGV[11]: error text
-- ARGV[12]: job TTL in seconds
-- ARGV[13]: '1' = the attempt was rate limited (a 429): counted in the job's
--           'throttles', not as an error
-- Returns: { outcome, delayMs, nonReadyCount } where outcome is 'parked',
--   'stale' (the attempt is not current) or 'cancelled' (the group was
--   cancelled: the job is counted as cancelled instead).
local prefix, gid, jid = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms(ARGV[5])
local d = redis.call('HMGET', KEYS[1], 'status', 'attempt')
if d[1] ~= 'RUNNING' and d[1] ~= 'LEASED' or num(d[2]) ~= tonumber(ARGV[4]) then
  return { 'stale', 0, 0 }
end
if redis.call('HGET', KEYS[2], 'status') == 'CANCELLED' then
  cancel_job(prefix, gid, KEYS[1], KEYS[2], now, tonumber(ARGV[12]))
  return { 'cancelled', 0, 0 }
end
if ARGV[11] ~= '' then
  redis.call('HSET', KEYS[1], 'error', ARGV[11])
end
if ARGV[13] == '1' then
  redis.call('HINCRBY', KEYS[1], 'throttles', 1)
end
local rate = group_rate(tonumber(ARGV[7]), redis.call('SCARD', KEYS[3]))
local retry_after = tonumber(ARGV[6])
if retry_after < 0 then retry_after = nil end
local delay, count = park(prefix, gid, jid, KEYS[1], now, rate, tonumber(ARGV[8]), tonumber(ARGV[9]),
  ARGV[10] == '1', retry_after)
return { 'parked', delay, count }
