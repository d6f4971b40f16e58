-- callback_retry.lua: makes a failed completion callback pending again, due
-- at once, with a new retry budget from now (a retry by hand). The webhook
-- id, the body and the attempts so far are kept.
-- KEYS[1]: callbacks:due
-- KEYS[2]: group:<gk>:callback
-- ARGV[1]: group key
-- ARGV[2]: now override in ms ('' = Redis TIME)
-- Returns: the state before the call: 'failed' (now pending), 'pending',
--   'delivered' (nothing changed) or 'none' (no callback).
local now = now_ms(ARGV[2])
local state = redis.call('HGET', KEYS[2], 'state')
if not state then return 'none' end
if state ~= 'failed' then return state end
redis.call('HSET', KEYS[2], 'state', 'pending', 'since', now, 'nextAt', now)
redis.call('HDEL', KEYS[2], 'failedAt', 'lease')
redis.call('PERSIST', KEYS[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
return 'failed'
