-- failures.lua: reads one page of a group's failures index, newest first
-- (docs/ARCHITECTURE.md §3.1, record.lua writes it).
-- KEYS[1]: group:<gk>:failures (ZSET of jobIds, scored by finish time in ms)
-- ARGV[1]: key prefix (job keys are built from it)
-- ARGV[2]: group key "<tenant>:<gid>"
-- ARGV[3]: the last jobId of the previous page ('' = start at the newest)
-- ARGV[4]: the most entries to return
-- ARGV[5]: the most bytes of a payload to return (0 = whole payloads): a
--          longer payload is cut to its first ARGV[5] bytes
-- ARGV[6]: byte budget of the call (0 = none): the call stops taking
--          entries once the payloads and errors it read add up to it (at
--          least one entry is taken), so that a page of large payloads is
--          cut short rather than read whole in one call; a payload's head
--          kept beside it (payloadHead, lib.lua) counts for its own bytes
-- Returns: { entries, more } where entries is a flat list of 8 values per
--   failed job, newest first: jobId, finishedAt (ms, the index's score),
--   type, attempt (the one that failed), error, payload (or its first
--   ARGV[5] bytes), found ('1' when the job's hash still exists; '0' when
--   it expired, and type to payload are ''), and the payload's size in
--   bytes; more is 1 when older entries follow the page.
-- The page starts right after the previous page's last entry, found by its
-- rank now, so failures recorded meanwhile (newer, at the front) neither
-- repeat nor hide entries. An entry trimmed away since (the index keeps the
-- newest entries) ends the listing: every older one is gone too.
local prefix, gk, after, limit = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local head, budget = tonumber(ARGV[5]) or 0, tonumber(ARGV[6]) or 0
local start = 0
if after ~= '' then
  local r = redis.call('ZREVRANK', KEYS[1], after)
  if r == false then return { {}, 0 } end
  start = r + 1
end
local page = redis.call('ZRANGE', KEYS[1], start, start + limit, 'REV', 'WITHSCORES')
local out, more, read = {}, 0, 0
for i = 1, #page, 2 do
  if (i + 1) / 2 > limit or (budget > 0 and i > 1 and read >= budget) then
    more = 1
    break
  end
  local jid = page[i]
  local job_key = prefix .. 'job:' .. gk .. ':' .. jid
  local found, d, p, size = '1', nil, nil, 0
  if head > 0 then
    -- a large payload's head kept at its failure (record.lua) is read
    -- alone: the listing does not read the whole payload
    local h = redis.call('HMGET', job_key, 'type', 'attempt', 'status', 'resultAttempt', 'error', 'payloadHead')
    if h[3] and h[6] and #h[6] >= head then
      d = { type = h[1] or nil, attempt = h[2] or nil, resultAttempt = h[4] or nil, error = h[5] or nil }
      size = redis.call('HSTRLEN', job_key, 'payload')
      p = string.sub(h[6], 1, head)
      read = read + #p + #(d.error or '')
    end
  end
  if d == nil then
    d = job_read(job_key)
    if d == nil then
      found = '0'
      d = { payload = '' }
    else
      local r = redis.call('HMGET', job_key, 'resultAttempt', 'error')
      d.resultAttempt, d.error = r[1] or nil, r[2] or nil
    end
    p, size = d.payload, #d.payload
    read = read + size + #(d.error or '')
    if head > 0 and size > head then p = string.sub(p, 1, head) end
  end
  for _, v in ipairs({ jid, page[i + 1], d.type or '', d.resultAttempt or d.attempt or '0', d.error or '', p, found, size }) do
    out[#out + 1] = v
  end
end
return { out, more }
