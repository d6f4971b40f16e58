-- callback_claim.lua: leases the completion callbacks that are due, so that
-- one deliverer at a time holds each (docs/ARCHITECTURE.md, completion
-- callbacks). A due entry of callbacks:due (member: group key, score: due
-- time in ms) is leased by moving its score to now + the lease and writing
-- the lease's token into the callback's hash; a deliverer that dies lets
-- its lease run out, and the entry is due again. An entry whose hash is
-- gone or not pending is dropped.
-- KEYS[1]: callbacks:due
-- ARGV[1]: key prefix (the callback and meta keys are built from it)
-- ARGV[2]: now override in ms ('' = Redis TIME)
-- ARGV[3]: most callbacks leased
-- ARGV[4]: lease in ms
-- ARGV[5]: lease token
-- Returns: a flat list of 9 + 7 values per leased callback: group key, url,
--   webhook id, attempts so far, endedAt (ms), since (ms, the start of the
--   retry budget), frozen body ('' = none yet), finishedAt of the group
--   ('' = its meta is gone), the script's now (ms), then the group reply
--   (lib.lua group_reply).
local prefix = ARGV[1]
local now = now_ms(ARGV[2])
local most, lease, token = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, most)
local out = {}
for _, gk in ipairs(due) do
  local key = prefix .. 'group:' .. gk .. ':callback'
  local c = redis.call('HMGET', key, 'state', 'url', 'id', 'attempts', 'endedAt', 'since', 'body')
  if c[1] ~= 'pending' then
    redis.call('ZREM', KEYS[1], gk)
  else
    redis.call('ZADD', KEYS[1], now + lease, gk)
    redis.call('HSET', key, 'lease', token)
    local meta_key = prefix .. 'group:' .. gk .. ':meta'
    local n = #out
    out[n + 1], out[n + 2], out[n + 3], out[n + 4] = gk, c[2], c[3], num(c[4])
    out[n + 5], out[n + 6], out[n + 7] = num(c[5]), num(c[6]), c[7] or ''
    out[n + 8] = redis.call('HGET', meta_key, 'finishedAt') or ''
    out[n + 9] = now
    for _, v in ipairs(group_reply(meta_key)) do out[#out + 1] = v end
  end
end
return out
