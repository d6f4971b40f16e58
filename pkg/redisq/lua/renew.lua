-- renew.lua: a worker extends the claims of the jobs in its hands (claimed
-- and running, waiting for a slot, or with a result not yet accepted by
-- RESULT) so that the repair never takes their runs as lost
-- (docs/ARCHITECTURE.md §6.5). A job that is no longer RUNNING as that
-- attempt (its result was recorded, it was retried or re-leased) is left
-- alone: its claim is over.
-- KEYS[1]: claims
-- ARGV[1]: key prefix
-- ARGV[2]: now override in ms ('' = Redis TIME)
-- ARGV[3]: claim TTL in ms
-- ARGV[3+3(i-1)+1..3]: group key "<tenant>:<gid>"_i, jobId_i, attempt_i
-- Returns: the number of claims extended.
local prefix = ARGV[1]
local until_ms = now_ms(ARGV[2]) + tonumber(ARGV[3])
local claims = {}
for a = 4, #ARGV, 3 do
  local gk, jid = ARGV[a], ARGV[a + 1]
  local job_key = prefix .. 'job:' .. gk .. ':' .. jid
  local d = redis.call('HMGET', job_key, 'status', 'attempt', 'lost')
  if d[1] == 'RUNNING' and num(d[2]) == tonumber(ARGV[a + 2]) then
    if d[3] then
      redis.call('HDEL', job_key, 'lost')
    end
    claims[#claims + 1] = until_ms
    claims[#claims + 1] = gk .. ':' .. jid
  end
end
zadd_pinned_bulk(KEYS[1], claims)
return #claims / 2
