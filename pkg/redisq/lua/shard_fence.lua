-- shard_fence.lua: a shard's fence (docs/ARCHITECTURE.md §11.1), the epoch
-- of the newest lease on the shard, written into the shard by the lease's
-- taker and raised only.
-- KEYS[1]: the shard's fence (P{s<i>}:fence)
-- ARGV[1]: the shard's prefix (P{s<i>}:)
-- ARGV[2]: raise or check
-- ARGV[3]: the epoch (> 0)
-- raise: the fence becomes the epoch unless it is above it already (the
--   lease was taken over since, or the epoch is stale); returns
--   {1, epoch} when the fence is now the epoch, {0, fence} when it is above.
-- check: changes nothing; returns {1, fence} when a call with the epoch may
--   change the shard (lib.lua fence_ok, as the shard's scripts check it),
--   {0, fence} when the epoch is below the fence.
local ok = fence_ok(ARGV[1], ARGV[3])
local cur = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if ARGV[2] == 'raise' then
  if not ok then return {0, cur} end
  local e = tonumber(ARGV[3])
  if e > cur then
    redis.call('SET', KEYS[1], ARGV[3])
  end
  return {1, e}
end
return {ok and 1 or 0, cur}
