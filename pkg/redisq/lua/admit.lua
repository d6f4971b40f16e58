-- admit.lua: takes up to N jobs out of the fair queue in fair order, through
-- the rate gate of the configured mode, and leases them
-- (docs/ARCHITECTURE.md §4, §5).
-- KEYS[1..3]: fair-queue:high, fair-queue:normal, fair-queue:low (ZSETs of
--             tenants, scored by each tenant's virtual time)
-- KEYS[4]:    fair-queue:vclock
-- KEYS[5]:    inflight
-- KEYS[6]:    active-tenants
-- KEYS[7]:    active-tenants:seen
-- KEYS[8]:    rate-limit:pacer
-- KEYS[9]:    tenant-weights
-- KEYS[10]:   fair-queue:tenant-clock
-- KEYS[11]:   stuck-watch
-- KEYS[12]:   schedule:wait (ZSET of groups passed by for their notBefore
--             or sending windows, scored by when to look at them again)
-- ARGV[1]:  key prefix (tenant, group, job, counter and congestion keys are built from it)
-- ARGV[2]:  N, the most jobs to take (the caller's free READY capacity)
-- ARGV[3]:  ALPHA
-- ARGV[4]:  mode: 'seed' (fixed window, denied jobs parked with backoff) or
--           'paced' (per-tenant shares skipped, not parked; global rate
--           paced within the window)
-- ARGV[5]:  global limit per window
-- ARGV[6]:  window length in ms
-- ARGV[7]:  lease in ms (at least 1)
-- ARGV[8]:  now override in ms ('' = Redis TIME)
-- ARGV[9]:  active-tenant staleness timeout in ms
-- ARGV[10]: paced burst tolerance in ms
-- ARGV[11]: base backoff ms (seed mode)
-- ARGV[12]: max backoff ms (seed mode)
-- ARGV[13]: '1' = congestion-aware backoff, '0' = fixed base (seed mode)
-- ARGV[14]: READY room per job type, '*=other,type=room,...' ('' = no
--           per-type limit); a type not listed has the room 'other'. A job
--           whose type has no room is held (its group keeps its place) and
--           never takes the room of other types.
-- ARGV[15]: rate limit per window of each limited job type or
--           destination, 'name=n,...' ('' = none): a job whose type, or
--           explicit destination (its dest), has no rate left in this window
--           (paced: or is ahead of its pacer) is held as for READY room, in
--           seed mode too (not parked); 'n~' marks a learned rate, and
--           'n@m' the most jobs of the name this call admits (a shard's
--           grant of it: lib.lua type_limits_parse)
-- ARGV[16]: READY's last sequence when the rooms of ARGV[14] were measured
--           ('' = none): the call then takes from each type's room the
--           jobs other admitters handed to READY that the measurement does
--           not show, and reserves room for the jobs it leases, atomically
--           (lib.lua's READY room reservations), so concurrent admitters
--           never overfill a type's room together. A measurement older
--           than another admitter's of the same type gives that type no
--           room in this call (held: the caller measures again).
-- ARGV[17]: the key of a guard set by position.lua in the same pipeline
--           ('' = none): when it is missing, SUBMIT's position was not
--           current (a Redis that came back older, before the replay) and
--           nothing is done
-- ARGV[18]: the caller's shard lease epoch ('' or 0 = a caller without
--           shard leases): below the shard's fence (lib.lua fence_ok) the
--           call is refused with STALEEPOCH and nothing is done
--           (docs/ARCHITECTURE.md §11.1)
-- ARGV[19]: the end (ms, Redis time) of the grant period the caller admits
--           in ('' or 0 = none): a call that runs at or after it admits
--           nothing (wake 0: the caller takes its next grant), so a call
--           delayed past its period (a slot moving, a slow network) never
--           spends an old grant in a later window
-- ARGV[20]: the most jobs the shard admits in an aligned window, checked
--           against its window count ('' or 0 = ARGV[5]). A caller
--           admitting at a grant (ARGV[5] is the grant as a rate, which
--           changes from one period to the next) passes the global limit:
--           the grants keep the shards together within it, and a shard
--           whose grant fell below its earlier pace is not held for the
--           rest of the window by what it admitted before
-- Returns: { jobs, parked, wake, started, drained, deniedGlobal, deniedShare, now, held, rateHeld,
--            scheduled }
--   jobs:    the admitted jobs, a lib.lua lease_entry each (gk =
--            "<tenant>:<gid>"; dest '' = its type)
--   parked:  jobs sent to the non-ready queue (seed mode)
--   wake:    -1 nothing is waiting; -2 jobs wait but their types have no
--            READY room; 0 call again now; > 0 ms until the rate gate has
--            room for several jobs again (or, when only jobs of rate-limited
--            types wait, until the first of those types has rate again)
--   started: group keys of the groups that moved CREATED -> RUNNING (they
--            are put on the stuck watch list)
--   drained: group keys of sealed groups whose last queued job left (-> AGGREGATING)
--   held:    flat list type, groups: job types without room that held the
--            next job of that many groups in this call
--   rateHeld: flat list name, groups: the same for job types (or
--            explicit destinations) whose rate limit held the next job of
--            that many groups
--   scheduled: ms until the first group passed by for its schedule is
--            due (-1 = none)
--
-- Order (docs/ARCHITECTURE.md §4): levels strictly high -> normal -> low.
-- Within a level the tenant with the smallest virtual time goes first;
-- serving one of its jobs sets it to max(its time, the level's) + 1/weight
-- (weighted round robin; a tenant that was passed by keeps its place for
-- one serve but earns no credit), and the level's virtual time becomes the
-- larger of the two before the serve (a tenant that becomes non-empty
-- enters there: queue_group). Within the tenant the group with the smallest
-- fair score goes first and is re-scored when served. A tenant whose groups
-- are all held for READY room in this call is passed by and keeps its
-- place; a group that is paused or at its in-flight limit leaves the queue
-- keeping its score (parkedScore) until requeue_group puts it back, and so
-- does a group before its notBefore or outside its sending windows, which
-- waits in KEYS[12] until then (lib.lua sched_until, sched_wake).
local prefix = ARGV[1]
local want = tonumber(ARGV[2])
local alpha = tonumber(ARGV[3])
local mode = ARGV[4]
local limit = tonumber(ARGV[5])
local window_cap = tonumber(ARGV[20] or '') or 0
if window_cap <= 0 then window_cap = limit end
local window_ms = tonumber(ARGV[6])
local lease_ms = tonumber(ARGV[7])
local now = now_ms(ARGV[8])
local stale_ms = tonumber(ARGV[9])
local burst_ms = tonumber(ARGV[10])
if mode ~= 'seed' and mode ~= 'paced' then
  return redis.error_reply('ERR admit: mode ' .. tostring(mode) .. ': must be seed or paced')
end
if not lease_ms or lease_ms < 1 then
  return redis.error_reply('ERR admit: lease ' .. tostring(ARGV[7]) .. ': must be at least 1 ms')
end
if (ARGV[17] or '') ~= '' and redis.call('EXISTS', ARGV[17]) == 0 then
  return redis.error_reply('NOTCURRENT the log position is not current')
end
if not fence_ok(prefix, ARGV[18]) then
  return redis.error_reply('STALEEPOCH the shard lease epoch is below the shard fence')
end
local grant_until = tonumber(ARGV[19] or '') or 0
if grant_until > 0 and now >= grant_until then
  return { {}, 0, 0, {}, {}, 0, 0, now, {}, {}, -1 }
end
local deadline = fmt(now + lease_ms) -- of every lease of this call (lib.lua itoa)
local window = math.floor(now / window_ms)
local window_end = (window + 1) * window_ms

local rooms = ready_rooms(ARGV[14], ARGV[16])
local held = {}
-- per-type rate limits: tlimits (nil = none), their states in this call,
-- the groups each held and the soonest wait among them
local tlimits, tstate, rate_held, type_wake = nil, {}, {}, nil
tlimits = type_limits_parse(ARGV[15])
-- MAX_BLOCKED bounds how many held groups one call passes by.
local MAX_BLOCKED = 256

local jobs, started, drained, inflight = {}, {}, {}, {}
local admitted, parked, wake = 0, 0, -1
local denied_global, denied_share = 0, 0

local tat, interval = now, 0
local gkey = prefix .. 'rate-limit:global:' .. window
local stale = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now - stale_ms, 'LIMIT', 0, 100)
if #stale > 0 then
  redis.call('SREM', KEYS[6], unpack(stale))
  redis.call('ZREM', KEYS[7], unpack(stale))
end
local active = redis.call('SCARD', KEYS[6])
local gcount = num(redis.call('GET', gkey))
if mode == 'paced' then
  tat = tonumber(redis.call('GET', KEYS[8]) or '0')
  if tat < now then tat = now end
  interval = window_ms / limit
end

sched_wake(prefix, KEYS[12], now, alpha)
local vt = vclock_load(KEYS[4], now)

-- tenant loads a tenant's state once per call; a tenant also "asks for
-- capacity" (joins the active set and refreshes its last-seen time).
local tenants = {}
local function tenant(t)
  local s = tenants[t]
  if s then return s end
  s = { weight = tenant_weight(KEYS[9], t) }
  s.rkey = prefix .. 'rate-limit:tenant:' .. t .. ':' .. window
  s.wcount = num(redis.call('GET', s.rkey))
  s.wstart = s.wcount
  active = active + redis.call('SADD', KEYS[6], t)
  redis.call('ZADD', KEYS[7], now, t)
  tenants[t] = s
  return s
end

-- group loads a group's state once per call. NONE is the empty run of a
-- group not yet read (group_job), shared: it is replaced, never written.
local groups = {}
local NONE = {}
local function group(gk)
  local g = groups[gk]
  if g then return g end
  local meta_key = prefix .. 'group:' .. gk .. ':meta'
  local m = redis.call('HMGET', meta_key, 'basePriority', 'totalJobs', 'doneJobs', 'status', 'declaredTotal',
    'inFlight', 'maxInFlight', 'abandonedAt', 'notBefore', 'winAt')
  g = {
    meta = meta_key, jobs = prefix .. 'group:' .. gk .. ':jobs', ids = prefix .. 'group:' .. gk .. ':ids',
    base = num(m[1]), total = num(m[2]), done = num(m[3]), status = m[4], declared = m[5],
    inflight = num(m[6]), max = num(m[7]), leased = 0, abandoned = m[8], left = {},
    sched = (m[9] or m[10]) and sched_until(m[9], m[10], now) or 0,
    queued = queued_key_of(prefix, gk), buf = NONE, recs = NONE, bi = 1, fetch = 1, rdel = {},
  }
  g.len = redis.call('LLEN', g.jobs)
  groups[gk] = g
  return g
end

-- A group's jobs are taken off its list in runs (group_job): its first
-- visit in a call pops one job, and each time the run is used up the next
-- pops twice as many (at most FETCH_MAX, and never more than the call may
-- still take), with their records in one HMGET. So a group served many
-- times in a call costs a few list pops and record reads rather than one of
-- each per job, and a group served once costs what it did. The jobs of a
-- run the call did not take (held, or the call ended) go back to the front
-- of the list in order at the end of the call (group_unread), so the list
-- is as if only the taken jobs had left it; the records of the jobs taken
-- go in one HDEL per group.
local FETCH_MAX = 64

-- group_job returns the next job of group g (gk) not taken in this call:
-- its id and what job_peek reads of it; nil when the list is empty. It
-- stays the next job until group_took.
local function group_job(g, gk, room)
  if g.bi > #g.buf then
    local k = math.max(1, math.min(g.fetch, room, FETCH_MAX))
    g.fetch = math.min(g.fetch * 2, FETCH_MAX)
    g.bi = 1
    if k == 1 then
      -- one job (a group's first visit): no reply tables to read it
      local jid = redis.call('LPOP', g.jobs)
      if not jid then
        g.buf = NONE
        return nil
      end
      g.buf, g.recs = { jid }, { redis.call('HGET', g.queued, jid) }
    else
      g.buf = redis.call('LPOP', g.jobs, k) or NONE
      if #g.buf == 0 then return nil end
      g.recs = redis.call('HMGET', g.queued, unpack(g.buf))
    end
  end
  local jid, d = g.buf[g.bi], g.recs[g.bi]
  if type(d) ~= 'table' then
    -- decoded once, though a held job is read again by a later call
    d = d and queued_decode(d)
    if d then
      d.record = true
    else
      d = job_read(job_key_of(prefix, gk, jid)) or { payload = '' }
    end
    g.recs[g.bi] = d
  end
  return jid, d
end

-- group_took marks group g's next job taken (admitted or parked).
local function group_took(g)
  g.recs[g.bi] = nil
  g.bi = g.bi + 1
end

-- group_unread puts the jobs group g popped and did not take back at the
-- front of its list, in order, and drops the records of the jobs it took.
local function group_unread(g)
  if g.bi <= #g.buf then
    local back = {}
    for i = #g.buf, g.bi, -1 do back[#back + 1] = g.buf[i] end
    redis.call('LPUSH', g.jobs, unpack(back))
  end
  for i = 1, #g.rdel, BULK do
    redis.call('HDEL', g.queued, unpack(g.rdel, i, math.min(i + BULK - 1, #g.rdel)))
  end
end

-- Per level li, tenants passed by in this call: skipped[li] have no group
-- that can be served in this call (each is held for READY room); capped[li]
-- used up their share of the window (paced mode; cleared when caps are
-- lifted). Per tenant ZSET, nheld counts its held groups (held_group).
-- A level found empty stays empty for the rest of the call: this script
-- only takes tenants and groups out.
local skipped, nskipped = { {}, {}, {} }, { 0, 0, 0 }
local capped, ncapped = { {}, {}, {} }, { 0, 0, 0 }
local lifted, empty = false, {}
local held_group, nheld, nblocked = {}, {}, 0
-- tclock[li] is the virtual time of level li (KEYS[10]), never going back.
local tclock = {}
local function level_clock(li)
  if tclock[li] == nil then
    tclock[li] = tonumber(redis.call('HGET', KEYS[10], LEVELS[li]) or '0') or 0
  end
  return tclock[li]
end

-- A tenant's ZSET of waiting groups (P tenant:<t>:groups:<level>) with at
-- most 16 + 4 N groups, and at most 1024 (a call that takes N > 1 jobs
-- reads no much larger ZSET whole), is served from a copy (zcopy.lua), so a
-- group served several times in a call, or many groups of one tenant, cost
-- no ZSET read or write per job; a larger ZSET is read and written in place.
local zq = zc_new(want > 1 and math.min(1024, 16 + 4 * want) or -1)

-- tenant_group finds the first group of tenant t in its ZSET tq that may be
-- served: empty groups leave the queue, and so do paused groups and groups
-- at their in-flight limit, which keep their score (parkedScore).
local function tenant_group(t, tq)
  while true do
    local pick = zc_first(zq, tq, nheld[tq] or 0, nblocked > 0 and held_group or nil, t .. ':')
    if pick == nil then return nil end
    local gk = t .. ':' .. pick
    local g = group(gk)
    if g.len <= 0 then
      zc_rem(zq, tq, pick)
    elseif g.status == 'PAUSED' or (g.max > 0 and g.inflight >= g.max) or g.sched > 0 then
      local pscore = zc_score(zq, tq, pick)
      zc_rem(zq, tq, pick)
      redis.call('HSET', g.meta, 'parkedScore', pscore)
      if g.sched > 0 then redis.call('ZADD', KEYS[12], g.sched, gk) end
    else
      g.tq, g.gid = tq, pick
      return gk, g
    end
  end
end

-- cur is the tenant being served, kept between iterations so that a tenant
-- that stays ahead of the next one in its level (its rival: the first
-- tenant after it that is neither skipped nor capped) is served again
-- without reading the level's ZSET; its score is written back (flush_cur)
-- when another tenant's turn comes and at the end of the call. Order is
-- exactly that of the ZSET: by score, then by name.
local cur = nil
local function flush_cur()
  if cur ~= nil and cur.served then
    redis.call('ZADD', KEYS[cur.li], fmt(cur.tscore), cur.t)
  end
  cur = nil
end

-- next_group finds, in fair order, the first group that may be served. In
-- paced mode a tenant whose share of this window is used up is skipped
-- (keeping its place) unless share limits are lifted (work-conserving).
-- A group whose next job's type has no READY room is passed by for the
-- rest of the call (it keeps its place); unlike a used-up share, lifting
-- the share limits does not unblock it.
local function next_group()
  if cur ~= nil then
    local c = cur
    local ahead = c.rival == nil or c.tscore < c.rival_score or (c.tscore == c.rival_score and c.t < c.rival)
    local full = mode == 'paced' and not lifted and c.s.wcount >= tenant_share(limit, active, c.s.weight)
    if ahead and not full then
      local gk, g = tenant_group(c.t, c.tq)
      if gk then return gk, g, c.li, c.t, c.tscore, c.s end
    end
    flush_cur()
  end
  for li = 1, 3 do
    local fq = KEYS[li]
    while not empty[li] do
      local r = redis.call('ZRANGE', fq, 0, nskipped[li] + ncapped[li] + 1, 'WITHSCORES')
      if #r == 0 then empty[li] = true end
      local t, tscore, rival, rival_score = nil, nil, nil, nil
      for j = 1, #r, 2 do
        if not skipped[li][r[j]] and not capped[li][r[j]] then
          if t == nil then
            t, tscore = r[j], tonumber(r[j + 1])
          else
            rival, rival_score = r[j], tonumber(r[j + 1])
            break
          end
        end
      end
      if t == nil then break end
      local s = tenant(t)
      if mode == 'paced' and not lifted and s.wcount >= tenant_share(limit, active, s.weight) then
        capped[li][t] = true
        ncapped[li] = ncapped[li] + 1
        denied_share = denied_share + 1
      else
        local tq = prefix .. 'tenant:' .. t .. ':groups:' .. LEVELS[li]
        local gk, g = tenant_group(t, tq)
        if gk then
          cur = { li = li, t = t, tscore = tscore, s = s, tq = tq, rival = rival, rival_score = rival_score }
          return gk, g, li, t, tscore, s
        end
        if zc_empty(zq, tq) then
          redis.call('ZREM', fq, t) -- no group left: the tenant leaves the level
        else
          skipped[li][t] = true
          nskipped[li] = nskipped[li] + 1
        end
      end
    end
  end
  return nil
end

local reserved = {} -- READY reservations, added once the loop is done
-- Parked jobs count toward N too, so that a seed-mode call with the limit
-- used up moves at most N jobs, never the whole queue.
while admitted + parked < want do
  if mode == 'paced' then
    if gcount >= window_cap then
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
  if nblocked >= MAX_BLOCKED then
    break -- bound the call: many groups wait for room of their types
  end
  local gk, g, li, t, tscore, s = next_group()
  if gk == nil and mode == 'paced' and not lifted and ncapped[1] + ncapped[2] + ncapped[3] > 0 then
    -- every waiting tenant has used its share: hand the rest of the window
    -- to them rather than waste it (never beyond the global limit)
    lifted = true
    capped, ncapped = { {}, {}, {} }, { 0, 0, 0 }
    gk, g, li, t, tscore, s = next_group()
  end
  if gk == nil then break end

  -- read, not written: a job held below stays the group's next job, and
  -- goes back to the list as it was (group_unread)
  local jid, d = group_job(g, gk, want - admitted - parked)
  local passed, ty, tg, dg = false, nil, false, false
  if jid and rooms then
    ty = d.type or ''
    if not ready_take(rooms, prefix, ty, now) then
      -- no room for its type: the job stays and the group is passed by
      passed = true
      held_group[gk] = true
      nheld[g.tq] = (nheld[g.tq] or 0) + 1
      nblocked = nblocked + 1
      held[ty] = (held[ty] or 0) + 1
    end
  end
  if jid and tlimits and not passed then
    tg = type_gate(tstate, tlimits, prefix, d.type or '', mode, window, window_ms, now)
    local hg = tg -- the gate that holds the job, if one does
    local w = tg and type_wait(tg, now, window_end, burst_ms) or 0
    if w == 0 and d.dest then
      -- a job with an explicit destination passes its destination's gate
      -- too (one namespace with the types: lib.lua type_gate)
      dg = type_gate(tstate, tlimits, prefix, d.dest, mode, window, window_ms, now)
      hg = dg
      w = dg and type_wait(dg, now, window_end, burst_ms) or 0
    end
    if w > 0 then
      -- its type's or destination's rate is used up: held as for READY room
      type_hold(hg)
      if ty then ready_give_back(rooms, ty) end
      passed, tg, dg = true, false, false
      held_group[gk] = true
      nheld[g.tq] = (nheld[g.tq] or 0) + 1
      nblocked = nblocked + 1
      rate_held[hg.type] = (rate_held[hg.type] or 0) + 1
      if type_wake == nil or w < type_wake then type_wake = w end
    end
  end
  if not passed then
    g.len = g.len - 1
    if jid then
      group_took(g)
      local allowed = true
      g.left[#g.left + 1] = jid -- it leaves the list: into the id set
      if mode == 'seed' then
        -- seed mode: the fixed-window check; a denied job is parked
        local rate = tenant_share(limit, active, s.weight)
        if gcount >= window_cap then
          allowed = false
          denied_global = denied_global + 1
        elseif s.wcount >= rate then
          allowed = false
          denied_share = denied_share + 1
        end
        if not allowed then
          if ty then ready_give_back(rooms, ty) end
          job_leave(prefix, gk, jid, d, 'QUEUED', nil, g.rdel)
          park(prefix, gk, jid, job_key_of(prefix, gk, jid), now, rate, tonumber(ARGV[11]), tonumber(ARGV[12]), ARGV[13] == '1', nil)
          parked = parked + 1
        end
      end
      if allowed then
        local attempt = num(d.attempt) + 1
        job_leave(prefix, gk, jid, d, 'LEASED', attempt, g.rdel)
        local mem = gk .. ':' .. jid
        inflight[#inflight + 1] = deadline
        inflight[#inflight + 1] = mem
        if ty and rooms.seq then ready_reserve_later(reserved, ty, mem, now, lease_ms) end
        jobs[#jobs + 1] = lease_entry(mem, d, attempt)
        admitted = admitted + 1
        g.inflight = g.inflight + 1
        g.leased = g.leased + 1
        gcount = gcount + 1
        s.wcount = s.wcount + 1
        tat = tat + interval
        if tg then type_take(tg) end
        if dg then type_take(dg) end
      end
    end

    vt = vt + VCLOCK_STEP
    local left = false
    if g.len > 0 then
      local score = fair_score(vt, g.base, g.done, g.total, alpha)
      if g.max > 0 and g.inflight >= g.max then
        -- at its in-flight limit: out of the queue, keeping its place until
        -- a slot frees (requeue_group)
        zc_rem(zq, g.tq, g.gid)
        redis.call('HSET', g.meta, 'parkedScore', fmt(score))
        left = true
      else
        zc_add(zq, g.tq, g.gid, score)
      end
    else
      zc_rem(zq, g.tq, g.gid)
      left = true
      if g.declared and g.total >= tonumber(g.declared) and (g.status == 'RUNNING' or g.status == 'CREATED') then
        g.status = 'AGGREGATING'
        redis.call('HSET', g.meta, 'status', 'AGGREGATING')
        drained[#drained + 1] = gk
      end
    end
    -- the tenant's virtual time moves on by 1/weight per job served, from
    -- the level's virtual time if it lags behind it (it was passed by
    -- meanwhile: it keeps its place for one serve, no credit); the level's
    -- virtual time is the tenant's time before this serve
    if jid then
      local vl = level_clock(li)
      local lagged = tscore < vl
      if tscore > vl then vl = tscore end
      tclock[li] = vl
      -- two tenants that lagged (both passed by, for a type's READY room
      -- or rate) would both get vl + 1/weight, and ties go by name, always
      -- to the same tenant: the level moves on by a hair after each, so the
      -- next lands just behind (1e-6, far below any 1/weight)
      if lagged then tclock[li] = vl + 1e-6 end
      tscore = vl + 1 / s.weight
    end
    if left and zc_empty(zq, g.tq) then
      redis.call('ZREM', KEYS[li], t)
      cur = nil -- the tenant left the level
    elseif jid then
      cur.tscore, cur.served = tscore, true
    end
    if g.status == 'CREATED' then
      g.status = 'RUNNING'
      redis.call('HSET', g.meta, 'status', 'RUNNING', 'startedAt', now)
      redis.call('ZADD', KEYS[11], 'NX', now, gk)
      started[#started + 1] = gk
    end
  end
end

flush_cur()
zc_flush(zq)

if admitted + parked >= want then
  wake = 0
elseif wake == -1 and next(held) ~= nil then
  wake = -2 -- jobs wait, held only by READY room: call again when it frees
elseif wake == -1 and type_wake then
  wake = type_wake -- jobs wait, held only by their types' rate limits
end

ready_reserve_flush(prefix, reserved)
redis.call('SET', KEYS[4], fmt(vt))
for li, v in pairs(tclock) do
  redis.call('HSET', KEYS[10], LEVELS[li], fmt(v))
end
zadd_pinned_bulk(KEYS[5], inflight)
for _, g in pairs(groups) do
  group_unread(g)
  if g.leased > 0 and g.max > 0 then -- counted only for a group with a limit
    redis.call('HINCRBY', g.meta, 'inFlight', g.leased)
  end
  if #g.left > 0 then
    ids_add(g.ids, g.left)
    if g.abandoned then
      -- an abandoned group's keys have its TTL (abandon.lua): so does the set
      local ttl = redis.call('PTTL', g.meta)
      if ttl > 0 then redis.call('PEXPIRE', g.ids, ttl, 'NX') end
    end
  end
end
local ttl = math.ceil(window_ms * 2)
local dg = 0
for _, s in pairs(tenants) do
  if s.wcount > s.wstart then
    redis.call('INCRBY', s.rkey, s.wcount - s.wstart)
    redis.call('PEXPIRE', s.rkey, ttl)
    dg = dg + s.wcount - s.wstart
  end
end
if dg > 0 then
  redis.call('INCRBY', gkey, dg)
  redis.call('PEXPIRE', gkey, ttl)
end
if mode == 'paced' then
  redis.call('SET', KEYS[8], fmt(tat), 'PX', ttl + math.ceil(burst_ms))
end
type_save(tstate, window_ms, burst_ms)

local first = redis.call('ZRANGE', KEYS[12], 0, 0, 'WITHSCORES')
local scheduled = -1
if #first > 0 then scheduled = math.max(1, tonumber(first[2]) - now) end
return { jobs, parked, wake, started, drained, denied_global, denied_share, now, flat_pairs(held),
  flat_pairs(rate_held), scheduled }
