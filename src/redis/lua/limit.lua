-- A topic's token bucket (see src/limit.rs): a hash of t (tokens) and at
-- (ms, Redis's clock), refilled at `rate` a second up to a second's worth,
-- and forgotten a minute after its last use (then full again).
-- bucket_take: how many of `want` the bucket allows now, and when it
-- allows none, how long (ms) until the next token; with the state to
-- spend from (bucket_spend, once the claim counted what it took).
-- A rate of 0: no limit.
local function bucket_take(key, rate, want, now)
  if rate <= 0 then
    return want, 0, 0, now
  end
  local burst = math.max(1, rate)
  local s = redis.call('HMGET', key, 't', 'at')
  local tokens = tonumber(s[1]) or burst
  local at = tonumber(s[2]) or now
  if now > at then
    tokens = math.min(burst, tokens + (now - at) * rate / 1000)
    at = now
  end
  local n = math.min(want, math.floor(tokens))
  if n >= 1 then
    return n, 0, tokens, at
  end
  return 0, math.max(1, math.ceil((1 - tokens) * 1000 / rate)), tokens, at
end

local function bucket_spend(key, rate, tokens, at, spent)
  if rate <= 0 then
    return
  end
  redis.call('HSET', key, 't', tostring(tokens - spent), 'at', string.format('%d', at))
  redis.call('PEXPIRE', key, 60000)
end
