-- ratekeeper one-<algorithm>: the epilogue (see one_prologue.lua): decide; when admitted,
-- write the pending state with its expiry and answer.
--
-- Reply:    admitted: the algorithm's short admission reply where its codec parses one
--           (fast_reset: gcra {remaining, tat, now}; token-bucket {remaining, tokens}, both
--           as written), else one.lua's {1, remaining, '0', reset_after, delay};
--           rejected on a stored state: that state as stored and now ({tat, now}; a hash's
--           fields in the order `decide` reads them, then now), from which the client decides
--           as the Python algorithm does (its fast_reject: floats formatted less here);
--           rejected on an absent key (a cost the limit can never take): one.lua's
--           {0, remaining, retry_after (nil = never), reset_after, delay}.
--           now: ARGV's as given, or the server's clock as whole microseconds (an integer).
--           Fractional numbers are '%.17g' strings ('0' for zero, as _common.lua's fmt).

local s1, allowed, remaining, retry, reset, delay, stored, ttl, s2, s3 = decide(key, now, cost,
  PARAMS, true)  -- (_lua.py writes in the algorithm's p1, p2[, p3]; brief: see _common.lua)
if allowed == 1 then
  -- _common.lua's expiry_ms(ttl): ceil to ms, plus the grace, at least the minimum
  local ms = math.ceil(ttl * 1000) + tonumber(ARGV[np + 4] or 0)
  local min_ms = tonumber(ARGV[np + 2] or 1)
  if not (ms >= min_ms) then
    ms = min_ms
  end
  local kept  -- the first value written, as written
  WRITE_STATE  -- (_lua.py writes in the algorithm's SET, or HSET and PEXPIRE)
  return ADMITTED_REPLY
end
if stored then
  if type(stored) == 'table' then
    stored[#stored + 1] = now_out
    return stored
  end
  return {stored, now_out}
end
if retry then
  retry = retry == 0 and '0' or string.format('%.17g', retry)
end
return {0, remaining, retry, reset == 0 and '0' or string.format('%.17g', reset),
  delay == 0 and '0' or string.format('%.17g', delay)}
