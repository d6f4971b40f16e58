-- correct_tenant.lua: re-derives one tenant's non-ready counter as the sum
-- of its groups' non-ready counters, which correct.lua has just checked.
-- The tenant's groups that can have backed-off jobs are its active groups
-- (the SET kept by the quota scripts) and the groups passed in ARGV (the
-- ones on the stuck watch list); a group of the tenant whose cancel is under
-- way (in the cancel-sweep ZSET) still has backed-off jobs its counter no
-- longer counts, so the tenant is left for a later pass.
-- KEYS[1]: tenant:<t>:non-ready-count
-- KEYS[2]: tenant:<t>:active-groups
-- KEYS[3]: cancel-sweep
-- ARGV[1]: key prefix
-- ARGV[2]: tenant
-- ARGV[3..]: more groupIds of the tenant
-- Returns: 1 when the counter was wrong and was fixed, 0 when it was right,
--   -1 when a cancel of one of its groups is under way (nothing changed).
local prefix, tenant = ARGV[1], ARGV[2]
if #redis.call('ZRANGEBYLEX', KEYS[3], '[' .. tenant .. ':', '(' .. tenant .. ';', 'LIMIT', 0, 1) > 0 then
  return -1
end
local seen, sum = {}, 0
local function add(gid)
  if seen[gid] then return end
  seen[gid] = true
  sum = sum + num(redis.call('GET', prefix .. 'congestion:' .. tenant .. ':' .. gid .. ':non-ready-count'))
end
for _, gid in ipairs(redis.call('SMEMBERS', KEYS[2])) do add(gid) end
for i = 3, #ARGV do add(ARGV[i]) end
if num(redis.call('GET', KEYS[1])) == sum then return 0 end
if sum <= 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], sum)
end
return 1
