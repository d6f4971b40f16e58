-- enqueue.lua: adds jobs of ONE group to the fair queue, idempotently for
-- the whole life of the group (docs/ARCHITECTURE.md §3, §4), within the
-- tenant quotas (§5).
-- KEYS[1]:    group:<gk>:meta
-- KEYS[2]:    group:<gk>:jobs
-- KEYS[3]:    group:<gk>:ids (the job ids that left the group's list: with
--             the list and the job hashes, every job id the group accepted;
--             lib.lua ids_add)
-- KEYS[3+i]:  job:<gk>:<jid_i>, i = 1..n (a job added is written as a
--             record of group:<gk>:queued, lib.lua job_leave; its hash is
--             read when one exists)
-- ARGV[1]: key prefix (the fair-queue and tenant keys are built from it)
-- ARGV[2]: tenant
-- ARGV[3]: groupId
-- ARGV[4]: priority level of a new group (high|normal|low)
-- ARGV[5]: basePriority of a new group
-- ARGV[6]: maxInFlight of a new group (0 = unlimited)
-- ARGV[7]: ALPHA
-- ARGV[8]: now override in ms ('' = Redis TIME)
-- ARGV[9]: default most queued jobs per tenant (0 = unlimited)
-- ARGV[10]: default most active groups per tenant (0 = unlimited)
-- ARGV[11]: sizes of the call's units, comma-separated, in order ('' = one
--           unit of all the jobs): the quotas accept or refuse a unit's new
--           jobs together (a unit is a jobs message)
-- ARGV[12]: the key of a guard set by position.lua ('' = none): when it
--           is given and does not exist, the call changes nothing and
--           fails with an error starting 'NOTCURRENT'
-- ARGV[13]: '1' restores jobs accepted before (a replay of SUBMIT,
--           docs/ARCHITECTURE.md §6.7): the tenant quotas refuse nothing
--           (the jobs still count), '' = a new submission
-- ARGV[14]: callback URL of a new group ('' = none): kept in its meta
--           (callbackUrl); the script that ends the group schedules its
--           delivery (lib.lua callback_schedule)
-- ARGV[15]: notBefore of a new group, Unix ms ('' = none): kept in its meta
--           (notBefore); admission passes the group by until then
-- ARGV[16]: sending windows of a new group, their JSON ('' = none: its
--           tenant's default ones, tenant-windows, if any): kept in its
--           meta (windows) for the fetchers to refresh winAt from
-- ARGV[17]: the windows' next open intervals, 'open,close,...' Unix ms
--           (meta winAt, redisq schedule.go)
-- ARGV[18]: when winAt is to be refreshed, Unix ms (schedule:windows score)
-- ARGV[18+4(i-1)+1..4]: jobId_i, type_i, payload_i, trace_i (W3C traceparent, '' = none)
-- Only when a job of the call names an explicit destination (one that is
-- not its type), after the n jobs (D = 18 + 4n):
-- ARGV[D+1]: the most explicit destinations of the tenant
--            (tenant:<t>:destinations) at once
-- ARGV[D+2]: ms after its last use that a destination leaves that set
-- ARGV[D+2+i]: destination_i ('' = its type)
-- Returns: { outcomes, created, level, basePriority, maxInFlight, refusals, callbackUrl, notBefore,
--            windows, destRefused, <group reply> }
--   outcomes: one char per job: 'A' added, 'D' duplicate (accepted before
--   by the group, even if its job hash has expired since: nothing changed),
--   'S' rejected (beyond the sealed total), 'C' rejected (group cancelled or
--   completed), 'G' rejected (its unit would create the group and the tenant
--   has its most active groups), 'Q' rejected (its unit's new jobs would take
--   the tenant beyond its most queued jobs); never 'G' or 'Q' when
--   ARGV[13] is '1'.
--   created: 1 when this call created the group, else 0.
--   level, basePriority, maxInFlight: the group's settings after the call (a
--   group keeps those of the job that created it; the requested ones while
--   the group has none).
--   callbackUrl: the group's callback URL after the call ('' = none; a
--   group keeps that of the job that created it).
--   notBefore, windows: the group's after the call ('' = none; kept from
--   the job that created it).
--   destRefused: the jobs added without their destination, which the
--   tenant's bound refused: they fall back to their type.
--   refusals: 5 values per unit a quota refused: the unit's index (1-based),
--   'G' or 'Q', the limit, the tenant's count when the unit was judged
--   (active groups or queued jobs) and the unit's new jobs.
-- A paused group, or one at its in-flight limit, takes the jobs into its list
-- but is not queued (requeue_group). An abandoned group (abandonedAt set)
-- that receives jobs, even duplicates or refused ones, is revived first
-- (lib.lua group_revive). Duplicates, jobs of an ended group and
-- jobs beyond the sealed total are judged before the quotas and never count.
if ARGV[12] ~= '' and redis.call('EXISTS', ARGV[12]) == 0 then
  return redis.error_reply('NOTCURRENT the log position is not current')
end
local prefix, tenant, gid = ARGV[1], ARGV[2], ARGV[3]
local gk = tenant .. ':' .. gid
local alpha = tonumber(ARGV[7])
local now = now_ms(ARGV[8])
local now_s = fmt(now) -- every record's createdAt, formatted once (lib.lua itoa)
local meta_key, jobs_key, ids_key = KEYS[1], KEYS[2], KEYS[3]
local queued_key = queued_key_of(prefix, gk)
local n = #KEYS - 3
local FIRST = 18
local TENANT_TYPES_MAX = 1000 -- redisq TenantTypesMax

-- Explicit destinations (docs/ARCHITECTURE.md §5): a job added keeps its
-- destination while the tenant has fewer than the bound, or uses it
-- already; past the bound it falls back to its type (not stored), counted
-- in dest_refused. Read only when the call carries destinations.
local D = FIRST + 4 * n
local dests = #ARGV > D
local dest_refused = 0
local dest_key, dest_bound, dest_card, dest_seen, dest_ttl = nil, 0, 0, {}, 0
local function dest_of(k)
  local dest = ARGV[D + 2 + k]
  if dest == '' then return nil end
  if dest_key == nil then
    dest_key = prefix .. 'tenant:' .. tenant .. ':destinations'
    dest_bound = tonumber(ARGV[D + 1])
    local forget = tonumber(ARGV[D + 2])
    redis.call('ZREMRANGEBYSCORE', dest_key, '-inf', now - forget)
    dest_card = redis.call('ZCARD', dest_key)
    dest_ttl = forget
  end
  local seen = dest_seen[dest]
  if seen == nil then
    seen = redis.call('ZSCORE', dest_key, dest) ~= false
    if not seen and dest_card < dest_bound then
      seen = true
      dest_card = dest_card + 1
    end
    if seen then redis.call('ZADD', dest_key, now, dest) end
    dest_seen[dest] = seen
  end
  if seen then return dest end
  dest_refused = dest_refused + 1
  return nil
end

local units = {}
if ARGV[11] == '' then
  units[1] = n
else
  local sum = 0
  for s in string.gmatch(ARGV[11], '%d+') do
    units[#units + 1] = tonumber(s)
    sum = sum + tonumber(s)
  end
  if sum ~= n then
    return redis.error_reply('enqueue: unit sizes add up to ' .. sum .. ', not ' .. n .. ' jobs')
  end
end

local m = redis.call('HMGET', meta_key, 'status', 'priorityLevel', 'basePriority', 'maxInFlight', 'totalJobs',
  'declaredTotal', 'doneJobs', 'cancelledCount', 'abandonedAt', 'createdAt', 'inFlight', 'parkedScore')
local status = m[1]
local level = m[2] or ARGV[4]
local base = tonumber(m[3] or ARGV[5])
local maxinf = tonumber(m[4] or ARGV[6])
local total = num(m[5])
local declared = m[6] and tonumber(m[6]) or nil
local ended = status and TERMINAL_GROUP[status]

-- Jobs for an abandoned group (abandon.lua: abandonedAt set, its keys given
-- the group TTL) bring it back to life before anything else: its keys and
-- unfinished jobs lose their TTLs, so it cannot expire mid-life.
if status and not ended and m[9] and n > 0 then
  group_revive(prefix, gk, meta_key, now)
end

-- Tenant quotas. A live group the quotas do not count yet (created before
-- they existed) is adopted: its jobs not terminal yet count from now on.
-- (The tenant's counts are read only for a quota that has a limit.) Jobs
-- restored by a replay were admitted once: no quota refuses them.
local qlimit, glimit = 0, 0
if ARGV[13] == '' then
  qlimit, glimit = quota_limits(prefix, tenant, tonumber(ARGV[9]), tonumber(ARGV[10]))
end
local queued, active = 0, 0
if qlimit > 0 then queued = num(redis.call('GET', quota_jobs_key(prefix, tenant))) end
if glimit > 0 and not status then active = redis.call('SCARD', quota_groups_key(prefix, tenant)) end
local adopt = false
local adopted = 0
if status and not ended and not quota_counted(prefix, tenant, gid) then
  adopt = true
  adopted = math.max(0, total - num(m[7]) - num(m[8]))
  queued = queued + adopted
end

-- A job id is known when it is in the id set (it left the list: its hash
-- may have expired since), or it has a record in the group's queued hash
-- (it is queued), or its hash exists and is not terminal (it is queued, or
-- has left the list and is in the set anyway). Records of a group that does
-- not exist (no meta) are left over from an earlier group of the same name
-- (its keys expire together, so this is only a safeguard): they go, and a
-- record older than the group (createdAt) is replaced. A terminal job
-- of the group is always in its set, so a terminal hash outside it, like a
-- hash created before the group (createdAt) or any hash of a group that
-- does not exist (no meta), is left over from an earlier
-- group of the same name whose keys expired before it: the job is new,
-- and its hash is made anew (stale). Both are read in bulk first: the id
-- set (when it exists) in one SMISMEMBER, and one EXISTS of all the job
-- keys tells whether any hash needs a look.
local in_ids, in_queued, any_hash, stale = {}, {}, false, {}
local created_at = tonumber(m[10] or '')
if n > 0 then
  if not m[1] then redis.call('DEL', queued_key) end
  local jids = {}
  for k = 1, n do jids[k] = ARGV[FIRST + 4 * (k - 1) + 1] end
  local has_ids = redis.call('EXISTS', ids_key) == 1
  local has_queued = m[1] and redis.call('EXISTS', queued_key) == 1
  for k = 1, n, BULK do
    local hi = math.min(k + BULK - 1, n)
    if has_ids then
      local r = redis.call('SMISMEMBER', ids_key, unpack(jids, k, hi))
      for i = 1, #r do in_ids[k + i - 1] = r[i] == 1 end
    end
    if has_queued then
      local r = redis.call('HMGET', queued_key, unpack(jids, k, hi))
      for i = 1, #r do in_queued[k + i - 1] = r[i] end
    end
    if not any_hash then any_hash = redis.call('EXISTS', unpack(KEYS, 3 + k, 3 + hi)) > 0 end
  end
end
local function known(k)
  if in_ids[k] then return true end
  local r = in_queued[k]
  if r and not (created_at and queued_created(r) < created_at) then return true end
  if not any_hash then return false end
  local h = redis.call('HMGET', KEYS[3 + k], 'status', 'createdAt')
  if not h[1] then return false end
  if not m[1] or TERMINAL_JOB[h[1]] or (created_at and num(h[2]) < created_at) then
    stale[k] = true
    return false
  end
  return true
end

local out = {}
local new_ids = {}
local records = {} -- field, value pairs of the queued hash to write
local new_types = {} -- the types of the jobs added, for the tenant's type index
local written = {} -- ids of the jobs written by earlier units of this call
local refusals = {}
local created = 0
local exists = status and true or false -- or created by an earlier unit of this call
local i = 0
for u, size in ipairs(units) do
  local cand, inunit = {}, {}
  for k = i + 1, i + size do
    local jid = ARGV[FIRST + 4 * (k - 1) + 1]
    if ended then
      -- nothing of an ended group is re-created (its keys have their TTL)
      if known(k) then out[k] = 'D' else out[k] = 'C' end
    elseif inunit[jid] or written[jid] or known(k) then
      out[k] = 'D'
    elseif declared and total + #new_ids + #cand >= declared then
      out[k] = 'S'
    else
      inunit[jid] = true
      cand[#cand + 1] = k
    end
  end
  if #cand > 0 then
    local code, limit, count
    if not exists and glimit > 0 and active >= glimit then
      code, limit, count = 'G', glimit, active
    elseif qlimit > 0 and queued + #cand > qlimit then
      code, limit, count = 'Q', qlimit, queued
    end
    if code then
      for _, k in ipairs(cand) do out[k] = code end
      for _, v in ipairs({ u, code, limit, count, #cand }) do refusals[#refusals + 1] = v end
    else
      for _, k in ipairs(cand) do
        local a = FIRST + 4 * (k - 1)
        local jid = ARGV[a + 1]
        -- its record in the group's queued hash (lib.lua job_leave): its
        -- hash is written when it leaves the list; one left over
        -- from an earlier group goes now
        if stale[k] then redis.call('DEL', KEYS[3 + k]) end
        records[#records + 1] = jid
        records[#records + 1] = queued_record(now_s, ARGV[a + 2], ARGV[a + 4], ARGV[a + 3],
          dests and dest_of(k) or nil)
        written[jid] = true
        new_ids[#new_ids + 1] = jid
        new_types[ARGV[a + 2]] = true
        out[k] = 'A'
      end
      queued = queued + #cand
      if not exists then
        exists = true
        active = active + 1
      end
    end
  end
  i = i + size
end

local added = #new_ids
local jobs_len = 0
if adopt then
  quota_open(prefix, tenant, gid)
  quota_count(prefix, tenant, adopted)
end
if added > 0 then
  for k = 1, #records, BULK do
    redis.call('HSET', queued_key, unpack(records, k, math.min(k + BULK - 1, #records)))
  end
  for k = 1, added, BULK do
    jobs_len = redis.call('RPUSH', jobs_key, unpack(new_ids, k, math.min(k + BULK - 1, added)))
  end
  if not status then
    status = 'CREATED'
    created = 1
    redis.call('HSET', meta_key, 'priorityLevel', level, 'basePriority', base, 'maxInFlight', maxinf,
      'inFlight', 0, 'totalJobs', 0, 'doneJobs', 0, 'successCount', 0, 'failedCount', 0,
      'cancelledCount', 0, 'status', status, 'createdAt', now)
    if ARGV[14] ~= '' then redis.call('HSET', meta_key, 'callbackUrl', ARGV[14]) end
    sched_keep(prefix, tenant, gk, meta_key, ARGV[15], ARGV[16], ARGV[17], ARGV[18])
    quota_open(prefix, tenant, gid)
    index_group(prefix, tenant, gid, now)
  elseif not m[2] then
    -- the group was sealed or paused before its first job arrived
    redis.call('HSET', meta_key, 'priorityLevel', level, 'basePriority', base, 'maxInFlight', maxinf)
    if ARGV[14] ~= '' then redis.call('HSET', meta_key, 'callbackUrl', ARGV[14]) end
    sched_keep(prefix, tenant, gk, meta_key, ARGV[15], ARGV[16], ARGV[17], ARGV[18])
    index_group(prefix, tenant, gid, now)
  elseif status == 'AGGREGATING' then
    status = 'RUNNING'
    redis.call('HSET', meta_key, 'status', status)
  end
  redis.call('HINCRBY', meta_key, 'totalJobs', added)
  quota_count(prefix, tenant, added)
  -- the tenant's type index (redisq Keys.TenantTypes): each type added,
  -- scored now; the newest TENANT_TYPES_MAX kept
  local types_key, tz = prefix .. 'tenant:' .. tenant .. ':types', {}
  for ty in pairs(new_types) do
    tz[#tz + 1] = now
    tz[#tz + 1] = ty
  end
  for k = 1, #tz, BULK do
    redis.call('ZADD', types_key, unpack(tz, k, math.min(k + BULK - 1, #tz)))
  end
  if redis.call('ZCARD', types_key) > TENANT_TYPES_MAX then
    redis.call('ZREMRANGEBYRANK', types_key, 0, -(TENANT_TYPES_MAX + 1))
  end
  -- the meta as it is now, and the list's length (RPUSH): not read again
  requeue_group(prefix, gk, now, alpha,
    { status, level, base, total + added, m[7], m[11], maxinf, m[12] }, jobs_len)
end

-- a tenant that stops naming destinations leaves no set behind
if dest_key then redis.call('PEXPIRE', dest_key, dest_ttl) end

local kept = redis.call('HMGET', meta_key, 'callbackUrl', 'notBefore', 'windows')
return reply(meta_key, concat_all(out), created, level, base, maxinf, refusals,
  kept[1] or '', kept[2] or '', kept[3] or '', dest_refused)
