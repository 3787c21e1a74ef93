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

ALGOS[2] = function()  -- built on first use (see _common.lua)
  local function load(key)
    local v = redis.call('GET', key)
    if not v then
      return nil
    end
    return num(v, key, 'tat')
  end

  local function decide(key, now, cost, r, b)
    local tat = load(key)
    if tat == nil or tat < now then
      tat = now
    end
    local tokens = b - (tat - now) * r  -- a full bucket minus the debt not yet refilled
    local left = tokens - cost
    -- gcra.py: Go's nanosecond, widened by the rounding a Unix-time tat accumulates
    if left >= 0 or (-left / r < NS_TOLERANCE + math.min((b + 2.0) * math.abs(tat) * FLOAT_DRIFT,
                                                         0.25 / r) and cost <= b) then
      tat = tat + cost / r
      return tat, 1, floor_remaining(left), 0, tat - now, 0
    end
    local retry = false
    if not (cost > b) then
      retry = -left / r
    end
    return nil, 0, floor_remaining(tokens), retry, tat - now, 0
  end

  local function write(key, tat, now)
    redis.call('SET', key, fmt(tat), 'PX', expiry_ms(tat - now))
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
    write(key, tat, now)
  end

  return {decide = decide, write = write, refund = refund}
end
