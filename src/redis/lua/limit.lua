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
-- deadline beside the shard's in-flight zset, which alone says what is
-- still handed out. busy_count: how many of its members the in-flight
-- zset holds with a deadline still to come (a lease extended there counts
-- by its new one); the others (acked, nacked, cancelled, expired, handed
-- out again and counted anew) leave the set. With a cap of 0 (none), 0.
local function busy_count(key, inflight, cap, now)
  if cap <= 0 then
    return 0
  end
  local ids = redis.call('ZRANGE', key, 0, -1)
  if #ids == 0 then
    return 0
  end
  local deadlines = bulk_read('ZMSCORE', inflight, ids)
  local gone, live = {}, 0
  for i, id in ipairs(ids) do
    local d = tonumber(deadlines[i])
    if d and d > now then
      live = live + 1
    else
      gone[#gone + 1] = id
    end
  end
  bulk('ZREM', key, gone)
  return live
end

-- Adds what a claim handed out ({id, record} items, false for a record
-- gone) to the set, each with its deadline (now + ttl, as claim_head set).
local function busy_add(key, cap, items, now)
  if cap <= 0 then
    return
  end
  local pairs_of = {}
  for _, item in ipairs(items) do
    if item then
      local ttl = string.match(item[2], '^[^|]*|(%d+)|')
      pairs_of[#pairs_of + 1] = now + tonumber(ttl)
      pairs_of[#pairs_of + 1] = item[1]
    end
  end
  bulk('ZADD', key, pairs_of)
end
