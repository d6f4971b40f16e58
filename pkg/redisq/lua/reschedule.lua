-- reschedule.lua: moves the notBefore of a group that has not started
-- (docs/ARCHITECTURE.md §5, Schedules): none of its jobs was admitted yet
-- (no startedAt). Schedule messages apply in publish order among
-- themselves: given the SUBMIT sequence of its message (ARGV[4]), one is
-- applied only if it is newer than the last one the group took (its meta's
-- schedSeq); an older one changes nothing ('superseded'). A group waiting
-- for its schedule (KEYS[2]) is looked at again by the next admission.
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: schedule:wait
-- ARGV[1]: the group key "<tenant>:<gid>"
-- ARGV[2]: the new notBefore, Unix ms
-- ARGV[3]: now override in ms ('' = Redis TIME)
-- ARGV[4]: SUBMIT sequence of the message ('' or '0' = unordered)
-- Returns: { outcome, '', <group reply> } where outcome is 'rescheduled',
--   'started' (its jobs are being admitted: nothing done), 'ended',
--   'unknown' (no such group) or 'superseded'.
local now = now_ms(ARGV[3])
local seq = tonumber(ARGV[4]) or 0
local m = redis.call('HMGET', KEYS[1], 'status', 'startedAt', 'schedSeq')
if not m[1] then return reply(KEYS[1], 'unknown', '') end
if TERMINAL_GROUP[m[1]] then return reply(KEYS[1], 'ended', '') end
if m[2] then return reply(KEYS[1], 'started', '') end
if seq > 0 then
  if seq <= num(m[3]) then return reply(KEYS[1], 'superseded', '') end
  redis.call('HSET', KEYS[1], 'schedSeq', seq)
end
redis.call('HSET', KEYS[1], 'notBefore', ARGV[2])
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], now, ARGV[1])
end
return reply(KEYS[1], 'rescheduled', '')
