-- idempotency.lua: an Idempotency-Key's record, taken as a lock by the
-- first request with the key and replaced by its response
-- (docs/api.md#idempotency). Every step but lock applies only while the
-- record is still the caller's lock, so a request whose lock expired (and
-- was taken by another) never extends, deletes or overwrites the other's.
-- KEYS[1] the key's record: a JSON STRING {state, owner?, fp?, status?, ct?, body?}
-- ARGV[1] op: lock | renew | release | complete
-- ARGV[2] owner: the lock's owner id
-- ARGV[3] lock: the lock record; renew: the lock's TTL in ms;
--         complete: the response record
-- ARGV[4] lock: the lock's TTL in ms; complete: the response's TTL in ms
--         (0 = no expiry)
-- Returns 1 when the step applied: the lock was taken (lock), or the
-- record was still the owner's lock; else 0.
local op = ARGV[1]
if op == 'lock' then
  if redis.call('SET', KEYS[1], ARGV[3], 'NX', 'PX', ARGV[4]) then return 1 end
  return 0
end
local v = redis.call('GET', KEYS[1])
if not v or cjson.decode(v).owner ~= ARGV[2] then return 0 end
if op == 'renew' then
  return redis.call('PEXPIRE', KEYS[1], ARGV[3])
elseif op == 'release' then
  return redis.call('DEL', KEYS[1])
elseif op == 'complete' then
  if tonumber(ARGV[4]) > 0 then
    redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
  else
    redis.call('SET', KEYS[1], ARGV[3])
  end
  return 1
end
return redis.error_reply('idempotency.lua: unknown op ' .. tostring(op))
