-- ratekeeper one-leaky-bucket: the single-limit hot path for leaky-bucket, as one
-- straight-line script. Same KEYS as one.lua (see there), a shorter ARGV (below), one.lua's
-- reply but for rejections on a stored state, and the same arithmetic as leaky_bucket.lua
-- (nginx's integer milli-requests and millisecond clock), which both mirror
-- ratekeeper/algorithms/leaky_bucket.py line by line. It exists for speed: it defines no
-- functions and builds no tables but its reply. tests/integration/test_redis_parity.py
-- checks it against the general script (check.lua), decision by decision, state and expiry
-- by expiry, on the server clock and a client clock.
--
-- KEYS[1]   the state key, a hash {excess = <milli-requests queued, integer>,
--           last = <ms of the last update, integer>}; absent = an idle bucket.
-- ARGV[1]   cost (whole requests). The request is charged if admitted.
-- ARGV[2]   rate, milli-requests per second.   ARGV[3]  burst, milli-requests.
-- ARGV[4]   delay threshold, milli-requests (2^62 for nodelay).
-- ARGV[5]   minimum key expiry, whole ms >= 1; absent = 1.
-- ARGV[6]   now: seconds as a decimal string (client clock); absent or "" = the server
--           clock.   ARGV[7]  grace, whole ms >= 0; absent = 0.
--           (Trailing defaults are left off: every argument costs the server a string.)
-- Reply:    admitted, or rejected on an absent key (a cost above burst + 1): one.lua's
--           {allowed (0/1), remaining (integer), retry_after (nil = never), reset_after,
--           delay}, fractional numbers as '%.17g' strings ('0' for zero); rejected on a
--           stored state: {excess, last (both as stored), now} (now: ARGV[6] as given, or
--           the server's clock as whole microseconds, an integer), from which the client
--           decides as leaky_bucket.py does (its fast_reject: `decide` itself, which
--           rejects too; two floats formatted less).

local now_text, now, now_us = ARGV[6], nil, nil
if now_text == nil or now_text == '' then
  if redis.replicate_commands then
    redis.replicate_commands()  -- Redis < 7: replicate effects, so TIME may precede writes
  end
  local t = redis.call('TIME')
  now_text = nil
  -- exactly tonumber('<s>.<us, 6 digits>') (see _common.lua's clock)
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now = now_us / 1000000
else
  now = tonumber(now_text)
end
local key = KEYS[1]
local cost, rate = tonumber(ARGV[1]), tonumber(ARGV[2])
local burst, threshold = tonumber(ARGV[3]), tonumber(ARGV[4])
local floor, fmod = math.floor, math.fmod

-- now_ms = round(now * 1000), Python's round half to even (_common.lua's round)
local now_ms
do
  local x = now * 1000
  local f = floor(x)
  local d = x - f
  if d > 0.5 or (d == 0.5 and f % 2 ~= 0) then
    now_ms = f + 1
  else
    now_ms = f
  end
end

-- _level: the leaked level at now_ms (>= -1000) and the ms the state would be stamped with
local level, stamp = -1000, now_ms
local v = redis.call('HMGET', key, 'excess', 'last')
if v[1] or v[2] then
  local excess0, last = tonumber(v[1]), tonumber(v[2])
  if excess0 == nil or excess0 ~= excess0 or excess0 == math.huge or excess0 == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': excess is '
      .. tostring(v[1])})
  end
  if last == nil or last ~= last or last == math.huge or last == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': last is '
      .. tostring(v[2])})
  end
  local ms = now_ms - last
  if ms < -60000 then
    ms = 1
  elseif ms < 0 then
    ms = 0
  end
  -- idiv(rate * ms, 1000): Python's //, exact below 2^53 (_common.lua's idiv)
  local a = rate * ms
  local r = fmod(a, 1000)
  local q = (a - r) / 1000
  if r < 0 then
    q = q - 1
  end
  level = excess0 - q
  if not (level > -1000) then
    level = -1000
  end
  if ms == 0 then
    stamp = last
  end
end

-- c = round(cost) * 1000 (costs are whole: round is the identity on them)
local c
do
  local f = floor(cost)
  local d = cost - f
  if d > 0.5 or (d == 0.5 and f % 2 ~= 0) then
    c = (f + 1) * 1000
  else
    c = f * 1000
  end
end
local excess = level + c
if excess < 0 then
  excess = 0
end
if excess <= burst then
  local delay, delay_text = 0, '0'
  if not (excess <= threshold) then
    local a = (excess - threshold) * 1000
    local r = fmod(a, rate)
    local q = (a - r) / rate
    if r < 0 then
      q = q - 1
    end
    delay = q / 1000
    if delay ~= 0 then
      delay_text = string.format('%.17g', delay)
    end
  end
  local remaining
  do
    local a = burst - excess
    local r = fmod(a, 1000)
    remaining = (a - r) / 1000
    if r < 0 then
      remaining = remaining - 1
    end
  end
  -- drain_ms(excess) = -idiv(-(excess + 1000) * 1000, rate): whole ms to drain to rest
  local drain
  do
    local a = -(excess + 1000) * 1000
    local r = fmod(a, rate)
    local q = (a - r) / rate
    if r < 0 then
      q = q - 1
    end
    drain = -q
  end
  local reset = (stamp + drain) / 1000 - now  -- until drained to rest: the ttl too
  local excess_text, stamp_text = '0', '0'
  if excess ~= 0 then
    excess_text = string.format('%.17g', excess)
  end
  if stamp ~= 0 then
    stamp_text = string.format('%.17g', stamp)
  end
  redis.call('HSET', key, 'excess', excess_text, 'last', stamp_text)
  -- expiry_ms(ttl): ceil to ms, plus the grace, at least the minimum
  local ms = math.ceil(reset * 1000) + tonumber(ARGV[7] or 0)
  local min_ms = tonumber(ARGV[5] or 1)
  if not (ms >= min_ms) then
    ms = min_ms
  end
  redis.call('PEXPIRE', key, ms)
  local reset_text = '0'
  if reset ~= 0 then
    reset_text = string.format('%.17g', reset)
  end
  return {1, remaining, '0', reset_text, delay_text}
end
if v[1] then
  return {v[1], v[2], now_text or now_us}  -- rejected: the state it was decided on
end
-- rejected on an absent key: c - 1000 > burst, a cost even an idle bucket cannot take
local remaining
do
  local a = burst - level
  local r = fmod(a, 1000)
  remaining = (a - r) / 1000
  if r < 0 then
    remaining = remaining - 1
  end
end
if not (remaining > 0) then
  remaining = 0
end
return {0, remaining, false, '0', '0'}
