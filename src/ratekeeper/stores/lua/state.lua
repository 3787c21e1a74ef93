-- ratekeeper state: read one key's raw state, for inspection and tests. Writes nothing.
--
-- KEYS[1]   a state key.
-- ARGV      none.
-- Reply:    {type, pttl (ms; -1 = no expiry, -2 = absent), server time (seconds, string),
--            then the raw value: hash -> field, value, field, value, ...;
--            string -> value; list -> every element, head first}.

local key = KEYS[1]
local kind = redis.call('TYPE', key)
if type(kind) == 'table' then
  kind = kind.ok
end
local t = redis.call('TIME')
local reply = {kind, redis.call('PTTL', key), string.format('%.17g', tonumber(t[1]) + tonumber(t[2]) / 1000000)}
local raw = {}
if kind == 'hash' then
  raw = redis.call('HGETALL', key)
elseif kind == 'string' then
  raw = {redis.call('GET', key)}
elseif kind == 'list' then
  raw = redis.call('LRANGE', key, 0, -1)
end
for i = 1, #raw do
  reply[#reply + 1] = raw[i]
end
return reply
