-- record.lua: records a job's terminal result exactly once and completes the
-- group when it is sealed and every job is terminal.
-- KEYS[1]: job:<gid>:<jid>
-- KEYS[2]: group:<gid>:meta
-- ARGV[1]: key prefix
-- ARGV[2]: groupId
-- ARGV[3]: status: SUCCESS or FAILED
-- ARGV[4]: error text ('' = none)
-- ARGV[5]: now override in ms ('' = Redis TIME)
-- ARGV[6]: job TTL in seconds once terminal (0 = keep)
-- ARGV[7]: group TTL in seconds once ended (0 = keep)
-- ARGV[8]: attempt that produced the result
-- Returns: { outcome, transition, createdAt, <group reply> } where outcome is
--   'recorded', 'duplicate' (the job was already terminal: nothing changed)
--   or 'unknown' (no such job); transition is 'COMPLETED' when this result
--   completed the group, else ''; createdAt is the job's enqueue time (ms,
--   0 if unknown).
local prefix, gid, status = ARGV[1], ARGV[2], ARGV[3]
local now = now_ms(ARGV[5])
local job_ttl, group_ttl = tonumber(ARGV[6]), tonumber(ARGV[7])

local j = redis.call('HMGET', KEYS[1], 'status', 'createdAt')
local cur, created = j[1], num(j[2])
if cur == false then
  return reply(KEYS[2], 'unknown', '', 0)
end
if TERMINAL_JOB[cur] then
  return reply(KEYS[2], 'duplicate', '', created)
end

redis.call('HSET', KEYS[1], 'status', status, 'finishedAt', now, 'resultAttempt', ARGV[8])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'error', ARGV[4])
end
if job_ttl > 0 then
  redis.call('EXPIRE', KEYS[1], job_ttl)
end
local done = redis.call('HINCRBY', KEYS[2], 'doneJobs', 1)
redis.call('HSET', KEYS[2], 'lastProgressAt', now)
if status == 'SUCCESS' then
  redis.call('HINCRBY', KEYS[2], 'successCount', 1)
else
  redis.call('HINCRBY', KEYS[2], 'failedCount', 1)
end

-- seed 002: avgThrottlePerJob follows the completed jobs
local stats_key = prefix .. 'congestion:' .. gid .. ':stats'
local throttles = redis.call('HGET', stats_key, 'totalThrottleCount')
if throttles then
  redis.call('HSET', stats_key, 'avgThrottlePerJob', string.format('%.2f', tonumber(throttles) / done))
end

local transition = maybe_complete(prefix, gid, KEYS[2], now, group_ttl) or ''
return reply(KEYS[2], 'recorded', transition, created)
