-- grant.lua: the cross-shard limiter (docs/ARCHITECTURE.md §11.1). One
-- shard owner's report: its demand now and how much of its last grant it
-- admitted; the reply is its grant for the current aligned period.
--
-- Time is cut into aligned periods (ARGV[2] ms), a whole number of them
-- per aligned window (ARGV[3] ms). At the first report of a period the
-- script allocates the period's slice of what is left of the window (an
-- even share over the periods left, at most what keeps the window's worth
-- of periods ending with this one within the sliding cap) among the live
-- shards (reported in this period or the last), from the demand they
-- reported before this period: all of it to the highest level any of them
-- has demand at (high, normal, low, strictly), split in proportion to
-- their demand there, each type's slice in proportion to their demand for
-- the type. Each shard carries the fraction its integer grants missed or
-- exceeded (its credit) into the next allocation, so shares are exact over
-- time. A shard takes its allocation when it reports in the period (none
-- if it now reports no demand; a type's grant never exceeds its overall
-- grant); what it does not take goes to the shards that have not reported
-- in the period yet, in proportion to their allotments; what no one takes
-- was never granted. Grants count in the window's net; the part of a grant
-- its owner reports unused is taken off again while its window lasts, and
-- when it comes after the period's allocation (which could not count it)
-- it goes at once to the shards that have not reported in the period yet,
-- as an allotment not taken does (the last to report keeps its own). A
-- shard given more than its allotment so pays it back from its next
-- allocation, so that shares stay exact. A shard that reports nothing for
-- a whole period is left out of the next allocation and forgotten.
--
-- KEYS[1]: grants:pool   HASH: period (of the allocation), window, net (jobs
--          granted minus returned in the window), net:<type>, hist (JSON:
--          period -> {n = jobs, t = {type = jobs}} granted minus returned,
--          for the window's worth of periods ending with this one)
-- KEYS[2]: grants:shards HASH: shard -> JSON {seen = period of its last
--          report, d = {high, normal, low}, td = {type = demand}, gp = period
--          of its grant, g = its grant, tg = {type = grant}, c = credit,
--          tc = {type = credit}, ap = period of its allotment, a = its
--          allotment not taken yet {g = jobs, t = {type = jobs}}, x = jobs
--          passed on to it in its period beyond its allotment, paid back
--          from the next allocation, sh = its part of the demand the
--          period shp was allocated by, in millionths}
-- ARGV[1]:  now override in ms ('' = Redis TIME)
-- ARGV[2]:  period in ms
-- ARGV[3]:  window in ms (a multiple of the period)
-- ARGV[4]:  limit: jobs per window
-- ARGV[5]:  sliding cap: most jobs granted minus returned in any window's
--           worth of consecutive periods
-- ARGV[6]:  limited types 'type=limit:sliding cap,...' ('' = none): the
--           static ones, and those of this report alone (learned
--           destination rates, which come and go: a name not in a report
--           keeps its window's count in the pool)
-- ARGV[7]:  shard
-- ARGV[8..10]: the shard's demand at high, normal, low
-- ARGV[11]: jobs of its last grant it admitted
-- ARGV[12]: n, then n pairs: type, the shard's demand for it
-- then m, then m pairs: type, jobs of its last grant of the type it admitted
--          (a type granted and not named: all of it)
-- Returns: { jobs, period, period end ms, now ms, share, type, jobs, ... }
--          with every limited type, in name order; share is the shard's
--          part of the demand the period was allocated by, in millionths
--          (0 when it was not live at the allocation)

local now = now_ms(ARGV[1])
local period_ms = tonumber(ARGV[2])
local window_ms = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local types, tnames = {}, {}
for t, l, c in string.gmatch(ARGV[6], '([^=,]+)=(%d+):(%d+)') do
  types[t] = { limit = tonumber(l), cap = tonumber(c) }
  tnames[#tnames + 1] = t
end
table.sort(tnames)
local shard = ARGV[7]
local dem = { tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]) }
local used = tonumber(ARGV[11])
local ai = 12
local tdem = {}
for _ = 1, tonumber(ARGV[ai]) do
  if types[ARGV[ai + 1]] then tdem[ARGV[ai + 1]] = tonumber(ARGV[ai + 2]) end
  ai = ai + 2
end
ai = ai + 1
local tused = {}
for _ = 1, tonumber(ARGV[ai]) do
  tused[ARGV[ai + 1]] = tonumber(ARGV[ai + 2])
  ai = ai + 2
end

-- the pool: the period allocated last, this window's net counts
local pool = {}
local raw = redis.call('HGETALL', KEYS[1])
for i = 1, #raw, 2 do pool[raw[i]] = raw[i + 1] end

-- periods never go back (a clock set back, a failover to a server whose
-- clock is behind): such a report counts in the period allocated last
local per_window = window_ms / period_ms
local p = math.floor(now / period_ms)
if tonumber(pool.period) and p < tonumber(pool.period) then p = tonumber(pool.period) end
local w = math.floor(p / per_window)
local net, tnet = 0, {}
for _, t in ipairs(tnames) do tnet[t] = 0 end
if tonumber(pool.window) == w then
  net = num(pool.net)
  for _, t in ipairs(tnames) do tnet[t] = num(pool['net:' .. t]) end
end

-- the periods of the last window's worth
local hist = {}
for q, h in pairs(cjson.decode(pool.hist or '{}')) do
  if tonumber(q) > p - per_window then hist[q] = h end
end
local function hist_of(q)
  local k = string.format('%d', q)
  local h = hist[k]
  if h == nil then
    h = { n = 0, t = {} }
    hist[k] = h
  end
  return h
end

-- the shards: all of them for the first report of a period (which
-- allocates it), else the reporting one alone
local allocated = tonumber(pool.period) ~= p
local states, ids = {}, {}
local me
if allocated then
  raw = redis.call('HGETALL', KEYS[2])
  for i = 1, #raw, 2 do
    states[raw[i]] = cjson.decode(raw[i + 1])
    ids[#ids + 1] = raw[i]
  end
  table.sort(ids, function(a, b) return tonumber(a) < tonumber(b) end)
  me = states[shard]
else
  local v = redis.call('HGET', KEYS[2], shard)
  if v then me = cjson.decode(v) end
end
if me == nil then
  me = { seen = -1, d = { 0, 0, 0 }, td = {}, gp = -1, g = 0, tg = {}, c = 0, tc = {} }
end

-- 1. the shard's last grant: what it did not admit flows back while its
-- window lasts
-- (returned: what goes back to this window after the period's allocation,
-- which could not count it, passed on in this period in 3.)
local returned = 0
if me.gp < p then
  local same = math.floor(me.gp / per_window) == w
  local h = nil
  if me.gp > p - per_window then h = hist_of(me.gp) end
  local back = me.g - math.min(math.max(used, 0), me.g)
  if same then
    if not allocated then returned = math.min(back, net) end
    net = math.max(net - back, 0)
  end
  if h then h.n = math.max(h.n - back, 0) end
  for t, g in pairs(me.tg) do
    if tnet[t] then
      local tu = tused[t]
      if tu == nil then tu = g end
      back = g - math.min(math.max(tu, 0), g)
      if same then tnet[t] = math.max(tnet[t] - back, 0) end
      if h then h.t[t] = math.max((h.t[t] or 0) - back, 0) end
    end
  end
  me.g, me.tg = 0, {}
end

-- slice is the period's share of what is left of a window's limit lim
-- (taken: granted minus returned so far): an even share of it over the
-- periods left, at most what keeps the jobs of the window's worth of
-- periods ending with this one within the sliding cap scap. ty names a
-- limited type (nil: all jobs).
local function slice(lim, scap, taken, ty)
  local left = lim - taken
  if left <= 0 then return 0 end
  local recent = 0
  for q = p - per_window + 1, p - 1 do
    local h = hist[string.format('%d', q)]
    if h then
      if ty then recent = recent + (h.t[ty] or 0) else recent = recent + h.n end
    end
  end
  local b = math.ceil(left / (per_window - p % per_window))
  return math.max(math.min(b, left, scap - recent), 0)
end

-- split divides b jobs among the shards k in proportion to wts[k] (sum >
-- 0), each with its credit credits[k] (the fraction of a job its earlier
-- integer grants missed, or got beyond its shares): each shard's target is
-- its share plus its credit, at least 0; the targets are scaled to b,
-- floors first, the jobs left to the largest remainders (ties to the lower
-- shard). owed[k] (nil: none) is what shard k was given beyond its share
-- before: the shares are of b and all that is owed, and each shard's
-- target is its share less what it owes. Returns the grants and the new
-- credits, within [-1, 1].
local function split(b, wts, credits, owed)
  owed = owed or {}
  local total, pot = 0, b
  for k = 1, #wts do
    total = total + wts[k]
    if wts[k] > 0 then pot = pot + (owed[k] or 0) end
  end
  local x, y, ysum = {}, {}, 0
  for k = 1, #wts do
    x[k], y[k] = 0, 0
    if wts[k] > 0 then
      x[k] = pot * wts[k] / total - (owed[k] or 0) + (credits[k] or 0)
      y[k] = math.max(x[k], 0)
    end
    ysum = ysum + y[k]
  end
  if ysum <= 0 then -- every shard owes: plain shares
    for k = 1, #wts do y[k] = b * wts[k] / total end
    ysum = b
  end
  local g, sum, order = {}, 0, {}
  for k = 1, #wts do
    if ysum > 0 then y[k] = y[k] * b / ysum end
    g[k] = math.floor(y[k])
    sum = sum + g[k]
    if wts[k] > 0 then order[#order + 1] = k end
  end
  table.sort(order, function(a, c)
    local fa, fc = y[a] - g[a], y[c] - g[c]
    if fa ~= fc then return fa > fc end
    return a < c
  end)
  for j = 1, #order do
    if sum >= b then break end
    g[order[j]] = g[order[j]] + 1
    sum = sum + 1
  end
  local nc = {}
  for k = 1, #wts do
    nc[k] = 0
    if wts[k] > 0 then nc[k] = math.min(math.max(x[k] - g[k], -1), 1) end
  end
  return g, nc
end

-- 2. the first report of a period allocates it from the demand reported
-- before it
local lapsed = {}
if allocated then
  local alloc = {}
  local live = {}
  for _, s in ipairs(ids) do
    if states[s].seen >= p - 1 then
      live[#live + 1] = s
      alloc[s] = { g = 0, t = {} }
      states[s].a, states[s].ap = alloc[s], p
    elseif s ~= shard then
      lapsed[#lapsed + 1] = s
    end
  end
  local b = slice(limit, cap, net, nil)
  local owed = {}
  for _, s in ipairs(live) do
    owed[s], states[s].x = states[s].x, nil
  end
  for _, s in ipairs(live) do states[s].sh, states[s].shp = 0, p end
  for l = 1, 3 do
    local wts, credits, owes, sum = {}, {}, {}, 0
    for k, s in ipairs(live) do
      wts[k] = states[s].d[l] or 0
      credits[k] = states[s].c or 0
      -- what was passed on to it in the last period beyond its share is
      -- paid back from this one
      owes[k] = owed[s] or 0
      sum = sum + wts[k]
    end
    if sum > 0 then
      local g, nc = split(b, wts, credits, owes)
      for k, s in ipairs(live) do
        alloc[s].g = g[k]
        states[s].c = nc[k]
        states[s].sh = math.floor(wts[k] / sum * 1e6 + 0.5)
      end
      break
    end
  end
  -- a type goes to the shards with an overall grant
  for _, t in ipairs(tnames) do
    local bt = slice(types[t].limit, types[t].cap, tnet[t], t)
    local wts, credits, sum = {}, {}, 0
    for k, s in ipairs(live) do
      wts[k] = 0
      if alloc[s].g > 0 then wts[k] = states[s].td[t] or 0 end
      credits[k] = states[s].tc[t] or 0
      sum = sum + wts[k]
    end
    if sum > 0 then
      local g, nc = split(bt, wts, credits)
      for k, s in ipairs(live) do
        if g[k] > 0 then alloc[s].t[t] = g[k] end
        states[s].tc[t] = nc[k]
      end
    else
      for _, s in ipairs(live) do states[s].tc[t] = nil end
    end
  end
end

-- 3. the shard takes its allocation (once a period: a second report in
-- the same period gets the same grant again). What it does not take, and
-- what it returned of its last grant in this window (1.), go to the shards
-- that have not reported in the period yet, in proportion to their
-- allotments, so that unused grants flow back at once; with none left to
-- report, what it returned is its own to take.
if me.gp ~= p then
  local a = nil
  if me.ap == p then a = me.a end
  local g, tg = 0, {}
  me.a, me.ap = nil, nil
  -- the shards yet to report: their states in hand when this call
  -- allocated the period (and written back with the others below), else
  -- read now
  local others, oids = nil, {}
  local function pending()
    if others then return end
    others = {}
    if not allocated then
      raw = redis.call('HGETALL', KEYS[2])
      for i = 1, #raw, 2 do states[raw[i]] = cjson.decode(raw[i + 1]) end
    end
    for s, st in pairs(states) do
      if s ~= shard and st.ap == p and st.a and st.seen < p then
        others[s] = st
        oids[#oids + 1] = s
      end
    end
    table.sort(oids, function(x, y) return tonumber(x) < tonumber(y) end)
  end
  local rest, trest, any = returned, {}, returned > 0
  if any then pending() end
  if a then
    if any and #oids == 0 then
      a.g, rest = a.g + rest, 0
    end
    if dem[1] + dem[2] + dem[3] > 0 then
      g = math.min(a.g, limit - net)
      for t, n in pairs(a.t) do
        if tnet[t] and (tdem[t] or 0) > 0 then
          local x = math.min(n, g, types[t].limit - tnet[t])
          if x > 0 then
            tg[t] = x
            tnet[t] = tnet[t] + x
            local h = hist_of(p)
            h.t[t] = (h.t[t] or 0) + x
          end
        end
      end
      net = net + g
      local h = hist_of(p)
      h.n = h.n + g
    end
    rest = rest + a.g - g
    for t, n in pairs(a.t) do
      if types[t] and n > (tg[t] or 0) then
        trest[t] = n - (tg[t] or 0)
      end
    end
  end
  any = rest > 0 or next(trest) ~= nil
  if any then
    pending()
    local function pass(r, weight, add)
      local wts, sum = {}, 0
      for k, s in ipairs(oids) do
        wts[k] = weight(others[s])
        sum = sum + wts[k]
      end
      if r <= 0 or sum <= 0 then return end
      local extra = split(r, wts, {})
      for k, s in ipairs(oids) do
        if extra[k] > 0 then add(others[s], extra[k]) end
      end
    end
    pass(rest, function(st) return st.a.g end, function(st, n)
      st.a.g, st.x = st.a.g + n, (st.x or 0) + n
    end)
    for _, t in ipairs(tnames) do
      if trest[t] then
        pass(trest[t], function(st) return st.a.t[t] or 0 end, function(st, n) st.a.t[t] = (st.a.t[t] or 0) + n end)
      end
    end
    if not allocated then
      local args = {}
      for _, s in ipairs(oids) do
        args[#args + 1] = s
        args[#args + 1] = cjson.encode(others[s])
      end
      if #args > 0 then redis.call('HSET', KEYS[2], unpack(args)) end
    end
  end
  me.gp, me.g, me.tg = p, g, tg
end
me.seen, me.d, me.td = p, dem, tdem
states[shard] = me

-- write back: the shards (every live one after an allocation, else this
-- one) and the pool
local ttl = 2 * window_ms + 2 * period_ms
if #lapsed > 0 then redis.call('HDEL', KEYS[2], unpack(lapsed)) end
local args = { shard, cjson.encode(me) }
if allocated then
  for _, s in ipairs(ids) do
    if s ~= shard and states[s].seen >= p - 1 then
      args[#args + 1] = s
      args[#args + 1] = cjson.encode(states[s])
    end
  end
end
redis.call('HSET', KEYS[2], unpack(args))
redis.call('PEXPIRE', KEYS[2], ttl)
local out = { 'period', p, 'window', w, 'net', net, 'hist', cjson.encode(hist) }
for _, t in ipairs(tnames) do
  out[#out + 1] = 'net:' .. t
  out[#out + 1] = tnet[t]
end
if tonumber(pool.window) == w then
  -- names this report does not limit keep their window's count
  for k, v in pairs(pool) do
    local t = string.match(k, '^net:(.+)$')
    if t and not types[t] then
      out[#out + 1] = k
      out[#out + 1] = v
    end
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(out))
redis.call('PEXPIRE', KEYS[1], ttl)

local share = 0
if me.shp == p then share = me.sh or 0 end
local reply = { me.g, p, (p + 1) * period_ms, now, share }
for _, t in ipairs(tnames) do
  reply[#reply + 1] = t
  reply[#reply + 1] = me.tg[t] or 0
end
return reply
