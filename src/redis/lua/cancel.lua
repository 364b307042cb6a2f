-- Cancel a message that has not been handed to a consumer.
-- KEYS[1] delay zset, KEYS[2] message hash, KEYS[3] in-flight zset
-- ARGV[1] id, ARGV[2] ready key prefix
-- Returns { outcome, attempts }: 'deleted', 'in_flight' (left alone), or
-- 'absent' (not in this shard; attempts 0).
local id = ARGV[1]
local rec = redis.call('HGET', KEYS[2], id)
if not rec then
  return { 'absent', 0 }
end
local topic, _, attempts = string.match(rec, '^([^|]*)|(%d+)|(%d+)|')
attempts = tonumber(attempts)
if redis.call('ZSCORE', KEYS[3], id) then
  return { 'in_flight', attempts }
end
redis.call('ZREM', KEYS[1], id)
redis.call('ZREM', ARGV[2] .. topic, id)
redis.call('HDEL', KEYS[2], id)
return { 'deleted', attempts }
