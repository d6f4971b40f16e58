-- lib.lua: helpers prepended to every script (see scripts.go). Defines only
-- local functions; reads no KEYS or ARGV itself.

-- now_ms returns the override (tests) or Redis TIME in milliseconds. Scripts
-- call it once and reuse the value.
local function now_ms(override)
  if override ~= nil and override ~= '' then
    return tonumber(override)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- fmt keeps every digit of a score: Lua's tostring keeps only 14.
local function fmt(x)
  return string.format('%.17g', x)
end

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

local function num(v)
  return tonumber(v or '0') or 0
end

-- group_cleanup removes an ended group from the rate limiter's active set and
-- drops its congestion state; meta and job hashes get their TTLs.
local function group_cleanup(prefix, gid, meta_key, group_ttl)
  redis.call('SREM', prefix .. 'active-groups', gid)
  redis.call('ZREM', prefix .. 'active-groups:seen', gid)
  redis.call('DEL', prefix .. 'congestion:' .. gid .. ':non-ready-count',
    prefix .. 'congestion:' .. gid .. ':stats')
  if group_ttl > 0 then
    redis.call('EXPIRE', meta_key, group_ttl)
    redis.call('EXPIRE', prefix .. 'group:' .. gid .. ':jobs', group_ttl)
  end
end

-- completion_due is the completion rule: the group is sealed (declared is
-- its total; false or nil = not sealed), has not ended, and its done and
-- cancelled jobs reach the declared total.
local function completion_due(status, declared, done, cancelled)
  if not declared or TERMINAL_GROUP[status] then
    return false
  end
  return done + cancelled >= declared
end

-- maybe_complete completes a sealed group whose every job is terminal.
-- Returns the new state or false.
local function maybe_complete(prefix, gid, meta_key, now, group_ttl)
  local m = redis.call('HMGET', meta_key, 'status', 'declaredTotal', 'doneJobs', 'cancelledCount')
  if not completion_due(m[1], m[2] and tonumber(m[2]), num(m[3]), num(m[4])) then
    return false
  end
  redis.call('HSET', meta_key, 'status', 'COMPLETED', 'finishedAt', now)
  group_cleanup(prefix, gid, meta_key, group_ttl)
  return 'COMPLETED'
end

-- backoff_ms is the congestion-aware backoff:
-- base + floor(nonReadyCount / max(1, perGroupRate)) * 1000, clamped to max.
local function backoff_ms(count, rate, base, max)
  if rate < 1 then rate = 1 end
  local b = base + math.floor(count / rate) * 1000
  if b > max then b = max end
  return b
end

-- group_rate is a group's share of the global limit: max(1, floor(global / active)).
local function group_rate(limit, active)
  if active < 1 then active = 1 end
  local r = math.floor(limit / active)
  if r < 1 then r = 1 end
  return r
end

-- park puts a job of gid into the non-ready queue. With congestion control
-- (congestion == true) the delay is the congestion-aware backoff from the group's
-- non-ready count (after counting this job); otherwise the fixed base.
-- retry_after_ms >= 0 overrides the delay (a Retry-After from a worker).
-- Returns the delay in ms and the group's non-ready count.
local function park(prefix, gid, jid, job_key, now, rate, base, max, congestion, retry_after_ms)
  local count_key = prefix .. 'congestion:' .. gid .. ':non-ready-count'
  local stats_key = prefix .. 'congestion:' .. gid .. ':stats'
  local count = redis.call('INCR', count_key)
  local delay = base
  if retry_after_ms ~= nil and retry_after_ms >= 0 then
    delay = math.min(retry_after_ms, max) -- a Retry-After is honoured up to the cap
  elseif congestion then
    delay = backoff_ms(count, rate, base, max)
  end
  redis.call('ZADD', prefix .. 'non-ready-queue', now + delay, gid .. ':' .. jid)
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

-- lease hands a job out: attempt + 1, status LEASED, into the inflight set
-- until confirmed. Appends gid, jid, type, payload, attempt, trace to out.
local function lease(out, inflight_key, job_key, gid, jid, deadline)
  local d = redis.call('HMGET', job_key, 'type', 'payload', 'attempt', 'trace')
  local attempt = num(d[3]) + 1
  redis.call('HSET', job_key, 'status', 'LEASED', 'attempt', attempt)
  redis.call('ZADD', inflight_key, deadline, gid .. ':' .. jid)
  for _, v in ipairs({ gid, jid, d[1], d[2], attempt, d[4] or '' }) do
    out[#out + 1] = v
  end
end

-- split_member splits "<gid>:<jid>" (ids never contain ':').
local function split_member(m)
  local i = string.find(m, ':', 1, true)
  return string.sub(m, 1, i - 1), string.sub(m, i + 1)
end

-- cancel_job counts a job of a cancelled group as cancelled.
local function cancel_job(prefix, gid, job_key, meta_key, now, job_ttl)
  redis.call('HSET', job_key, 'status', 'CANCELLED', 'finishedAt', now)
  if job_ttl > 0 then redis.call('EXPIRE', job_key, job_ttl) end
  redis.call('HINCRBY', meta_key, 'cancelledCount', 1)
end
