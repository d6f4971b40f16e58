-- abandon.lua: an unsealed group without activity for the idle TTL is
-- abandoned (nobody will seal it): it leaves the stuck watch list and every
-- key of it gets the group TTL, so Redis does not keep it forever. Its
-- activity is the latest of createdAt, startedAt, lastProgressAt, pausedAt
-- and abandonedAt. The first step checks and marks the group (abandonedAt)
-- and expires its group keys; every step, the first included, gives at most
-- ARGV[5] of its job hashes a TTL (EXPIRE NX: a finished job keeps its
-- shorter one), going through the group's job list and then its id set
-- (between them every job of the group: lib.lua ids_add) from cursor
-- ARGV[6]. A later step finds a group revived meanwhile (enqueue.lua:
-- abandonedAt cleared) active, and stops.
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: group:<gk>:ids
-- KEYS[3]: stuck-watch
-- ARGV[1]: key prefix
-- ARGV[2]: group key "<tenant>:<gid>"
-- ARGV[3]: now override in ms ('' = Redis TIME)
-- ARGV[4]: idle TTL in ms
-- ARGV[5]: most job ids this step goes through (at least 1)
-- ARGV[6]: cursor ('0' = the first step; 'L<index>' in the job list,
--          'S<SSCAN cursor>' in the id set)
-- ARGV[7]: group TTL in seconds
-- Returns: { outcome, cursor } where outcome is 'abandoned' (this step
--   went on with it; cursor '0' once finished) or 'active' (sealed, ended,
--   or active within the idle TTL: nothing changed).
local prefix, gk = ARGV[1], ARGV[2]
local now = now_ms(ARGV[3])
local budget = tonumber(ARGV[5])
if budget < 1 then budget = 1 end
local cursor = ARGV[6]
local ttl = tonumber(ARGV[7])

if cursor ~= '0' and not redis.call('HGET', KEYS[1], 'abandonedAt') then
  return { 'active', '0' } -- revived since the last step
end
if cursor == '0' then
  local m = redis.call('HMGET', KEYS[1], 'status', 'declaredTotal', 'createdAt', 'startedAt', 'lastProgressAt',
    'pausedAt', 'abandonedAt')
  if not m[1] or TERMINAL_GROUP[m[1]] or m[2] then
    return { 'active', '0' }
  end
  local last = 0
  for i = 3, 7 do last = math.max(last, num(m[i])) end
  if m[7] == false and now - last <= tonumber(ARGV[4]) then
    return { 'active', '0' }
  end
  redis.call('HSET', KEYS[1], 'abandonedAt', now)
  redis.call('ZREM', KEYS[3], gk)
  local keys = { KEYS[1], prefix .. 'group:' .. gk .. ':jobs', KEYS[2], prefix .. 'group:' .. gk .. ':progress',
    prefix .. 'group:' .. gk .. ':failures', prefix .. 'congestion:' .. gk .. ':stats',
    prefix .. 'congestion:' .. gk .. ':non-ready-count' }
  for _, k in ipairs(keys) do redis.call('EXPIRE', k, ttl) end
  cursor = 'L0'
end
-- the queued jobs, by index (jobs admitted meanwhile, whose indexes shift,
-- are in the id set by then)
if string.sub(cursor, 1, 1) == 'L' then
  local from = tonumber(string.sub(cursor, 2))
  local page = redis.call('LRANGE', prefix .. 'group:' .. gk .. ':jobs', from, from + budget - 1)
  for _, jid in ipairs(page) do
    redis.call('EXPIRE', job_key_of(prefix, gk, jid), ttl, 'NX')
  end
  budget = budget - #page
  if #page > 0 then cursor = 'L' .. (from + #page) else cursor = 'S0' end
  if budget <= 0 then return { 'abandoned', cursor } end
  cursor = 'S0'
end
cursor = string.sub(cursor, 2)
repeat
  local r = redis.call('SSCAN', KEYS[2], cursor, 'COUNT', budget)
  cursor = r[1]
  for _, jid in ipairs(r[2]) do
    redis.call('EXPIRE', job_key_of(prefix, gk, jid), ttl, 'NX')
  end
  budget = budget - math.max(#r[2], 1)
until cursor == '0' or budget <= 0
if cursor == '0' then return { 'abandoned', '0' } end
return { 'abandoned', 'S' .. cursor }
