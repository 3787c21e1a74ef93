-- fixed-window (algorithm id 4): mirrors ratekeeper/algorithms/fixed_window.py line by line.
--
-- KEYS: the state key, a hash {k = <window index, integer>, used = <cost admitted in window k>};
--       windows are [k*P, (k+1)*P) on the clock's scale (the Unix epoch on the server clock).
-- ARGV: p1 = N, the cost admitted per window (Limit.capacity, float)
--       p2 = P, the window length in seconds (Limit.period, float); p3 unused.
-- decide: allowed iff used + cost <= N; retry_after = the next window's start - now (false
--       when cost > N). A clock gone back into an earlier window keeps counting in window k.
-- ttl:  (k + 1) * P - now.

ALGOS[4] = function()  -- built on first use (see _common.lua)
  local function load(key)
    return load_fields(key, 'k', 'used')
  end

  -- decide, self-contained (see _common.lua): admitted, the pending state is {k, used}.
  local function decide(key, now, cost, n, p, brief)
    local k = math.floor(now / p + 1e-9)  -- EPS
    local used = 0
    local v = redis.call('HMGET', key, 'k', 'used')
    local stored = nil
    if v[1] or v[2] then
      stored = v
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
    if used + cost <= n + 1e-9 then
      used = used + cost
      local remaining = 0
      if n - used > 0 then
        remaining = math.floor(n - used + 1e-9)  -- floor_remaining (EPS)
      end
      return k, 1, remaining, 0, reset, 0, nil, reset, used
    end
    if brief == true and stored then
      return nil, 0, 0, false, 0, 0, stored  -- (see _common.lua)
    end
    local retry = false
    if not (cost > n) then
      retry = reset
    end
    local reset_after = 0
    if used ~= 0 then
      reset_after = reset
    end
    local remaining = 0
    if n - used > 0 then
      remaining = math.floor(n - used + 1e-9)
    end
    return nil, 0, remaining, retry, reset_after, 0, stored
  end

  local function write(key, s, now, n, p)
    redis.call('HSET', key, 'k', fmt(s[1]), 'used', fmt(s[2]))
    redis.call('PEXPIRE', key, expiry_ms((s[1] + 1) * p - now))
  end

  local function refund(key, now, cost, at, n, p)
    local state = load(key)
    if state == nil then
      return
    end
    local k, used = state[1], state[2]
    local ak = floor(at / p + EPS)
    if ak < k and floor(now / p + EPS) < k then
      ak = k  -- the clock was (and is) behind the stored window: the cost went there
    end
    if ak ~= k then
      -- admitted in an earlier window: that quota has already reset. The state is kept as
      -- it is, with a fresh expiry like every refund (`now` may be behind the last write).
      redis.call('PEXPIRE', key, expiry_ms((k + 1) * p - now))
      return
    end
    used = used - cost
    if used > EPS then
      write(key, {k, used}, now, n, p)
      return
    end
    redis.call('DEL', key)
  end

  return {decide = decide, write = write, refund = refund}
end
