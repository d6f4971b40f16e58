-- progress.lua: appends a progress sample to a running group's history
-- (docs/ARCHITECTURE.md §8): "<ms>:<done + cancelled>", newest first,
-- read atomically with the group's counters. An ended group (or one whose
-- meta is gone) gets none, so the history never outlives the group's TTL
-- (group_cleanup gives it that TTL when the group ends).
-- KEYS[1]: group meta
-- KEYS[2]: group progress LIST
-- ARGV[1]: now override in ms ('' = Redis TIME)
-- ARGV[2]: entries kept
-- ARGV[3]: least ms between two samples (a sample closer to the newest is
--          not written, so several aggregators do not crowd the history)
-- Returns: 1 when a sample was written, 0 otherwise.
local now = now_ms(ARGV[1])
local keep = tonumber(ARGV[2])
local gap = tonumber(ARGV[3])
local m = redis.call('HMGET', KEYS[1], 'status', 'doneJobs', 'cancelledCount')
if not m[1] or TERMINAL_GROUP[m[1]] then
  return 0
end
local head = redis.call('LINDEX', KEYS[2], 0)
if head then
  local t = tonumber(string.match(head, '^(%d+):'))
  if t and now - t < gap and now >= t then
    return 0
  end
end
redis.call('LPUSH', KEYS[2], string.format('%d:%d', now, num(m[2]) + num(m[3])))
redis.call('LTRIM', KEYS[2], 0, keep - 1)
return 1
