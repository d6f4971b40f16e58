-- lease.lua: a named lease held by one owner at a time, so that one process
-- among several does a piece of work (a SUBMIT replay, docs/ARCHITECTURE.md
-- §6.7); a holder that dies frees it when its time runs out.
-- KEYS[1]: the lease key (lease:<name>)
-- ARGV[1]: take or release
-- ARGV[2]: owner
-- ARGV[3]: take: how long the lease lasts, in ms
-- take: the lease is taken when it is free or already the owner's (then
--   renewed for ARGV[3]); returns 1, or 0 when another owner holds it.
-- release: the lease is freed when it is the owner's; returns 1 if it was.
local cur = redis.call('GET', KEYS[1])
if ARGV[1] == 'release' then
  if cur == ARGV[2] then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
if cur and cur ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', tonumber(ARGV[3]))
return 1
