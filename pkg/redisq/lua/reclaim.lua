-- reclaim.lua: re-leases jobs whose admission lease expired (the holder
-- died between lease and hand-over), at most N per call. The attempt is
-- unchanged, so a re-publish carries the same message id. A job of a paused
-- group goes back to the front of its group's list instead (status QUEUED;
-- a delivery of the old attempt is then stale) and leaves its group's
-- in-flight count: it is admitted again when the group is resumed. A
-- re-leased job renews its READY room reservation (lib.lua): its message
-- may not be on READY yet.
-- KEYS[1]: inflight
-- ARGV[1]: key prefix
-- ARGV[2]: N
-- ARGV[3]: lease in ms
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: ALPHA
-- Returns: { jobs, next, requeued } where jobs are the re-leased jobs, a
--   lib.lua lease_entry each, next is the earliest
--   remaining deadline (-1 = none) and requeued counts the jobs of paused
--   groups put back in their lists.
local prefix = ARGV[1]
local now = now_ms(ARGV[4])
local deadline = now + tonumber(ARGV[3])
local alpha = tonumber(ARGV[5])
local out, requeued = {}, 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, mem in ipairs(expired) do
  local gk, jid = split_member(mem)
  local job_key = prefix .. 'job:' .. gk .. ':' .. jid
  local d = job_read(job_key) or { payload = '' }
  if d.status == 'LEASED' then
    if redis.call('HGET', meta_key_of(prefix, gk), 'status') == 'PAUSED' then
      redis.call('ZREM', KEYS[1], mem)
      redis.call('LPUSH', jobs_key_of(prefix, gk), jid)
      redis.call('HSET', job_key, 'status', 'QUEUED')
      inflight_release(prefix, gk, 1, now, alpha)
      requeued = requeued + 1
    else
      zadd_pinned(KEYS[1], deadline, mem)
      ready_reserve(prefix, d.type or '', mem, now, tonumber(ARGV[3]))
      out[#out + 1] = lease_entry(mem, d, num(d.attempt))
    end
  else
    -- already running, finished or gone: nothing to recover
    redis.call('ZREM', KEYS[1], mem)
  end
end
local _, next_deadline = zfirst_job(KEYS[1])
if next_deadline == nil then next_deadline = -1 end
return { out, next_deadline, requeued }
