-- retry.lua: sends a running job back to the non-ready queue after a
-- retryable error or a 429, with the congestion-aware backoff (a
-- Retry-After given by the worker wins). The job leaves its group's
-- in-flight count (docs/ARCHITECTURE.md §5).
-- KEYS[1]: job:<gk>:<jid>
-- KEYS[2]: group:<gk>:meta
-- KEYS[3]: active-tenants
-- KEYS[4]: tenant-weights
-- ARGV[1]: key prefix
-- ARGV[2]: tenant
-- ARGV[3]: groupId
-- ARGV[4]: jobId
-- ARGV[5]: attempt that failed
-- ARGV[6]: now override in ms ('' = Redis TIME)
-- ARGV[7]: retry-after in ms (-1 = none)
-- ARGV[8]: global limit per window (the rate is the tenant's share of it)
-- ARGV[9]: base backoff ms
-- ARGV[10]: max backoff ms
-- ARGV[11]: '1' congestion-aware, '0' fixed base
-- ARGV[12]: error text
-- ARGV[13]: job TTL in seconds
-- ARGV[14]: '1' = the attempt was rate limited (a 429): counted in the job's
--           'throttles', not as an error, and in the group meta's 'throttles'
--           (every retry is counted in the congestion statistics)
-- ARGV[15]: ALPHA
-- Returns: { outcome, delayMs, nonReadyCount } where outcome is 'parked',
--   'stale' (the attempt is not current) or 'cancelled' (the group was
--   cancelled: the job is counted as cancelled instead).
local prefix, tenant, jid = ARGV[1], ARGV[2], ARGV[4]
local gk = tenant .. ':' .. ARGV[3]
local now = now_ms(ARGV[6])
local alpha = tonumber(ARGV[15])
local d = redis.call('HMGET', KEYS[1], 'status', 'attempt')
if d[1] ~= 'RUNNING' and d[1] ~= 'LEASED' or num(d[2]) ~= tonumber(ARGV[5]) then
  return { 'stale', 0, 0 }
end
if redis.call('HGET', KEYS[2], 'status') == 'CANCELLED' then
  cancel_job(KEYS[1], KEYS[2], now, tonumber(ARGV[13]))
  inflight_release(prefix, gk, 1, now, alpha)
  return { 'cancelled', 0, 0 }
end
if ARGV[12] ~= '' then
  redis.call('HSET', KEYS[1], 'error', ARGV[12])
end
if ARGV[14] == '1' then
  redis.call('HINCRBY', KEYS[1], 'throttles', 1)
  if redis.call('EXISTS', KEYS[2]) == 1 then -- never a meta of its own
    redis.call('HINCRBY', KEYS[2], 'throttles', 1)
  end
end
local rate = tenant_share(tonumber(ARGV[8]), redis.call('SCARD', KEYS[3]), tenant_weight(KEYS[4], tenant))
local retry_after = tonumber(ARGV[7])
if retry_after < 0 then retry_after = nil end
local delay, count = park(prefix, gk, jid, KEYS[1], now, rate, tonumber(ARGV[9]), tonumber(ARGV[10]),
  ARGV[11] == '1', retry_after)
inflight_release(prefix, gk, 1, now, alpha)
redis.call('ZREM', prefix .. 'claims', gk .. ':' .. jid) -- its run is over
return { 'parked', delay, count }
