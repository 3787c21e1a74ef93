-- ratekeeper refund: give back costs charged earlier (a cancelled reservation, or the
-- rollback of a composite check whose limits live in different cluster slots).
-- Assembled by ratekeeper/stores/_lua.py as algorithms/_common.lua + every algorithm file
-- (ratekeeper/algorithms/<name>.lua) + this file.
--
-- KEYS[i]   the state key of limit i (on a cluster all keys share one hash slot).
-- ARGV[1]   now: seconds as a decimal string (client clock), or "" for the server clock.
-- ARGV[2]   at: the `now` the charge was decided at (seconds, decimal string; check.lua
--           returned it, as text or as whole microseconds).
-- ARGV[3]   minimum key expiry, whole milliseconds >= 1.
-- ARGV[4]   grace, whole milliseconds >= 0, added to every expiry (as for check.lua).
-- ARGV[5 + 5*(i-1) ..]   limit i: algorithm id, cost, p1, p2, p3 (as for check.lua).
-- Reply:    now (ARGV[1] as given, or TIME as whole microseconds, an integer). Each key is rewritten with a fresh PEXPIRE, deleted when the
--           refund leaves it equal to a missing key, or left alone when absent.

local now_text, now = clock(ARGV[1])
local at = tonumber(ARGV[2])
MIN_MS = tonumber(ARGV[3])
GRACE_MS = tonumber(ARGV[4])

for i = 1, #KEYS do
  local o = 4 + (i - 1) * 5
  local algo = algorithm(tonumber(ARGV[o + 1]))
  algo.refund(KEYS[i], now, tonumber(ARGV[o + 2]), at, tonumber(ARGV[o + 3]),
    tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5]))
end
return now_text
