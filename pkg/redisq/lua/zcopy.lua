-- zcopy.lua: sorted sets served from a copy kept in the script, prepended
-- (after lib.lua) to the scripts that change many members of small ZSETs
-- in one call (see scripts.go). Defines only local functions; reads no
-- KEYS or ARGV itself.
--
-- A ZSET with at most copy_max members is read once per call (ZRANGE
-- WITHSCORES) and served from the copy: members are picked, re-scored and
-- removed in the copy, in exactly the ZSET's order (by score, then by
-- member, bytewise), and the changes are written back by zc_flush at the
-- end of the call, one ZADD and one ZREM per ZSET. So a member changed
-- several times in a call, or many members of one ZSET, cost no ZSET read
-- or write each. A larger ZSET is read and written in place.

-- zc_new returns a set of copies of ZSETs of at most copy_max members
-- (< 0: every ZSET is read and written in place).
local function zc_new(copy_max)
  return { sets = {}, max = copy_max }
end

-- zc_bytes_less orders two members as a ZSET does (memcmp, then length).
local function zc_bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- zc_get returns the copy of ZSET key (entries e[lo..hi] = { m, s } in
-- order), or false when key is read and written in place.
local function zc_get(zc, key)
  local z = zc.sets[key]
  if z ~= nil then return z end
  z = false
  if zc.max >= 0 and redis.call('ZCARD', key) <= zc.max then
    local r = redis.call('ZRANGE', key, 0, -1, 'WITHSCORES')
    z = { e = {}, lo = 1, hi = 0, dirty = {} }
    for i = 1, #r, 2 do
      z.hi = z.hi + 1
      z.e[z.hi] = { m = r[i], s = tonumber(r[i + 1]) }
    end
  end
  zc.sets[key] = z
  return z
end

local function zc_find(z, m)
  for i = z.lo, z.hi do
    if z.e[i].m == m then return i end
  end
  return nil
end

-- zc_rem takes member m out of ZSET key (ZREM).
local function zc_rem(zc, key, m)
  local z = zc_get(zc, key)
  if not z then
    redis.call('ZREM', key, m)
    return
  end
  local i = zc_find(z, m)
  if i == nil then return end
  if i == z.lo then
    z.e[i] = nil
    z.lo = z.lo + 1
  else
    for j = i, z.hi - 1 do z.e[j] = z.e[j + 1] end
    z.e[z.hi] = nil
    z.hi = z.hi - 1
  end
  z.dirty[m] = true
end

-- zc_add sets member m's score in ZSET key (ZADD).
local function zc_add(zc, key, m, score)
  local z = zc_get(zc, key)
  if not z then
    redis.call('ZADD', key, fmt(score), m)
    return
  end
  zc_rem(zc, key, m)
  -- from the end: a re-scored member usually goes last
  local i = z.hi
  while i >= z.lo and (score < z.e[i].s or (score == z.e[i].s and zc_bytes_less(m, z.e[i].m))) do
    z.e[i + 1] = z.e[i]
    i = i - 1
  end
  z.e[i + 1] = { m = m, s = score }
  z.hi = z.hi + 1
  z.dirty[m] = true
end

-- zc_score is member m's score in ZSET key, as a string (ZSCORE).
local function zc_score(zc, key, m)
  local z = zc_get(zc, key)
  if not z then return redis.call('ZSCORE', key, m) end
  local i = zc_find(z, m)
  return i and fmt(z.e[i].s)
end

-- zc_empty says whether ZSET key has no member left.
local function zc_empty(zc, key)
  local z = zc_get(zc, key)
  if not z then return redis.call('EXISTS', key) == 0 end
  return z.hi < z.lo
end

-- zc_first is the first member m of ZSET key for which skip[skip_prefix ..
-- m] is not set (skip nil: the first member), or nil. At most nskip
-- members are skipped.
local function zc_first(zc, key, nskip, skip, skip_prefix)
  local z = zc_get(zc, key)
  if not z then
    local r = redis.call('ZRANGE', key, 0, nskip)
    if skip == nil then return r[1] end
    for j = 1, #r do
      if not skip[skip_prefix .. r[j]] then return r[j] end
    end
    return nil
  end
  for i = z.lo, z.hi do
    local m = z.e[i].m
    if skip == nil or not skip[skip_prefix .. m] then return m end
  end
  return nil
end

-- zc_flush writes the copies' changes back to their ZSETs. A ZSET of which
-- many members changed is written anew, in descending order: a small ZSET
-- is a listpack, where changing a member's score finds it and moves it one
-- by one (parsing the scores it passes), while each member added in
-- descending order goes in at the head. The order and scores are the same.
local function zc_flush(zc)
  for key, z in pairs(zc.sets) do
    local ndirty = 0
    if z then
      for _ in pairs(z.dirty) do ndirty = ndirty + 1 end
    end
    if ndirty >= 8 and ndirty * 4 >= z.hi - z.lo + 1 then
      redis.call('DEL', key)
      local add = {}
      for i = z.hi, z.lo, -1 do
        add[#add + 1] = fmt(z.e[i].s)
        add[#add + 1] = z.e[i].m
      end
      for i = 1, #add, BULK do
        redis.call('ZADD', key, unpack(add, i, math.min(i + BULK - 1, #add)))
      end
    elseif ndirty > 0 then
      local score = {}
      for i = z.lo, z.hi do score[z.e[i].m] = z.e[i].s end
      local add, rem = {}, {}
      for m in pairs(z.dirty) do
        if score[m] then
          add[#add + 1] = fmt(score[m])
          add[#add + 1] = m
        else
          rem[#rem + 1] = m
        end
      end
      for i = 1, #rem, BULK do
        redis.call('ZREM', key, unpack(rem, i, math.min(i + BULK - 1, #rem)))
      end
      for i = 1, #add, BULK do
        redis.call('ZADD', key, unpack(add, i, math.min(i + BULK - 1, #add)))
      end
    end
  end
end
