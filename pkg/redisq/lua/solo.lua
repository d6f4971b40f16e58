-- solo.lua: a suspect job (claim.lua) is about to run alone in its worker,
-- with no other job running there, so that if the worker stops now, the
-- job is the cause. Counts the run in the job's 'solo' field,
-- "<attempt>:<k>" (the poison budget of the attempt).
-- KEYS[1]: the job's key
-- ARGV[1]: attempt the worker claimed
-- Returns: k, this solo run's number for the attempt (1 for the first), or
--   -1 when the job is no longer RUNNING as that attempt (stale).
local job_key, attempt = KEYS[1], tonumber(ARGV[1])
local d = redis.call('HMGET', job_key, 'status', 'attempt', 'solo')
if d[1] ~= 'RUNNING' or num(d[2]) ~= attempt then
  return -1
end
local k = 1
if d[3] then
  local a, n = string.match(d[3], '^(%d+):(%d+)$')
  if tonumber(a) == attempt then
    k = tonumber(n) + 1
  end
end
redis.call('HSET', job_key, 'solo', attempt .. ':' .. k)
return k
