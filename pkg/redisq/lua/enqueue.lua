-- enqueue.lua: adds jobs of ONE group to the fair queue, idempotently for
-- the whole life of the group (docs/ARCHITECTURE.md §3, §4).
-- KEYS[1]:    group:<gk>:meta
-- KEYS[2]:    group:<gk>:jobs
-- KEYS[3]:    group:<gk>:ids (every job id the group ever accepted)
-- KEYS[3+i]:  job:<gk>:<jid_i>, i = 1..n
-- ARGV[1]: key prefix (the fair-queue keys are built from it)
-- ARGV[2]: tenant
-- ARGV[3]: groupId
-- ARGV[4]: priority level of a new group (high|normal|low)
-- ARGV[5]: basePriority of a new group
-- ARGV[6]: maxInFlight of a new group (0 = unlimited)
-- ARGV[7]: ALPHA
-- ARGV[8]: now override in ms ('' = Redis TIME)
-- ARGV[8+4(i-1)+1..4]: jobId_i, type_i, payload_i, trace_i (W3C traceparent, '' = none)
-- Returns: { outcomes, created, level, basePriority, maxInFlight, <group reply> }
--   outcomes: one char per job: 'A' added, 'D' duplicate (accepted before
--   by the group, even if its job hash has expired since: nothing changed),
--   'S' rejected (beyond the sealed total), 'C' rejected (group cancelled or
--   completed).
--   created: 1 when this call created the group, else 0.
--   level, basePriority, maxInFlight: the group's settings after the call (a
--   group keeps those of the job that created it; the requested ones while
--   the group has none).
-- A paused group, or one at its in-flight limit, takes the jobs into its list
-- but is not queued (requeue_group).
local prefix, tenant, gid = ARGV[1], ARGV[2], ARGV[3]
local gk = tenant .. ':' .. gid
local alpha = tonumber(ARGV[7])
local now = now_ms(ARGV[8])
local meta_key, jobs_key, ids_key = KEYS[1], KEYS[2], KEYS[3]
local n = #KEYS - 3

local m = redis.call('HMGET', meta_key, 'status', 'priorityLevel', 'basePriority', 'maxInFlight', 'totalJobs',
  'declaredTotal')
local status = m[1]
local level = m[2] or ARGV[4]
local base = tonumber(m[3] or ARGV[5])
local maxinf = tonumber(m[4] or ARGV[6])
local total = num(m[5])
local declared = m[6] and tonumber(m[6]) or nil
local ended = status and TERMINAL_GROUP[status]

local out = {}
local new_ids = {}
local created = 0
for i = 1, n do
  local a = 8 + 4 * (i - 1)
  local jid = ARGV[a + 1]
  if ended then
    -- an ended group's id set is not re-created (it has its TTL)
    if redis.call('SISMEMBER', ids_key, jid) == 1 then out[i] = 'D' else out[i] = 'C' end
  elseif redis.call('SADD', ids_key, jid) == 0 then
    out[i] = 'D'
  elseif declared and total + #new_ids >= declared then
    redis.call('SREM', ids_key, jid)
    out[i] = 'S'
  else
    local job_key = KEYS[3 + i]
    redis.call('HSET', job_key,
      'id', jid, 'tenant', tenant, 'groupId', gid, 'type', ARGV[a + 2], 'payload', ARGV[a + 3],
      'status', 'QUEUED', 'attempt', 0, 'createdAt', now)
    if ARGV[a + 4] ~= '' then
      redis.call('HSET', job_key, 'trace', ARGV[a + 4])
    end
    new_ids[#new_ids + 1] = jid
    out[i] = 'A'
  end
end

local added = #new_ids
if added > 0 then
  for i = 1, added, 4000 do
    redis.call('RPUSH', jobs_key, unpack(new_ids, i, math.min(i + 3999, added)))
  end
  if not status then
    status = 'CREATED'
    created = 1
    redis.call('HSET', meta_key, 'priorityLevel', level, 'basePriority', base, 'maxInFlight', maxinf,
      'inFlight', 0, 'totalJobs', 0, 'doneJobs', 0, 'successCount', 0, 'failedCount', 0,
      'cancelledCount', 0, 'status', status, 'createdAt', now)
  elseif not m[2] then
    -- the group was sealed or paused before its first job arrived
    redis.call('HSET', meta_key, 'priorityLevel', level, 'basePriority', base, 'maxInFlight', maxinf)
  elseif status == 'AGGREGATING' then
    status = 'RUNNING'
    redis.call('HSET', meta_key, 'status', status)
  end
  redis.call('HINCRBY', meta_key, 'totalJobs', added)
  requeue_group(prefix, gk, now, alpha)
end

return reply(meta_key, table.concat(out), created, level, base, maxinf)
