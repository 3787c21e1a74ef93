-- gcra (algorithm id 2): mirrors ratekeeper/algorithms/gcra.py line by line.
--
-- KEYS: the state key, a string: tat, the theoretical arrival time (seconds, float), the
--       instant the bucket is full again; absent (or tat <= now) = a full bucket.
-- ARGV: p1 = r, tokens per second (Limit.per_second, float)
--       p2 = b, capacity in tokens (Limit.capacity, float); p3 unused.
-- decide: tokens(now) = b - max(0, tat - now) * r; allowed iff tokens >= cost (with Go's
--       1 ns tolerance), then tat' = max(tat, now) + cost / r. retry_after = (cost - tokens) / r,
--       false when cost > b; reset_after = tat' - now.
-- ttl:  tat - now.
-- one-gcra admits with: {remaining, kept, now_out} (stores/lua/one_epilogue.lua's values:
--       the tat as written and now, from which gcra.py's fast_reset computes reset_after)

ALGOS[2] = function()  -- built on first use (see _common.lua)
  local function load(key)
    local v = redis.call('GET', key)
    if not v then
      return nil
    end
    return num(v, key, 'tat')
  end

  -- decide, self-contained (see _common.lua): admitted, the pending state is {tat}.
  local function decide(key, now, cost, r, b, brief)
    local v = redis.call('GET', key)
    local tat = now
    if v then
      local stored = tonumber(v)
      if stored == nil or stored ~= stored or stored == math.huge or stored == -math.huge then
        error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': tat is ' .. tostring(v)})
      end
      if not (stored < now) then
        tat = stored
      end
    end
    local tokens = b - (tat - now) * r  -- a full bucket minus the debt not yet refilled
    local left = tokens - cost
    -- gcra.py: Go's nanosecond (NS_TOLERANCE), widened by the rounding a Unix-time tat
    -- accumulates (FLOAT_DRIFT = 2^-52)
    if left >= 0 or (-left / r < 1e-9 + math.min((b + 2.0) * math.abs(tat) * 2.220446049250313e-16,
                                                 0.25 / r) and cost <= b) then
      tat = tat + cost / r
      local remaining = 0
      if left > 0 then
        remaining = math.floor(left + 1e-9)  -- floor_remaining (EPS)
      end
      return tat, 1, remaining, 0, tat - now, 0, nil, tat - now
    end
    if brief == true and v then
      return nil, 0, 0, false, 0, 0, v  -- (see _common.lua)
    end
    local retry = false
    if not (cost > b) then
      retry = -left / r
    end
    local remaining = 0
    if tokens > 0 then
      remaining = math.floor(tokens + 1e-9)
    end
    return nil, 0, remaining, retry, tat - now, 0, v or nil
  end

  local function write(key, s, now)
    redis.call('SET', key, fmt(s[1]), 'PX', expiry_ms(s[1] - now))
  end

  local function refund(key, now, cost, at, r, b)
    local tat = load(key)
    if tat == nil then
      return
    end
    tat = tat - cost / r
    if tat <= now then
      redis.call('DEL', key)
      return
    end
    write(key, {tat}, now)
  end

  return {decide = decide, write = write, refund = refund}
end
