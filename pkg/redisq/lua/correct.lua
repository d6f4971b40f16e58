-- correct.lua: re-derives every group's non-ready counter from the
-- non-ready queue itself ("count drift").
-- KEYS[1]: non-ready-queue
-- KEYS[2]: active-groups
-- ARGV[1]: key prefix
-- Returns: the number of counters that were wrong and fixed.
local prefix = ARGV[1]
local counts = {}
local total = redis.call('ZCARD', KEYS[1])
for start = 0, total - 1, 5000 do
  for _, mem in ipairs(redis.call('ZRANGE', KEYS[1], start, start + 4999)) do
    local gid = split_member(mem)
    counts[gid] = (counts[gid] or 0) + 1
  end
end
for _, gid in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if counts[gid] == nil then counts[gid] = 0 end
end
local fixed = 0
for gid, n in pairs(counts) do
  local count_key = prefix .. 'congestion:' .. gid .. ':non-ready-count'
  local cur = redis.call('GET', count_key)
  if num(cur) ~= n then
    fixed = fixed + 1
    if n == 0 then
      redis.call('DEL', count_key)
    else
      redis.call('SET', count_key, n)
    end
    local stats_key = prefix .. 'congestion:' .. gid .. ':stats'
    if redis.call('EXISTS', stats_key) == 1 then
      redis.call('HSET', stats_key, 'currentNonReadyCount', n)
    end
  end
end
return fixed
