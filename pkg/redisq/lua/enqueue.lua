-- enqueue.lua: adds jobs of ONE group to the fair queue, idempotently.
-- KEYS[1..3]: fair-queue:high, fair-queue:normal, fair-queue:low
-- KEYS[4]:    fair-queue:vclock
-- KEYS[5]:    group:<gid>:jobs
-- KEYS[6]:    group:<gid>:meta
-- KEYS[6+i]:  job:<gid>:<jid_i>, i = 1..n
-- ARGV[1]: groupId
-- ARGV[2]: priority level of a new group (high|normal|low)
-- ARGV[3]: basePriority of a new group
-- ARGV[4]: ALPHA
-- ARGV[5]: now override in ms ('' = Redis TIME)
-- ARGV[5+4(i-1)+1..4]: jobId_i, type_i, payload_i, trace_i (W3C traceparent, '' = none)
-- Returns: { outcomes, totalJobs, status, level, created }
--   outcomes: one char per job: 'A' added, 'D' duplicate (already in the
--   group: nothing changed), 'S' rejected (beyond the sealed total),
--   'C' rejected (group cancelled or completed).
--   level: the group's level (a group keeps the level of its first job).
--   created: 1 when this call created the group, else 0.
local gid = ARGV[1]
local alpha = tonumber(ARGV[4])
local now = now_ms(ARGV[5])
local meta_key = KEYS[6]
local n = #KEYS - 6

local m = redis.call('HMGET', meta_key, 'status', 'priorityLevel', 'basePriority', 'totalJobs', 'doneJobs', 'declaredTotal')
local status = m[1]
local level = m[2] or ARGV[2]
local base = tonumber(m[3] or ARGV[3])
local total = num(m[4])
local done = num(m[5])
local declared = m[6] and tonumber(m[6]) or nil

local out = {}
local new_ids = {}
local created = 0
for i = 1, n do
  local a = 5 + 4 * (i - 1)
  local jid = ARGV[a + 1]
  local job_key = KEYS[6 + i]
  if redis.call('EXISTS', job_key) == 1 then
    out[i] = 'D'
  elseif status and TERMINAL_GROUP[status] then
    out[i] = 'C'
  elseif declared and total + #new_ids >= declared then
    out[i] = 'S'
  else
    redis.call('HSET', job_key,
      'id', jid, 'groupId', gid, 'type', ARGV[a + 2], 'payload', ARGV[a + 3],
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
    redis.call('RPUSH', KEYS[5], unpack(new_ids, i, math.min(i + 3999, added)))
  end
  if not status then
    status = 'CREATED'
    created = 1
    redis.call('HSET', meta_key, 'priorityLevel', level, 'basePriority', base,
      'totalJobs', 0, 'doneJobs', 0, 'successCount', 0, 'failedCount', 0,
      'cancelledCount', 0, 'status', status, 'createdAt', now)
  elseif not m[2] then
    -- the group was sealed before its first job arrived
    redis.call('HSET', meta_key, 'priorityLevel', level, 'basePriority', base)
  elseif status == 'AGGREGATING' then
    status = 'RUNNING'
    redis.call('HSET', meta_key, 'status', status)
  end
  total = redis.call('HINCRBY', meta_key, 'totalJobs', added)
  local fq = KEYS[2]
  if level == 'high' then fq = KEYS[1] elseif level == 'low' then fq = KEYS[3] end
  -- ZADD NX: a group already waiting keeps its place.
  local vt = vclock_load(KEYS[4], now) + VCLOCK_STEP
  if redis.call('ZADD', fq, 'NX', fmt(fair_score(vt, base, done, total, alpha)), gid) == 1 then
    redis.call('SET', KEYS[4], fmt(vt))
  end
end

return { table.concat(out), total, status or 'NONE', level, created }
