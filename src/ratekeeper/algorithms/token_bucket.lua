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
-- one-token-bucket admits with: {remaining, kept} (stores/lua/one_epilogue.lua's values: the
--       tokens as written, from which token_bucket.py's fast_reset computes reset_after)

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

  -- decide, self-contained (see _common.lua): admitted, the pending state is {left, now}.
  local function decide(key, now, cost, r, b, brief)
    local v = redis.call('HMGET', key, 'tokens', 'last')
    local tokens = b
    local behind = 0  -- how far the clock is behind the state's `last` (refill resumes there)
    local stored = nil
    if v[1] or v[2] then
      stored = v
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
    -- token_bucket.py: Go's nanosecond (NS_TOLERANCE), widened to the float grid of now
    -- (FLOAT_DRIFT = 2^-52)
    if left >= 0 or (-left / r < 1e-9 + math.min(2.0 * math.abs(now) * 2.220446049250313e-16,
                                                 0.25 / r) and cost <= b) then
      local remaining = 0
      if left > 0 then
        remaining = math.floor(left + 1e-9)  -- floor_remaining (EPS)
      end
      -- Like Go, the state is stamped `now` even when the clock went backwards.
      -- (the ttl is write's, with last = now)
      return left, 1, remaining, 0, (b - left) / r, 0, nil, now + (b - left) / r - now, now
    end
    if brief == true and stored then
      return nil, 0, 0, false, 0, 0, stored  -- (see _common.lua)
    end
    local retry = false
    if not (cost > b) then
      retry = behind - left / r  -- the deficit refills at r per second from `last`
    end
    local remaining = 0
    if tokens > 0 then
      remaining = math.floor(tokens + 1e-9)
    end
    return nil, 0, remaining, retry, behind + (b - tokens) / r, 0, stored
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
