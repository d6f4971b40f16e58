-- submit_room.lua: a tenant's room on SUBMIT (docs/operations.md §9): the
-- bytes of its requests the gateway published or is publishing that the
-- fetchers have not applied yet, against the most it may have there.
--
-- KEYS[1]: the HASH of tenants' own gateway limits (field "<tenant>:submitBytes")
-- KEYS[2]: the tenant's published entries: ZSET "<token>:<bytes>" -> the
--          SUBMIT sequence at or below which all of the request is
-- KEYS[3]: the tenant's reservations: ZSET "<token>:<bytes>" -> expiry ms
-- KEYS[4]: the tenant's total bytes of both
-- ARGV[1]: mode: reserve, settle or release
-- ARGV[2]: tenant
-- ARGV[3]: now override in ms ('' = Redis TIME)
-- ARGV[4]: how long the keys live after the last call, ms
-- reserve: ARGV[5] default limit in bytes (0 = none), ARGV[6] the fetchers'
--   ack floor on SUBMIT, ARGV[7] token, ARGV[8] bytes, ARGV[9] lease ms.
--   Forgets the entries at or below the ack floor (applied) and the lapsed
--   reservations, then reserves the bytes if the total stays within the
--   limit. Returns {reserved, total before, limit (0 = none)}.
-- settle: ARGV[5] token, ARGV[6] bytes, ARGV[7] SUBMIT sequence: the
--   request is published; its bytes count until the fetchers' ack floor
--   reaches that sequence.
-- release: ARGV[5] token, ARGV[6] bytes: nothing of it was published.

local mode, tenant = ARGV[1], ARGV[2]
local now, ttl = now_ms(ARGV[3]), tonumber(ARGV[4])

local function forget(key, max)
  local gone = redis.call('ZRANGEBYSCORE', key, '-inf', max, 'LIMIT', 0, 1000)
  if #gone == 0 then return end
  local sum = 0
  for _, m in ipairs(gone) do
    sum = sum + tonumber(string.match(m, ':(%d+)$'))
  end
  redis.call('ZREM', key, unpack(gone))
  if redis.call('DECRBY', KEYS[4], sum) < 0 then redis.call('SET', KEYS[4], 0) end
end

local function keep()
  for i = 2, 4 do redis.call('PEXPIRE', KEYS[i], ttl) end
end

if mode == 'reserve' then
  local limit = tonumber(ARGV[5])
  local own = redis.call('HGET', KEYS[1], tenant .. ':submitBytes')
  if own then limit = tonumber(own) end
  if limit == nil or limit <= 0 then return {1, 0, 0} end
  forget(KEYS[2], ARGV[6])
  forget(KEYS[3], '(' .. now)
  local total = tonumber(redis.call('GET', KEYS[4]) or '0')
  local bytes = tonumber(ARGV[8])
  if total + bytes > limit then return {0, total, limit} end
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[9]), ARGV[7] .. ':' .. ARGV[8])
  redis.call('INCRBY', KEYS[4], bytes)
  keep()
  return {1, total, limit}
end

local member = ARGV[5] .. ':' .. ARGV[6]
local held = redis.call('ZREM', KEYS[3], member)
if mode == 'settle' then
  redis.call('ZADD', KEYS[2], tonumber(ARGV[7]), member)
  if held == 0 then redis.call('INCRBY', KEYS[4], tonumber(ARGV[6])) end -- its lease had lapsed
  keep()
elseif held == 1 then
  if redis.call('DECRBY', KEYS[4], tonumber(ARGV[6])) < 0 then redis.call('SET', KEYS[4], 0) end
end
return {1, 0, 0}
