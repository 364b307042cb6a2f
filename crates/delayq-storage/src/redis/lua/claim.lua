-- Hand the first ready messages of one topic in one shard to a consumer.
-- KEYS[1] ready zset of the topic, KEYS[2] message hash, KEYS[3] in-flight zset,
-- KEYS[4] the shard's paused topics (set), KEYS[5] the topic's rate limit
-- bucket in this shard, KEYS[6] the topic's hand-outs in this shard
-- (limit.lua, prepended), KEYS[7] the shard's applied hash (fence.lua,
-- prepended)
-- ARGV[1] how many to take from the head of the queue, ARGV[2] the topic,
-- ARGV[3] the shard's share of its rate limit a second (0: none), ARGV[4]
-- the shard's share of its concurrency cap (0: none), ARGV[5] how long
-- (ms) a poll the cap holds back waits before it looks again, ARGV[6] how
-- long (ms) a poll waits before it looks again at a fenced shard.
-- A paused topic hands nothing out, nor does a shard fenced after a
-- possible loss of Redis's last writes.
-- Taking from the head (not chosen ids) lets concurrent consumers share a
-- queue without claiming the same messages.
-- Each claimed message gets attempts + 1 and an ack deadline of now + ttl,
-- now by Redis's clock (clock.lua, prepended; claim_head: bulk.lua).
-- Returns the claimed ids, each followed by its record (attempts already
-- raised), in queue order, then how long (ms) the rate limit or the
-- concurrency cap holds the topic back when it allowed nothing (0
-- otherwise), then the time the script ran (Redis's clock, ms).
local now = now_ms()
local out = {}
if redis.call('SISMEMBER', KEYS[4], ARGV[2]) == 1 then
  return { '0', tostring(now) }
end
-- A fenced shard is held back like a spent limit: the poll leaves it out
-- of its next look and takes from the other shards meanwhile.
if loss_fenced(KEYS[7]) then
  return { ARGV[6], tostring(now) }
end
local want = tonumber(ARGV[1])
local cap = tonumber(ARGV[4] or '0')
if cap > 0 then
  local room = cap - busy_count(KEYS[6], cap, now)
  if room <= 0 then
    if redis.call('ZCARD', KEYS[1]) == 0 then
      return { '0', tostring(now) }
    end
    return { ARGV[5], tostring(now) }
  end
  want = math.min(want, room)
end
local rate = tonumber(ARGV[3])
local n, wait, tokens, at = bucket_take(KEYS[5], rate, want, now)
if n == 0 then
  return { tostring(wait), tostring(now) }
end
local items = claim_head(KEYS[1], KEYS[2], KEYS[3], n, now)
busy_add(KEYS[6], cap, items, now)
for _, item in ipairs(items) do
  if item then
    out[#out + 1] = item[1]
    out[#out + 1] = item[2]
  end
end
bucket_spend(KEYS[5], rate, tokens, at, #out / 2)
out[#out + 1] = '0'
out[#out + 1] = tostring(now)
return out
