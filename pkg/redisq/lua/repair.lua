-- repair.lua: repairs a group that made no progress (docs/ARCHITECTURE.md
-- §6.5), one bounded step at a time. The first step:
--   complete: a sealed group whose done and cancelled jobs reach its total
--             but that is not COMPLETED is completed (quota, TTLs);
--   queue:    a group with queued jobs that may be admitted (not paused,
--             below its in-flight limit) but is missing from its tenant's
--             ZSET at its level, or whose tenant is missing from the level,
--             is queued again.
-- Every step goes through at most ARGV[7] of the group's job ids (SSCAN of
-- group:<gk>:ids from cursor ARGV[8]):
--   lease:    a LEASED job without an entry in the inflight ZSET (nobody
--             would re-publish it) gets one, already expired, so the
--             dispatcher's reclaim re-publishes it (same attempt); so does
--             a RUNNING job whose run is lost, made LEASED again. A run is
--             taken as lost by liveness alone, never because its group
--             recorded nothing for a while (docs/ARCHITECTURE.md §6.5):
--             its claim (the claims ZSET, extended by its worker while the
--             job or its result is in its hands) has expired, it was seen
--             so by an earlier step at least ARGV[12] ms ago (its 'lost'
--             field; a renewal or a new claim clears it, so a claim that a
--             Redis that came back older shows expired is given the time
--             to be renewed), and every result published before that
--             sighting has been taken from RESULT (ARGV[11]), so a result
--             backed up there is never mistaken for a lost one;
-- and counts the jobs in flight (LEASED, RUNNING). The last step:
--   inflight: a group with an in-flight limit whose inFlight is above the
--             jobs really in flight gets the real count, and is queued again
--             if it has jobs waiting. Over several steps this is done only
--             if inFlight did not change meanwhile (every lease and every
--             finished job changes it), so a moving group is never cut
--             below its real count.
-- KEYS[1]: group:<gk>:meta
-- KEYS[2]: group:<gk>:jobs
-- KEYS[3]: inflight
-- KEYS[4]: group:<gk>:ids
-- KEYS[5]: claims
-- ARGV[1]: key prefix
-- ARGV[2]: tenant
-- ARGV[3]: groupId
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: group TTL in seconds (0 = keep)
-- ARGV[6]: ALPHA
-- ARGV[7]: most job ids this step goes through (at least 1)
-- ARGV[8]: SSCAN cursor ('0' = the first step)
-- ARGV[9]: jobs in flight counted by the earlier steps
-- ARGV[10]: inFlight read by the first step ('' in the first step)
-- ARGV[11]: RESULT is settled through this time in ms: every result
--   published before it was recorded ('' = not checked: liveness alone)
-- ARGV[12]: claim TTL in ms: how long a run seen lost waits to be re-leased
-- Returns: { cursor, counted, inFlightAtStart, leases, queued, inflight,
--   completed, suspected, held } where suspected counts the runs this step
--   first saw without a live claim, held the RUNNING jobs whose claims live
--   (their workers have them in hand), and cursor is '0' once the repair is finished; leases
--   counts the leases restored by this step; queued, inflight and completed
--   are 1 when that repair was made by this step (inflight: the number of
--   slots freed).
local prefix, tenant, gid = ARGV[1], ARGV[2], ARGV[3]
local gk = tenant .. ':' .. gid
local now = now_ms(ARGV[4])
local group_ttl, alpha = tonumber(ARGV[5]), tonumber(ARGV[6])
local budget = tonumber(ARGV[7])
if budget < 1 then budget = 1 end
local cursor, counted = ARGV[8], tonumber(ARGV[9])
local first = ARGV[10] == ''
local settled = tonumber(ARGV[11])
local grace = tonumber(ARGV[12])

local m = redis.call('HMGET', KEYS[1], 'status', 'declaredTotal', 'doneJobs', 'cancelledCount', 'priorityLevel',
  'inFlight', 'maxInFlight')
local status = m[1]
if not status or TERMINAL_GROUP[status] then
  return { '0', 0, '', 0, 0, 0, 0, 0, 0 }
end
local v0 = ARGV[10]
local queued, completed = 0, 0
if first then
  v0 = tostring(num(m[6]))
  if completion_due(status, m[2] and tonumber(m[2]), num(m[3]), num(m[4])) then
    quota_end(prefix, tenant, gid, KEYS[1])
    maybe_complete(prefix, gk, KEYS[1], now, group_ttl)
    for _, level in ipairs(LEVELS) do
      unqueue_group(prefix, tenant, gid, level)
    end
    return { '0', 0, v0, 0, 0, 0, 1, 0, 0 }
  end
  if status ~= 'PAUSED' and redis.call('LLEN', KEYS[2]) > 0 then
    local level = m[5] or 'normal'
    if not redis.call('ZSCORE', tenant_queue_key(prefix, tenant, level), gid) then
      if requeue_group(prefix, gk, now, alpha) then queued = 1 end
    elseif not redis.call('ZSCORE', prefix .. 'fair-queue:' .. level, tenant) then
      local vt = redis.call('HGET', prefix .. 'fair-queue:tenant-clock', level) or '0'
      redis.call('ZADD', prefix .. 'fair-queue:' .. level, 'NX', vt, tenant)
      queued = 1
    end
  end
end

local leases, suspected, held = 0, 0, 0
repeat
  local r = redis.call('SSCAN', KEYS[4], cursor, 'COUNT', budget)
  cursor = r[1]
  local page = r[2]
  for _, jid in ipairs(page) do
    local job_key = job_key_of(prefix, gk, jid)
    local st = redis.call('HGET', job_key, 'status')
    if st == 'LEASED' or st == 'RUNNING' then
      counted = counted + 1
      local member = gk .. ':' .. jid
      if not redis.call('ZSCORE', KEYS[3], member) then
        local lease = st == 'LEASED'
        local live = st == 'RUNNING' and num(redis.call('ZSCORE', KEYS[5], member)) >= now
        if live then
          held = held + 1
        elseif st == 'RUNNING' then
          -- no live claim: its worker stopped, or its run ended and the
          -- result was lost (a Redis that came back older, after RESULT
          -- and READY were acknowledged), or it is still on RESULT
          local lost = tonumber(redis.call('HGET', job_key, 'lost') or '')
          if not lost then
            redis.call('HSET', job_key, 'lost', now)
            suspected = suspected + 1
          elseif now - lost >= grace and (not settled or lost < settled) then
            -- leased again, it is re-published as the same attempt
            redis.call('HSET', job_key, 'status', 'LEASED')
            redis.call('HDEL', job_key, 'lost')
            redis.call('ZREM', KEYS[5], member)
            lease = true
          end
        end
        if lease then
          zadd_pinned(KEYS[3], now, member)
          leases = leases + 1
        end
      end
    end
  end
  budget = budget - math.max(#page, 1)
until cursor == '0' or budget <= 0

local freed = 0
if cursor == '0' then
  local max = num(m[7])
  local cur = num(redis.call('HGET', KEYS[1], 'inFlight'))
  if max > 0 and tostring(cur) == v0 and counted < cur then
    freed = cur - counted
    redis.call('HSET', KEYS[1], 'inFlight', counted)
    if requeue_group(prefix, gk, now, alpha) then queued = 1 end
  end
end
return { cursor, counted, v0, leases, queued, freed, completed, suspected, held }
