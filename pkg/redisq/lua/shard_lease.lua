-- shard_lease.lua: leases on the logical shards (docs/ARCHITECTURE.md
-- §11.1), spread evenly over the live holders (fetchers), each taken with
-- an epoch raised at every take.
-- KEYS[1]: P{g}:shard-holders ZSET, holder -> heartbeat expiry (ms)
-- KEYS[2]: P{g}:shard-leases HASH, shard -> "<until ms>:<epoch>:<holder>"
-- KEYS[3]: P{g}:shard-epochs HASH, shard -> its last lease's epoch
-- KEYS[4]: P{g}:shard-count STRING, the number of shards
-- ARGV[1]: hold or release
-- ARGV[2]: the holder
-- hold: ARGV[3] now in ms ('' = Redis TIME), ARGV[4] the number of shards
--   N, ARGV[5] how long a heartbeat and a lease last, in ms.
--   Records the holder alive until now + ARGV[5] and forgets holders whose
--   heartbeat expired; computes the holder's share: N over the H live
--   holders, floor(N / H), one more for the first N mod H of them in the
--   order of their ids (Lua's string order); keeps and renews its leases
--   up to its share (the lowest shards), frees the others, and takes free
--   shards (no lease, or one expired), lowest first, up to its share. A
--   take sets the shard's epoch to the greater of its last epoch + 1 and
--   now (ms), so epochs stay above the fences written before even if this
--   key went back to an older state.
--   Returns {H, share, shard, epoch, shard, epoch, ...} for the shards the
--   holder holds; an error when N differs from the stored number.
-- release: ARGV[3..] the shards to give back; none = all the holder's,
--   and the holder leaves the holders (a clean stop). A shard is freed only
--   when the holder's lease is on it. Returns how many were freed.

-- lease_parts splits "<until>:<epoch>:<holder>" (the holder may hold ':').
local function lease_parts(v)
  local a = string.find(v, ':', 1, true)
  local b = string.find(v, ':', a + 1, true)
  return tonumber(string.sub(v, 1, a - 1)), tonumber(string.sub(v, a + 1, b - 1)), string.sub(v, b + 1)
end

local holder = ARGV[2]

if ARGV[1] == 'release' then
  local shards = {}
  if #ARGV > 2 then
    for i = 3, #ARGV do shards[#shards + 1] = ARGV[i] end
  else
    local all = redis.call('HGETALL', KEYS[2])
    for i = 1, #all, 2 do shards[#shards + 1] = all[i] end
    redis.call('ZREM', KEYS[1], holder)
  end
  local freed = 0
  for _, s in ipairs(shards) do
    local v = redis.call('HGET', KEYS[2], s)
    if v then
      local _, _, h = lease_parts(v)
      if h == holder then
        redis.call('HDEL', KEYS[2], s)
        freed = freed + 1
      end
    end
  end
  return freed
end

local now = now_ms(ARGV[3])
local n = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local stored = redis.call('GET', KEYS[4])
if stored and tonumber(stored) ~= n then
  return redis.error_reply('shard leases: ' .. n .. ' shards asked for, the leases are for ' .. stored)
end
if not stored then
  redis.call('SET', KEYS[4], n)
end

local until_ms = now + ttl
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
redis.call('ZADD', KEYS[1], fmt(until_ms), holder)
local live = redis.call('ZRANGE', KEYS[1], 0, -1)
table.sort(live)
local h = #live
local share = math.floor(n / h)
for i, id in ipairs(live) do
  if id == holder then
    if i <= n % h then share = share + 1 end
    break
  end
end

local leases = {}
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do leases[tonumber(all[i])] = all[i + 1] end
local out = {h, share}
local free = {}
local kept = 0
for s = 0, n - 1 do
  local v = leases[s]
  local live_lease = false
  if v then
    local u, epoch, who = lease_parts(v)
    if u > now then
      live_lease = true
      if who == holder then
        if kept < share then
          kept = kept + 1
          redis.call('HSET', KEYS[2], s, fmt(until_ms) .. ':' .. fmt(epoch) .. ':' .. holder)
          out[#out + 1] = s
          out[#out + 1] = epoch
        else
          redis.call('HDEL', KEYS[2], s) -- beyond its share: for the others
        end
      end
    end
  end
  if not live_lease then free[#free + 1] = s end
end
for _, s in ipairs(free) do
  if kept >= share then break end
  local epoch = (tonumber(redis.call('HGET', KEYS[3], s) or '0') or 0) + 1
  if epoch < now then epoch = now end
  redis.call('HSET', KEYS[3], s, fmt(epoch))
  redis.call('HSET', KEYS[2], s, fmt(until_ms) .. ':' .. fmt(epoch) .. ':' .. holder)
  kept = kept + 1
  out[#out + 1] = s
  out[#out + 1] = epoch
end
return out
