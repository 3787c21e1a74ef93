-- sliding-window-log (algorithm id 5): mirrors ratekeeper/algorithms/sliding_window_log.py.
--
-- KEYS: the state key, a list of admitted timestamps in admission order, one element per unit
--       of cost (a request of cost 3 at t is three elements fmt(t)). A run of equal
--       timestamps is one (ts, cost) entry of the Python state, so the list holds at most N
--       elements and LLEN is the admitted cost. Like `limits`' moving window, this keeps
--       every operation O(1) or O(entries touched) rather than O(N) per decision.
-- ARGV: p1 = N, cost per window (Limit.capacity, float; costs are whole numbers)
--       p2 = P, the window length in seconds (Limit.period, float); p3 unused.
-- decide: entries at or before now - P (within TIME_EPS) are expired (dropped when the request is charged; a
--       rejection writes nothing); allowed iff live + cost <= N, logged at `now`, or at the
--       newest entry's timestamp when that is >= now (same instant, or a clock behind it: the
--       list stays in time order). retry_after = when enough live cost has slid out:
--       ts + P - now of the entry that frees it (false when cost > N).
-- ttl:  the newest entry + P - now.

ALGOS[5] = function()  -- built on first use (see _common.lua)
  -- _live(): index (0-based) of the first entry with ts > now - P, and the list length.
  -- Scans from the head like the Python loop, stopping at the first live entry. The chunks
  -- read grow 8, 32, 128, 512, 1024...: in steady state only an entry or two at the head
  -- has expired since the last admission (which trimmed the rest), so 8 usually suffice.
  local function live_start(key, now, p)
    local cutoff = now - p + TIME_EPS  -- ts + P <= now (within TIME_EPS): expired
    local len = redis.call('LLEN', key)
    local i = 0
    local chunk_size = 8
    while i < len do
      local chunk = redis.call('LRANGE', key, i, i + chunk_size - 1)
      if #chunk == 0 then
        break
      end
      for j = 1, #chunk do
        if num(chunk[j], key, 'log entry') > cutoff then
          return i + j - 1, len
        end
      end
      i = i + #chunk
      if chunk_size < 1024 then
        chunk_size = chunk_size * 4
      end
    end
    return len, len
  end

  local function at_index(key, i)
    return num(redis.call('LINDEX', key, i), key, 'log entry')
  end

  local function decide(key, now, cost, n, p)
    local i0, len = live_start(key, now, p)
    local used = len - i0
    if used + cost <= n + EPS then
      local ts = now
      if used > 0 then
        local newest = at_index(key, -1)
        if newest >= now then
          -- Same instant, or a clock behind the newest entry: log it with that entry, so
          -- the log stays in time order (and the cost stays logged at least as long).
          ts = newest
        end
      end
      -- (no ttl: no single-limit script reads it)
      return i0, 1, floor_remaining(n - used - cost), 0, ts + p - now, 0, nil, nil, ts, cost
    end
    local retry = false
    if cost <= n then
      -- Free entries oldest first until used - freed + cost <= N + EPS. Units are whole, so
      -- the first such count f (found exactly, then checked with the Python expression) lies
      -- in the entry Python stops at.
      local limit = n + EPS
      local f = math.ceil(used + cost - limit)
      if f < 1 then
        f = 1
      end
      while f > 1 and used - (f - 1) + cost <= limit do
        f = f - 1
      end
      while not (used - f + cost <= limit) do
        f = f + 1
      end
      if f <= used then
        retry = at_index(key, i0 + f - 1) + p - now
      end
    end
    local reset = 0
    if used > 0 then
      reset = at_index(key, -1) + p - now
    end
    return nil, 0, floor_remaining(n - used), retry, reset, 0
  end

  local function write(key, s, now, n, p)
    local drop, ts, cost = s[1], fmt(s[2]), s[3]
    if drop > 0 then
      redis.call('LTRIM', key, drop, -1)
    end
    local batch = {}
    for _ = 1, cost do
      batch[#batch + 1] = ts
      if #batch == 1000 then
        redis.call('RPUSH', key, unpack(batch))
        batch = {}
      end
    end
    if #batch > 0 then
      redis.call('RPUSH', key, unpack(batch))
    end
    redis.call('PEXPIRE', key, expiry_ms(s[2] + p - now))
  end

  local function refund(key, now, cost, at, n, p)
    if redis.call('EXISTS', key) == 0 then
      return
    end
    redis.call('LREM', key, cost, fmt(at))  -- oldest matching units first, as Python does
    if redis.call('LLEN', key) == 0 then
      return  -- an empty list is deleted by Redis: the Python refund returns None
    end
    redis.call('PEXPIRE', key, expiry_ms(at_index(key, -1) + p - now))
  end

  return {decide = decide, write = write, refund = refund}
end
