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

  local function decide(key, now, cost, n, p)
    local k = floor(now / p + EPS)
    local used = 0
    local state = load(key)
    if state ~= nil and state[1] >= k then
      k, used = state[1], state[2]
    end
    local reset = (k + 1) * p - now
    if used + cost <= n + EPS then
      used = used + cost
      return {k, used}, 1, floor_remaining(n - used), 0, reset, 0
    end
    local retry = false
    if not (cost > n) then
      retry = reset
    end
    local reset_after = 0
    if used ~= 0 then
      reset_after = reset
    end
    return nil, 0, floor_remaining(n - used), retry, reset_after, 0
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
