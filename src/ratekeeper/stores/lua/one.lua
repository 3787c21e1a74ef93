-- ratekeeper one: decide a single limit, in one atomic call. Assembled by
-- ratekeeper/stores/_lua.py as _common.lua + ONE algorithm file + this file, one script per
-- algorithm: the hot path of a limiter with one limit builds only what it runs.
--
-- KEYS[1]   the limit's state key.
-- ARGV      exactly as check.lua with one limit:
--   ARGV[1]   now: seconds as a decimal string (client clock), or "" for the server clock.
--   ARGV[2]   "1": charge the request if the limit admits it; "0": only look.
--   ARGV[3]   minimum key expiry, whole milliseconds >= 1.
--   ARGV[4]   grace, whole milliseconds >= 0, added to the expiry.
--   ARGV[5..9]  algorithm id, cost, p1, p2, p3 (documented in the algorithm's file).
-- Reply:    as check.lua: {now, admitted, allowed, remaining, retry_after (nil = never),
--           reset_after, delay}; numbers that may be fractional are strings.

local now_text, now = clock(ARGV[1])
MIN_MS = tonumber(ARGV[3])
GRACE_MS = tonumber(ARGV[4])
local algo = algorithm(tonumber(ARGV[5]))
local key = KEYS[1]
local p1, p2, p3 = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local st, allowed, remaining, retry, reset, delay = algo.decide(key, now, tonumber(ARGV[6]),
  p1, p2, p3)
if allowed == 1 and ARGV[2] == '1' then
  algo.write(key, st, now, p1, p2, p3)
end
return {now_text, allowed, allowed, remaining, retry and fmt(retry), fmt(reset), fmt(delay)}
