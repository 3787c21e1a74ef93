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

  -- _level(): the leaked level at now_ms (>= -1000) and the ms the state would be stamped with.
  local function level_at(state, now_ms, rate)
    if state == nil then
      return -1000, now_ms
    end
    local excess, last = state[1], state[2]
    local ms = now_ms - last
    if ms < -60000 then
      ms = 1
    elseif ms < 0 then
      ms = 0
    end
    local level = excess - idiv(rate * ms, 1000)
    if not (level > -1000) then
      level = -1000
    end
    if ms ~= 0 then
      return level, now_ms
    end
    return level, last
  end

  -- _drain_ms(): whole ms after which excess - rate * ms // 1000 <= -1000 (drained to rest).
  local function drain_ms(excess, rate)
    return -idiv(-(excess + 1000) * 1000, rate)
  end

  local function decide(key, now, cost, rate, burst, threshold)
    local state = load(key)
    local now_ms = round(now * 1000)
    local level, stamp = level_at(state, now_ms, rate)
    local c = round(cost) * 1000
    local excess = level + c
    if excess < 0 then
      excess = 0
    end
    if excess <= burst then
      local delay = 0
      if not (excess <= threshold) then
        delay = idiv((excess - threshold) * 1000, rate) / 1000
      end
      local remaining = idiv(burst - excess, 1000)
      local reset = (stamp + drain_ms(excess, rate)) / 1000 - now  -- until drained to rest
      return {excess, stamp}, 1, remaining, 0, reset, delay
    end
    local retry = false
    if not (c - 1000 > burst) then
      -- Need rate * T // 1000 >= need (T in ms from last); solve for the smallest T.
      local excess0, last = 0, now_ms
      if state ~= nil then
        excess0, last = state[1], state[2]
      end
      local need = excess0 + c - burst
      local wait_ms = -idiv(-need * 1000, rate)
      retry = (last + wait_ms - now_ms) / 1000
      if not (retry > 0) then
        retry = 0  -- max(0.0, x)
      end
    end
    local remaining = idiv(burst - level, 1000)
    if not (remaining > 0) then
      remaining = 0
    end
    -- reset = 0.0 if state is None else max(0.0, ttl(state, now, limit))
    local reset = 0
    if state ~= nil then
      reset = (state[2] + drain_ms(state[1], rate)) / 1000 - now
      if not (reset > 0) then
        reset = 0
      end
    end
    return nil, 0, remaining, retry, reset, 0
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
