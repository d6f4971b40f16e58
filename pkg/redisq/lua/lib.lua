-- lib.lua: helpers prepended to every script (see scripts.go). Defines
-- local functions and constants, and runs one command of its own first
-- (the slot check below); reads no ARGV itself.
--
-- A group is named inside Redis by its group key "<tenant>:<gid>" (tokens
-- never contain ':'); its keys are P group:<gk>:meta|jobs|ids|queued, its
-- jobs' hashes P job:<gk>:<jid> (a queued job that has not left the list
-- yet has a record in P group:<gk>:queued instead: job_leave), and the
-- inflight and non-ready ZSETs hold members "<gk>:<jid>"
-- (docs/ARCHITECTURE.md §3).

-- The slot check, every script's first command. While a Redis Cluster slot
-- moves between primaries (docs/operations.md, "Adding a primary, moving
-- slots"), some of its keys are on one node and some on the other: a
-- script's command on a key its node lacks fails the script, and what the
-- script wrote before that command stays written; run on the importing
-- node, a command on a key not moved yet reads nothing. Scripts read and
-- write keys they build from the prefix, which Redis does not check before
-- the script starts. So every script first names two keys that never
-- exist, in the slot of KEYS[1]: in a slot that is moving, on either node,
-- that fails at once, before any write (redisq retries the call until the
-- slot has moved); in any other slot, or on a single node, it reads
-- nothing. A script thus runs whole or not at all.
if KEYS[1] then
  redis.call('EXISTS', KEYS[1] .. '\0slot-check:1', KEYS[1] .. '\0slot-check:2')
end

-- now_ms returns the override (tests) or Redis TIME in milliseconds. Scripts
-- call it once and reuse the value.
local function now_ms(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Values passed to one command or joined at once are at most BULK: Redis's
-- Lua takes 8,000 on the stack of a C call (LUAI_MAXCSTACK), and the
-- in-process miniredis of `bulkaction dev` (gopher-lua) about 5,000 for the
-- whole call, frames included; table.concat and unpack put every value
-- there.
local BULK = 1000

-- The ZSETs every job passes through (P inflight, P claims and
-- P ready:reserved:<type>) hold a pin: the member ZPIN, scored +inf, and
-- longer than the 64 bytes of Redis's default zset-max-listpack-value. A
-- ZSET of at most 128 short members is a listpack, in which every insert
-- and removal walks the whole set (1.4 µs a member at 50 members, against
-- 0.2 µs in a skiplist); the pin makes the set a skiplist from its first
-- ZADD on, and keeps the key from being deleted when its last job leaves,
-- to come back as a listpack. Every ZADD to these sets carries the pin
-- (zadd_pinned, zadd_pinned_bulk): a set an earlier version wrote becomes
-- a skiplist at its next ZADD. The pin holds no ':', so it is never a
-- member "<gk>:<jid>"; its +inf score keeps it out of every range up to a
-- time, and the readers that count or rank these sets leave it out
-- (ZCOUNT to '(+inf', zfirst_job). (Go: Keys.Inflight.)
local ZPIN = 'skiplist-pin' .. string.rep('.', 68)

-- zadd_pinned adds member at score to the pinned ZSET key.
local function zadd_pinned(key, score, member)
  redis.call('ZADD', key, 'inf', ZPIN, score, member)
end

-- zadd_pinned_bulk adds the score, member pairs of l to the pinned ZSET
-- key, BULK values a command.
local function zadd_pinned_bulk(key, l)
  for i = 1, #l, BULK do
    local hi = math.min(i + BULK - 1, #l)
    if i == 1 then
      redis.call('ZADD', key, 'inf', ZPIN, unpack(l, i, hi))
    else
      redis.call('ZADD', key, unpack(l, i, hi))
    end
  end
end

-- zfirst_job is the first member and its score of the pinned ZSET key
-- (nil when it holds no job).
local function zfirst_job(key)
  local r = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #r == 0 or r[1] == ZPIN then return nil end
  return r[1], tonumber(r[2])
end

-- concat_all joins the strings of t (table.concat(t)) BULK at a time.
local function concat_all(t)
  local n = #t
  if n <= BULK then return table.concat(t) end
  local parts = {}
  for i = 1, n, BULK do
    parts[#parts + 1] = table.concat(t, '', i, math.min(i + BULK - 1, n))
  end
  return concat_all(parts)
end

-- Scripts that go through a number of jobs (cancel.lua, release.lua) also
-- stop at a time budget (docs/ARCHITECTURE.md §6.5, bounded scripts): their
-- work per job is small, but while a fork of Redis is alive (an AOF
-- rewrite, a snapshot) every memory page a script writes first is copied,
-- which can make the same work ten or thirty times as long. They read the
-- clock every TIME_SLICE jobs and stop once the budget is spent, the rest
-- left to the next call.
local TIME_SLICE = 5

-- time_budget returns a function that reports whether us microseconds
-- have passed since time_budget was called (never, for us <= 0).
local function time_budget(us)
  us = tonumber(us) or 0
  if us <= 0 then
    return function() return false end
  end
  local function clock_us()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local stop = clock_us() + us
  return function() return clock_us() >= stop end
end

-- fmt keeps every digit of a score: Lua's tostring keeps only 14.
local function fmt(x)
  return string.format('%.17g', x)
end

local function num(v)
  return tonumber(v or '0') or 0
end

-- A number passed to redis.call is formatted by Redis with '%.17g' (as
-- fmt does), and one joined to a string by Lua with '%.14g': both cost a
-- printf. Scripts that pass the same number for many jobs (a time, a
-- deadline) format it once with fmt, and small counts come from SMALL
-- (itoa), so per job nothing is formatted.
local SMALL = { '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', '16' }
SMALL[0] = '0'
local function itoa(n)
  return SMALL[n] or fmt(n)
end

local LEVELS = { 'high', 'normal', 'low' }

-- The fair queue's virtual clock never goes backwards and advances by a
-- step at each use, so groups touched in the same millisecond still get
-- distinct, increasing scores (ties never fall back to member order).
local VCLOCK_STEP = 0.001
local function vclock_load(key, now)
  local v = tonumber(redis.call('GET', key) or '0')
  if v < now then v = now end
  return v
end

-- fair_score is docs/ARCHITECTURE.md §4: vt + basePriority + ALPHA * done / max(1, total - done).
local function fair_score(vt, base, done, total, alpha)
  local rem = total - done
  if rem < 1 then rem = 1 end
  return vt + base + alpha * done / rem
end

local TERMINAL_JOB = { SUCCESS = true, FAILED = true, CANCELLED = true }
local TERMINAL_GROUP = { COMPLETED = true, CANCELLED = true }

-- group_parts splits a group key "<tenant>:<gid>" into tenant and gid.
local function group_parts(gk)
  local i = string.find(gk, ':', 1, true)
  return string.sub(gk, 1, i - 1), string.sub(gk, i + 1)
end

-- split_member splits "<tenant>:<gid>:<jid>" at its last ':' into the group
-- key and the job id.
local function split_member(m)
  local i = string.find(m, ':[^:]*$')
  return string.sub(m, 1, i - 1), string.sub(m, i + 1)
end

local function meta_key_of(prefix, gk) return prefix .. 'group:' .. gk .. ':meta' end
local function jobs_key_of(prefix, gk) return prefix .. 'group:' .. gk .. ':jobs' end
local function job_key_of(prefix, gk, jid) return prefix .. 'job:' .. gk .. ':' .. jid end
local function queued_key_of(prefix, gk) return prefix .. 'group:' .. gk .. ':queued' end
local function tenant_queue_key(prefix, tenant, level)
  return prefix .. 'tenant:' .. tenant .. ':groups:' .. level
end

-- tenant_weight is a tenant's weight (docs/ARCHITECTURE.md §4, §5): 1..1000, absent = 1.
local function tenant_weight(weights_key, tenant)
  local w = tonumber(redis.call('HGET', weights_key, tenant) or '1') or 1
  if w < 1 then w = 1 elseif w > 1000 then w = 1000 end
  return math.floor(w)
end

-- tenant_share is a tenant's share of the global limit per window
-- (docs/ARCHITECTURE.md §5): max(1, floor(limit / active tenants)) * weight.
-- It is also the rate the congestion-aware backoff divides by.
local function tenant_share(limit, active, weight)
  if active < 1 then active = 1 end
  local r = math.floor(limit / active)
  if r < 1 then r = 1 end
  return r * (weight or 1)
end

-- queue_group is the one way a group enters the fair queue
-- (docs/ARCHITECTURE.md §4): it joins its tenant's ZSET at level with score
-- unless it is already there (ZADD NX: a waiting group keeps its place), and
-- its tenant joins the level's ZSET if it is not there, at the level's
-- virtual time (the virtual time of the tenant served last at that level),
-- so a tenant gets no credit for the time it was absent. Returns true when
-- the group was added.
local function queue_group(prefix, tenant, gid, level, score)
  local tq = tenant_queue_key(prefix, tenant, level)
  if redis.call('ZADD', tq, 'NX', fmt(score), gid) == 0 then
    return false
  end
  if redis.call('ZCARD', tq) > 1 then
    return true -- the tenant waits at the level already (it has other groups there)
  end
  local vt = redis.call('HGET', prefix .. 'fair-queue:tenant-clock', level) or '0'
  redis.call('ZADD', prefix .. 'fair-queue:' .. level, 'NX', vt, tenant)
  return true
end

-- unqueue_group takes a group out of its tenant's ZSET at level, and the
-- tenant out of the level when that was its last group there. Returns the
-- group's score (a string), or false when it was not queued.
local function unqueue_group(prefix, tenant, gid, level)
  local tq = tenant_queue_key(prefix, tenant, level)
  local score = redis.call('ZSCORE', tq, gid)
  if not score then return false end
  redis.call('ZREM', tq, gid)
  if redis.call('EXISTS', tq) == 0 then
    redis.call('ZREM', prefix .. 'fair-queue:' .. level, tenant)
  end
  return score
end

-- requeue_group queues a group that has queued jobs and may be admitted: it
-- exists, is neither paused nor ended, and is below its in-flight limit
-- (maxInFlight, 0 = none). A group taken out of the queue while it had jobs
-- (paused, or at its limit) goes back at the place it kept (parkedScore);
-- any other is scored like a group that becomes non-empty. Returns true when
-- the group was queued by this call. A caller that knows the group's meta
-- (the fields of REQUEUE_FIELDS, as now) and the length of its job list may
-- pass them (m, len) rather than have them read again.
local REQUEUE_FIELDS = { 'status', 'priorityLevel', 'basePriority', 'totalJobs', 'doneJobs', 'inFlight',
  'maxInFlight', 'parkedScore' }
local function requeue_group(prefix, gk, now, alpha, m, len)
  local meta_key = meta_key_of(prefix, gk)
  m = m or redis.call('HMGET', meta_key, unpack(REQUEUE_FIELDS))
  if not m[1] or m[1] == 'PAUSED' or TERMINAL_GROUP[m[1]] then return false end
  local max = num(m[7])
  if max > 0 and num(m[6]) >= max then return false end
  if (len or redis.call('LLEN', jobs_key_of(prefix, gk))) == 0 then
    if m[8] then redis.call('HDEL', meta_key, 'parkedScore') end
    return false
  end
  local tenant, gid = group_parts(gk)
  local level = m[2] or 'normal'
  if m[8] then
    redis.call('HDEL', meta_key, 'parkedScore')
    return queue_group(prefix, tenant, gid, level, tonumber(m[8]))
  end
  if redis.call('ZSCORE', tenant_queue_key(prefix, tenant, level), gid) then
    return false -- waiting already: it keeps its place
  end
  local vkey = prefix .. 'fair-queue:vclock'
  local vt = vclock_load(vkey, now) + VCLOCK_STEP
  if queue_group(prefix, tenant, gid, level, fair_score(vt, num(m[3]), num(m[5]), num(m[4]), alpha)) then
    redis.call('SET', vkey, fmt(vt))
    return true
  end
  return false
end

-- Schedules (docs/ARCHITECTURE.md §5): a group's notBefore (meta
-- notBefore, Unix ms) and the open intervals of its sending windows (meta
-- winAt, 'open,close,...' Unix ms in order, computed by the Go side from
-- the windows and refreshed by the fetchers: redisq schedule.go). The
-- script's clock decides.

-- sched_keep writes a new group's schedule into its meta, and puts a group
-- with windows on the refresh list (schedule:windows, scored by when its
-- winAt is to be computed again). A group created without windows takes
-- its tenant's default ones (tenant-windows), if any, with no interval
-- yet: it is held until a fetcher computes them (at once: refresh due 0).
local function sched_keep(prefix, tenant, gk, meta_key, nb, windows, win_at, refresh_at)
  if nb ~= '' then redis.call('HSET', meta_key, 'notBefore', nb) end
  if windows == '' then
    windows = redis.call('HGET', prefix .. 'tenant-windows', tenant) or ''
    win_at, refresh_at = '0,0', 0
  end
  if windows ~= '' then
    redis.call('HSET', meta_key, 'windows', windows, 'winAt', win_at)
    redis.call('ZADD', prefix .. 'schedule:windows', refresh_at, gk)
  end
end

-- sched_until returns 0 when a group with notBefore nb and open intervals
-- win (either nil or '' = none) may be admitted at now, else when to look
-- at it again: its notBefore, or its next window's opening after that. A
-- winAt with no interval left (not refreshed in time) holds the group and
-- says to look again in a second.
local function sched_until(nb, win, now)
  local t = now
  nb = tonumber(nb or '')
  if nb and nb > t then t = nb end
  if win and win ~= '' then
    local due = nil
    for o, c in string.gmatch(win, '(%d+),(%d+)') do
      o, c = tonumber(o), tonumber(c)
      if c > t then
        due = math.max(o, t)
        break
      end
    end
    t = due or math.max(t, now + 1000)
  end
  if t > now then return t end
  return 0
end

-- sched_wake puts back in their tenants' queues, at the place they kept,
-- the groups passed by for their schedule whose time has come (at most 100
-- a call; the rest at the next).
local function sched_wake(prefix, wait_key, now, alpha)
  local due = redis.call('ZRANGEBYSCORE', wait_key, '-inf', now, 'LIMIT', 0, 100)
  if #due == 0 then return end
  redis.call('ZREM', wait_key, unpack(due))
  for _, gk in ipairs(due) do requeue_group(prefix, gk, now, alpha) end
end

-- inflight_release: n of the group's jobs left the in-flight states
-- (LEASED, RUNNING). Its inFlight goes down by n, never below 0,
-- and a group with an in-flight limit that is below it again is queued if
-- jobs wait (requeue_group). A group whose meta is gone is left alone.
local function inflight_release(prefix, gk, n, now, alpha)
  local meta_key = meta_key_of(prefix, gk)
  local m = redis.call('HMGET', meta_key, 'status', 'inFlight', 'maxInFlight')
  if not m[1] or num(m[3]) == 0 then return end -- counted only for a group with a limit
  local v = num(m[2]) - n
  if v < 0 then v = 0 end
  redis.call('HSET', meta_key, 'inFlight', v)
  if num(m[3]) > 0 and v < num(m[3]) then
    requeue_group(prefix, gk, now, alpha)
  end
end

-- The id set P group:<gk>:ids and the job list P group:<gk>:jobs together
-- hold every job id the group accepted (docs/ARCHITECTURE.md §3.1): a job
-- is in the list from its enqueue until it first leaves it (admitted,
-- parked or cancelled), and its id enters the set then (ids_add), in the
-- same script. A queued job costs no set entry; its record in the group's
-- queued hash (job_leave), or its hash, which lives while the job is not
-- terminal, makes a re-sent id a duplicate (enqueue.lua), and the set does
-- from then on, whether or not the hash has expired since.
local function ids_add(ids_key, ids)
  for i = 1, #ids, BULK do
    redis.call('SADD', ids_key, unpack(ids, i, math.min(i + BULK - 1, #ids)))
  end
end

-- callback_schedule: an ended group with a callback URL (its meta's
-- callbackUrl) gets a pending delivery, due at once: its hash
-- group:<gk>:callback (no TTL while pending; the deliverer gives it one when
-- the delivery ends) and its entry in the callbacks:due ZSET, scored by when
-- it is due (callback_claim.lua, callback_settle.lua). The webhook id is
-- stable for this end of the group (every attempt carries it). Written in
-- the script that ends the group, so no pending callback is lost between
-- the two.
local function callback_schedule(prefix, gk, meta_key)
  local m = redis.call('HMGET', meta_key, 'callbackUrl', 'finishedAt')
  if not m[1] then return end
  local at = num(m[2])
  local key = prefix .. 'group:' .. gk .. ':callback'
  redis.call('DEL', key)
  redis.call('HSET', key, 'url', m[1], 'state', 'pending', 'id', 'msg_' .. redis.sha1hex(gk .. ':' .. at),
    'endedAt', at, 'since', at, 'attempts', 0, 'nextAt', at)
  redis.call('ZADD', prefix .. 'callbacks:due', at, gk)
end

-- group_cleanup drops an ended group's congestion state; its meta, job
-- list, queued records (those a cancel has not gone through yet), id set,
-- progress samples and failures index get the group TTL. (Its tenant leaves
-- the rate limiter's active set when it stops asking for capacity.) A group
-- with a callback URL gets its pending delivery (callback_schedule).
local function group_cleanup(prefix, gk, meta_key, group_ttl)
  callback_schedule(prefix, gk, meta_key)
  -- the non-ready count goes; the statistics (throttles) stay for status,
  -- with the group's TTL
  redis.call('DEL', prefix .. 'congestion:' .. gk .. ':non-ready-count')
  local stats_key = prefix .. 'congestion:' .. gk .. ':stats'
  if redis.call('EXISTS', stats_key) == 1 then
    redis.call('HSET', stats_key, 'currentNonReadyCount', 0)
    if group_ttl > 0 then redis.call('EXPIRE', stats_key, group_ttl) end
  end
  if group_ttl > 0 then
    redis.call('EXPIRE', meta_key, group_ttl)
    redis.call('EXPIRE', prefix .. 'group:' .. gk .. ':jobs', group_ttl)
    redis.call('EXPIRE', queued_key_of(prefix, gk), group_ttl)
    redis.call('EXPIRE', prefix .. 'group:' .. gk .. ':ids', group_ttl)
    redis.call('EXPIRE', prefix .. 'group:' .. gk .. ':progress', group_ttl)
    redis.call('EXPIRE', prefix .. 'group:' .. gk .. ':failures', group_ttl)
  end
end

-- completion_due is the completion rule: the group is sealed (declared is
-- its total; false or nil = not sealed), has not ended, and its done and
-- cancelled jobs reach the declared total. A paused group completes too.
local function completion_due(status, declared, done, cancelled)
  if not declared or TERMINAL_GROUP[status] then
    return false
  end
  return done + cancelled >= declared
end

-- maybe_complete completes a sealed group whose every job is terminal.
-- Returns the new state or false.
local function maybe_complete(prefix, gk, meta_key, now, group_ttl)
  local m = redis.call('HMGET', meta_key, 'status', 'declaredTotal', 'doneJobs', 'cancelledCount')
  if not completion_due(m[1], m[2] and tonumber(m[2]), num(m[3]), num(m[4])) then
    return false
  end
  redis.call('HSET', meta_key, 'status', 'COMPLETED', 'finishedAt', now)
  group_cleanup(prefix, gk, meta_key, group_ttl)
  return 'COMPLETED'
end

-- backoff_ms is the congestion-aware backoff:
-- base + floor(nonReadyCount / max(1, rate)) * 1000, clamped to max.
local function backoff_ms(count, rate, base, max)
  if rate < 1 then rate = 1 end
  local b = base + math.floor(count / rate) * 1000
  if b > max then b = max end
  return b
end

-- tenant_count_key is the count of a tenant's jobs in the non-ready queue.
-- Rate shares are per tenant, so the backoff divides the tenant's count by
-- the tenant's share: a tenant gains nothing by splitting its work into
-- groups.
local function tenant_count_key(prefix, tenant)
  return prefix .. 'tenant:' .. tenant .. ':non-ready-count'
end

-- uncount_nonready takes n jobs of a tenant out of its non-ready count,
-- deleting the counter when it reaches 0.
local function uncount_nonready(prefix, tenant, n)
  local key = tenant_count_key(prefix, tenant)
  if redis.call('DECRBY', key, n) <= 0 then
    redis.call('DEL', key)
  end
end

-- park puts a job of group gk into the non-ready queue. With congestion
-- control (congestion == true) the delay is the congestion-aware backoff
-- from the non-ready count of the group's tenant (after counting this job)
-- and rate, the tenant's share; otherwise the fixed base. retry_after_ms >= 0
-- overrides the delay (a Retry-After from a worker). Returns the delay in ms
-- and the group's non-ready count.
local function park(prefix, gk, jid, job_key, now, rate, base, max, congestion, retry_after_ms)
  local count_key = prefix .. 'congestion:' .. gk .. ':non-ready-count'
  local stats_key = prefix .. 'congestion:' .. gk .. ':stats'
  local count = redis.call('INCR', count_key)
  local tcount = redis.call('INCR', tenant_count_key(prefix, group_parts(gk)))
  local delay = base
  if retry_after_ms ~= nil and retry_after_ms >= 0 then
    delay = math.min(retry_after_ms, max) -- a Retry-After is honoured up to the cap
  elseif congestion then
    delay = backoff_ms(tcount, rate, base, max)
  end
  redis.call('ZADD', prefix .. 'non-ready-queue', now + delay, gk .. ':' .. jid)
  redis.call('HSET', job_key, 'status', 'BACKOFF')
  redis.call('HINCRBY', stats_key, 'totalThrottleCount', 1)
  redis.call('HSET', stats_key, 'lastThrottleAt', now, 'lastBackoffMs', delay,
    'currentNonReadyCount', count, 'rateLimitSpeed', rate)
  return delay, count
end

-- group_reply is the common tail of every group reply:
-- status, declaredTotal (-1 = not sealed), totalJobs, doneJobs,
-- successCount, failedCount, cancelledCount.
local function group_reply(meta_key)
  local m = redis.call('HMGET', meta_key, 'status', 'declaredTotal', 'totalJobs', 'doneJobs',
    'successCount', 'failedCount', 'cancelledCount')
  local declared = -1
  if m[2] then declared = tonumber(m[2]) end
  return { m[1] or 'NONE', declared, num(m[3]), num(m[4]), num(m[5]), num(m[6]), num(m[7]) }
end

-- reply prepends head values to a group reply.
local function reply(meta_key, ...)
  local out = { ... }
  for _, v in ipairs(group_reply(meta_key)) do out[#out + 1] = v end
  return out
end

-- The job hash (docs/ARCHITECTURE.md §3.1) keeps no value longer than
-- Redis's default hash-max-listpack-value (64 bytes), so that it stays a
-- compact listpack rather than a hashtable: its tenant, group and id are in
-- its key, an attempt of 0 is not stored (absent = 0), and the payload is
-- stored in the field 'payload' when it is at most PAYLOAD_CHUNK bytes (or
-- above PAYLOAD_CHUNK * PAYLOAD_CHUNKS_MAX bytes, too large for a listpack
-- anyway), and otherwise cut into fields 'p1', 'p2', ... of PAYLOAD_CHUNK
-- bytes each. An empty payload is not stored. job_read puts it together.
-- (Go: jobhash.go, JobPayload.)
local PAYLOAD_CHUNK = 64
local PAYLOAD_CHUNKS_MAX = 100
-- A failed job's payload stored whole (above PAYLOAD_CHUNK *
-- PAYLOAD_CHUNKS_MAX bytes) keeps its first PAYLOAD_HEAD bytes beside it
-- in the field 'payloadHead' (record.lua), so that a failures listing
-- reads them alone rather than the whole payload (failures.lua).
local PAYLOAD_HEAD = 1024

-- PART names the fields of a payload's first parts, so that per job no
-- field name is put together ('p' .. k) for a payload of up to 4 parts.
local PART = { 'p1', 'p2', 'p3', 'p4' }

-- payload_fields sets t[n + 1], t[n + 2], ... to the field, value pairs
-- that store payload p and returns the new n.
local function payload_fields(t, p, n)
  local size = #p
  if size == 0 then return n end
  if size <= PAYLOAD_CHUNK or size > PAYLOAD_CHUNK * PAYLOAD_CHUNKS_MAX then
    t[n + 1], t[n + 2] = 'payload', p
    return n + 2
  end
  local k = 0
  for i = 1, size, PAYLOAD_CHUNK do
    k = k + 1
    t[n + 1], t[n + 2] = PART[k] or 'p' .. k, string.sub(p, i, i + PAYLOAD_CHUNK - 1)
    n = n + 2
  end
  return n
end

-- job_read reads the fields of a job hash that hand it out or describe it:
-- type, attempt, trace, status and its payload, put together ('' when it
-- has none); nil when the hash does not exist (every job hash has a
-- status). One HMGET reads a payload of up to 4 parts; a larger one takes
-- one more for the others.
local JOB_READ = { 'type', 'attempt', 'trace', 'status', 'payload', 'p1', 'p2', 'p3', 'p4', 'dest' }
-- The fields of the parts past p4, built on first use: lib.lua runs in
-- front of every script, and most calls never read a payload that long.
local JOB_READ_MORE
local function job_read_more()
  if not JOB_READ_MORE then
    JOB_READ_MORE = {}
    for k = 5, PAYLOAD_CHUNKS_MAX do JOB_READ_MORE[#JOB_READ_MORE + 1] = 'p' .. k end
  end
  return JOB_READ_MORE
end
local function job_read(job_key)
  local h = redis.call('HMGET', job_key, unpack(JOB_READ))
  if not h[4] then return nil end
  local p = h[5]
  if not p then
    if h[6] then
      p = h[6] .. (h[7] or '') .. (h[8] or '') .. (h[9] or '')
      if h[9] then
        local more = redis.call('HMGET', job_key, unpack(job_read_more()))
        local parts = { p }
        for i = 1, #more do
          if not more[i] then break end
          parts[#parts + 1] = more[i]
        end
        p = table.concat(parts)
      end
    else
      p = ''
    end
  end
  return { type = h[1] or nil, attempt = h[2] or nil, trace = h[3] or nil, status = h[4], payload = p,
    dest = h[10] or nil }
end

-- A queued job that has not left its group's list yet has no job hash: it
-- is one field of its group's HASH P group:<gk>:queued (docs/ARCHITECTURE.md
-- §3.1), named by its id, whose value is the record
--   <createdAt>:<len(type)>:<len(trace)>:<type><trace><payload>
-- (lengths in bytes, decimal; the payload whole, '' when empty). Its status
-- is QUEUED and its attempt 0: neither is stored. So a queued job costs one
-- field of a hash its group shares rather than a key of its own (the key,
-- its entry in the keyspace, and a field name per value). The first time it
-- leaves the list (admitted or parked by admission, or cancelled),
-- job_leave writes its job hash as above and drops its record (admission
-- reads the job first, job_peek, and a job it holds goes back to the list
-- as it was). A queued job whose hash an earlier version wrote (no record)
-- is read from its hash, like any job that has left the list once: both
-- layouts are read. Enqueue deletes a hash left over from an earlier group
-- of the same name when it writes a job's record, and nothing writes the
-- hash of a job that has a record, so the hash job_leave writes is new.
-- (Go: jobhash.go, ReadJob.)
--
-- A job with an explicit destination (docs/ARCHITECTURE.md §5: one that is
-- not its type) carries it after its trace, its length after the trace's
-- and a '/':
--   <createdAt>:<len(type)>:<len(trace)>/<len(dest)>:<type><trace><dest><payload>
-- so a job without one has the record above, byte for byte, and its hash no
-- 'dest' field.
local function queued_record(created, ty, trace, payload, dest)
  if dest and dest ~= '' then
    return created .. ':' .. #ty .. ':' .. #trace .. '/' .. #dest .. ':' .. ty .. trace .. dest .. payload
  end
  return created .. ':' .. #ty .. ':' .. #trace .. ':' .. ty .. trace .. payload
end

-- queued_decode reads a record into job_read's fields (status QUEUED, no
-- attempt, trace nil when it has none, createdAt a string); nil when r is
-- not a record.
local function queued_decode(r)
  local _, e, c, tl, rl = string.find(r, '^(%d+):(%d+):(%d+):')
  local dl, dest = 0, nil
  if not e then
    _, e, c, tl, rl, dl = string.find(r, '^(%d+):(%d+):(%d+)/(%d+):')
    if not e then return nil end
    dl = tonumber(dl)
  end
  tl, rl = tonumber(tl), tonumber(rl)
  local tr = string.sub(r, e + tl + 1, e + tl + rl)
  if tr == '' then tr = nil end
  if dl > 0 then dest = string.sub(r, e + tl + rl + 1, e + tl + rl + dl) end
  return { type = string.sub(r, e + 1, e + tl), trace = tr, status = 'QUEUED', createdAt = c,
    payload = string.sub(r, e + tl + rl + dl + 1), dest = dest }
end

-- queued_created is the createdAt of a record (a number; 0 when r is not one).
local function queued_created(r)
  return tonumber(string.match(r, '^(%d+):') or '0') or 0
end

-- job_peek reads a queued job of group gk as job_read does, from its record
-- (then d.record is true) or else its hash, and writes nothing; nil when
-- the job has neither.
local function job_peek(prefix, gk, jid)
  local r = redis.call('HGET', queued_key_of(prefix, gk), jid)
  local d = r and queued_decode(r)
  if d then
    d.record = true
    return d
  end
  return job_read(job_key_of(prefix, gk, jid))
end

-- job_leave writes the status (and attempt, unless nil) of a job read by
-- job_peek that leaves its group's list: into its hash, or, for a job with
-- a record, into the hash it gets now with the record's fields, in one
-- HSET, and the record goes.
-- A caller that moves many jobs of a group (admit.lua) passes rdel, a table
-- the ids of dropped records are appended to, and deletes them itself in one
-- HDEL per group.
-- The fields are put in a table made with room for 16 values (the
-- constructor's false values), the most a job with a trace, a destination
-- and a payload of up to 4 parts writes, so that it is never grown value by
-- value; only its first n values are written.
local function job_leave(prefix, gk, jid, d, status, attempt, rdel)
  local job_key = job_key_of(prefix, gk, jid)
  local f = { 'status', status, false, false, false, false, false, false,
    false, false, false, false, false, false, false, false }
  local n = 2
  if attempt then
    f[3], f[4], n = 'attempt', itoa(attempt), 4
  end
  if d.record then
    if rdel then
      rdel[#rdel + 1] = jid
    else
      redis.call('HDEL', queued_key_of(prefix, gk), jid)
    end
    d.record = nil
    f[n + 1], f[n + 2], f[n + 3], f[n + 4] = 'type', d.type, 'createdAt', d.createdAt
    n = n + 4
    if d.trace then
      f[n + 1], f[n + 2], n = 'trace', d.trace, n + 2
    end
    if d.dest then
      f[n + 1], f[n + 2], n = 'dest', d.dest, n + 2
    end
    n = payload_fields(f, d.payload, n)
  end
  redis.call('HSET', job_key, unpack(f, 1, n))
end

-- job_take reads a job that leaves its group's list (job_peek) and gives a
-- job with a record its hash, status QUEUED (job_leave).
local function job_take(prefix, gk, jid)
  local d = job_peek(prefix, gk, jid)
  if d and d.record then job_leave(prefix, gk, jid, d, 'QUEUED') end
  return d
end

-- lease_entry is a leased job as the scripts that hand jobs out reply it
-- (admit, release, reclaim; Go: parseLease), one string of its fields
-- joined by single spaces, the payload last and whole:
--   <attempt> <gk>:<jid> <type> <trace> <dest> <payload>
-- (type, trace and dest '' when none: dest '' = its type), where
-- <gk>:<jid> is mem, the job's member of the inflight set. Tokens, ids,
-- destinations and W3C traceparents hold no space. One value per job, not
-- seven: each value of a reply is a string the client allocates, and the
-- group key went with every job; the client confirms the job with the
-- member it reads here, not one it puts together.
local function lease_entry(mem, d, attempt)
  return attempt .. ' ' .. mem .. ' ' .. (d.type or '') .. ' ' .. (d.trace or '') .. ' ' ..
    (d.dest or '') .. ' ' .. d.payload
end

-- lease hands a job out: attempt + 1, status LEASED, into the inflight set
-- until confirmed. Appends its lease_entry to out.
-- The caller counts the job in its group's inFlight.
local function lease(out, inflight_key, job_key, gk, jid, deadline)
  local d = job_read(job_key) or { payload = '' }
  local attempt = num(d.attempt) + 1
  redis.call('HSET', job_key, 'status', 'LEASED', 'attempt', attempt)
  local mem = gk .. ':' .. jid
  zadd_pinned(inflight_key, deadline, mem)
  out[#out + 1] = lease_entry(mem, d, attempt)
end

-- cancel_job counts a job of a cancelled group as cancelled.
local function cancel_job(job_key, meta_key, now, job_ttl)
  redis.call('HSET', job_key, 'status', 'CANCELLED', 'finishedAt', now)
  if job_ttl > 0 then redis.call('EXPIRE', job_key, job_ttl) end
  redis.call('HINCRBY', meta_key, 'cancelledCount', 1)
end

-- Per-type rate limits (docs/ARCHITECTURE.md §5): at most a type's limit of
-- its jobs per window are admitted or released, beside the global limit. In
-- paced mode a pacer (GCRA) per type also spreads them over the window with
-- the global pacer's burst tolerance. A job whose type has no rate left is
-- held like a type without READY room: it stays (or goes back) in its
-- group's list and the group keeps its place.
--
-- A type's pacer remembers whether the last call that met its jobs held
-- them for its rate ('h' after its value). Its jobs have waited since, so
-- the next call gives it the credit of the gap rather than only the burst
-- tolerance: its pacer goes on from where it stood, at most TYPE_CREDIT of
-- the window back, where a plain GCRA restarts a pacer left behind at now.
-- Calls further apart than the burst tolerance (a fetcher busy handing jobs
-- on, or waking late) so still admit the type at its limit; the window's
-- count keeps every aligned window within it, and no sliding window sees
-- more than limit × (1 + (burst + credit) / window). A type not held last
-- time (idle, or its jobs all taken) restarts at now, as before, and so
-- does one held while over its limit (a limit lowered below what its
-- window took already, or 0 while a destination is stopped): it gets no
-- credit for time it had no rate. A destination's learned rate carries no
-- credit at all: it was learned from what the destination accepted as
-- admitted, and a catch-up burst meets a downstream's token bucket at once.

-- TYPE_CREDIT is the most credit a held type's pacer carries, as a share of
-- the window: 1 / redisq.TypeCreditDivisor. More lets calls further apart
-- keep the rate, but each call's burst reaches the downstream at once.
local TYPE_CREDIT = 0.1

-- LEARNED and CALLMAX key the learned set and the calls' most jobs in a
-- type_limits_parse result (not types: no type contains a '~').
local LEARNED = '~learned'
local CALLMAX = '~callmax'

-- type_limits_parse reads 'type=n,...' (jobs per window; 'n~' marks a
-- destination's learned rate, which carries no credit; a suffix '@m' is the
-- most jobs of it this call admits: a shard's grant of it,
-- docs/ARCHITECTURE.md §11.1); nil when spec is empty (no type has a
-- limit). The learned set is under the key LEARNED, the most jobs per call
-- under CALLMAX.
local function type_limits_parse(spec)
  if spec == nil or spec == '' then return nil end
  local l, learned, callmax = {}, {}, {}
  for t, n, m, x in string.gmatch(spec, '([^=,]+)=(%d+)(~?)@?(%d*)') do
    l[t] = tonumber(n)
    if m == '~' then learned[t] = true end
    if x ~= '' then callmax[t] = tonumber(x) end
  end
  l[LEARNED], l[CALLMAX] = learned, callmax
  return l
end

-- type_gate returns the rate state of type ty in this call, loading it once
-- into cache; false when ty has no limit. Keys: P rate-limit:type:<ty>:<window>
-- (fixed-window count) and P rate-limit:type:<ty>:pacer (paced mode).
-- Destinations and types are one namespace (docs/ARCHITECTURE.md §5): a
-- job with an explicit destination (its dest) passes the gate of its type
-- and then that of its destination, both through this function.
local function type_gate(cache, limits, prefix, ty, mode, window, window_ms, now)
  local s = cache[ty]
  if s ~= nil then return s end
  local lim = limits[ty]
  if lim == nil then
    cache[ty] = false
    return false
  end
  s = { type = ty, limit = lim, ckey = prefix .. 'rate-limit:type:' .. ty .. ':' .. window,
    credit = not limits[LEARNED][ty], left = limits[CALLMAX][ty] }
  s.count = num(redis.call('GET', s.ckey))
  s.start = s.count
  if mode == 'paced' then
    -- the pacer's value: its theoretical arrival time (ms), then 'h' when
    -- the last call that met the type held it
    s.pkey = prefix .. 'rate-limit:type:' .. ty .. ':pacer'
    local tat, held = string.match(redis.call('GET', s.pkey) or '0', '^([^h]*)(h?)$')
    s.tat, s.held, s.held0 = tonumber(tat) or 0, held or '', held or ''
    local from = now
    if s.held == 'h' and s.credit then from = now - window_ms * TYPE_CREDIT end
    if s.tat < from then s.tat = from end
    s.interval = window_ms / lim
  end
  cache[ty] = s
  return s
end

-- type_wait is 0 when type state s lets one more job through now, else the
-- ms until it may: the window's end once its count is used up, or (paced)
-- until half the burst tolerance is free again, as the global pacer's wake;
-- 1 when the call's most jobs of it are taken (the caller's next call
-- brings what comes due of its grant).
local function type_wait(s, now, window_end, burst_ms)
  if s.left and s.left <= 0 then return 1 end
  if s.count >= s.limit then return window_end - now end
  if s.interval and s.tat - now > burst_ms then
    local w = math.ceil(s.tat - burst_ms / 2 - now)
    if w < 1 then w = 1 end
    return w
  end
  return 0
end

-- type_take counts one job of type state s.
local function type_take(s)
  s.count = s.count + 1
  if s.left then s.left = s.left - 1 end
  if s.interval then
    s.tat = s.tat + s.interval
    s.held = ''
  end
end

-- type_hold notes that type state s held a job (type_wait > 0): the next
-- call carries the credit of the gap, unless the type is over its limit.
local function type_hold(s)
  if s.interval then
    s.held = (s.credit and s.limit > 0 and s.count <= s.limit) and 'h' or ''
  end
end

-- type_save writes back the counts and pacers of the types that let jobs
-- through in this call, and the pacers of those held or no longer held.
local function type_save(cache, window_ms, burst_ms)
  local ttl = math.ceil(window_ms * 2)
  for _, s in pairs(cache) do
    if s and s.count > s.start then
      redis.call('INCRBY', s.ckey, s.count - s.start)
      redis.call('PEXPIRE', s.ckey, ttl)
    end
    if s and s.interval and (s.count > s.start or s.held ~= s.held0) then
      redis.call('SET', s.pkey, fmt(s.tat) .. s.held, 'PX', ttl + math.ceil(burst_ms))
    end
  end
end

-- Tenant quotas (docs/ARCHITECTURE.md §5). A tenant's active groups are
-- its groups that exist and have not ended: the SET P tenant:<t>:active-groups
-- of their groupIds. Its queued jobs are the jobs of those groups that are
-- not terminal yet: P tenant:<t>:queued-jobs is the sum over the set of
-- totalJobs - doneJobs - cancelledCount. The scripts that create a group,
-- add jobs, make a job of a counted group terminal or end a group keep both
-- (a cancelled group's jobs still running stop counting when it ends). A
-- group is counted from its creation; one created before the quotas
-- existed is adopted by enqueue or the counter correction.
local function quota_groups_key(prefix, tenant)
  return prefix .. 'tenant:' .. tenant .. ':active-groups'
end
local function quota_jobs_key(prefix, tenant)
  return prefix .. 'tenant:' .. tenant .. ':queued-jobs'
end

-- quota_limit is a tenant's limit of one quota ('queued' or 'groups'): its
-- override in P tenant-quotas (field "<tenant>:<name>"), else the default;
-- 0 means unlimited.
local function quota_limit(prefix, tenant, name, default)
  local v = tonumber(redis.call('HGET', prefix .. 'tenant-quotas', tenant .. ':' .. name) or '')
  if v == nil then v = default end
  if v < 0 then v = 0 end
  return v
end

-- quota_limits is quota_limit of both quotas, queued jobs and active
-- groups, in one read.
local function quota_limits(prefix, tenant, default_queued, default_groups)
  local r = redis.call('HMGET', prefix .. 'tenant-quotas', tenant .. ':queued', tenant .. ':groups')
  local q, g = tonumber(r[1] or ''), tonumber(r[2] or '')
  if q == nil then q = default_queued end
  if g == nil then g = default_groups end
  return math.max(q, 0), math.max(g, 0)
end

-- quota_counted reports whether a group counts among its tenant's active groups.
local function quota_counted(prefix, tenant, gid)
  return redis.call('SISMEMBER', quota_groups_key(prefix, tenant), gid) == 1
end

-- quota_open counts a group that exists and has not ended among its
-- tenant's active groups (the tenant is listed for the counter correction).
local function quota_open(prefix, tenant, gid)
  redis.call('SADD', quota_groups_key(prefix, tenant), gid)
  redis.call('SADD', prefix .. 'quota-tenants', tenant)
end

-- quota_count adds n jobs to a tenant's queued jobs.
local function quota_count(prefix, tenant, n)
  if n > 0 then
    redis.call('INCRBY', quota_jobs_key(prefix, tenant), n)
  end
end

-- quota_uncount takes n jobs out of a tenant's queued jobs, deleting the
-- counter when it reaches 0.
local function quota_uncount(prefix, tenant, n)
  if n <= 0 then return end
  local key = quota_jobs_key(prefix, tenant)
  if redis.call('DECRBY', key, n) <= 0 then
    redis.call('DEL', key)
  end
end

-- quota_close: a counted group ended; it leaves its tenant's active groups,
-- and its remaining jobs (not terminal yet) leave its queued jobs.
local function quota_close(prefix, tenant, gid, remaining)
  if redis.call('SREM', quota_groups_key(prefix, tenant), gid) == 1 then
    quota_uncount(prefix, tenant, remaining)
  end
end

-- quota_end is quota_close with the remaining jobs read from the group's
-- meta: call it before the meta counts the jobs the end cancels.
local function quota_end(prefix, tenant, gid, meta_key)
  local c = redis.call('HMGET', meta_key, 'totalJobs', 'doneJobs', 'cancelledCount')
  quota_close(prefix, tenant, gid, num(c[1]) - num(c[2]) - num(c[3]))
end

-- index_group lists a group in the group indexes (docs/ARCHITECTURE.md §9):
-- every group by creation time (member "<tenant>:<gid>"), and each
-- tenant's (member gid). Readers drop members whose meta has expired.
local function index_group(prefix, tenant, gid, now)
  redis.call('ZADD', prefix .. 'group-index', 'NX', now, tenant .. ':' .. gid)
  redis.call('ZADD', prefix .. 'tenant:' .. tenant .. ':group-index', 'NX', now, gid)
end

-- READY room reservations (docs/ARCHITECTURE.md §5): admitters measure
-- READY's messages per type with the stream's last sequence L, and the
-- scripts that hand jobs to READY count, atomically with the hand-out, the
-- jobs other admitters handed out that the measurement cannot show: those
-- not published yet, and those published after L. P ready:reserved:<type>
-- (ZSET, member "<gk>:<jid>") scores a job by its message's READY sequence
-- once its publish is confirmed, or by RESERVED_UNPUBLISHED + the time its
-- reservation lapses while it is not (its lease deadline plus one lease,
-- so a reclaim renews it first). P ready:floor (HASH type -> sequence) is
-- how far published entries were pruned: a measurement older than that
-- cannot be completed, and gets no room for the type (it measures again).
local RESERVED_UNPUBLISHED = 4503599627370496 -- 2^52, above any sequence

local function reserved_key(prefix, ty) return prefix .. 'ready:reserved:' .. ty end

-- ready_reserve counts a job handed to READY (leased until now + lease_ms)
-- against its type's room until its publish is confirmed.
local function ready_reserve(prefix, ty, member, now, lease_ms)
  zadd_pinned(reserved_key(prefix, ty), RESERVED_UNPUBLISHED + now + 2 * lease_ms, member)
end

-- ready_reserve_later is ready_reserve for a script that reserves many
-- jobs: it gathers them by type in pending, and ready_reserve_flush adds
-- them with one ZADD per type (and 2,000 jobs) before the script returns.
-- A script checks a type's room (ready_pending) before it reserves any job
-- of that type, so the reservations of the same call need not be in the
-- set yet.
-- The last score ready_reserve_later formatted (lib.lua runs anew with
-- every call, so these start empty in each).
local reserve_at, reserve_at_s
local function ready_reserve_later(pending, ty, member, now, lease_ms)
  local l = pending[ty]
  if l == nil then
    l = {}
    pending[ty] = l
  end
  local at = RESERVED_UNPUBLISHED + now + 2 * lease_ms
  if reserve_at ~= at then
    reserve_at, reserve_at_s = at, fmt(at) -- formatted once (itoa)
  end
  l[#l + 1] = reserve_at_s
  l[#l + 1] = member
end

local function ready_reserve_flush(prefix, pending)
  for ty, l in pairs(pending) do
    zadd_pinned_bulk(reserved_key(prefix, ty), l)
  end
end

-- ready_pending returns how many of type ty's messages a measurement at
-- sequence seq does not show (see above), or false when the measurement is
-- older than the pruned entries. It prunes the entries the measurement
-- shows and the lapsed reservations.
local function ready_pending(prefix, ty, seq, now)
  local key = reserved_key(prefix, ty)
  local floor = tonumber(redis.call('HGET', prefix .. 'ready:floor', ty) or '0')
  if seq < floor then return false end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', seq)
  redis.call('ZREMRANGEBYSCORE', key, RESERVED_UNPUBLISHED, RESERVED_UNPUBLISHED + now)
  if seq > floor then redis.call('HSET', prefix .. 'ready:floor', ty, seq) end
  return redis.call('ZCOUNT', key, '-inf', '(+inf') -- not the pin
end

-- READY's room per job type, as admission and release take it: spec is
-- '*=other,type=room,...' (a type not listed has the room other; '' or nil:
-- no per-type limit, and ready_rooms returns nil), seq READY's last
-- sequence when the rooms were measured ('' or nil: none). The first job
-- of a type taken against a measurement with a sequence also takes off
-- what other admitters handed to READY since (ready_pending), or the whole
-- room when the measurement is older than the pruned entries.
local function ready_rooms(spec, seq)
  if spec == nil or spec == '' then return nil end
  local by = {}
  for t, r in string.gmatch(spec, '([^=,]+)=(%d+)') do by[t] = tonumber(r) end
  local other = by['*'] or 0
  by['*'] = nil
  return { by = by, other = other, seq = tonumber(seq or ''), checked = {} }
end

-- ready_take says whether a job of type ty may go to READY now, and takes
-- its room when it may (rooms nil: it may, and nothing is taken).
local function ready_take(rooms, prefix, ty, now)
  if rooms == nil then return true end
  local by = rooms.by
  if by[ty] == nil then by[ty] = rooms.other end
  if rooms.seq and not rooms.checked[ty] and by[ty] > 0 then
    rooms.checked[ty] = true
    local pending = ready_pending(prefix, ty, rooms.seq, now)
    if pending == false then by[ty] = 0 else by[ty] = by[ty] - pending end
  end
  if by[ty] <= 0 then return false end
  by[ty] = by[ty] - 1
  return true
end

-- ready_give_back returns the room a job of type ty took (ready_take) and
-- then did not use.
local function ready_give_back(rooms, ty)
  if rooms ~= nil then rooms.by[ty] = rooms.by[ty] + 1 end
end

-- group_revive brings an abandoned group back to life (abandon.lua marked
-- it with abandonedAt and gave its keys the group TTL): its keys lose their
-- TTLs (PERSIST), so it cannot expire mid-life; so do the hashes of its jobs
-- that have not ended (a finished job keeps its JOB_TTL). abandonedAt is
-- cleared, the revival counts as activity (lastProgressAt, which the idle
-- check reads) and the group is watched again (stuck-watch), so a group
-- that then idles for the idle TTL is abandoned again. It goes through the
-- group's whole job list and id set once (ids_add: between them they hold
-- every job of the group): revivals are rare (a group idle for days).
local function group_revive(prefix, gk, meta_key, now)
  redis.call('HDEL', meta_key, 'abandonedAt')
  redis.call('HSET', meta_key, 'lastProgressAt', now)
  local g = prefix .. 'group:' .. gk .. ':'
  for _, k in ipairs({ meta_key, g .. 'jobs', g .. 'queued', g .. 'ids', g .. 'progress', g .. 'failures',
    prefix .. 'congestion:' .. gk .. ':stats', prefix .. 'congestion:' .. gk .. ':non-ready-count' }) do
    redis.call('PERSIST', k)
  end
  local function persist(jid)
    local jk = job_key_of(prefix, gk, jid)
    local st = redis.call('HGET', jk, 'status')
    if st and not TERMINAL_JOB[st] then redis.call('PERSIST', jk) end
  end
  local n = redis.call('LLEN', g .. 'jobs')
  for i = 0, n - 1, 1000 do
    for _, jid in ipairs(redis.call('LRANGE', g .. 'jobs', i, i + 999)) do persist(jid) end
  end
  local cursor = '0'
  repeat
    local r = redis.call('SSCAN', g .. 'ids', cursor, 'COUNT', 1000)
    cursor = r[1]
    for _, jid in ipairs(r[2]) do persist(jid) end
  until cursor == '0'
  redis.call('ZADD', prefix .. 'stuck-watch', 'NX', now, gk)
end

-- flat_pairs returns a map as a flat list k1, v1, k2, v2, … (a script's
-- reply cannot carry a map).
local function flat_pairs(t)
  local out = {}
  for k, v in pairs(t) do
    out[#out + 1] = k
    out[#out + 1] = v
  end
  return out
end

-- fence_ok reports whether a call carrying a shard lease's epoch may change
-- the shard under prefix (docs/ARCHITECTURE.md §11.1): epoch 0 (or '') is
-- a caller without shard leases (one shard, no fencing) and always may;
-- any other epoch may while it is not below the shard's fence (P fence,
-- raised by the lease's taker, shard_fence.lua), so a holder whose lease
-- was taken over changes nothing.
local function fence_ok(prefix, epoch)
  local e = tonumber(epoch) or 0
  if e == 0 then return true end
  return e >= (tonumber(redis.call('GET', prefix .. 'fence') or '0') or 0)
end
