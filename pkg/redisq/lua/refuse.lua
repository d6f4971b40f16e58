-- refuse.lua: records that the pipeline refused (dead-lettered) a submit
-- message of a group, so that the group's producer can see it
-- (docs/ARCHITECTURE.md §6.1). It never creates the group: the meta is only
-- read, for the reply.
-- KEYS[1]: group:<gk>:refusals (HASH: messages, jobs, messages:<reason>,
--          jobs:<reason>, firstAt, lastAt, lastReason, lastError, lastMsgId)
-- KEYS[2]: group:<gk>:refused-ids (ZSET: refused message ids, scored by
--          their SUBMIT sequence)
-- KEYS[3]: group:<gk>:refused-recent (LIST: the newest refusals, newest
--          first, each "<at>\n<reason>\n<jobs>\n<seq>\n<msgId>\n<error>")
-- KEYS[4]: group:<gk>:meta (read only)
-- ARGV[1]: message id ('#<seq>' for a message without one)
-- ARGV[2]: SUBMIT sequence (0 = unknown)
-- ARGV[3]: reason token
-- ARGV[4]: jobs the message had refused (0 for a seal)
-- ARGV[5]: error text
-- ARGV[6]: now override in ms ('' = Redis TIME)
-- ARGV[7]: TTL of the three keys in seconds (0 = keep)
-- ARGV[8]: most message ids kept
-- ARGV[9]: most recent refusals kept
-- Returns: { recorded (1, or 0 when this delivery of the message was
--   recorded before), refused messages, refused jobs, <group reply> }
--   (status 'NONE' when the group does not exist).
local msgid, seq, reason = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local jobs, err = tonumber(ARGV[4]), ARGV[5]
local ttl, keep_ids, keep_recent = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])

if seq > 0 then
  local s = redis.call('ZSCORE', KEYS[2], msgid)
  if s and tonumber(s) == seq then
    local c = redis.call('HMGET', KEYS[1], 'messages', 'jobs')
    return reply(KEYS[4], 0, num(c[1]), num(c[2])) -- a redelivery of a message already recorded
  end
end
local now = now_ms(ARGV[6])

redis.call('ZADD', KEYS[2], seq, msgid)
local n = redis.call('ZCARD', KEYS[2])
if n > keep_ids then
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, n - keep_ids - 1)
end
local messages = redis.call('HINCRBY', KEYS[1], 'messages', 1)
local total_jobs = redis.call('HINCRBY', KEYS[1], 'jobs', jobs)
redis.call('HINCRBY', KEYS[1], 'messages:' .. reason, 1)
redis.call('HINCRBY', KEYS[1], 'jobs:' .. reason, jobs)
redis.call('HSETNX', KEYS[1], 'firstAt', now)
redis.call('HSET', KEYS[1], 'lastAt', now, 'lastReason', reason, 'lastError', err, 'lastMsgId', msgid)
redis.call('LPUSH', KEYS[3], now .. '\n' .. reason .. '\n' .. jobs .. '\n' .. seq .. '\n' .. msgid .. '\n' .. err)
redis.call('LTRIM', KEYS[3], 0, keep_recent - 1)
if ttl > 0 then
  for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ttl) end
end
return reply(KEYS[4], 1, messages, total_jobs)
