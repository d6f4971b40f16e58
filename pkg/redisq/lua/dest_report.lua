-- dest_report.lua: the adaptive rate controller (docs/ARCHITECTURE.md §5):
-- takes the outcomes workers counted per destination since their last
-- report and moves each destination's learned rate (AIMD).
-- A throttle multiplies the rate by the decrease factor, by half as much
-- off 1 when the rate was back at the rate of its last decrease, and
-- halves it when it came in a probe (below); a
-- Retry-After stops the destination until then, or, when the report also
-- counts accepted jobs, for as long as the new rate takes to send the
-- throttled ones.
-- KEYS[1]:  dest-rates (ZSET destination -> last report ms)
-- ARGV[1]:  key prefix (P dest-rate:<dest> is built from it)
-- ARGV[2]:  now override in ms ('' = Redis TIME)
-- ARGV[3]:  additive increase, jobs/s per second of accepted reports
-- ARGV[4]:  multiplicative decrease factor (0 < f < 1)
-- ARGV[5]:  floor, jobs/s
-- ARGV[6]:  ceiling, jobs/s (0 = none)
-- ARGV[7]:  decrease hold in ms: at most one decrease per hold
-- ARGV[8]:  most destinations tracked
-- ARGV[9]:  ms after which a destination not reported is forgotten
-- ARGV[10]: longest stop a Retry-After may set, ms
-- ARGV[11]: increase ratio per second (0 = additive only): below the rate
--           of the last decrease the rate grows by this share of the
--           distance to it, above it by this share of the distance beyond
--           it, each second (at least the additive increase); past
--           (1 + (1 − factor)/2) × that rate, by the rate itself (a probe)
-- ARGV[12..]: 4 values per destination: its name, jobs accepted, jobs
--             throttled, and the longest Retry-After in ms (0 = none)
-- Returns: { refused } destinations not tracked because the bound was reached
--
-- State per destination (HASH P dest-rate:<dest>): rate (jobs/s; absent =
-- not learned yet: no limit), inc (ms of the last increase or throttle),
-- dec (ms of the last decrease), stop (ms until which it is stopped), sec,
-- acc (jobs accepted in second sec), prev (in the second before), first
-- (ms of its first report), max (the rate when it last decreased), tacc
-- and tthr (jobs accepted and throttled in all its reports, which the
-- dashboard samples into rates over time).
local prefix = ARGV[1]
local now = now_ms(ARGV[2])
local inc = tonumber(ARGV[3])
local factor = tonumber(ARGV[4])
local rfloor = tonumber(ARGV[5])
local ceiling = tonumber(ARGV[6])
local hold = tonumber(ARGV[7])
local max_dests = tonumber(ARGV[8])
local stale = tonumber(ARGV[9])
local max_stop = tonumber(ARGV[10])
local ratio = tonumber(ARGV[11])

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - stale)
local count = redis.call('ZCARD', KEYS[1])
local refused = {}

local function clamp(r)
  if ceiling > 0 and r > ceiling then r = ceiling end
  if r < rfloor then r = rfloor end
  return r
end

for i = 12, #ARGV, 4 do
  local dest = ARGV[i]
  local accepted, throttled, after = tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local known = redis.call('ZSCORE', KEYS[1], dest)
  if not known and count >= max_dests then
    refused[#refused + 1] = dest
  else
    if not known then count = count + 1 end
    local key = prefix .. 'dest-rate:' .. dest
    local h = redis.call('HMGET', key, 'rate', 'inc', 'dec', 'stop', 'sec', 'acc', 'prev', 'first', 'max', 'tacc', 'tthr')
    local rate, wmax = tonumber(h[1]), tonumber(h[9])
    local t_inc, t_dec, stop = num(h[2]), num(h[3]), num(h[4])
    local sec, acc, prev, first = num(h[5]), num(h[6]), num(h[7]), tonumber(h[8]) or now
    local tacc, tthr = num(h[10]) + accepted, num(h[11]) + throttled
    local s = math.floor(now / 1000)
    if s ~= sec then
      if s == sec + 1 then prev = acc else prev = 0 end
      acc, sec = 0, s
    end
    acc = acc + accepted
    if throttled > 0 then
      if rate == nil then
        -- first throttle: start below what it accepted in the last second
        -- (reported for less than a second: its count so far, per second)
        local seen = math.max(prev, acc)
        if now - first < 1000 then seen = acc * 1000 / math.max(now - first, 200) end
        wmax = seen
        rate = clamp(seen * factor)
        t_dec = now
      elseif now - t_dec >= hold then
        -- back at (or past) the rate of the last decrease: the capacity is
        -- where it was, so half the decrease; below it, the capacity fell
        local f = factor
        local least = 0
        if wmax and ratio > 0 and rate >= wmax * (3 - factor) / 2 then
          -- a probe overshot: half (it doubled each second), not below the
          -- rate of the last decrease, which it passed without a throttle
          f, least = 0.5, wmax
        elseif wmax and rate >= wmax then
          f = (1 + factor) / 2
        end
        wmax = rate
        rate = clamp(math.max(rate * f, least))
        t_dec = now
      end
      t_inc = now
      if after > 0 then
        -- throttles beside accepted jobs are a small overshoot: stop as
        -- long as the new rate takes to send the jobs that were too many;
        -- throttles alone, the whole Retry-After
        local pause = math.min(after, max_stop)
        if accepted > 0 then pause = math.min(pause, math.ceil(throttled * 1000 / rate)) end
        local until_ms = now + pause
        if until_ms > stop then stop = until_ms end
      end
    elseif accepted > 0 and rate ~= nil then
      local dt = math.min(now - t_inc, 1000)
      -- grow only while used at half its rate or more: an idle destination
      -- does not earn a rate it never tried
      if dt > 0 and math.max(acc, prev) * 2 >= rate then
        -- additive, or faster far from the rate of the last decrease: back
        -- to it soon after a decrease (concave), and away from it once the
        -- destination accepts more (convex); slowest near it. Half a decrease's
        -- worth past it (wmax × (1 + (1 − factor)/2), 1.1 × it for 0.8)
        -- with no throttle, the capacity has risen: it grows by itself per
        -- second (probe), as a slow start
        local g = inc
        if wmax and ratio > 0 then
          if rate >= wmax * (3 - factor) / 2 then
            g = math.max(inc, rate)
          else
            g = math.max(inc, ratio * math.abs(wmax - rate))
          end
        end
        rate = clamp(rate + g * dt / 1000)
      end
      if dt > 0 then t_inc = now end
    end
    local fields = { 'inc', t_inc, 'dec', t_dec, 'stop', stop, 'sec', sec, 'acc', acc, 'prev', prev, 'first', first,
      'tacc', tacc, 'tthr', tthr }
    if rate ~= nil then
      fields[#fields + 1] = 'rate'
      fields[#fields + 1] = fmt(rate)
    end
    if wmax ~= nil then
      fields[#fields + 1] = 'max'
      fields[#fields + 1] = fmt(wmax)
    end
    redis.call('HSET', key, unpack(fields))
    redis.call('PEXPIRE', key, stale)
    redis.call('ZADD', KEYS[1], now, dest)
  end
end
return { refused }
