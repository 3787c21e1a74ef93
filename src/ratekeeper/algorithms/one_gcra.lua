-- ratekeeper one-gcra: the single-limit hot path for gcra, as one straight-line script.
-- Same KEYS as one.lua (see there), a shorter ARGV and reply (below), and the same
-- arithmetic as gcra.lua, which both mirror ratekeeper/algorithms/gcra.py line by line.
-- It exists for speed: Redis runs a script's whole body on every EVALSHA, so this one
-- defines no functions and builds no tables but its reply (one.lua + _common.lua + gcra.lua
-- create about 15 closures per call). tests/integration/test_redis_parity.py checks it
-- against the Python and against the general script (check.lua), decision by decision,
-- state and expiry by expiry, on the server clock and a client clock. The client side of
-- its short reply is gcra.py's fast_reset.
--
-- KEYS[1]   the state key, a string: tat (seconds, '%.17g'); absent = a full bucket.
-- ARGV[1]   cost. The request is charged if admitted.
-- ARGV[2]   r, tokens per second (float).   ARGV[3]  b, capacity (float).
-- ARGV[4]   minimum key expiry, whole ms >= 1; absent = 1.
-- ARGV[5]   now: seconds as a decimal string (client clock); absent or "" = the server
--           clock.   ARGV[6]  grace, whole ms >= 0; absent = 0.
--           (Trailing defaults are left off: every argument costs the server a string on
--           each call, so a server-clock store sends only ARGV[1..3].)
-- Reply:    admitted: {remaining (integer), tat, now} (retry_after and delay are 0;
--           reset_after = tat - now, computed by the client: one float formatted less here):
--           now is ARGV[5] as given, or the server's clock as whole microseconds (an integer);
--           rejected, the key holding a tat: {tat as stored, now} (the client computes
--           remaining, retry_after and reset_after from them as gcra.py does: gcra.py's
--           fast_reject; two floats formatted less); rejected on an absent key (a cost
--           above the capacity): {0, remaining, retry_after (nil = never), reset_after,
--           delay}, as one.lua. Fractional numbers as '%.17g' strings ('0' for zero).

local now_text, now, now_us = ARGV[5], nil, nil
if now_text == nil or now_text == '' then
  if redis.replicate_commands then
    redis.replicate_commands()  -- Redis < 7: replicate effects, so TIME may precede writes
  end
  local t = redis.call('TIME')
  now_text = nil
  -- exactly tonumber('<s>.<us, 6 digits>'), without formatting it: an integer below 2^53
  -- divided by 10^6, rounded once, like the decimal read correctly rounded
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now = now_us / 1000000
else
  now = tonumber(now_text)
end
local key = KEYS[1]
local cost, r, b = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local tat = nil
local v = redis.call('GET', key)
if v then
  tat = tonumber(v)
  if tat == nil or tat ~= tat or tat == math.huge or tat == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': tat is ' .. tostring(v)})
  end
end
if tat == nil or tat < now then
  tat = now
end
local tokens = b - (tat - now) * r  -- a full bucket minus the debt not yet refilled
local left = tokens - cost
-- NS_TOLERANCE + min((b + 2) * |tat| * FLOAT_DRIFT, 0.25 / r), as gcra.py
if left >= 0 or (-left / r < 1e-9 + math.min((b + 2.0) * math.abs(tat) * 2.220446049250313e-16,
                                             0.25 / r) and cost <= b) then
  tat = tat + cost / r
  local tat_text = string.format('%.17g', tat)
  local reset = tat - now  -- the expiry's; the client's reset_after is the same difference
  do
    -- expiry_ms(tat - now): ceil to ms, plus the grace, at least the minimum
    local ms = math.ceil(reset * 1000) + tonumber(ARGV[6] or 0)
    local min_ms = tonumber(ARGV[4] or 1)
    if not (ms >= min_ms) then
      ms = min_ms
    end
    redis.call('SET', key, tat_text, 'PX', ms)
  end
  local rem = 0
  if left > 0 then
    rem = math.floor(left + 1e-9)  -- floor_remaining
  end
  return {rem, tat_text, now_text or now_us}
end
if v then
  return {v, now_text or now_us}  -- rejected: the state it was decided on (see Reply)
end
local retry = false
if not (cost > b) then
  retry = string.format('%.17g', -left / r)
end
local rem = 0
if tokens > 0 then
  rem = math.floor(tokens + 1e-9)
end
local reset_text = '0'
if tat - now ~= 0 then
  reset_text = string.format('%.17g', tat - now)
end
return {0, rem, retry, reset_text, '0'}
