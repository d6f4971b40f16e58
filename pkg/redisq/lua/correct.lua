-- correct.lua: re-derives every group's and every tenant's non-ready
-- counter from the non-ready queue itself ("count drift").
-- KEYS[1]: non-ready-queue
-- KEYS[2]: stuck-watch (the groups that started and have not ended: only
--          they can have backed-off jobs, so only their counters can be
--          wrong when the queue holds none of their jobs)
-- ARGV[1]: key prefix
-- Returns: the number of counters that were wrong and fixed.
local function fix(key, n)
  if num(redis.call('GET', key)) == n then return false end
  if n == 0 then
    redis.call('DEL', key)
  else
    redis.call('SET', key, n)
  end
  return true
end
local prefix = ARGV[1]
local counts = {}
local total = redis.call('ZCARD', KEYS[1])
for start = 0, total - 1, 5000 do
  for _, mem in ipairs(redis.call('ZRANGE', KEYS[1], start, start + 4999)) do
    local gk = split_member(mem)
    counts[gk] = (counts[gk] or 0) + 1
  end
end
local watched = redis.call('ZCARD', KEYS[2])
for start = 0, watched - 1, 5000 do
  for _, gk in ipairs(redis.call('ZRANGE', KEYS[2], start, start + 4999)) do
    if counts[gk] == nil then counts[gk] = 0 end
  end
end
local fixed = 0
local tcounts = {}
for gk, n in pairs(counts) do
  local tenant = group_parts(gk)
  tcounts[tenant] = (tcounts[tenant] or 0) + n
  if fix(prefix .. 'congestion:' .. gk .. ':non-ready-count', n) then
    fixed = fixed + 1
    local stats_key = prefix .. 'congestion:' .. gk .. ':stats'
    if redis.call('EXISTS', stats_key) == 1 then
      redis.call('HSET', stats_key, 'currentNonReadyCount', n)
    end
  end
end
for tenant, n in pairs(tcounts) do
  if fix(tenant_count_key(prefix, tenant), n) then
    fixed = fixed + 1
  end
end
return fixed
