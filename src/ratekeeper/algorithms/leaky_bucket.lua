-- leaky-bucket (algorithm id 3): mirrors ratekeeper/algorithms/leaky_bucket.py line by line,
-- which is nginx 1.22 limit_req arithmetic: integer milli-requests and a millisecond clock.
-- All values here are whole numbers held in doubles, exact below 2^53; `idiv` is Python's //.
--
-- KEYS: the state key, a hash {excess = <milli-requests queued, integer>,
--       last = <ms of the last update, integer>}; absent = an idle bucket.
-- ARGV: p1 = rate in milli-requests per second (leaky_bucket.params: int(per_second*1000+EPS))
--       p2 = burst in milli-requests (burst * 1000)
--       p3 = delay threshold in milli-requests (delay * 1000; 2^62 for nodelay)
-- decide: now_ms = round(now * 1000); excess = max(level(now_ms), -1000) + 1000 * cost,
--       clamped at 0; allowed iff excess <= burst, with delay (excess - threshold) / rate
--       when excess > threshold. retry_after: when enough has leaked (false when
--       cost - 1 > burst requests: never).
-- ttl:  (last + ceil((excess + 1000) * 1000 / rate)) / 1000 - now: the time to drain to
--       rest, counted in whole ms as decide leaks.

ALGOS[3] = function()  -- built on first use (see _common.lua)
  local function load(key)
    return load_fields(key, 'excess', 'last')
  end

  -- _drain_ms(): whole ms after which excess - rate * ms // 1000 <= -1000 (drained to rest).
  local function drain_ms(excess, rate)
    return -idiv(-(excess + 1000) * 1000, rate)
  end

  -- decide, self-contained (see _common.lua; `round` and `idiv` written out): admitted, the
  -- pending state is {excess, stamp}.
  local function decide(key, now, cost, rate, burst, threshold, brief)
    local floor, fmod = math.floor, math.fmod
    -- now_ms = round(now * 1000), Python's round half to even
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
    local stored, excess0, last = nil, 0, now_ms
    if v[1] or v[2] then
      stored = v
      excess0, last = tonumber(v[1]), tonumber(v[2])
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
      -- idiv(rate * ms, 1000): Python's //, exact below 2^53
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
    -- c = round(cost) * 1000
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
      local delay = 0
      if not (excess <= threshold) then
        local a = (excess - threshold) * 1000  -- idiv(a, rate) / 1000
        local r = fmod(a, rate)
        local q = (a - r) / rate
        if r < 0 then
          q = q - 1
        end
        delay = q / 1000
      end
      local remaining  -- idiv(burst - excess, 1000)
      do
        local a = burst - excess
        local r = fmod(a, 1000)
        remaining = (a - r) / 1000
        if r < 0 then
          remaining = remaining - 1
        end
      end
      local drain  -- drain_ms(excess) = -idiv(-(excess + 1000) * 1000, rate)
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
      return excess, 1, remaining, 0, reset, delay, nil, reset, stamp
    end
    if brief == true and stored then
      return nil, 0, 0, false, 0, 0, stored  -- (see _common.lua)
    end
    local retry = false
    if not (c - 1000 > burst) then
      -- Need rate * T // 1000 >= need (T in ms from last); solve for the smallest T:
      -- wait_ms = -idiv(-need * 1000, rate)
      local a = -(excess0 + c - burst) * 1000
      local r = fmod(a, rate)
      local q = (a - r) / rate
      if r < 0 then
        q = q - 1
      end
      retry = (last - q - now_ms) / 1000
      if not (retry > 0) then
        retry = 0  -- max(0.0, x)
      end
    end
    local remaining  -- max(0, idiv(burst - level, 1000))
    do
      local a = burst - level
      local r = fmod(a, 1000)
      remaining = (a - r) / 1000
      if r < 0 then
        remaining = remaining - 1
      end
      if not (remaining > 0) then
        remaining = 0
      end
    end
    -- reset = 0.0 if state is None else max(0.0, ttl(state, now, limit))
    local reset = 0
    if stored then
      local a = -(excess0 + 1000) * 1000  -- drain_ms(excess0)
      local r = fmod(a, rate)
      local q = (a - r) / rate
      if r < 0 then
        q = q - 1
      end
      reset = (last - q) / 1000 - now
      if not (reset > 0) then
        reset = 0
      end
    end
    return nil, 0, remaining, retry, reset, 0, stored
  end

  local function write(key, s, now, rate)
    redis.call('HSET', key, 'excess', fmt(s[1]), 'last', fmt(s[2]))
    redis.call('PEXPIRE', key, expiry_ms((s[2] + drain_ms(s[1], rate)) / 1000 - now))
  end

  local function refund(key, now, cost, at, rate)
    local state = load(key)
    if state == nil then
      return
    end
    local excess = state[1] - round(cost) * 1000
    if not (excess > -1000) then
      excess = -1000
    end
    write(key, {excess, state[2]}, now, rate)
  end

  return {decide = decide, write = write, refund = refund}
end
