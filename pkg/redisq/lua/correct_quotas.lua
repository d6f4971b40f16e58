-- correct_quotas.lua: re-derives one tenant's quota counts (docs/ARCHITECTURE.md
-- §5) from its groups' metas: its active groups are the groups that exist
-- and have not ended, its queued jobs the sum over them of totalJobs -
-- doneJobs - cancelledCount.
-- KEYS[1]: tenant:<t>:active-groups
-- KEYS[2]: tenant:<t>:queued-jobs
-- KEYS[3]: quota-tenants
-- ARGV[1]: key prefix
-- ARGV[2]: tenant
-- ARGV[3..]: groupIds of other groups of the tenant that may be live (queued
--            or started): a live one the set lacks is adopted
-- Returns: the number of wrong entries fixed (set members added or removed,
--   and the counter).
local prefix, tenant = ARGV[1], ARGV[2]
local fixed, sum = 0, 0
local seen = {}
local function check(gid, member)
  seen[gid] = true
  local m = redis.call('HMGET', prefix .. 'group:' .. tenant .. ':' .. gid .. ':meta', 'status', 'totalJobs',
    'doneJobs', 'cancelledCount')
  if m[1] and not TERMINAL_GROUP[m[1]] then
    if not member then
      redis.call('SADD', KEYS[1], gid)
      fixed = fixed + 1
    end
    local r = num(m[2]) - num(m[3]) - num(m[4])
    if r > 0 then sum = sum + r end
  elseif member then
    redis.call('SREM', KEYS[1], gid)
    fixed = fixed + 1
  end
end
for _, gid in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  check(gid, true)
end
for i = 3, #ARGV do
  if not seen[ARGV[i]] then check(ARGV[i], false) end
end
if num(redis.call('GET', KEYS[2])) ~= sum then
  if sum == 0 then
    redis.call('DEL', KEYS[2])
  else
    redis.call('SET', KEYS[2], sum)
  end
  fixed = fixed + 1
end
if sum == 0 and redis.call('SCARD', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[3], tenant)
else
  redis.call('SADD', KEYS[3], tenant)
end
return fixed
