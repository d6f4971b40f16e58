-- admit.lua: takes up to N jobs out of the fair queue in fair order, through
-- the rate gate of the configured mode, and leases them.
-- KEYS[1..3]: fair-queue:high, fair-queue:normal, fair-queue:low
-- KEYS[4]:    fair-queue:vclock
-- KEYS[5]:    inflight
-- KEYS[6]:    active-groups
-- KEYS[7]:    active-groups:seen
-- KEYS[8]:    rate-limit:pacer
-- ARGV[1]:  key prefix (group, job, counter and congestion keys are built from it)
-- ARGV[2]:  N, the most jobs to take (the caller's free READY capacity)
-- ARGV[3]:  ALPHA
-- ARGV[4]:  mode: 'fair' (no rate gate), 'seed' (fixed window, denied jobs
--           parked with backoff) or 'paced' (per-group shares skipped, not
--           parked; global rate paced within the window)
-- ARGV[5]:  global limit per window
-- ARGV[6]:  window length in ms
-- ARGV[7]:  lease in ms (0 = no lease: the job is handed over at once)
-- ARGV[8]:  now override in ms ('' = Redis TIME)
-- ARGV[9]:  active-group staleness timeout in ms
-- ARGV[10]: paced burst tolerance in ms
-- ARGV[11]: base backoff ms (seed mode)
-- ARGV[12]: max backoff ms (seed mode)
-- ARGV[13]: '1' = congestion-aware backoff, '0' = fixed base (seed mode)
-- ARGV[14]: READY room per job type, '*=other,type=room,...' ('' = no
--           per-type limit); a type not listed has the room 'other'. A job
--           whose type has no room is held (its group keeps its place) and
--           never takes the room of other types.
-- Returns: { jobs, parked, wake, started, drained, deniedGlobal, deniedGroup, now, held }
--   jobs:    flat list gid, jid, type, payload, attempt, trace for each
--            admitted job
--   parked:  jobs sent to the non-ready queue (seed mode)
--   wake:    -1 nothing is waiting; -2 jobs wait but their types have no
--            READY room; 0 call again now; > 0 ms until the rate gate has
--            room for several jobs again
--   started: groups that moved CREATED -> RUNNING
--   drained: sealed groups whose last queued job left (-> AGGREGATING)
--   held:    flat list type, groups: job types without room that held the
--            next job of that many groups in this call
local prefix = ARGV[1]
local want = tonumber(ARGV[2])
local alpha = tonumber(ARGV[3])
local mode = ARGV[4]
local limit = tonumber(ARGV[5])
local window_ms = tonumber(ARGV[6])
local lease_ms = tonumber(ARGV[7])
local now = now_ms(ARGV[8])
local stale_ms = tonumber(ARGV[9])
local burst_ms = tonumber(ARGV[10])
local gated = mode ~= 'fair'
local window = math.floor(now / window_ms)
local window_end = (window + 1) * window_ms

local rooms, other_room = nil, 0
if ARGV[14] ~= '' then
  rooms = {}
  for t, r in string.gmatch(ARGV[14], '([^=,]+)=(%d+)') do rooms[t] = tonumber(r) end
  other_room = rooms['*'] or 0
  rooms['*'] = nil
end
local held = {}
-- MAX_BLOCKED bounds how many held groups one call passes by.
local MAX_BLOCKED = 256

local jobs, started, drained, inflight = {}, {}, {}, {}
local admitted, parked, wake = 0, 0, -1
local denied_global, denied_group = 0, 0

local active, gcount, tat, interval = 0, 0, now, 0
local gkey = prefix .. 'rate-limit:global:' .. window
if gated then
  local stale = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now - stale_ms, 'LIMIT', 0, 100)
  if #stale > 0 then
    redis.call('SREM', KEYS[6], unpack(stale))
    redis.call('ZREM', KEYS[7], unpack(stale))
  end
  active = redis.call('SCARD', KEYS[6])
  gcount = num(redis.call('GET', gkey))
  if mode == 'paced' then
    tat = tonumber(redis.call('GET', KEYS[8]) or '0')
    if tat < now then tat = now end
    interval = window_ms / limit
  end
end

local vt = vclock_load(KEYS[4], now)
local groups = {}

-- group loads a group's state once per call; a gated group also "asks for
-- capacity" (joins the active set and refreshes its last-seen time).
local function group(gid)
  local g = groups[gid]
  if g then return g end
  local meta_key = prefix .. 'group:' .. gid .. ':meta'
  local m = redis.call('HMGET', meta_key, 'basePriority', 'totalJobs', 'doneJobs', 'status', 'declaredTotal')
  g = {
    meta = meta_key, jobs = prefix .. 'group:' .. gid .. ':jobs',
    base = num(m[1]), total = num(m[2]), done = num(m[3]), status = m[4], declared = m[5],
    served = 0, wcount = 0,
  }
  g.len = redis.call('LLEN', g.jobs)
  if gated then
    g.rkey = prefix .. 'rate-limit:group:' .. gid .. ':' .. window
    g.wcount = num(redis.call('GET', g.rkey))
    g.wstart = g.wcount
    active = active + redis.call('SADD', KEYS[6], gid)
    redis.call('ZADD', KEYS[7], now, gid)
  end
  groups[gid] = g
  return g
end

-- next_group finds the first group in fair order that may be served. In
-- paced mode a group whose share of this window is used up is skipped
-- (keeping its place) unless share limits are lifted (work-conserving).
-- A level found empty stays empty for the rest of the call: only enqueue
-- adds groups to a level.
-- A group whose next job's type has no READY room is blocked for the rest
-- of the call (it keeps its place); unlike a used-up share, lifting the
-- share limits does not unblock it.
local capped, ncapped, lifted, empty = {}, { 0, 0, 0 }, false, {}
local blocked, nblocked = {}, { 0, 0, 0 }
local function next_group()
  for li = 1, 3 do
    local fq = KEYS[li]
    while not empty[li] do
      local r = redis.call('ZRANGE', fq, 0, ncapped[li])
      if #r == 0 then empty[li] = true end
      local pick = nil
      for j = 1, #r do
        if not capped[r[j]] and not blocked[r[j]] then pick = r[j]; break end
      end
      if pick == nil then break end
      local g = group(pick)
      if g.len <= 0 then
        -- an empty group at the top: remove it and search the same level again
        redis.call('ZREM', fq, pick)
      elseif mode == 'paced' and not lifted and g.wcount >= group_rate(limit, active) then
        capped[pick] = true
        ncapped[li] = ncapped[li] + 1
        denied_group = denied_group + 1
      else
        return pick, g, fq, li
      end
    end
  end
  return nil
end

-- Parked jobs count toward N too, so that a seed-mode call with the limit
-- used up moves at most N jobs, never the whole queue.
while admitted + parked < want do
  if mode == 'paced' then
    if gcount >= limit then
      wake = window_end - now
      denied_global = denied_global + 1
      break
    end
    if tat - now > burst_ms then
      -- come back when half the burst tolerance is free again, so the next
      -- call admits several jobs rather than one
      wake = math.ceil(tat - burst_ms / 2 - now)
      if wake < 1 then wake = 1 end
      break
    end
  end
  if nblocked[1] + nblocked[2] + nblocked[3] >= MAX_BLOCKED then
    break -- bound the call: many groups wait for room of their types
  end
  local gid, g, fq, li = next_group()
  if gid == nil and mode == 'paced' and not lifted and next(capped) ~= nil then
    -- every waiting group has used its share: hand the rest of the window
    -- to them rather than waste it (never beyond the global limit)
    lifted = true
    capped, ncapped = {}, { nblocked[1], nblocked[2], nblocked[3] }
    gid, g, fq, li = next_group()
  end
  if gid == nil then break end

  local jid = redis.call('LPOP', g.jobs)
  local passed, t, d = false, nil, nil
  if jid then
    d = redis.call('HMGET', prefix .. 'job:' .. gid .. ':' .. jid, 'type', 'payload', 'attempt', 'trace')
  end
  if jid and rooms then
    t = d[1] or ''
    if rooms[t] == nil then rooms[t] = other_room end
    if rooms[t] <= 0 then
      -- no room for its type: put the job back and pass the group by
      redis.call('LPUSH', g.jobs, jid)
      passed = true
      blocked[gid] = true
      nblocked[li] = nblocked[li] + 1
      ncapped[li] = ncapped[li] + 1
      held[t] = (held[t] or 0) + 1
    else
      rooms[t] = rooms[t] - 1
    end
  end
  if not passed then
    g.len = g.len - 1
    vt = vt + VCLOCK_STEP
    if g.len > 0 then
      redis.call('ZADD', fq, fmt(fair_score(vt, g.base, g.done, g.total, alpha)), gid)
    else
      redis.call('ZREM', fq, gid)
      if g.declared and g.total >= tonumber(g.declared) and (g.status == 'RUNNING' or g.status == 'CREATED') then
        g.status = 'AGGREGATING'
        redis.call('HSET', g.meta, 'status', 'AGGREGATING')
        drained[#drained + 1] = gid
      end
    end
    if g.status == 'CREATED' then
      g.status = 'RUNNING'
      redis.call('HSET', g.meta, 'status', 'RUNNING', 'startedAt', now)
      started[#started + 1] = gid
    end

    if jid then
      local job_key = prefix .. 'job:' .. gid .. ':' .. jid
      local allowed = true
      if mode == 'seed' then
        -- seed mode: the fixed-window check; a denied job is parked
        local rate = group_rate(limit, active)
        if gcount >= limit then
          allowed = false
          denied_global = denied_global + 1
        elseif g.wcount >= rate then
          allowed = false
          denied_group = denied_group + 1
        end
        if not allowed then
          if t then rooms[t] = rooms[t] + 1 end
          park(prefix, gid, jid, job_key, now, rate, tonumber(ARGV[11]), tonumber(ARGV[12]), ARGV[13] == '1', nil)
          parked = parked + 1
        end
      end
      if allowed then
        local attempt = num(d[3]) + 1
        if lease_ms > 0 then
          redis.call('HSET', job_key, 'status', 'LEASED', 'attempt', attempt)
          inflight[#inflight + 1] = now + lease_ms
          inflight[#inflight + 1] = gid .. ':' .. jid
        else
          redis.call('HSET', job_key, 'status', 'DEQUEUED', 'attempt', attempt)
        end
        jobs[#jobs + 1] = gid
        jobs[#jobs + 1] = jid
        jobs[#jobs + 1] = d[1]
        jobs[#jobs + 1] = d[2]
        jobs[#jobs + 1] = attempt
        jobs[#jobs + 1] = d[4] or ''
        admitted = admitted + 1
        g.served = g.served + 1
        if gated then
          gcount = gcount + 1
          g.wcount = g.wcount + 1
          tat = tat + interval
        end
      end
    end
  end
end

if admitted + parked >= want then
  wake = 0
elseif wake == -1 and next(held) ~= nil then
  wake = -2 -- jobs wait, held only by READY room: call again when it frees
end

redis.call('SET', KEYS[4], fmt(vt))
for i = 1, #inflight, 2000 do
  redis.call('ZADD', KEYS[5], unpack(inflight, i, math.min(i + 1999, #inflight)))
end
if gated then
  local ttl = math.ceil(window_ms * 2)
  local dg = 0
  for gid, g in pairs(groups) do
    if g.wcount > g.wstart then
      redis.call('INCRBY', g.rkey, g.wcount - g.wstart)
      redis.call('PEXPIRE', g.rkey, ttl)
      dg = dg + g.wcount - g.wstart
    end
  end
  if dg > 0 then
    redis.call('INCRBY', gkey, dg)
    redis.call('PEXPIRE', gkey, ttl)
  end
  if mode == 'paced' then
    redis.call('SET', KEYS[8], fmt(tat), 'PX', ttl + math.ceil(burst_ms))
  end
end

local held_list = {}
for t, n in pairs(held) do
  held_list[#held_list + 1] = t
  held_list[#held_list + 1] = n
end
return { jobs, parked, wake, started, drained, denied_global, denied_group, now, held_list }
