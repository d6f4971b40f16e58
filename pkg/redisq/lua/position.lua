-- position.lua: a consumer's position in a retained log (docs/ARCHITECTURE.md §6.7).
-- KEYS[1] positions HASH
-- ARGV[1] log name, ARGV[2] op: read | advance | reset | guard
-- ARGV[3] seq (advance: the new position; reset: the position a replay
--         reached); guard: the key of the guard to set
-- guard sets the key ARGV[3] (with a TTL of a minute) when the position is
-- current and deletes it when it is not: the calls that follow on the same
-- connection, in the same pipeline, apply only while the key exists
-- (enqueue.lua), so they apply only to the server that found the position
-- current (a restart between them closes the connection).
-- ARGV[4], ARGV[5] (reset) the seq and run id the replay started from
-- Returns {seq, current (1|0), run id of this server}. current says the
-- position was stored by this very server process: a restart (clean, or from
-- an older snapshot, or a failover) changes the run id, and until a replay
-- resets the position it is not current and advance refuses to move it.
-- A server without INFO in scripts (an embedded Redis-compatible server of
-- `bulkaction dev`) has one process for its whole life: a constant run id.
local info = redis.pcall('INFO', 'server')
local rid = type(info) == 'string' and string.match(info, 'run_id:(%w+)') or 'no-run-id'
local seqf, ridf = ARGV[1] .. ':seq', ARGV[1] .. ':rid'
local cur = redis.call('HMGET', KEYS[1], seqf, ridf)
local seq = tonumber(cur[1]) or 0
local stored = cur[2] or ''
local op = ARGV[2]
if op == 'advance' then
  if stored ~= rid then
    return {seq, 0, rid}
  end
  local n = tonumber(ARGV[3])
  if n > seq then
    redis.call('HSET', KEYS[1], seqf, n)
    seq = n
  end
  return {seq, 1, rid}
elseif op == 'guard' then
  if stored == rid then
    redis.call('SET', ARGV[3], '1', 'PX', 60000)
    return {seq, 1, rid, stored}
  end
  redis.call('DEL', ARGV[3])
  return {seq, 0, rid, stored}
elseif op == 'reset' then
  if seq ~= tonumber(ARGV[4]) or stored ~= ARGV[5] then
    return {seq, stored == rid and 1 or 0, rid}
  end
  local n = tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], seqf, n, ridf, rid)
  return {n, 1, rid}
end
return {seq, stored == rid and 1 or 0, rid, stored}
