-- relet.lua: leases again, as a new attempt, jobs whose READY publish was a
-- JetStream duplicate of a message no longer on READY (docs/ARCHITECTURE.md
-- §6.2): the message id <t>:<g>:<jid>:<attempt> was used before, by a
-- hand-out Redis lost (an asynchronous failover, AOF everysec), and that
-- message was consumed meanwhile. Publishing the same attempt again would
-- be dropped as a duplicate for the stream's duplicate window, leaving the
-- job leased with no READY message; a new attempt has a new message id
-- (and its result a new one too). Fenced: only a job still LEASED as the
-- attempt that was published is re-leased; one that moved on (claimed,
-- cancelled, put back) is left alone.
-- KEYS[1]: inflight
-- ARGV[1]: key prefix (job keys are built from it)
-- ARGV[2]: now override in ms ('' = Redis TIME)
-- ARGV[3]: lease in ms
-- ARGV[4..]: 3 values per job: group key "<tenant>:<gid>", jobId, the
--            attempt that was published
-- Returns: one value per job, in order: its new attempt, or 0 when it was
--   not re-leased. A re-leased job gets a new lease deadline and renews its
--   READY room reservation; its group's in-flight count is unchanged.
local prefix = ARGV[1]
local now = now_ms(ARGV[2])
local lease_ms = tonumber(ARGV[3])
local out = {}
for i = 4, #ARGV, 3 do
  local gk, jid, attempt = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local job_key = job_key_of(prefix, gk, jid)
  local d = redis.call('HMGET', job_key, 'status', 'attempt', 'type')
  if d[1] == 'LEASED' and num(d[2]) == attempt then
    local mem = gk .. ':' .. jid
    redis.call('HSET', job_key, 'attempt', attempt + 1)
    zadd_pinned(KEYS[1], now + lease_ms, mem)
    ready_reserve(prefix, d[3] or '', mem, now, lease_ms)
    out[#out + 1] = attempt + 1
  else
    out[#out + 1] = 0
  end
end
return out
