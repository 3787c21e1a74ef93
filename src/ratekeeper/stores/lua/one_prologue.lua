-- ratekeeper one-<algorithm>, the single-limit hot path of an algorithm with a straight-line
-- form (its codec's fast_script): this prologue, the algorithm's `decide` (the very text
-- check.lua runs, from ratekeeper/algorithms/<name>.lua, which calls and captures nothing
-- outside itself) and one_epilogue.lua, assembled by ratekeeper/stores/_lua.py. Redis runs a
-- script's whole body on every EVALSHA, so this one defines that one function and nothing
-- else (one.lua with _common.lua builds about 15 closures per call).
--
-- KEYS[1]   the limit's state key (documented in the algorithm's file).
-- ARGV[1]   cost (the limit's units). The request is charged if admitted.
-- ARGV[2 .. 1+np]   the limit's p1, p2 (and p3: leaky-bucket), exactly its codec's
--           params(limit); np is the number of them `decide` takes.
-- ARGV[np+2]  minimum key expiry, whole ms >= 1; absent = 1.
-- ARGV[np+3]  now: seconds as a decimal string (client clock); absent or "" = the server
--           clock.   ARGV[np+4]  grace, whole ms >= 0; absent = 0.
--           (Trailing defaults are left off: every argument costs the server a string on
--           each call, so a server-clock store sends only ARGV[1 .. 1+np].)
-- Reply:    see one_epilogue.lua.

local np = NUMBER_OF_PARAMS  -- (_lua.py writes in the algorithm's)
local now_out, now = ARGV[np + 3], nil
local now_text = nil  -- the client's `now` as it gave it (nil: the server's clock)
if now_out == nil or now_out == '' then
  if redis.replicate_commands then
    redis.replicate_commands()  -- Redis < 7: replicate effects, so TIME may precede writes
  end
  local t = redis.call('TIME')
  -- as _common.lua's clock: whole microseconds, and exactly tonumber('<s>.<us, 6 digits>')
  now_out = tonumber(t[1]) * 1000000 + tonumber(t[2])
  now = now_out / 1000000
else
  now, now_text = tonumber(now_out), now_out
end
local key, cost = KEYS[1], tonumber(ARGV[1])
local p1, p2, p3 = tonumber(ARGV[2]), tonumber(ARGV[3]), nil
if np == 3 then
  p3 = tonumber(ARGV[4])
end
