-- sliding-window-counter (algorithm id 6): mirrors
-- ratekeeper/algorithms/sliding_window_counter.py line by line (Cloudflare's estimate).
--
-- KEYS: the state key, a hash {k = <current window index>, prev = <cost admitted in window
--       k-1>, curr = <cost admitted in window k>}; windows are [k*P, (k+1)*P).
-- ARGV: p1 = N, cost per period (Limit.capacity, float)
--       p2 = P, the period in seconds (Limit.period, float); p3 unused.
-- decide: estimate = prev * (P - elapsed) / P + curr (elapsed = now - k*P); allowed iff
--       estimate + cost <= N. retry_after solves the estimate for the earliest time the cost
--       fits (false when cost > N).
-- ttl:  (k + 2) * P - now when curr > 0, else (k + 1) * P - now.

ALGOS[6] = function()  -- built on first use (see _common.lua)
  local function load(key)
    return load_fields(key, 'k', 'prev', 'curr')
  end

  -- decide, self-contained (see _common.lua): admitted, the pending state is
  -- {k, prev, curr}.
  local function decide(key, now, cost, n, p, brief)
    -- roll: the stored windows as seen from now's window
    local k = math.floor(now / p + 1e-9)  -- EPS
    local prev, curr = 0, 0
    local v = redis.call('HMGET', key, 'k', 'prev', 'curr')
    local stored = nil
    if v[1] or v[2] or v[3] then
      stored = v
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
    local start = k * p
    if est + cost <= n + 1e-9 then
      curr = curr + cost
      local reset, w
      if curr ~= 0 then
        reset, w = start + 2 * p - now, 2
      else
        reset, w = start + p - now, 1
      end
      local remaining = 0
      if n - est - cost > 0 then
        remaining = math.floor(n - est - cost + 1e-9)  -- floor_remaining (EPS)
      end
      -- (the ttl is write's)
      return k, 1, remaining, 0, reset, 0, nil, (k + w) * p - now, prev, curr
    end
    if brief == true and stored then
      return nil, 0, 0, false, 0, 0, stored  -- (see _common.lua)
    end
    local retry = false
    if cost <= n then
      if curr + cost <= n then
        -- prev * (P - e) / P <= N - curr - c  =>  e >= P - (N - curr - c) * P / prev
        local e = p - (n - curr - cost) * p / prev
        retry = start + e - now
      else
        -- next window: curr * (P - e) / P + c <= N  =>  e >= P - (N - c) * P / curr
        local e = p - (n - cost) * p / curr
        retry = start + p + e - now
      end
      if retry < 0 then
        retry = 0  -- max(retry, 0.0)
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
    local remaining = 0
    if n - est > 0 then
      remaining = math.floor(n - est + 1e-9)
    end
    return nil, 0, remaining, retry, reset, 0, stored
  end

  local function write(key, s, now, n, p)
    redis.call('HSET', key, 'k', fmt(s[1]), 'prev', fmt(s[2]), 'curr', fmt(s[3]))
    local w = 1
    if s[3] ~= 0 then
      w = 2
    end
    redis.call('PEXPIRE', key, expiry_ms((s[1] + w) * p - now))
  end

  local function refund(key, now, cost, at, n, p)
    local state = load(key)
    if state == nil then
      return
    end
    local k, prev, curr = state[1], state[2], state[3]
    local ak = floor(at / p + EPS)
    if ak < k and floor(now / p + EPS) < k then
      ak = k  -- the clock was (and is) behind the stored window: the cost went to `curr`
    end
    if ak == k then
      curr = curr - cost
      if not (curr > 0) then
        curr = 0  -- max(0.0, x)
      end
    elseif ak == k - 1 then
      prev = prev - cost
      if not (prev > 0) then
        prev = 0
      end
    end
    if prev > EPS or curr > EPS then
      write(key, {k, prev, curr}, now, n, p)
      return
    end
    redis.call('DEL', key)
  end

  return {decide = decide, write = write, refund = refund}
end
