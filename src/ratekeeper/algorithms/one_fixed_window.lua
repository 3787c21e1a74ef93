-- ratekeeper one-fixed-window: the single-limit hot path for fixed-window, as one
-- straight-line script. Same KEYS as one.lua (see there), a shorter ARGV (below), one.lua's
-- reply, and the same arithmetic as fixed_window.lua, which both mirror
-- ratekeeper/algorithms/fixed_window.py line by line. It exists for speed: Redis runs a
-- script's whole body on every EVALSHA, so this one defines no functions and builds no
-- tables but its reply, reads TIME without formatting it, and formats a number shared by
-- two reply fields once. tests/integration/test_redis_parity.py checks it against the
-- general script (check.lua), decision by decision, state and expiry by expiry, on the
-- server clock and a client clock.
--
-- KEYS[1]   the state key, a hash {k = <window index>, used = <cost admitted in window k>}.
-- ARGV[1]   cost. The request is charged if admitted.
-- ARGV[2]   N, the cost admitted per window (float).   ARGV[3]  P, the period (seconds).
-- ARGV[4]   minimum key expiry, whole ms >= 1; absent = 1.
-- ARGV[5]   now: seconds as a decimal string (client clock); absent or "" = the server
--           clock.   ARGV[6]  grace, whole ms >= 0; absent = 0.
--           (Trailing defaults are left off: every argument costs the server a string.)
-- Reply:    one.lua's: {allowed (0/1), remaining (integer), retry_after (nil = never),
--           reset_after, delay}; fractional numbers as '%.17g' strings ('0' for zero);
--           except a rejection on a stored state: {k, used (both as stored), now} (now:
--           ARGV[5] as given, or the server's clock as whole microseconds, an integer), from
--           which the client computes the decision as fixed_window.py does (its
--           fast_reject; a float formatted less).

local now_text, now, now_us = ARGV[5], nil, nil
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
local cost, n, p = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local k = math.floor(now / p + 1e-9)  -- EPS
local used = 0
local v = redis.call('HMGET', key, 'k', 'used')
if v[1] or v[2] then
  local sk, su = tonumber(v[1]), tonumber(v[2])
  if sk == nil or sk ~= sk or sk == math.huge or sk == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': k is ' .. tostring(v[1])})
  end
  if su == nil or su ~= su or su == math.huge or su == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': used is '
      .. tostring(v[2])})
  end
  if sk >= k then  -- same window, or the clock went back into an earlier one
    k, used = sk, su
  end
end
local reset = (k + 1) * p - now
if not (used + cost <= n + 1e-9) and v[1] then
  return {v[1], v[2], now_text or now_us}  -- rejected: the state it was decided on
end
local reset_text = '0'
if reset ~= 0 then
  reset_text = string.format('%.17g', reset)
end
if used + cost <= n + 1e-9 then
  used = used + cost
  local k_text, used_text = '0', '0'
  if k ~= 0 then
    k_text = string.format('%.17g', k)
  end
  if used ~= 0 then
    used_text = string.format('%.17g', used)
  end
  redis.call('HSET', key, 'k', k_text, 'used', used_text)
  -- expiry_ms(ttl): ceil to ms, plus the grace, at least the minimum; ttl = reset
  local ms = math.ceil(reset * 1000) + tonumber(ARGV[6] or 0)
  local min_ms = tonumber(ARGV[4] or 1)
  if not (ms >= min_ms) then
    ms = min_ms
  end
  redis.call('PEXPIRE', key, ms)
  local rem = 0
  if n - used > 0 then
    rem = math.floor(n - used + 1e-9)  -- floor_remaining
  end
  return {1, rem, '0', reset_text, '0'}
end
local retry = false
if not (cost > n) then
  retry = reset_text
end
local rem = 0
if n - used > 0 then
  rem = math.floor(n - used + 1e-9)
end
if used == 0 then
  reset_text = '0'
end
return {0, rem, retry, reset_text, '0'}
