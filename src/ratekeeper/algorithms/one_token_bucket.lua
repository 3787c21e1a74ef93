-- ratekeeper one-token-bucket: the single-limit hot path for token-bucket, as one
-- straight-line script. Same KEYS as one.lua (see there), a shorter ARGV and reply
-- (below), and the same arithmetic as token_bucket.lua, which both mirror
-- ratekeeper/algorithms/token_bucket.py line by line. It exists for speed: Redis runs a
-- script's whole body on every EVALSHA, so this one defines no functions and builds no
-- tables but its reply. tests/integration/test_redis_parity.py checks it against the Python
-- and against the general script (check.lua), decision by decision, state and expiry by
-- expiry, on the server clock and a client clock. The client side of its short reply is
-- token_bucket.py's fast_reset.
--
-- KEYS[1]   the state key, a hash {tokens = <tokens at `last`>, last = <seconds>}, floats;
--           absent = a full bucket.
-- ARGV[1]   cost. The request is charged if admitted.
-- ARGV[2]   r, tokens per second (float).   ARGV[3]  b, capacity (float).
-- ARGV[4]   minimum key expiry, whole ms >= 1; absent = 1.
-- ARGV[5]   now: seconds as a decimal string (client clock); absent or "" = the server
--           clock.   ARGV[6]  grace, whole ms >= 0; absent = 0.
--           (Trailing defaults are left off: every argument costs the server a string on
--           each call, so a server-clock store sends only ARGV[1..3].)
-- Reply:    admitted: {remaining (integer), left} (retry_after and delay are 0;
--           reset_after = (b - left) / r, computed by the client: one float formatted less
--           here); rejected, the key holding a state: {tokens, last (both as stored), now}
--           (now: ARGV[5] as given, or the server's clock as whole microseconds, an
--           integer; the client computes remaining, retry_after and reset_after from them as
--           token_bucket.py does: its fast_reject; two floats formatted less); rejected on
--           an absent key (a cost above the capacity): {0, remaining, retry_after (nil =
--           never), reset_after, delay}, as one.lua. Fractional numbers as '%.17g' strings
--           ('0' for zero).

local now_text, now, t = ARGV[5], nil, nil
if now_text == nil or now_text == '' then
  if redis.replicate_commands then
    redis.replicate_commands()  -- Redis < 7: replicate effects, so TIME may precede writes
  end
  t = redis.call('TIME')
  now_text = nil
  -- exactly tonumber('<s>.<us, 6 digits>'), without formatting it: an integer below 2^53
  -- divided by 10^6, rounded once, like the decimal read correctly rounded
  now = (tonumber(t[1]) * 1000000 + tonumber(t[2])) / 1000000
else
  now = tonumber(now_text)
end
local key = KEYS[1]
local cost, r, b = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])

local tokens = b
local behind = 0  -- how far the clock is behind the state's `last` (refill resumes there)
local v = redis.call('HMGET', key, 'tokens', 'last')
if v[1] or v[2] then
  local last
  tokens, last = tonumber(v[1]), tonumber(v[2])
  if tokens == nil or tokens ~= tokens or tokens == math.huge or tokens == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': tokens is '
      .. tostring(v[1])})
  end
  if last == nil or last ~= last or last == math.huge or last == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': last is '
      .. tostring(v[2])})
  end
  if now >= last then
    tokens = tokens + (now - last) * r
    if tokens > b then
      tokens = b
    end
  else  -- a clock going backwards refills nothing
    behind = last - now
  end
end
local left = tokens - cost
-- NS_TOLERANCE + min(2 * |now| * FLOAT_DRIFT, 0.25 / r), as token_bucket.py
if left >= 0 or (-left / r < 1e-9 + math.min(2.0 * math.abs(now) * 2.220446049250313e-16,
                                             0.25 / r) and cost <= b) then
  -- Like Go, the state is stamped `now` even when the clock went backwards.
  local left_text = string.format('%.17g', left)
  do
    redis.call('HSET', key, 'tokens', left_text, 'last',
      now_text or string.format('%s.%06d', t[1], t[2]))
    -- expiry_ms(ttl): ceil to ms, plus the grace, at least the minimum; the ttl
    -- last + (b - tokens) / r - now with last = now
    local ms = math.ceil((now + (b - left) / r - now) * 1000) + tonumber(ARGV[6] or 0)
    local min_ms = tonumber(ARGV[4] or 1)
    if not (ms >= min_ms) then
      ms = min_ms
    end
    redis.call('PEXPIRE', key, ms)
  end
  local rem = 0
  if left > 0 then
    rem = math.floor(left + 1e-9)  -- floor_remaining
  end
  return {rem, left_text}
end
if v[1] then  -- rejected: the state it was decided on (see Reply)
  return {v[1], v[2], now_text or (tonumber(t[1]) * 1000000 + tonumber(t[2]))}
end
local retry = false
if not (cost > b) then
  local x = behind - left / r
  retry = '0'
  if x ~= 0 then
    retry = string.format('%.17g', x)
  end
end
local rem = 0
if tokens > 0 then
  rem = math.floor(tokens + 1e-9)
end
local reset = behind + (b - tokens) / r
local reset_text = '0'
if reset ~= 0 then
  reset_text = string.format('%.17g', reset)
end
return {0, rem, retry, reset_text, '0'}
