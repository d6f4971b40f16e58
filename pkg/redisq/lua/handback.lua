-- handback.lua: a worker hands claimed jobs back on purpose (its shutdown
-- grace is over, or a step failed): it marks each one 'released' as its
-- attempt, so that the next claim (claim.lua) knows the holder did not stop
-- while running it and does not make it a suspect, and ends its claim, so
-- that the next delivery runs it at once.
-- KEYS[1]: claims
-- KEYS[1+i]: a job's key; ARGV[2i]: the attempt handed back,
-- ARGV[2i+1]: the job's claims member "<tenant>:<gid>:<jid>"
-- ARGV[1]: the holder handing back ('' = the caller holds every job): a
--   job RUNNING under another holder is left alone (a worker that does not
--   know whether its claim ran hands back only what it holds).
local holder = ARGV[1]
for i = 2, #KEYS do
  local a = 2 * (i - 1)
  local d = redis.call('HMGET', KEYS[i], 'status', 'attempt', 'holder')
  if d[1] == 'RUNNING' and num(d[2]) == tonumber(ARGV[a]) and (holder == '' or d[3] == holder) then
    redis.call('HSET', KEYS[i], 'released', ARGV[a])
    redis.call('ZREM', KEYS[1], ARGV[a + 1])
  end
end
return 0
