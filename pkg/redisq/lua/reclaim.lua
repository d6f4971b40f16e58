-- reclaim.lua: re-leases jobs whose admission lease expired (the holder
-- died between lease and hand-over), at most N per call. The attempt is
-- unchanged, so a re-publish carries the same message id.
-- KEYS[1]: inflight
-- ARGV[1]: key prefix
-- ARGV[2]: N
-- ARGV[3]: lease in ms
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- Returns: { jobs, next } where jobs is a flat list gid, jid, type, payload,
--   attempt, trace and next is the earliest remaining deadline (-1 = none).
local prefix = ARGV[1]
local now = now_ms(ARGV[4])
local deadline = now + tonumber(ARGV[3])
local out = {}
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
for _, mem in ipairs(expired) do
  local gid, jid = split_member(mem)
  local job_key = prefix .. 'job:' .. gid .. ':' .. jid
  local d = redis.call('HMGET', job_key, 'status', 'type', 'payload', 'attempt', 'trace')
  if d[1] == 'LEASED' then
    redis.call('ZADD', KEYS[1], deadline, mem)
    out[#out + 1] = gid
    out[#out + 1] = jid
    out[#out + 1] = d[2]
    out[#out + 1] = d[3]
    out[#out + 1] = num(d[4])
    out[#out + 1] = d[5] or ''
  else
    -- already running, finished or gone: nothing to recover
    redis.call('ZREM', KEYS[1], mem)
  end
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_deadline = -1
if #nxt > 0 then next_deadline = tonumber(nxt[2]) end
return { out, next_deadline }
