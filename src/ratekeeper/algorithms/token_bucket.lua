-- token-bucket (algorithm id 1): mirrors ratekeeper/algorithms/token_bucket.py line by line
-- (Go golang.org/x/time/rate AllowN with explicit times).
--
-- KEYS: the state key, a hash {tokens = <tokens at `last`, float>, last = <seconds, float>};
--       absent = a full bucket.
-- ARGV: p1 = r, refill rate in tokens per second (Limit.per_second, float)
--       p2 = b, capacity in tokens (Limit.capacity, float); p3 unused.
-- decide: allowed iff the tokens at `now` are >= cost (less than 1 ns of refill short counts);
--       an admission stamps the state with `now`, even when the clock is behind `last` (Go).
--       retry_after = behind + (cost - tokens) / r, false when cost > b; reset_after =
--       (b - left) / r when admitted, behind + (b - tokens) / r when rejected, where
--       behind = last - now when the clock is behind (no refill then), else 0.
-- ttl:  last + (b - tokens) / r - now, the time until the bucket is full again.

ALGOS[1] = function()  -- built on first use (see _common.lua)
  local function load(key)
    return load_fields(key, 'tokens', 'last')
  end

  -- _tokens() (used by refund): the tokens at `now` and the time they refer to
  -- (advance() in rate.go).
  local function tokens_at(state, now, r, b)
    if state == nil then
      return b, now
    end
    local tokens, last = state[1], state[2]
    if now < last then
      return tokens, last  -- clock went backwards: no time passed, `last` stays
    end
    tokens = tokens + (now - last) * r
    if tokens > b then
      return b, now
    end
    return tokens, now
  end

  local function decide(key, now, cost, r, b)
    local state = load(key)
    local tokens
    local behind = 0  -- how far the clock is behind the state's `last` (refill resumes there)
    if state == nil then
      tokens = b
    else
      local last
      tokens, last = state[1], state[2]
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
    -- token_bucket.py: Go's nanosecond, widened to the float grid of now
    if left >= 0 or (-left / r < NS_TOLERANCE + math.min(2.0 * math.abs(now) * FLOAT_DRIFT,
                                                         0.25 / r) and cost <= b) then
      -- Like Go, the state is stamped `now` even when the clock went backwards.
      return {left, now}, 1, floor_remaining(left), 0, (b - left) / r, 0
    end
    local retry = false
    if not (cost > b) then
      retry = behind - left / r  -- the deficit refills at r per second from `last`
    end
    return nil, 0, floor_remaining(tokens), retry, behind + (b - tokens) / r, 0
  end

  local function write(key, s, now, r, b)
    redis.call('HSET', key, 'tokens', fmt(s[1]), 'last', fmt(s[2]))
    redis.call('PEXPIRE', key, expiry_ms(s[2] + (b - s[1]) / r - now))
  end

  local function refund(key, now, cost, at, r, b)
    local state = load(key)
    if state == nil then
      return
    end
    local tokens, t = tokens_at(state, now, r, b)
    tokens = tokens + cost
    if tokens >= b then
      redis.call('DEL', key)
      return
    end
    write(key, {tokens, t}, now, r, b)
  end

  return {decide = decide, write = write, refund = refund}
end
