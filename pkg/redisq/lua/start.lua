-- start.lua: a worker is about to start jobs it claimed a while ago (they
-- waited for a slot): a job of a group cancelled since is counted as
-- cancelled instead of run, as claim.lua does at claim time; it leaves its
-- group's in-flight count and its claim ends. One call checks every job a
-- worker is about to start at that moment (ARCHITECTURE §6.3).
-- KEYS[1]: claims
-- ARGV[1]: key prefix
-- ARGV[2]: now override in ms ('' = Redis TIME)
-- ARGV[3]: job TTL in seconds
-- ARGV[3+3(i-1)+1..3]: group key "<tenant>:<gid>"_i, jobId_i, the attempt claimed_i
-- Returns: per job, 'run' (start it), 'cancelled' (its group was
--   cancelled: it is counted as cancelled and must not run) or 'stale' (the
--   job is no longer RUNNING as that attempt: its run is not this worker's
--   to start).
local prefix = ARGV[1]
local job_ttl = tonumber(ARGV[3])
local now = nil
local cancelled = {} -- group key -> status read once per call
local out = {}
for a = 4, #ARGV, 3 do
  local gk, jid = ARGV[a], ARGV[a + 1]
  local job_key = job_key_of(prefix, gk, jid)
  local d = redis.call('HMGET', job_key, 'status', 'attempt')
  if d[1] ~= 'RUNNING' or num(d[2]) ~= tonumber(ARGV[a + 2]) then
    out[#out + 1] = 'stale'
  else
    local meta_key = meta_key_of(prefix, gk)
    if cancelled[gk] == nil then
      cancelled[gk] = redis.call('HGET', meta_key, 'status') == 'CANCELLED'
    end
    if not cancelled[gk] then
      out[#out + 1] = 'run'
    else
      now = now or now_ms(ARGV[2])
      cancel_job(job_key, meta_key, now, job_ttl)
      inflight_release(prefix, gk, 1, now, 0)
      redis.call('ZREM', KEYS[1], gk .. ':' .. jid)
      out[#out + 1] = 'cancelled'
    end
  end
end
return out
