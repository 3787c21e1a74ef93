-- ratekeeper one: decide a single limit, in one atomic call. Assembled by
-- ratekeeper/stores/_lua.py as algorithms/_common.lua + ONE algorithm file (ratekeeper/algorithms/
-- <name>.lua) + this file, one script per algorithm: the hot path of a limiter with one
-- limit builds only what it runs.
--
-- KEYS[1]   the limit's state key.
-- ARGV[1]   now: seconds as a decimal string (client clock), or "" for the server clock.
-- ARGV[2]   cost (the limit's units). The request is charged if the limit admits it.
-- ARGV[3]   minimum key expiry, whole milliseconds >= 1.
-- ARGV[4]   grace, whole milliseconds >= 0, added to the expiry.
-- ARGV[5..] p1, p2 and (leaky-bucket only) p3, documented in the algorithm's file: exactly
--           its codec's params(limit), no padding.
--           (check.lua's ARGV less the "consume" flag and the algorithm id: every argument
--           costs the client and the server something on the hot path.)
-- Reply:    check.lua's per-limit values only: {allowed (0/1), remaining (integer),
--           retry_after (nil = never), reset_after, delay}; numbers that may be fractional
--           are strings. (No `now`: a single decision is never refunded by time.)

local _, now = clock(ARGV[1])
MIN_MS = tonumber(ARGV[3])
GRACE_MS = tonumber(ARGV[4])
local algo = algorithm((next(ALGOS)))  -- the one algorithm file this script holds
local key = KEYS[1]
local p1, p2, p3 = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local s1, allowed, remaining, retry, reset, delay, _, _, s2, s3 = algo.decide(key, now,
  tonumber(ARGV[2]), p1, p2, p3)
if allowed == 1 then
  algo.write(key, {s1, s2, s3}, now, p1, p2, p3)
end
return {allowed, remaining, retry and fmt(retry), fmt(reset), fmt(delay)}
