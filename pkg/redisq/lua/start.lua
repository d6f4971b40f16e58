-- start.lua: a worker is about to start a job it claimed a while ago (it
-- waited for a slot): a job of a group cancelled since is counted as
-- cancelled instead of run, as claim.lua does at claim time; it leaves its
-- group's in-flight count and its claim ends.
-- KEYS[1]: job:<gk>:<jid>
-- KEYS[2]: group:<gk>:meta
-- KEYS[3]: claims
-- ARGV[1]: key prefix
-- ARGV[2]: group key "<tenant>:<gid>"
-- ARGV[3]: jobId
-- ARGV[4]: the attempt claimed
-- ARGV[5]: now override in ms ('' = Redis TIME)
-- ARGV[6]: job TTL in seconds
-- Returns: 'run' (start it), 'cancelled' (its group was cancelled: it is
--   counted as cancelled and must not run) or 'stale' (the job is no longer
--   RUNNING as that attempt: its run is not this worker's to start).
local d = redis.call('HMGET', KEYS[1], 'status', 'attempt')
if d[1] ~= 'RUNNING' or num(d[2]) ~= tonumber(ARGV[4]) then
  return 'stale'
end
if redis.call('HGET', KEYS[2], 'status') ~= 'CANCELLED' then
  return 'run'
end
local now = now_ms(ARGV[5])
cancel_job(KEYS[1], KEYS[2], now, tonumber(ARGV[6]))
inflight_release(ARGV[1], ARGV[2], 1, now, 0)
redis.call('ZREM', KEYS[3], ARGV[2] .. ':' .. ARGV[3])
return 'cancelled'
