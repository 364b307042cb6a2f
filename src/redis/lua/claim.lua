-- Hand the first ready messages of one topic in one shard to a consumer.
-- KEYS[1] ready zset of the topic, KEYS[2] message hash, KEYS[3] in-flight zset
-- ARGV[1] how many to take from the head of the queue.
-- Taking from the head (not chosen ids) lets concurrent consumers share a
-- queue without claiming the same messages.
-- Each claimed message gets attempts + 1 and an ack deadline of now + ttl,
-- now by Redis's clock (clock.lua, prepended).
-- Returns the claimed ids, each followed by its record (attempts already
-- raised), in queue order, then the time the script ran (Redis's clock, ms).
local now = now_ms()
local popped = redis.call('ZPOPMIN', KEYS[1], tonumber(ARGV[1]))
local out = {}
for i = 1, #popped, 2 do
  local id = popped[i]
  local rec = redis.call('HGET', KEYS[2], id)
  if rec then
    local topic, ttl, attempts, rest = string.match(rec, '^([^|]*)|(%d+)|(%d+)|(.*)$')
    rec = topic .. '|' .. ttl .. '|' .. (tonumber(attempts) + 1) .. '|' .. rest
    redis.call('HSET', KEYS[2], id, rec)
    redis.call('ZADD', KEYS[3], now + tonumber(ttl), id)
    out[#out + 1] = id
    out[#out + 1] = rec
  end
end
out[#out + 1] = tostring(now)
return out
