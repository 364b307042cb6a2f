-- A topic's token bucket (see src/limit.rs): a hash of t (tokens) and at
-- (ms, Redis's clock), refilled at `rate` a second up to a second's worth
-- (at least one token), and forgotten a minute after its last use (then
-- full again).
-- bucket_take: how many of `want` the bucket allows now, and when it
-- allows none, how long (ms) until the next token; with the state to
-- spend from (bucket_spend, once the claim counted what it took).
-- A clock that went back restarts the refill from now; a bucket fuller
-- than a lower limit allows is cut to it. A rate of 0: no limit.
local function bucket_take(key, rate, want, now)
  if rate <= 0 then
    return want, 0, 0, now
  end
  local burst = math.max(1, rate)
  local s = redis.call('HMGET', key, 't', 'at')
  local tokens = tonumber(s[1]) or burst
  local at = tonumber(s[2]) or now
  if now < at then
    at = now
  end
  tokens = math.min(burst, tokens + (now - at) * rate / 1000)
  at = now
  local n = math.min(want, math.floor(tokens + 1e-9))
  if n >= 1 then
    return n, 0, tokens, at
  end
  return 0, math.max(1, math.ceil((1 - tokens) * 1000 / rate)), tokens, at
end

-- Nothing spent changes nothing: the refill is linear and capped, so the
-- state read next time comes to the same.
local function bucket_spend(key, rate, tokens, at, spent)
  if rate <= 0 or spent == 0 then
    return
  end
  redis.call('HSET', key, 't', tostring(tokens - spent), 'at', string.format('%d', at))
  redis.call('PEXPIRE', key, 60000)
end

-- A topic's hand-outs in one shard (see src/limit.rs): a zset of id ->
-- ack deadline beside the shard's in-flight zset. The claim scripts add
-- what they hand out (busy_add); an ack, a nack and a recurring ack take
-- theirs out (busy_key, clock.lua); a delivery whose deadline passed
-- leaves by its score. busy_count: how many are held now, with a cap of 0
-- (none) 0.
local function busy_count(key, cap, now)
  if cap <= 0 then
    return 0
  end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  return redis.call('ZCARD', key)
end

-- Adds what a claim handed out ({id, record} items, false for a record
-- gone) to the set, each with its deadline (now + ttl, as claim_head set);
-- the set lives until the last of them.
local function busy_add(key, cap, items, now)
  if cap <= 0 then
    return
  end
  local pairs_of, last = {}, 0
  for _, item in ipairs(items) do
    if item then
      local deadline = now + tonumber(string.match(item[2], '^[^|]*|(%d+)|'))
      pairs_of[#pairs_of + 1] = deadline
      pairs_of[#pairs_of + 1] = item[1]
      last = math.max(last, deadline)
    end
  end
  if #pairs_of == 0 then
    return
  end
  bulk('ZADD', key, pairs_of)
  if redis.call('PTTL', key) < last - now + 1000 then
    redis.call('PEXPIRE', key, last - now + 1000)
  end
end
