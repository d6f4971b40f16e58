-- record.lua: records a batch of job results, each job's terminal result
-- exactly once, and completes every group of the batch that is sealed and
-- has every job terminal.
-- KEYS[1..G]: group:<gk>:meta of each group the batch touches
-- ARGV[1]:    key prefix (job and congestion keys are built from it)
-- ARGV[2]:    now override in ms ('' = Redis TIME)
-- ARGV[3]:    job TTL in seconds once terminal (0 = keep)
-- ARGV[4]:    group TTL in seconds once ended (0 = keep)
-- ARGV[5]:    ALPHA (a group below its in-flight limit again is re-queued)
-- ARGV[6]:    most entries kept in a group's failures index
-- ARGV[7]:    '1' drops a succeeded job's hash when its result is recorded
--             (Config.DropSucceededJobs), '0' keeps it the job TTL
-- ARGV[8..7+G]: group key "<tenant>:<gid>" of KEYS[1..G]
-- ARGV[8+G..]: 5 values per result, in order: group index g (KEYS[g]),
--             jobId, status (SUCCESS or FAILED), error text ('' = none),
--             attempt that produced the result
-- Returns: a flat list: first each group's reply (as lib.lua's
--   group_reply: its state and counters, 7 values) as read before the first
--   result, in the order of KEYS; then 3 values per result, in the order of
--   the results: outcome, completed, createdAt.
--   outcome is 'recorded', 'duplicate' (the job was already terminal, maybe
--   through an earlier result of this batch: nothing changed), 'fenced' (the
--   job is not in flight with the result's attempt: nothing changed) or
--   'unknown' (no such job); completed is 1 on the result that completed its group,
--   else 0; createdAt is the job's enqueue time (ms, 0 if unknown). Only a
--   recorded result changes its group's reply: doneJobs and successCount
--   (SUCCESS) or failedCount (FAILED) go up by one, and its state becomes
--   COMPLETED when completed is 1; so the caller has each group's reply
--   right after each result without the script sending it with each.
-- Fencing (docs/ARCHITECTURE.md §6.4): a result is recorded only when its
-- job is in flight (LEASED or RUNNING: handed out and not back)
-- with the result's attempt. A result for a job that is QUEUED or in BACKOFF
-- (say, Redis lost the writes that leased or claimed it, or an earlier
-- attempt's result arrives after a retry parked the job), for another
-- attempt, or forged on a result subject for a job that never ran, is
-- 'fenced': it changes nothing, so no job is counted twice and a job whose
-- attempt runs again is counted by that attempt's result.
-- A recorded job frees its slot of the group's in-flight count
-- (docs/ARCHITECTURE.md §5); a recorded
-- job of a group the tenant quotas count leaves its tenant's queued jobs,
-- and a completed group its tenant's active groups. A recorded FAILED result
-- adds its job to the group's failures index (group:<gk>:failures, a ZSET
-- of jobIds scored by finish time in ms), trimmed to the newest ARGV[6]
-- entries; it expires with the group's other keys (group_cleanup).
-- A recorded or duplicate result ends its run's claim (the claims ZSET,
-- claim.lua); a fenced one leaves it to the attempt in flight.
-- Every read comes before the first write, so a call that fails on a read
-- (a key of the wrong type) changes nothing.
local prefix = ARGV[1]
local now = now_ms(ARGV[2])
local job_ttl, group_ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
local alpha = tonumber(ARGV[5])
local failures_kept = tonumber(ARGV[6])
local drop_succeeded = ARGV[7] == '1'
local ngroups = #KEYS
local IN_FLIGHT = { LEASED = true, RUNNING = true }

-- Each group's meta is read once; its counters are then kept here and
-- written back once, after all of its results.
local groups = {}
for g = 1, ngroups do
  local m = redis.call('HMGET', KEYS[g], 'status', 'declaredTotal', 'totalJobs', 'doneJobs',
    'successCount', 'failedCount', 'cancelledCount', 'inFlight', 'maxInFlight')
  groups[g] = {
    gk = ARGV[7 + g], status = m[1], declared = m[2] and tonumber(m[2]), jobs = num(m[3]),
    done = num(m[4]), succeeded = num(m[5]), failed = num(m[6]), cancelled = num(m[7]),
    inflight = num(m[8]), max = num(m[9]), freed = 0, completed = false,
  }
end

local out = {}
for g = 1, ngroups do
  local s, n = groups[g], #out
  out[n + 1], out[n + 2], out[n + 3] = s.status or 'NONE', s.declared or -1, s.jobs
  out[n + 4], out[n + 5], out[n + 6], out[n + 7] = s.done, s.succeeded, s.failed, s.cancelled
end
local ended = {} -- claims ZSET members of the runs whose claim ends here
local function emit(outcome, completed, created, s, jid)
  if jid and (outcome == 'recorded' or outcome == 'duplicate') then
    ended[#ended + 1] = s.gk .. ':' .. jid
  end
  local n = #out
  out[n + 1], out[n + 2], out[n + 3] = outcome, completed, created
end

-- terminal: job key -> createdAt of every job found terminal or recorded by
-- this call, so a later result of the same job is a duplicate.
local terminal = {}
-- recorded: job key and the ARGV index of each result to write, flat
-- (no table per job).
local recorded = {}
for i = 8 + ngroups, #ARGV, 5 do
  local s = groups[tonumber(ARGV[i])]
  local job_key = prefix .. 'job:' .. s.gk .. ':' .. ARGV[i + 1]
  local created = terminal[job_key]
  if created then
    emit('duplicate', 0, created, s, ARGV[i + 1])
  else
    local j = redis.call('HMGET', job_key, 'status', 'createdAt', 'attempt')
    created = num(j[2])
    local rec = j[1] == false and redis.call('HGET', queued_key_of(prefix, s.gk), ARGV[i + 1])
    if rec then
      -- queued, with a record rather than a hash (lib.lua job_leave): not handed out
      emit('fenced', 0, queued_created(rec), s)
    elseif j[1] == false and redis.call('SISMEMBER', prefix .. 'group:' .. s.gk .. ':ids', ARGV[i + 1]) == 1 then
      -- left the list (lib.lua ids_add) and its hash is gone: it ended
      emit('duplicate', 0, 0, s, ARGV[i + 1])
    elseif j[1] == false then
      emit('unknown', 0, 0, s)
    elseif TERMINAL_JOB[j[1]] then
      terminal[job_key] = created
      emit('duplicate', 0, created, s, ARGV[i + 1])
    elseif not IN_FLIGHT[j[1]] or num(j[3]) ~= tonumber(ARGV[i + 4]) then
      -- not handed out (QUEUED, BACKOFF), or handed out as another attempt
      emit('fenced', 0, created, s)
    else
      terminal[job_key] = created
      recorded[#recorded + 1] = job_key
      recorded[#recorded + 1] = i
      s.recorded = true
      s.nrecorded = (s.nrecorded or 0) + 1
      s.freed = s.freed + 1
      s.done = s.done + 1
      if ARGV[i + 2] == 'SUCCESS' then
        s.succeeded = s.succeeded + 1
      else
        s.failed = s.failed + 1
        s.failures = s.failures or {}
        s.failures[#s.failures + 1] = ARGV[i + 1]
      end
      local completed = 0
      if completion_due(s.status, s.declared, s.done, s.cancelled) then
        s.status, s.completed, completed = 'COMPLETED', true, 1
      end
      emit('recorded', completed, created, s, ARGV[i + 1])
    end
  end
end

-- avgThrottlePerJob follows the completed jobs (a completed
-- group's congestion stats are dropped instead).
for g = 1, ngroups do
  local s = groups[g]
  if s.recorded and not s.completed then
    s.stats_key = prefix .. 'congestion:' .. s.gk .. ':stats'
    s.throttles = redis.call('HGET', s.stats_key, 'totalThrottleCount')
  end
  if s.recorded then
    -- tenant quotas: only a counted group's jobs are among its tenant's queued jobs
    s.tenant, s.gid = group_parts(s.gk)
    s.counted = quota_counted(prefix, s.tenant, s.gid)
  end
end

-- Writes only from here on.
local now_s, job_ttl_s = fmt(now), fmt(job_ttl) -- once for every job (lib.lua itoa)
for r = 1, #recorded, 2 do
  local job_key, i = recorded[r], recorded[r + 1]
  if drop_succeeded and ARGV[i + 2] == 'SUCCESS' then
    -- its group's counts and id set keep it; nothing reads its hash again
    redis.call('DEL', job_key)
  else
    if ARGV[i + 3] ~= '' then
      redis.call('HSET', job_key, 'status', ARGV[i + 2], 'finishedAt', now_s, 'resultAttempt', ARGV[i + 4],
        'error', ARGV[i + 3])
    else
      redis.call('HSET', job_key, 'status', ARGV[i + 2], 'finishedAt', now_s, 'resultAttempt', ARGV[i + 4])
    end
    if ARGV[i + 2] ~= 'SUCCESS' and redis.call('HSTRLEN', job_key, 'payload') > PAYLOAD_HEAD then
      local p = redis.call('HGET', job_key, 'payload')
      redis.call('HSET', job_key, 'payloadHead', string.sub(p, 1, PAYLOAD_HEAD))
    end
    if job_ttl > 0 then
      redis.call('EXPIRE', job_key, job_ttl_s)
    end
  end
end
for i = 1, #ended, BULK do
  redis.call('ZREM', prefix .. 'claims', unpack(ended, i, math.min(i + BULK - 1, #ended)))
end
-- the failures index, before group_cleanup gives an ended group's keys their TTL
for g = 1, ngroups do
  local s = groups[g]
  if s.failures then
    local fkey = prefix .. 'group:' .. s.gk .. ':failures'
    for _, jid in ipairs(s.failures) do
      redis.call('ZADD', fkey, now, jid)
    end
    redis.call('ZREMRANGEBYRANK', fkey, 0, -(failures_kept + 1))
    if TERMINAL_GROUP[s.status] and not s.completed and group_ttl > 0 then
      -- a job of a group that ended before it settled (cancelled while it ran)
      redis.call('EXPIRE', fkey, group_ttl)
    end
  end
end
for g = 1, ngroups do
  local s = groups[g]
  if s.freed > 0 and s.status and s.max > 0 then -- counted only for a group with a limit
    local v = s.inflight - s.freed
    if v < 0 then v = 0 end
    redis.call('HSET', KEYS[g], 'inFlight', v)
    s.requeue = s.max > 0 and v < s.max and not s.completed
  end
  if s.completed then
    redis.call('HSET', KEYS[g], 'doneJobs', s.done, 'successCount', s.succeeded,
      'failedCount', s.failed, 'lastProgressAt', now, 'status', 'COMPLETED', 'finishedAt', now)
    group_cleanup(prefix, s.gk, KEYS[g], group_ttl)
  elseif s.recorded then
    redis.call('HSET', KEYS[g], 'doneJobs', s.done, 'successCount', s.succeeded,
      'failedCount', s.failed, 'lastProgressAt', now)
    if s.throttles then
      redis.call('HSET', s.stats_key, 'avgThrottlePerJob', string.format('%.2f', tonumber(s.throttles) / s.done))
    end
    if s.requeue then
      -- a slot freed: the group may be served again (its score uses the new done count)
      requeue_group(prefix, s.gk, now, alpha)
    end
  end
  if s.counted then
    -- the recorded jobs leave the tenant's queued jobs; a completed group its active groups
    quota_uncount(prefix, s.tenant, s.nrecorded)
    if s.completed then
      quota_close(prefix, s.tenant, s.gid, s.jobs - s.done - s.cancelled)
    end
  end
end

return out
