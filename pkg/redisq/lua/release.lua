-- release.lua: moves due jobs out of the non-ready queue under a lease, at
-- most N per call, decrementing their groups' non-ready counters in the same
-- script. Each due job is released once, whatever the number of callers.
-- Releases pass the global rate gate (retries are downstream calls too): in
-- paced mode the pacer, in seed mode the fixed window's remaining room.
-- KEYS[1]: non-ready-queue
-- KEYS[2]: inflight
-- KEYS[3]: rate-limit:pacer
-- ARGV[1]: key prefix
-- ARGV[2]: N
-- ARGV[3]: lease in ms
-- ARGV[4]: now override in ms ('' = Redis TIME)
-- ARGV[5]: mode (fair|seed|paced)
-- ARGV[6]: global limit per window
-- ARGV[7]: window in ms
-- ARGV[8]: paced burst tolerance in ms
-- ARGV[9]: job TTL in seconds (cancelled jobs)
-- Returns: { jobs, next, cancelled } where jobs is a flat list gid, jid,
--   type, payload, attempt, trace; next is the due time (ms) of the earliest job
--   left, or -1 when the queue is empty; cancelled counts jobs of cancelled
--   groups that were counted instead of released.
local prefix = ARGV[1]
local want = tonumber(ARGV[2])
local lease_ms = tonumber(ARGV[3])
local now = now_ms(ARGV[4])
local mode = ARGV[5]
local limit, window_ms, burst_ms = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local job_ttl = tonumber(ARGV[9])

local window = math.floor(now / window_ms)
local gkey = prefix .. 'rate-limit:global:' .. window
if mode == 'paced' then
  local gcount = num(redis.call('GET', gkey))
  local tat = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tat < now then tat = now end
  local interval = window_ms / limit
  local room = limit - gcount
  local paced = math.floor((now + burst_ms - tat) / interval) + 1
  if paced < room then room = paced end
  if room < want then want = room end
  if want < 0 then want = 0 end
elseif mode == 'seed' then
  local room = limit - num(redis.call('GET', gkey))
  if room < want then want = room end
  if want < 0 then want = 0 end
end

local out, cancelled, released = {}, 0, 0
local due = {}
if want > 0 then
  due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, want)
end
local decr = {}
for _, mem in ipairs(due) do
  redis.call('ZREM', KEYS[1], mem)
  local gid, jid = split_member(mem)
  decr[gid] = (decr[gid] or 0) + 1
  local job_key = prefix .. 'job:' .. gid .. ':' .. jid
  local meta_key = prefix .. 'group:' .. gid .. ':meta'
  local status = redis.call('HGET', job_key, 'status')
  if status == 'BACKOFF' then
    if redis.call('HGET', meta_key, 'status') == 'CANCELLED' then
      cancel_job(prefix, gid, job_key, meta_key, now, job_ttl)
      cancelled = cancelled + 1
    else
      lease(out, KEYS[2], job_key, gid, jid, now + lease_ms)
      released = released + 1
    end
  end
end
for gid, n in pairs(decr) do
  local count_key = prefix .. 'congestion:' .. gid .. ':non-ready-count'
  local c = redis.call('DECRBY', count_key, n)
  if c <= 0 then
    -- nothing of the group backs off any more: drop the counter rather
    -- than keep (or, for a group that ended meanwhile, re-create) a key
    -- without a TTL; the next backoff creates it again
    c = 0
    redis.call('DEL', count_key)
  end
  local stats_key = prefix .. 'congestion:' .. gid .. ':stats'
  if redis.call('EXISTS', stats_key) == 1 then
    redis.call('HSET', stats_key, 'currentNonReadyCount', c)
  end
end
if (mode == 'paced' or mode == 'seed') and released > 0 then
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

local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local next_due = -1
if #nxt > 0 then next_due = tonumber(nxt[2]) end
return { out, next_due, cancelled }
