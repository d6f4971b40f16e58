-- claim.lua: a worker claims delivered jobs before running them. A delivery
-- must carry its job's current attempt; otherwise it is stale.
-- KEYS[1]: inflight
-- KEYS[2]: claims
-- KEYS[3]: holders-gone (ZSET of holders known to have stopped, by time)
-- ARGV[1]: key prefix (job and group keys are built from it)
-- ARGV[2]: now override in ms ('' = Redis TIME)
-- ARGV[3]: job TTL in seconds
-- ARGV[4]: claim TTL in ms: a job claimed to run gets an entry in the claims
--   ZSET (member "<gk>:<jid>") scored by now + this, which its worker
--   extends (renew.lua) while the job, or its result, is in its hands
--   (docs/ARCHITECTURE.md §6.5: liveness decides that a run is lost)
-- ARGV[5]: the claiming holder's id ('' = none), kept in the job's 'holder'
-- ARGV[5+3(i-1)+1..3]: group key "<tenant>:<gid>"_i, jobId_i, attempt_i
--   carried by delivery i
-- Returns: one outcome per delivery, in order: 'run:<n>:<t>:<s>' (run it;
--   this is the n-th claim of this attempt, t of the job's earlier attempts
--   were rate limited, and s is 1 when the job is a suspect: it was RUNNING
--   as this attempt and its holder never handed it back, so the holder
--   stopped while the job was running or waiting to run, and the job may
--   be what stopped it; 0 otherwise), 'stale' (another attempt is current, or
--   the job is terminal or gone, or this holder already runs it: drop the
--   delivery), 'busy:<ms>' (another holder's live claim has the job: it is
--   still running, or its result is on the way; a second delivery of the
--   same attempt, say a reclaimed lease re-published in a pack of another
--   make-up, must not run it again: hand the delivery back for <ms>, until
--   the claim expires unless renewed) or 'cancelled' (the group
--   was cancelled: the job is counted as cancelled and must not run; it
--   leaves its group's in-flight count).
-- The job's 'claims' field, "<attempt>:<n>", counts the claims of its
-- current attempt: only deliveries that reached Redis count. The poison
-- budget is not spent here but by solo.lua, when a suspect runs alone.
-- A holder that hands a job back on purpose (shutdown, an error) marks it
-- 'released' (handback.lua), so its next claim is not a suspect.
local prefix = ARGV[1]
local now = now_ms(ARGV[2])
local job_ttl = tonumber(ARGV[3])
local claim_until = now + tonumber(ARGV[4])
-- formatted once for every job of the call (lib.lua itoa)
local now_s, claim_until_s = fmt(now), fmt(claim_until)
local holder = ARGV[5]
local n = (#ARGV - 5) / 3

local out, seen, members, group_status, held = {}, {}, {}, {}, {}
for i = 1, n do
  local a = 5 + 3 * (i - 1)
  local gk, jid, attempt = ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 3])
  local job_key = prefix .. 'job:' .. gk .. ':' .. jid
  local mem = gk .. ':' .. jid
  local d = redis.call('HMGET', job_key, 'status', 'attempt', 'throttles', 'released', 'claims', 'lost',
    'holder')
  local busy
  if d[1] == 'RUNNING' and num(d[2]) == attempt and not seen[job_key] then
    local until_ms = num(redis.call('ZSCORE', KEYS[2], mem))
    if until_ms >= now and d[7] and not redis.call('ZSCORE', KEYS[3], d[7]) then
      busy = d[7] == holder and 'stale' or ('busy:' .. (until_ms - now + 1))
    end
  end
  if busy then
    out[i] = busy
  elseif d[1] == false or num(d[2]) ~= attempt or (d[1] ~= 'LEASED' and d[1] ~= 'RUNNING')
      or seen[job_key] then
    -- a second delivery of the same job in this call is a duplicate
    out[i] = 'stale'
  else
    seen[job_key] = true
    members[#members + 1] = mem
    local meta_key = prefix .. 'group:' .. gk .. ':meta'
    local st = group_status[gk]
    if st == nil then
      st = redis.call('HGET', meta_key, 'status') or ''
      group_status[gk] = st
    end
    if st == 'CANCELLED' then
      cancel_job(job_key, meta_key, now, job_ttl)
      inflight_release(prefix, gk, 1, now, 0)
      out[i] = 'cancelled'
    else
      local claims = 1
      local c = d[5]
      if c then
        local a, k = string.match(c, '^(%d+):(%d+)$')
        if tonumber(a) == attempt then
          claims = tonumber(k) + 1
        end
      end
      local suspect = 0
      if d[1] == 'RUNNING' and num(d[4]) ~= attempt then
        suspect = 1
      end
      local claims_s = itoa(attempt) .. ':' .. itoa(claims)
      if holder ~= '' then
        redis.call('HSET', job_key, 'status', 'RUNNING', 'claimedAt', now_s, 'claims', claims_s, 'holder', holder)
      else
        redis.call('HSET', job_key, 'status', 'RUNNING', 'claimedAt', now_s, 'claims', claims_s)
        if d[7] then redis.call('HDEL', job_key, 'holder') end
      end
      if d[4] then
        redis.call('HDEL', job_key, 'released')
      end
      if d[6] then
        redis.call('HDEL', job_key, 'lost')
      end
      held[#held + 1] = claim_until_s
      held[#held + 1] = mem
      out[i] = 'run:' .. itoa(claims) .. ':' .. itoa(num(d[3])) .. ':' .. itoa(suspect)
    end
  end
end
for i = 1, #members, BULK do
  redis.call('ZREM', KEYS[1], unpack(members, i, math.min(i + BULK - 1, #members)))
end
zadd_pinned_bulk(KEYS[2], held)
return out
