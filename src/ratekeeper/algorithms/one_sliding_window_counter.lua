-- ratekeeper one-sliding-window-counter: the single-limit hot path for
-- sliding-window-counter, as one straight-line script. Same KEYS as one.lua (see there), a
-- shorter ARGV (below), one.lua's reply, and the same arithmetic as
-- sliding_window_counter.lua, which both mirror ratekeeper/algorithms/sliding_window_counter.py
-- line by line. It exists for speed: Redis runs a script's whole body on every EVALSHA, so
-- this one defines no functions and builds no tables but its reply, and reads TIME without
-- formatting it. tests/integration/test_redis_parity.py checks it against the general script
-- (check.lua), decision by decision, state and expiry by expiry, on the server clock and a
-- client clock.
--
-- KEYS[1]   the state key, a hash {k = <current window index>, prev = <cost admitted in
--           window k-1>, curr = <cost admitted in window k>}.
-- ARGV[1]   cost. The request is charged if admitted.
-- ARGV[2]   N, cost per period (float).   ARGV[3]  P, the period (seconds).
-- ARGV[4]   minimum key expiry, whole ms >= 1; absent = 1.
-- ARGV[5]   now: seconds as a decimal string (client clock); absent or "" = the server
--           clock.   ARGV[6]  grace, whole ms >= 0; absent = 0.
--           (Trailing defaults are left off: every argument costs the server a string.)
-- Reply:    one.lua's: {allowed (0/1), remaining (integer), retry_after (nil = never),
--           reset_after, delay}; fractional numbers as '%.17g' strings ('0' for zero);
--           except a rejection on a stored state: {k, prev, curr (as stored), now} (now:
--           ARGV[5] as given, or the server's clock as whole microseconds, an integer), from
--           which the client computes the decision as sliding_window_counter.py does (its
--           fast_reject; two floats formatted less).

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

-- roll: the stored windows as seen from now's window
local k = math.floor(now / p + 1e-9)  -- EPS
local prev, curr = 0, 0
local v = redis.call('HMGET', key, 'k', 'prev', 'curr')
if v[1] or v[2] or v[3] then
  local sk, sp, sc = tonumber(v[1]), tonumber(v[2]), tonumber(v[3])
  if sk == nil or sk ~= sk or sk == math.huge or sk == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': k is ' .. tostring(v[1])})
  end
  if sp == nil or sp ~= sp or sp == math.huge or sp == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': prev is '
      .. tostring(v[2])})
  end
  if sc == nil or sc ~= sc or sc == math.huge or sc == -math.huge then
    error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': curr is '
      .. tostring(v[3])})
  end
  if k == sk then
    prev, curr = sp, sc
  elseif k == sk + 1 then
    prev = sc
  elseif not (k > sk) then
    k, prev, curr = sk, sp, sc  -- clock went back into an earlier window: keep the stored one
  end
end
-- estimate
local elapsed = now - k * p
if elapsed < 0 then
  elapsed = 0
end
local est = prev * (p - elapsed) / p + curr
if not (est + cost <= n + 1e-9) and v[1] then
  return {v[1], v[2], v[3], now_text or now_us}  -- rejected: the state it was decided on
end
local start = k * p
if est + cost <= n + 1e-9 then
  curr = curr + cost
  local reset
  local w = 1
  if curr ~= 0 then
    reset = start + 2 * p - now
    w = 2
  else
    reset = start + p - now
  end
  local k_text, prev_text, curr_text = '0', '0', '0'
  if k ~= 0 then
    k_text = string.format('%.17g', k)
  end
  if prev ~= 0 then
    prev_text = string.format('%.17g', prev)
  end
  if curr ~= 0 then
    curr_text = string.format('%.17g', curr)
  end
  redis.call('HSET', key, 'k', k_text, 'prev', prev_text, 'curr', curr_text)
  -- expiry_ms(ttl): ceil to ms, plus the grace, at least the minimum
  local ms = math.ceil(((k + w) * p - now) * 1000) + tonumber(ARGV[6] or 0)
  local min_ms = tonumber(ARGV[4] or 1)
  if not (ms >= min_ms) then
    ms = min_ms
  end
  redis.call('PEXPIRE', key, ms)
  local rem = 0
  if n - est - cost > 0 then
    rem = math.floor(n - est - cost + 1e-9)  -- floor_remaining
  end
  local reset_text = '0'
  if reset ~= 0 then
    reset_text = string.format('%.17g', reset)
  end
  return {1, rem, '0', reset_text, '0'}
end
local retry = false
if cost <= n then
  local x
  if curr + cost <= n then
    -- prev * (P - e) / P <= N - curr - c  =>  e >= P - (N - curr - c) * P / prev
    local e = p - (n - curr - cost) * p / prev
    x = start + e - now
  else
    -- next window: curr * (P - e) / P + c <= N  =>  e >= P - (N - c) * P / curr
    local e = p - (n - cost) * p / curr
    x = start + p + e - now
  end
  retry = '0'
  if x > 0 then  -- max(retry, 0.0)
    retry = string.format('%.17g', x)
  end
end
local reset
if curr ~= 0 then
  reset = start + 2 * p - now
elseif prev ~= 0 then
  reset = start + p - now
else
  reset = now - now
end
local reset_text = '0'
if reset ~= 0 then
  reset_text = string.format('%.17g', reset)
end
local rem = 0
if n - est > 0 then
  rem = math.floor(n - est + 1e-9)
end
return {0, rem, retry, reset_text, '0'}
