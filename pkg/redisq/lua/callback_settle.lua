-- callback_settle.lua: settles one leased completion callback, only while
-- the caller still holds its lease (the token written by
-- callback_claim.lua); a lease that ran out and went to another deliverer
-- changes nothing here.
-- KEYS[1]: callbacks:due
-- KEYS[2]: group:<gk>:callback
-- ARGV[1]: group key
-- ARGV[2]: lease token
-- ARGV[3]: op: 'body' (freeze the body sent on every attempt: kept if one
--          is already frozen), 'delivered', 'retry' (an attempt failed; due
--          again at ARGV[6]), 'failed' (an attempt failed and the retry
--          budget is spent), 'wait' (not attempted; due again at ARGV[6])
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: body ('body'), HTTP status ('delivered', 'retry', 'failed';
--          0 = no response)
-- ARGV[6]: due time in ms ('retry', 'wait'), else ''
-- ARGV[7]: last error ('retry', 'failed'), else ''
-- ARGV[8]: TTL in seconds of an ended delivery's hash ('delivered',
--          'failed'; 0 = keep)
-- Returns: { ok, body } where ok is 1 when the lease was held (and the op
--   applied), else 0; body is the frozen body ('body'), else ''.
local now = now_ms(ARGV[4])
local op = ARGV[3]
local c = redis.call('HMGET', KEYS[2], 'state', 'lease', 'body')
if c[1] ~= 'pending' or c[2] ~= ARGV[2] then
  return { 0, '' }
end
if op == 'body' then
  if c[3] then return { 1, c[3] } end
  redis.call('HSET', KEYS[2], 'body', ARGV[5])
  return { 1, ARGV[5] }
end
if op == 'wait' then
  redis.call('HSET', KEYS[2], 'nextAt', ARGV[6])
  redis.call('HDEL', KEYS[2], 'lease')
  redis.call('ZADD', KEYS[1], tonumber(ARGV[6]), ARGV[1])
  return { 1, '' }
end
redis.call('HINCRBY', KEYS[2], 'attempts', 1)
redis.call('HSET', KEYS[2], 'lastAttemptAt', now, 'statusCode', ARGV[5])
redis.call('HDEL', KEYS[2], 'lease')
if op == 'delivered' then
  redis.call('HSET', KEYS[2], 'state', 'delivered', 'deliveredAt', now)
  redis.call('HDEL', KEYS[2], 'nextAt', 'lastError')
  redis.call('ZREM', KEYS[1], ARGV[1])
elseif op == 'retry' then
  redis.call('HSET', KEYS[2], 'nextAt', ARGV[6], 'lastError', ARGV[7])
  redis.call('ZADD', KEYS[1], tonumber(ARGV[6]), ARGV[1])
  return { 1, '' }
else
  redis.call('HSET', KEYS[2], 'state', 'failed', 'failedAt', now, 'lastError', ARGV[7])
  redis.call('HDEL', KEYS[2], 'nextAt')
  redis.call('ZREM', KEYS[1], ARGV[1])
end
local ttl = tonumber(ARGV[8])
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
return { 1, '' }
