-- schedule_refresh.lua: writes the open intervals of a group's sending
-- windows that the Go side computed (redisq schedule.go), if the group
-- still has those windows and has not ended; otherwise takes it off the
-- refresh list (docs/ARCHITECTURE.md §5, Schedules).
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: schedule:windows (ZSET of groups with windows, scored by when
--          their winAt is to be computed again)
-- ARGV[1]: the group key "<tenant>:<gid>"
-- ARGV[2]: the windows the intervals were computed from (must equal the
--          meta's windows)
-- ARGV[3]: the intervals, 'open,close,...' Unix ms
-- ARGV[4]: when to compute them again, Unix ms
-- Returns: 1 written, 0 the group is gone, ended or has other windows
--          (taken off the list when it has none or has ended)
local m = redis.call('HMGET', KEYS[1], 'status', 'windows')
if not m[1] or TERMINAL_GROUP[m[1]] or not m[2] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
if m[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'winAt', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return 1
