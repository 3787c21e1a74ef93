-- ratekeeper check: decide one or more limits all-or-nothing, in one atomic call.
-- Assembled by ratekeeper/stores/_lua.py as algorithms/_common.lua + every algorithm file
-- (ratekeeper/algorithms/<name>.lua) + this file.
--
-- KEYS[i]   the state key of limit i (on a cluster all keys share one hash slot).
-- ARGV[1]   now: seconds as a decimal string (client clock), or "" to use the server clock
--           (TIME, seconds since the Unix epoch with microseconds).
-- ARGV[2]   "1": charge every limit if all admit (none if any rejects); "0": only look.
-- ARGV[3]   minimum key expiry, whole milliseconds >= 1.
-- ARGV[4]   grace, whole milliseconds >= 0, added to every expiry (the caller passes it with
--           a `now` of its own, so that callers whose clocks run behind still find the key).
-- ARGV[5 + 5*(i-1) .. 9 + 5*(i-1)]   limit i: algorithm id (its module's RedisCodec.id,
--           which its file registers as ALGOS[id]), cost (the limit's units), p1, p2, p3
--           (documented in each algorithm's file, ratekeeper/algorithms/<name>.lua).
-- Reply:    {now, admitted (1 when every limit admitted), then five values per limit:
--            allowed (0/1), remaining (integer), retry_after (seconds, string; nil = never),
--            reset_after (seconds, string), delay (seconds, string)}.
--           `now` is the time decided at, which a later refund needs as `at`: ARGV[1] as given,
--           or (server clock) TIME as whole microseconds, an integer.
-- Writes:   only when ARGV[2] is "1" and every limit admits; every key written gets PEXPIRE
--           from its algorithm's ttl (ceil to ms, plus ARGV[4], at least ARGV[3]).

local now_text, now = clock(ARGV[1])
local consume = ARGV[2] == '1'
MIN_MS = tonumber(ARGV[3])
GRACE_MS = tonumber(ARGV[4])

local reply = {now_text, 1}
local pending = {}
-- each limit's algorithm and parameters, parsed once for both loops (tonumber is a
-- noticeable part of a composite's server time)
local algos, params = {}, {}
local admitted = true
for i = 1, #KEYS do
  local o = 4 + (i - 1) * 5
  local algo = algorithm(tonumber(ARGV[o + 1]))
  local p1, p2, p3 = tonumber(ARGV[o + 3]), tonumber(ARGV[o + 4]), tonumber(ARGV[o + 5])
  local s1, allowed, remaining, retry, reset, delay, _, _, s2, s3 = algo.decide(
    KEYS[i], now, tonumber(ARGV[o + 2]), p1, p2, p3)
  pending[i] = {s1, s2, s3}
  algos[i] = algo
  local q = (i - 1) * 3
  params[q + 1], params[q + 2], params[q + 3] = p1, p2, p3
  if allowed == 0 then
    admitted = false
  end
  local r = 2 + (i - 1) * 5
  reply[r + 1] = allowed
  reply[r + 2] = remaining
  reply[r + 3] = retry and fmt(retry)
  reply[r + 4] = fmt(reset)
  reply[r + 5] = fmt(delay)
end

if admitted and consume then
  for i = 1, #KEYS do
    local q = (i - 1) * 3
    algos[i].write(KEYS[i], pending[i], now, params[q + 1], params[q + 2], params[q + 3])
  end
end
if not admitted then
  reply[2] = 0
end
return reply
