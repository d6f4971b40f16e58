-- abandon.lua: an unsealed group that is really idle for the idle TTL is
-- abandoned (nobody will seal it): it leaves the stuck watch list and every
-- key of it gets the group TTL, so Redis does not keep it forever. Really
-- idle means no work and no activity. A group with work is never abandoned,
-- however long it waits: one that is PAUSED, or has jobs queued (its job
-- list), backing off (its non-ready count), leased or running (in flight:
-- totalJobs above doneJobs + cancelledCount, or its inFlight count). Its
-- activity is the latest of createdAt, startedAt, lastProgressAt (a result,
-- a revival), pausedAt, activeAt (a control message it took: pause.lua,
-- resume.lua, seal.lua) and abandonedAt. The first step checks and marks
-- the group (abandonedAt) and expires its group keys; every step, the first
-- included, gives at most ARGV[5] of its job hashes a TTL (EXPIRE NX: a
-- finished job keeps its shorter one), going through the group's id set
-- (every job that left its list, and a group without work has none in it:
-- lib.lua ids_add) from cursor ARGV[6]. A later step finds a group revived
-- meanwhile (enqueue.lua, pause.lua, resume.lua, seal.lua: abandonedAt
-- cleared) active, and stops.
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: group:<gk>:ids
-- KEYS[3]: stuck-watch
-- ARGV[1]: key prefix
-- ARGV[2]: group key "<tenant>:<gid>"
-- ARGV[3]: now override in ms ('' = Redis TIME)
-- ARGV[4]: idle TTL in ms
-- ARGV[5]: most job ids this step goes through (at least 1)
-- ARGV[6]: cursor ('0' = the first step; 'S<SSCAN cursor>' in the id set)
-- ARGV[7]: group TTL in seconds
-- Returns: { outcome, cursor } where outcome is 'abandoned' (this step
--   went on with it; cursor '0' once finished), 'busy' (it has work: nothing
--   changed) or 'active' (sealed, ended, or active within the idle TTL:
--   nothing changed).
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
    'pausedAt', 'activeAt', 'abandonedAt', 'totalJobs', 'doneJobs', 'cancelledCount', 'inFlight')
  if not m[1] or TERMINAL_GROUP[m[1]] or m[2] then
    return { 'active', '0' }
  end
  if m[1] == 'PAUSED' or num(m[9]) > num(m[10]) + num(m[11]) or num(m[12]) > 0
    or redis.call('LLEN', prefix .. 'group:' .. gk .. ':jobs') > 0
    or num(redis.call('GET', prefix .. 'congestion:' .. gk .. ':non-ready-count')) > 0 then
    return { 'busy', '0' }
  end
  local last = 0
  for i = 3, 8 do last = math.max(last, num(m[i])) end
  if m[8] == false and now - last <= tonumber(ARGV[4]) then
    return { 'active', '0' }
  end
  redis.call('HSET', KEYS[1], 'abandonedAt', now)
  redis.call('ZREM', KEYS[3], gk)
  local keys = { KEYS[1], prefix .. 'group:' .. gk .. ':jobs', prefix .. 'group:' .. gk .. ':queued', KEYS[2],
    prefix .. 'group:' .. gk .. ':progress',
    prefix .. 'group:' .. gk .. ':failures', prefix .. 'congestion:' .. gk .. ':stats',
    prefix .. 'congestion:' .. gk .. ':non-ready-count' }
  for _, k in ipairs(keys) do redis.call('EXPIRE', k, ttl) end
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
