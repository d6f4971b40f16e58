-- handback.lua: a worker hands claimed jobs back on purpose (its shutdown
-- grace is over, or a step failed): it marks each one 'released' as its
-- attempt, so that the next claim (claim.lua) knows the holder did not stop
-- while running it and does not make it a suspect.
-- KEYS[i]: a job's key; ARGV[i]: the attempt handed back
for i = 1, #KEYS do
  local d = redis.call('HMGET', KEYS[i], 'status', 'attempt')
  if d[1] == 'RUNNING' and num(d[2]) == tonumber(ARGV[i]) then
    redis.call('HSET', KEYS[i], 'released', ARGV[i])
  end
end
return 0
