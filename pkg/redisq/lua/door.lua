-- door.lua: a tenant's limits at the gateway's door, shared by every
-- gateway replica (docs/ARCHITECTURE.md §9): a request rate and a job rate
-- (GCRA: each key holds the theoretical arrival time, in ms, of the next
-- unit) and a cap on slots held at once (a ZSET of slot id -> lease expiry,
-- so a replica that dies without leaving gives its slots back when their
-- leases run out).
--
-- KEYS[1]: the HASH of tenants' own limits (field "<tenant>:<name>")
-- KEYS[2]: the tenant's request-rate key (GCRA)
-- KEYS[3]: the tenant's job-rate key (GCRA)
-- KEYS[4]: the tenant's slot ZSET (concurrent requests or SSE streams)
-- KEYS[5]: the tenant's byte-rate key (GCRA)
-- ARGV[1]: mode: enter, charge, renew or leave
-- ARGV[2]: tenant
-- ARGV[3]: now override in ms ('' = Redis TIME)
-- ARGV[4]: window in ms (how much of a rate may be spent at once)
--
-- enter: ARGV[5] default requests/s, ARGV[6] default jobs/s, ARGV[7] the
--   slot's limit name ('' = no slot), ARGV[8] its default cap, ARGV[9] slot
--   id, ARGV[10] lease ms, ARGV[11] '1' to refuse a tenant with no job rate
--   or byte rate left, ARGV[12] default bytes/s. Takes the slot only if every limit allows, and one request unless
--   the request rate refuses (a refusal by another limit spends a request).
--   Returns {allowed, refused name, its limit, retry ms, request limit per
--   window, requests left, ms until the window is whole again, slot held}.
-- charge: ARGV[5] default jobs/s, ARGV[6] jobs, ARGV[7] default bytes/s,
--   ARGV[8] bytes. Spends them even past the window (the tenant then waits
--   for the debt to pay off). Returns the ms the larger debt goes past the
--   window (0 within it): how long the caller should wait before reading
--   more of the tenant's jobs.
-- renew: ARGV[5] lease ms, ARGV[6..] slot ids still held.
-- leave: ARGV[5] slot id.
-- A limit of 0 is unlimited; a tenant's own limit replaces the default.

local mode, tenant = ARGV[1], ARGV[2]
local now = now_ms(ARGV[3])
local window = tonumber(ARGV[4])

local function limit_of(name, default)
  if name == '' then return 0 end
  local own = redis.call('HGET', KEYS[1], tenant .. ':' .. name)
  if own then return tonumber(own) end
  return tonumber(default)
end

-- tat returns the key's theoretical arrival time, at least now.
local function tat(key)
  local v = redis.call('GET', key)
  if v then return math.max(tonumber(v), now) end
  return now
end

local function store(key, t)
  redis.call('SET', key, string.format('%.3f', t), 'PX', math.ceil(t - now) + 1000)
end

if mode == 'charge' then
  local wait = 0
  for _, c in ipairs({ { 'jobs', ARGV[5], ARGV[6], KEYS[3] }, { 'bytes', ARGV[7], ARGV[8], KEYS[5] } }) do
    local rate, n = limit_of(c[1], c[2] or '0'), tonumber(c[3] or '0')
    if rate > 0 and n > 0 then
      local t = tat(c[4]) + n * 1000 / rate
      store(c[4], t)
      wait = math.max(wait, math.ceil(t - now - window))
    end
  end
  return wait
end

if mode == 'renew' then
  local lease = tonumber(ARGV[5])
  for i = 6, #ARGV do
    redis.call('ZADD', KEYS[4], 'XX', now + lease, ARGV[i])
  end
  redis.call('PEXPIRE', KEYS[4], lease)
  return 1
end

if mode == 'leave' then
  return redis.call('ZREM', KEYS[4], ARGV[5])
end

-- enter
local req_rate = limit_of('requests', ARGV[5])
local job_rate = limit_of('jobs', ARGV[6])
local slot_name = ARGV[7]
local slot_cap = limit_of(slot_name, ARGV[8])
local lease = tonumber(ARGV[10])

local req_limit, req_left, req_reset, req_tat = 0, 0, 0, nil
if req_rate > 0 then
  local t = req_rate * window / 1000
  local step = 1000 / req_rate
  req_limit = math.floor(t)
  req_tat = tat(KEYS[2]) + step
  if req_tat - now > window then
    local retry = req_tat - window - now
    return {0, 'requests', req_rate, math.ceil(retry), req_limit, 0, math.ceil(req_tat - step - now), 0}
  end
  req_left = math.floor((window - (req_tat - now)) / step)
  req_reset = math.ceil(req_tat - now)
end

-- A request refused by a limit past the request rate has still spent a
-- request: a tenant that keeps asking for a slot it cannot have runs out of
-- requests like one that asks for anything else.
if ARGV[11] == '1' then
  for _, c in ipairs({ { 'jobs', job_rate, KEYS[3] }, { 'bytes', limit_of('bytes', ARGV[12] or '0'), KEYS[5] } }) do
    local rate = c[2]
    if rate > 0 then
      local jt = tat(c[3])
      if jt - now >= window then
        if req_tat then store(KEYS[2], req_tat) end
        return {0, c[1], rate, math.ceil(jt - window - now + 1000 / rate), req_limit, req_left, req_reset, 0}
      end
    end
  end
end

local held = 0
if slot_cap > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  if redis.call('ZCARD', KEYS[4]) >= slot_cap then
    -- When a slot frees is not known: come back in a second.
    if req_tat then store(KEYS[2], req_tat) end
    return {0, slot_name, slot_cap, 1000, req_limit, req_left, req_reset, 0}
  end
  redis.call('ZADD', KEYS[4], now + lease, ARGV[9])
  redis.call('PEXPIRE', KEYS[4], lease)
  held = 1
end
if req_tat then store(KEYS[2], req_tat) end
return {1, '', 0, 0, req_limit, req_left, req_reset, held}
