-- Hand ready messages of one topic to a consumer.
-- KEYS[1] ready zset of the topic, KEYS[2] message hash, KEYS[3] in-flight zset
-- ARGV[1] now_ms, ARGV[2..] ids the consumer chose (another consumer may
-- have taken some first: those are skipped).
-- Each claimed message gets attempts + 1 and an ack deadline of now + ttl.
-- Returns the claimed records, attempts already raised.
local now = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    local rec = redis.call('HGET', KEYS[2], id)
    if rec then
      local topic, ttl, attempts, rest = string.match(rec, '^([^|]*)|(%d+)|(%d+)|(.*)$')
      rec = topic .. '|' .. ttl .. '|' .. (tonumber(attempts) + 1) .. '|' .. rest
      redis.call('HSET', KEYS[2], id, rec)
      redis.call('ZADD', KEYS[3], now + tonumber(ttl), id)
      out[#out + 1] = rec
    end
  end
end
return out
