-- correct.lua: re-derives one group's non-ready counter ("count drift"),
-- one bounded step at a time: a step counts, for at most ARGV[4] of the
-- group's job ids (SSCAN of group:<gk>:ids from cursor ARGV[2]), those with
-- a member in the non-ready queue; no step reads the whole queue.
-- A group counted in one step is fixed at once (the count is exact). A
-- count over several steps marks the group's statistics
-- (currentNonReadyCount = 'counting') in its first step; every park and
-- release of the group's jobs overwrites that field, so the last step fixes
-- the counter only if the mark is still there (no job of the group entered
-- or left the queue meanwhile), and otherwise leaves it to the next pass.
-- An ended group keeps no counter: one left behind is deleted.
-- KEYS[1]: non-ready-queue
-- KEYS[2]: group:<gk>:meta
-- KEYS[3]: group:<gk>:ids
-- KEYS[4]: congestion:<gk>:non-ready-count
-- KEYS[5]: congestion:<gk>:stats
-- ARGV[1]: group key "<tenant>:<gid>"
-- ARGV[2]: SSCAN cursor ('0' = the first step)
-- ARGV[3]: members counted by the earlier steps
-- ARGV[4]: most job ids this step goes through (at least 1)
-- Returns: { cursor, counted, fixed } where cursor is '0' once the count
--   is finished; fixed is 1 when the counter was wrong and was fixed, 0 when
--   it was right (or the count is not finished), -1 when jobs of the group
--   entered or left the queue during a count of several steps (nothing
--   changed; the next pass counts again).
local gk = ARGV[1]
local first = ARGV[2] == '0'
local cursor = ARGV[2]
local counted = tonumber(ARGV[3])
local budget = tonumber(ARGV[4])
if budget < 1 then budget = 1 end

local status = redis.call('HGET', KEYS[2], 'status')
if not status or TERMINAL_GROUP[status] then
  -- cancel and completion drop the counter; release deletes it at 0
  if redis.call('DEL', KEYS[4]) == 1 then return { '0', 0, 1 } end
  return { '0', 0, 0 }
end

repeat
  local r = redis.call('SSCAN', KEYS[3], cursor, 'COUNT', budget)
  cursor = r[1]
  local page = r[2]
  for _, jid in ipairs(page) do
    if redis.call('ZSCORE', KEYS[1], gk .. ':' .. jid) then counted = counted + 1 end
  end
  budget = budget - math.max(#page, 1)
until cursor == '0' or budget <= 0

if cursor ~= '0' then
  if first then redis.call('HSET', KEYS[5], 'currentNonReadyCount', 'counting') end
  return { cursor, counted, 0 }
end
if not first and redis.call('HGET', KEYS[5], 'currentNonReadyCount') ~= 'counting' then
  return { '0', counted, -1 }
end
local fixed = 0
if num(redis.call('GET', KEYS[4])) ~= counted then
  fixed = 1
  if counted == 0 then
    redis.call('DEL', KEYS[4])
  else
    redis.call('SET', KEYS[4], counted)
  end
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('HSET', KEYS[5], 'currentNonReadyCount', counted)
end
return { '0', counted, fixed }
