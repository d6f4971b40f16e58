-- release.lua: moves due jobs out of the non-ready queue under a lease, at
-- most N per call, decrementing their groups' and tenants' non-ready
-- counters in the same script. Each due job is released once, whatever the number of callers.
-- Releases pass the global rate gate (retries are downstream calls too): in
-- paced mode the pacer, in seed mode the fixed window's remaining room.
-- A due job of a paused group, or of a group at its in-flight limit, is not
-- leased: it goes back to the front of its group's list (status QUEUED),
-- where admission finds it once the group is resumed or a slot frees; such
-- a group is not queued (docs/ARCHITECTURE.md §5). Releases pass the
-- per-type rate limits too: a due job whose type has no rate
-- left goes back to the front of its group's list (status QUEUED) and the
-- group is queued, so admission takes it in fair order once the type has
-- rate again; it never holds back due jobs of other types.
-- KEYS[1]: non-ready-queue
-- KEYS[2]: inflight
-- KEYS[3]: rate-limit:pacer
-- ARGV[1]: key prefix
-- ARGV[2]: N
-- ARGV[3]: lease in ms
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: mode (seed|paced)
-- ARGV[6]: global limit per window
-- ARGV[7]: window in ms
-- ARGV[8]: paced burst tolerance in ms
-- ARGV[9]: job TTL in seconds (cancelled jobs)
-- ARGV[10]: rate limit per window of each limited job type or destination,
--           'name=n,...' ('' = none); a job with an explicit destination
--           (its dest) passes its destination's limit too
-- ARGV[11]: ALPHA (a group that gets a rate-held job back is queued)
-- ARGV[12]: READY room per job type, as admit.lua's ARGV[14] ('' = no
--           per-type limit)
-- ARGV[13]: READY's last sequence when ARGV[12] was measured ('' = none),
--           as admit.lua's ARGV[16]: what other admitters handed to READY
--           since is taken from the rooms, and the released jobs reserve
--           theirs, atomically. A due job whose type has no room left goes
--           back to the front of its group's list (status QUEUED) and the
--           group is queued, as for a type's rate limit: admission takes it
--           in fair order when room frees.
-- ARGV[14]: time budget in µs (0 = none): the call stops releasing once it
--           is spent (lib.lua time_budget); the due jobs it did not reach
--           stay in the non-ready queue for the next call.
-- ARGV[15]: '1' = the caller's queue is one shard of several, whose owners
--           admit under grants of the global limits (docs/ARCHITECTURE.md
--           §11.1): every due job (of a group not cancelled) goes back to
--           the front of its group's list (status QUEUED) and the group is
--           queued, so that the shard's owner admits it in fair order within
--           its grant; none is leased here, and no rate gate is passed
-- Returns: { jobs, next, cancelled, requeued, rateHeld, readyHeld, timeUp, regrant } where jobs are
--   the released jobs, a lib.lua lease_entry each; next is the due time (ms) of
--   the earliest job left, or -1 when the queue is empty; cancelled counts
--   jobs of cancelled groups that were counted instead of released; requeued
--   counts the jobs of paused groups or groups at their in-flight limit put
--   back in their groups' lists; rateHeld is a flat list name, jobs of the
--   jobs put back in their groups' lists for their type's (or explicit
--   destination's) rate limit;
--   readyHeld the same for their type's READY room; timeUp is 1 when the
--   time budget stopped the call before the due jobs it took were done;
--   regrant counts the due jobs put back in their groups' lists for ARGV[15].
local prefix = ARGV[1]
local want = tonumber(ARGV[2])
local lease_ms = tonumber(ARGV[3])
local now = now_ms(ARGV[4])
local mode = ARGV[5]
local limit, window_ms, burst_ms = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local job_ttl = tonumber(ARGV[9])
local rooms = ready_rooms(ARGV[12], ARGV[13])
local ready_seq, ready_held = tonumber(ARGV[13] or ''), {}
local reserved = {} -- READY reservations, added before the script returns

if mode ~= 'seed' and mode ~= 'paced' then
  return redis.error_reply('ERR release: mode ' .. tostring(mode) .. ': must be seed or paced')
end
local window = math.floor(now / window_ms)
local gkey = prefix .. 'rate-limit:global:' .. window
local to_grants = ARGV[15] == '1'
if to_grants then
  -- no gate here: the jobs are admitted under the grants
elseif mode == 'paced' then
  local gcount = num(redis.call('GET', gkey))
  local tat = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tat < now then tat = now end
  local interval = window_ms / limit
  local room = limit - gcount
  local paced = math.floor((now + burst_ms - tat) / interval) + 1
  if paced < room then room = paced end
  if room < want then want = room end
  if want < 0 then want = 0 end
else
  local room = limit - num(redis.call('GET', gkey))
  if room < want then want = room end
  if want < 0 then want = 0 end
end

local out, cancelled, released = {}, 0, 0
-- back_to_group puts a due job back at the front of its group's list
-- (status QUEUED), where admission takes it
local function back_to_group(gk, jid, job_key)
  redis.call('LPUSH', jobs_key_of(prefix, gk), jid)
  redis.call('HSET', job_key, 'status', 'QUEUED')
end
local due = {}
if want > 0 then
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, want)
end
local decr, groups = {}, {}
local requeued, regrant = 0, 0
local tstate, rate_held = {}, {}
local tlimits = type_limits_parse(ARGV[10])
local spent, time_up = time_budget(ARGV[14]), 0
for i, mem in ipairs(due) do
  if i % TIME_SLICE == 0 and spent() then
    time_up = 1
    break
  end
  redis.call('ZREM', KEYS[1], mem)
  local gk, jid = split_member(mem)
  decr[gk] = (decr[gk] or 0) + 1
  local job_key = prefix .. 'job:' .. gk .. ':' .. jid
  local g = groups[gk]
  if g == nil then
    g = { meta = meta_key_of(prefix, gk), leased = 0 }
    local m = redis.call('HMGET', g.meta, 'status', 'inFlight', 'maxInFlight')
    g.status, g.inflight, g.max = m[1], num(m[2]), num(m[3])
    groups[gk] = g
  end
  local status = redis.call('HGET', job_key, 'status')
  if status == 'BACKOFF' then
    if g.status == 'CANCELLED' then
      cancel_job(job_key, g.meta, now, job_ttl)
      cancelled = cancelled + 1
    elseif g.status == 'PAUSED' or (g.max > 0 and g.inflight >= g.max) then
      back_to_group(gk, jid, job_key)
      requeued = requeued + 1
    elseif to_grants then
      back_to_group(gk, jid, job_key)
      g.requeue = true
      regrant = regrant + 1
    else
      local tg, dg, hg, ty, dest = false, false, false, nil, nil
      if tlimits and g.status then
        local h = redis.call('HMGET', job_key, 'type', 'dest')
        ty, dest = h[1] or '', h[2]
      elseif rooms then
        ty = redis.call('HGET', job_key, 'type') or ''
      end
      if tlimits and g.status then
        tg = type_gate(tstate, tlimits, prefix, ty, mode, window, window_ms, now)
        if tg and type_wait(tg, now, (window + 1) * window_ms, burst_ms) > 0 then
          hg = tg
        elseif dest then
          -- a job with an explicit destination passes its gate too
          dg = type_gate(tstate, tlimits, prefix, dest, mode, window, window_ms, now)
          if dg and type_wait(dg, now, (window + 1) * window_ms, burst_ms) > 0 then hg = dg end
        end
      end
      if hg then
        -- its type's or destination's rate is used up: back into its
        -- group, held there
        type_hold(hg)
        back_to_group(gk, jid, job_key)
        g.requeue = true
        rate_held[hg.type] = (rate_held[hg.type] or 0) + 1
      elseif g.status and not ready_take(rooms, prefix, ty, now) then
        -- its type's READY room is full: back into its group, held there
        back_to_group(gk, jid, job_key)
        g.requeue = true
        ready_held[ty] = (ready_held[ty] or 0) + 1
      else
        if tg then type_take(tg) end
        if dg then type_take(dg) end
        if ready_seq and ty then ready_reserve_later(reserved, ty, mem, now, lease_ms) end
        lease(out, KEYS[2], job_key, gk, jid, now + lease_ms)
        g.inflight = g.inflight + 1
        g.leased = g.leased + 1
        released = released + 1
      end
    end
  end
end
for _, g in pairs(groups) do
  if g.leased > 0 then
    if g.max > 0 then -- counted only for a group with a limit
      redis.call('HINCRBY', g.meta, 'inFlight', g.leased)
    end
  end
end
for gk, g in pairs(groups) do
  if g.requeue then requeue_group(prefix, gk, now, tonumber(ARGV[11])) end
end
local tdecr = {}
for gk, n in pairs(decr) do
  local tenant = group_parts(gk)
  tdecr[tenant] = (tdecr[tenant] or 0) + n
  local count_key = prefix .. 'congestion:' .. gk .. ':non-ready-count'
  local c = redis.call('DECRBY', count_key, n)
  if c <= 0 then
    -- nothing of the group backs off any more: drop the counter rather
    -- than keep (or, for a group that ended meanwhile, re-create) a key
    -- without a TTL; the next backoff creates it again
    c = 0
    redis.call('DEL', count_key)
  end
  local stats_key = prefix .. 'congestion:' .. gk .. ':stats'
  if redis.call('EXISTS', stats_key) == 1 then
    redis.call('HSET', stats_key, 'currentNonReadyCount', c)
  end
end
for tenant, n in pairs(tdecr) do
  uncount_nonready(prefix, tenant, n)
end
if released > 0 then
  local ttl = math.ceil(window_ms * 2)
  redis.call('INCRBY', gkey, released)
  redis.call('PEXPIRE', gkey, ttl)
end
if mode == 'paced' and released > 0 then
  local ttl = math.ceil(window_ms * 2)
  local tat = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tat < now then tat = now end
  redis.call('SET', KEYS[3], fmt(tat + released * window_ms / limit), 'PX', ttl + math.ceil(burst_ms))
end
if tlimits then type_save(tstate, window_ms, burst_ms) end
ready_reserve_flush(prefix, reserved)

local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_due = -1
if #nxt > 0 then next_due = tonumber(nxt[2]) end
return { out, next_due, cancelled, requeued, flat_pairs(rate_held), flat_pairs(ready_held), time_up, regrant }
