-- ratekeeper: helpers shared by every algorithm's script, the Lua side of algorithms/_common.py
-- (its tolerances and rounding) beside it. Prepended to the store's entry points
-- (stores/lua/check.lua, one.lua, refund.lua; Lua in Redis cannot `require`:
-- ratekeeper/stores/_lua.py assembles the scripts).
--
-- Numbers. Redis runs Lua 5.1, whose numbers are IEEE doubles, like Python floats: the same
-- operations in the same order give the same bits. Every fractional value crosses the
-- boundary as a string: ARGV values are parsed with tonumber (strtod, exact for Python's
-- repr), stored and returned values are written with fmt ('%.17g', which round-trips),
-- because Redis would truncate a Lua number to an integer.
--
-- Every algorithm file (ratekeeper/algorithms/<name>.lua, beside the Python module it
-- mirrors; `id` is that module's RedisCodec.id) registers
-- ALGOS[id] = function() return {decide = ..., write = ..., refund = ...} end. A script's body runs on every call, so an algorithm's functions are
-- only built when a call uses it (`algorithm(id)`):
--
--   decide(key, now, cost, p1, p2, p3)
--       -> s1 | nil, allowed (0/1), remaining (integer), retry_after (number | false),
--          reset_after, delay, stored, ttl, s2, s3
--       Reads the state at `key`, writes nothing. Admitted: `pending` = {s1, s2, s3} is the
--       state `write` commits when the request is charged, `ttl` its (the seconds until it
--       equals a missing key); rejected: s1 is nil (a rejected request never changes
--       state) and `stored` is the state as stored (GET's string, HMGET's fields; nil when
--       absent). Multiple values, not tables: a single-limit script builds none.
--       A straight-line algorithm's decide takes one more argument, `brief`: when it is
--       true (the single-limit script's, which answers a rejection on a stored state with
--       that state), such a rejection returns only `stored`, computing nothing else.
--       An algorithm with a straight-line single-limit script (its codec's fast_script)
--       writes its `decide` self-contained: it calls and captures nothing outside itself
--       (these helpers and values are written out in it), because stores/_lua.py assembles
--       that script from this one function between stores/lua/one_prologue.lua and
--       one_epilogue.lua, and Redis defines every function of a script again on each call
--       (a closure that captures values costs about 3 % of a call, one that captures none
--       about 2 %).
--   write(key, pending, now, p1, p2, p3)
--       Commits `pending` with PEXPIRE expiry_ms(ttl), `ttl` being the algorithm's: the
--       seconds until the state equals a missing key.
--   refund(key, now, cost, at, p1, p2, p3)
--       The algorithm's `refund`: gives back `cost` charged at time `at`. Rewrites the state
--       with a fresh expiry, deletes it when the refund leaves it equal to a missing key,
--       and leaves an absent key absent.
--
-- `now` and `at` are seconds on the clock's scale (the server's Unix time, or the client's);
-- `cost` is in the limit's units. p1..p3 are the limit's parameters, documented per file.

local EPS = 1e-9           -- algorithms/_common.py EPS: floor(x + EPS) so 2.9999999999999996 is 3
local NS_TOLERANCE = 1e-9  -- algorithms/_common.py NS_TOLERANCE: Go's 1 ns of refill
local FLOAT_DRIFT = 2.220446049250313e-16  -- algorithms/_common.py FLOAT_DRIFT: 2^-52
local TIME_EPS = 5e-7      -- algorithms/_common.py TIME_EPS: instants closer than this are one
local floor = math.floor
local ALGOS = {}

local function fmt(x)
  if x == 0 then
    return '0'  -- the common delay and retry_after, without the cost of %.17g
  end
  return string.format('%.17g', x)
end

-- _common.floor_remaining: whole units left, never negative.
local function floor_remaining(x)
  if x <= 0 then
    return 0
  end
  return floor(x + EPS)
end

-- Python's round() on a float: round half to even (nginx-style ms and whole costs).
local function round(x)
  local f = floor(x)
  local d = x - f
  if d > 0.5 then
    return f + 1
  end
  if d < 0.5 then
    return f
  end
  if f % 2 == 0 then
    return f
  end
  return f + 1
end

-- Python's a // b for whole numbers a and b > 0, exact below 2^53 (fmod is exact; a plain
-- floor(a / b) could round up when a / b is within half an ulp below an integer).
local function idiv(a, b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r < 0 then
    q = q - 1
  end
  return q
end

local function corrupt(key, what)
  error({err = 'RKSTATE corrupt rate-limit state at ' .. key .. ': ' .. what})
end

-- A stored number, validated (a missing, non-numeric, NaN or infinite value is corrupt).
local function num(v, key, what)
  local x = tonumber(v)
  if x == nil or x ~= x or x == math.huge or x == -math.huge then
    corrupt(key, what .. ' is ' .. tostring(v))
  end
  return x
end

-- Read hash fields as numbers: nil when the key holds none of them.
local function load_fields(key, ...)
  local names = {...}
  local v = redis.call('HMGET', key, ...)
  local any = false
  for i = 1, #names do
    if v[i] then
      any = true
    end
  end
  if not any then
    return nil
  end
  local out = {}
  for i = 1, #names do
    out[i] = num(v[i], key, names[i])
  end
  return out
end

-- Key expiry in ms from an algorithm's ttl (seconds): ceil to ms, plus GRACE_MS, at least
-- MIN_MS (>= 1). The entry point sets both from its ARGV before anything is written.
local MIN_MS, GRACE_MS = 1, 0

local function expiry_ms(ttl)
  local ms = math.ceil(ttl * 1000) + GRACE_MS
  if not (ms >= MIN_MS) then
    ms = MIN_MS
  end
  return ms
end

-- The algorithm with this id, its functions built on first use in this call.
local function algorithm(id)
  local algo = ALGOS[id]
  if type(algo) == 'function' then
    algo = algo()
    ALGOS[id] = algo
  end
  if algo == nil then
    error({err = 'RKARGS unknown algorithm id ' .. tostring(id)})
  end
  return algo
end

-- `now` as given and as a number. The caller gives it as a decimal string (client clock),
-- or it is the server's TIME as whole microseconds (an integer, which the reply carries
-- as one) and their number of seconds, (s * 10^6 + us) / 10^6: an integer below 2^53 divided
-- by 10^6, rounded once, exactly tonumber('<s>.<us, 6 digits>') and Python's float() of it,
-- without formatting that text (string.format costs more than the rest of a decision).
-- Either way the `now` returned for a later refund is the one the decision used.
local function clock(arg)
  if arg ~= '' then
    return arg, tonumber(arg)
  end
  if redis.replicate_commands then
    redis.replicate_commands()  -- Redis < 7: replicate effects, so TIME may precede writes
  end
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, us / 1000000
end
